"""The target protocol (``fence.targets.protocol``): its members, checked once, and its helpers.

A target's ledger is a plug-in like any other: a member missing from it gets
the one-line protocol error in every engine, never an AttributeError from deep
inside one (issue 25: a ledger without ``held`` failed all seven cells that way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fence._errors import PluginBroken
from fence._explore import explore
from fence._policies import POLICIES
from fence._world import ModelConfig
from fence.targets import Target

BAD = Path(__file__).resolve().parent / "targets_bad"
FORGETS_HELD = Target(
    row="forgets-held", system="fence", policy=POLICIES["naive"], recovery="fence's own, in memory",
    time="none: it has no clock of its own", server="none", storage="forgets_held:ForgetsHeldStorage",
    explorable=True,
)


@pytest.fixture
def forgets_held(monkeypatch):
    monkeypatch.syspath_prepend(str(BAD))
    import forgets_held

    return forgets_held


def _one_line_naming_held(error: PluginBroken) -> None:
    message = str(error)
    assert "\n" not in message
    assert message.startswith("ledger (ForgetsHeld in forgets_held.py) has no held; ")
    assert "free, held" in message  # the whole protocol is listed, held included


def test_a_target_ledger_without_held_gets_the_one_line_error_from_check_target(forgets_held):
    """fence.testing.check_target (machines with the lockstep, then the explorer) stops on the protocol error."""
    from fence.testing import check_target

    with pytest.raises(PluginBroken) as raised:
        check_target(FORGETS_HELD, "none:", profile="quick")
    _one_line_naming_held(raised.value)


def test_a_ledger_without_held_gets_the_one_line_error_from_the_explorer(forgets_held):
    """The explorer alone (which never reads held itself) stops on the same line at its first question."""
    with pytest.raises(PluginBroken) as raised:
        explore(POLICIES["naive"], ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2),
                ledger_factory=forgets_held.ForgetsHeld)
    _one_line_naming_held(raised.value)


def test_a_ledger_without_held_is_refused_when_loaded(capsys):
    """fence check --ledger FILE.py:ATTR: one line naming held, exit 2, before anything runs."""
    from fence._cli import main

    assert main(["check", "naive", "--ledger", f"{BAD / 'forgets_held.py'}:ForgetsHeld"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "without held" in err, err
