"""fence's pytest plugin: the ``fence_check`` fixture and the ``--fence-*`` options.

Registered through the ``pytest11`` entry point, so installing fence is enough;
``pytest -p no:fence`` turns it off. In a test::

    def test_our_janitor_is_safe(fence_check):
        fence_check("ticket_fleet.janitor:AbandonFirst").assert_proved()

``fence_check`` is ``fence.testing.check`` (and ``fence_check.target`` is
``check_target``) with four things decided once for the whole run:

* the Hypothesis effort: ``--fence-profile`` or the ``fence_profile`` ini
  option (quick, default, thorough; default: default);
* the explorer's bounds: ``--fence-explorer-bound UxJxA:H`` (repeatable) or
  the ``fence_explorer_bounds`` ini option (default: ``fence check``'s,
  ``fence.checking.verdicts.CHECK_BOUNDS``);
* the draw: derandomised, unless ``--fence-seed N``;
* where counterexamples go: the test's ``tmp_path``, or ``--fence-out DIR``
  (one directory per test under it, e.g. to keep them as CI artifacts).

Each check adds one line to a "fence" section of pytest's summary (the policy,
its verdicts, where its counterexamples are), also from pytest-xdist workers.
Importing this module imports no engine: fence loads when a test asks.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

PROFILE_NAMES = ("quick", "default", "thorough")
_PROPERTY = "fence"
"""The user_properties name under which each check's summary line travels (xdist sends them to the controller)."""


def pytest_addoption(parser) -> None:
    group = parser.getgroup("fence", "fence: janitor policies, destinations, ledgers and queues under fence's machines")
    group.addoption("--fence-profile", choices=PROFILE_NAMES, default=None,
                    help="Hypothesis effort for fence_check (default: the fence_profile ini option, else 'default')")
    group.addoption("--fence-seed", type=int, default=None, metavar="N",
                    help="draw with this seed instead of the derandomised default")
    group.addoption("--fence-out", default=None, metavar="DIR",
                    help="write counterexamples under DIR, a directory per test (default: each test's tmp_path)")
    group.addoption("--fence-explorer-bound", action="append", default=None, metavar="UxJxA:H",
                    help="prove within this bound (repeatable; default: the fence_explorer_bounds ini option, "
                    "else fence check's bounds)")
    parser.addini("fence_profile", "Hypothesis effort for fence_check: quick, default or thorough", default="default")
    parser.addini("fence_explorer_bounds", "bounds fence_check proves within, like 1x1x3:3 2x2x2:2 "
                  "(default: fence check's)", type="args", default=[])


def _explorer_bounds(config) -> tuple | None:
    """The bounds this run asked for (None: fence check's own), refused in one line if one is not a bound."""
    import argparse

    from fence.cli.arguments import explorer_bound

    given = config.getoption("--fence-explorer-bound") or config.getini("fence_explorer_bounds")
    if not given:
        return None
    try:
        return tuple(explorer_bound(text) for text in given)
    except argparse.ArgumentTypeError as problem:
        raise pytest.UsageError(f"fence explorer bound: {problem}") from None


def pytest_configure(config) -> None:
    profile = config.getoption("--fence-profile") or config.getini("fence_profile")
    if profile not in PROFILE_NAMES:
        raise pytest.UsageError(f"fence_profile = {profile!r} in the ini file: use one of {', '.join(PROFILE_NAMES)}")
    _explorer_bounds(config)


class FenceCheck:
    """``fence.testing.check`` bound to this run's options and this test's output directory."""

    def __init__(self, request, out: Path) -> None:
        self._request = request
        self._out = out
        config = request.config
        self.profile = config.getoption("--fence-profile") or config.getini("fence_profile")  # checked at configure
        self.seed = config.getoption("--fence-seed")
        self.explorer_bounds = _explorer_bounds(config)

    def __call__(self, policy, **options):
        from fence.testing import check

        options.setdefault("profile", self.profile)
        options.setdefault("seed", self.seed)
        if self.explorer_bounds is not None:
            options.setdefault("explorer_bounds", self.explorer_bounds)
        options.setdefault("out", self._out)
        return self._noted(check(policy, **options))

    def target(self, target, url: str | None = None, **options):
        """``check_target``: a built-in row's name, a ``fence.targets.Target`` or its spec; url None: its server."""
        from fence.testing import check_target

        options.setdefault("profile", self.profile)
        options.setdefault("out", self._out)
        return self._noted(check_target(target, url, **options))

    def _noted(self, checked):
        from fence.checking.verdicts import Verdict

        counts = Counter(checked.verdicts.values())
        said = ", ".join(f"{counts[verdict]} {verdict.value}" for verdict in Verdict if counts[verdict])
        where = f"; counterexamples in {checked.out}" if checked.written else ""
        self._request.node.user_properties.append((_PROPERTY, f"{checked.row or checked.policy}: {said}{where}"))
        return checked


@pytest.fixture
def fence_check(request, tmp_path: Path) -> FenceCheck:
    """Check a policy, destination or ledger (``fence.testing.check``) with this run's fence options."""
    chosen = request.config.getoption("--fence-out")
    if chosen:
        from fence.base.output import file_stem

        out = Path(chosen) / file_stem(request.node.nodeid)
    else:
        out = tmp_path / "fence"
    return FenceCheck(request, out)


def pytest_terminal_summary(terminalreporter) -> None:
    lines = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == _PROPERTY:
                    lines[(report.nodeid, value)] = None  # each phase's report carries them: once each
    if lines:
        terminalreporter.section("fence")
        for nodeid, value in lines:
            terminalreporter.write_line(f"{nodeid}: {value}")
