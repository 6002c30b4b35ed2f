"""fence in your own test suite: check your policy, destination or ledger in a few lines.

    from fence.testing import check

    def test_our_janitor_never_writes_a_ticket_twice():
        check("ticket_fleet.janitor:AbandonFirst",
              destination="ticket_fleet.desk:TicketDesk").assert_proved()

    def test_releasing_on_expiry_is_unsafe():
        check("naive").assert_violated("no_duplicate_writes")

``check`` runs what ``fence check`` runs, in this process: Hypothesis at its
configurations and the exhaustive explorer at the CI bound, both judged by
fence's observer on the facts fence recorded, never on your code's answers.
The result says which invariants are proved, violated, not found or
undetermined; each ``assert_*`` names how strong a claim it needs, and its
failure message is the verdict table, the shortest counterexample's steps and
the ``fence replay`` command for its JSON.

With pytest, fence's plugin (installed with fence; ``-p no:fence`` turns it
off) adds the ``fence_check`` fixture: ``check`` with counterexamples written
under the test's own ``tmp_path``, the effort set once for the whole run
(``--fence-profile quick|default|thorough``, ``--fence-seed N``), and a line
per check in pytest's summary. ``check_target`` does the same for a job system
under ``fence.targets``: a real queue on its real server, a built-in row or
your own ``fence.targets.Target`` (or its ``FILE.py:ATTR``); its
counterexamples replay on that real system, by ``fence replay FILE`` or
``replay_target(FILE)``, never on fence's model.

Theory of operation
-------------------
Plug-ins are named as the command line names them (``MODULE:ATTR``,
``FILE.py:ATTR``, or a built-in policy's name) or passed as objects: a policy
(or its class), a destination factory called with the policy's ``Guards``, a
ledger factory called with the capacity. Objects are held to the same protocol
checks as specs (one ``fence.BadInput`` line). A counterexample records the
spec of each plug-in that has one (an object found again by its module and
name), so that ``fence replay FILE.json`` runs it with the same code.

The verdicts are derandomised unless a seed is given: the same code gets the
same verdicts on every run, which is what a CI gate needs.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from fence.search import counterexample
from fence.checking.checking import PROFILES, check_policies, report_text, write_counterexamples
from fence.base.errors import BadInput
from fence.model.invariants import BY_NAME, INVARIANTS
from fence.model.plugins import (
    PlugInSpecs, checked_destination, checked_ledger, checked_policy, load_destination, load_ledger,
    UNIMPORTABLE, load_policy, spec_of,
)
from fence.model.policies import POLICIES, JanitorPolicy
from fence.checking.verdicts import CHECK_BOUNDS, DEFAULT_CONFIGS, PolicyReport, Verdict
from fence.model.world import ModelConfig

__all__ = ["Checked", "Verdict", "check", "check_target", "replay_target", "INVARIANT_NAMES"]

INVARIANT_NAMES = tuple(inv.name for inv in INVARIANTS)
"""The seven invariants, in the order of the verdict table."""

SAFE_ENOUGH = {
    "proved": frozenset({Verdict.PROVED}),
    "not-found": frozenset({Verdict.PROVED, Verdict.NOT_FOUND}),
}
"""What each safety assertion accepts: a proof within the bound, or at least a search that reached every danger."""


@dataclass
class Checked:
    """One check's verdicts, the report behind them, and where its counterexamples were written."""

    report: PolicyReport
    out: Path
    """The directory the counterexamples went to (.txt steps, .mmd Mermaid, .json replayable)."""
    written: list[Path] = field(default_factory=list)
    lockstep_findings: list = field(default_factory=list)
    """For a target: where the real system moved differently from the model policy it claims."""
    not_replayable_because: str = ""
    """Which plug-ins were passed as objects fence cannot import again ("": ``fence replay`` runs every file)."""
    row: str | None = None
    """For a target: its row, which names its files (``ROW__POLICY__INVARIANT.json``) and its failures."""
    bound: ModelConfig | None = None
    """For a target: the explorer's bound its legend names (``fence.targets.TARGET_BOUND``)."""
    replay_options: str = ""
    """For a target: what ``fence replay`` needs besides the file (``--postgres URL`` for a server you gave)."""
    assumption_violated: str | None = None
    """For a target: a run took more real time than half the tick its adapter assumes (``Target.tick_seconds``)."""

    @property
    def policy(self) -> str:
        return self.report.policy.name

    @property
    def verdicts(self) -> dict[str, Verdict]:
        """Invariant name -> verdict, in the table's order."""
        return {name: cell.verdict for name, cell in self.report.cells.items()}

    def replay_file(self, invariant: str) -> Path | None:
        """The replayable JSON of ``invariant``'s counterexample, if it was violated."""
        wanted = self.out / f"{counterexample.stem(self.policy, _known(invariant), self.row)}.json"
        return wanted if wanted in self.written else None

    @property
    def text(self) -> str:
        """What ``fence check`` prints: the table, then each counterexample's steps."""
        text = report_text([self.report], self.out if self.written else None, self.bound)
        if self.assumption_violated:
            text += f"\n\nADAPTER ASSUMPTION VIOLATED: {self.assumption_violated}"
        return text

    def __str__(self) -> str:
        return self.text

    # -- assertions: each says how strong a claim it needs ------------------------------
    def assert_proved(self, *invariants: str) -> Checked:
        """Each invariant (default: all seven) proved: the explorer exhausted its bound reaching every danger."""
        return self._assert_safe(invariants, "proved")

    def assert_not_found(self, *invariants: str) -> Checked:
        """Each invariant (default: all seven) proved, or not violated in a search that reached every danger.

        Weaker than ``assert_proved``: "not found in N examples" is not a proof.
        It is the most a ledger the explorer cannot copy can get (a ledger on a
        server can be copied if it is restorable: ``fence.model.restore``).
        """
        return self._assert_safe(invariants, "not-found")

    def assert_violated(self, *invariants: str) -> Checked:
        """Each invariant named violated, with a replayable counterexample (none named: at least one)."""
        names = [_known(name) for name in invariants]
        self._no_fence_bug()
        verdicts = self.verdicts
        if names:
            wrong = [name for name in names if verdicts[name] is not Verdict.VIOLATED]
        else:
            wrong = [] if Verdict.VIOLATED in verdicts.values() else ["any invariant"]
        if wrong:
            raise AssertionError(self._failure(f"expected violated: {', '.join(wrong)}", wrong))
        return self

    def assert_matches(self, expected: Mapping[str, str | Verdict]) -> Checked:
        """Each named cell has exactly the expected verdict (a gate: a change of verdict either way fails)."""
        verdicts = self.verdicts
        wrong = []
        for name, want in expected.items():
            _known(name)
            want = want if isinstance(want, Verdict) else _verdict(want)
            if verdicts[name] is not want:
                wrong.append(f"{name} is {verdicts[name].value}, expected {want.value}")
        if wrong:
            raise AssertionError(self._failure("; ".join(wrong), list(expected)))
        return self

    # -- helpers ------------------------------------------------------------------------
    def _assert_safe(self, invariants: Sequence[str], strength: str) -> Checked:
        names = [_known(name) for name in invariants] or list(INVARIANT_NAMES)
        self._no_fence_bug()
        accepted = SAFE_ENOUGH[strength]
        wrong = [name for name in names if self.verdicts[name] not in accepted]
        if wrong:
            said = ", ".join(f"{name} is {self.verdicts[name].value}" for name in wrong)
            raise AssertionError(self._failure(f"expected {strength}: {said}", wrong))
        return self

    def _no_fence_bug(self) -> None:
        disagree = [name for name, verdict in self.verdicts.items() if verdict is Verdict.DISAGREE]
        if disagree:
            raise AssertionError(self._failure(
                f"BUG IN FENCE: the engines disagree on {', '.join(disagree)}; please report it with the counterexample",
                disagree,
            ))

    def _failure(self, headline: str, names: Iterable[str]) -> str:
        who = f"target {self.row!r} (claims the policy {self.policy!r})" if self.row else f"policy {self.policy!r}"
        lines = [f"fence: {who}: {headline}", "", self.text]
        replays = [path for path in (self.replay_file(name) for name in names if name in BY_NAME) if path]
        if replays and self.not_replayable_because:
            lines.append(f"(fence replay cannot run these files: {self.not_replayable_because} cannot be imported "
                         "again; pass it as MODULE:ATTR, or a class or function defined at a module's top level)")
        else:
            on = " on the real system" if self.row else ""
            lines += [f"replay it{on}: fence replay {path}{self.replay_options}" for path in replays]
        return "\n".join(lines)


def _known(invariant: str) -> str:
    if invariant not in BY_NAME:
        raise ValueError(f"unknown invariant {invariant!r}: use one of {', '.join(INVARIANT_NAMES)}")
    return invariant


def _verdict(word: str) -> Verdict:
    try:
        return Verdict(word)
    except ValueError:
        raise ValueError(f"unknown verdict {word!r}: use one of {', '.join(v.value for v in Verdict)}") from None


def _policy(given) -> tuple[JanitorPolicy, str | None]:
    """The policy, and the spec a counterexample records for it (None: a built-in, found by its name)."""
    if isinstance(given, str):
        return load_policy(given), (None if given in POLICIES else given)
    if given in POLICIES.values():
        return given, None
    policy = checked_policy(given, repr(getattr(given, "__name__", type(given).__name__)))
    if isinstance(given, type):
        return policy, _spec_or_why(given)
    # An instance is found again through its class only if the class builds it unchanged.
    try:
        same = type(given)() == given
    except Exception:
        same = False
    spec = spec_of(type(given)) if same else None
    return policy, spec or f"{UNIMPORTABLE}a {type(given).__qualname__} built with arguments"


def _factory(given, load, checked):
    if given is None:
        return None, None
    if isinstance(given, str):
        return load(given), given
    return checked(given, repr(getattr(given, "__name__", type(given).__name__))), _spec_or_why(given)


def _spec_or_why(thing) -> str:
    """``MODULE:ATTR`` for ``thing``, or why there is none (a lambda, a local function, a module run as a script)."""
    return spec_of(thing) or f"{UNIMPORTABLE}{getattr(thing, '__qualname__', type(thing).__qualname__)}"


def check(
    policy: str | JanitorPolicy | type,
    *,
    destination=None,
    ledger=None,
    profile: str = "default",
    seed: int | None = None,
    configs: Sequence[ModelConfig] = DEFAULT_CONFIGS,
    explore: bool = True,
    out: str | Path | None = None,
    explorer_bounds: Sequence[ModelConfig] = CHECK_BOUNDS,
) -> Checked:
    """Both engines on ``policy`` with your ``destination`` and ``ledger`` (None: fence's own).

    ``profile`` is the Hypothesis effort (quick, default, thorough; ``fence
    check --profile``); ``seed`` replaces the derandomised draw; ``configs``
    the Hypothesis configurations (units x jobs). The explorer proves within
    each of ``explorer_bounds`` in turn (default ``CHECK_BOUNDS``: 1 unit x 1
    job x 3 attempts to horizon 4, then 2 units x 2 jobs x 2 attempts to horizon
    2, jobs symmetric), one time budget for all; ``explore=False`` skips it (a
    ledger on a server it cannot copy).
    Counterexamples go to ``out`` (default: a fresh temporary directory).
    A bad plug-in raises ``fence.BadInput`` with one line naming it.
    """
    if profile not in PROFILES:
        raise BadInput(f"unknown profile {profile!r}: use one of {', '.join(PROFILES)}")
    chosen, policy_spec = _policy(policy)
    destination_factory, destination_spec = _factory(destination, load_destination, checked_destination)
    ledger_factory, ledger_spec = _factory(ledger, load_ledger, checked_ledger)
    for config in configs:
        problem = config.problem()
        if problem:
            raise BadInput(f"{problem}; fix the configs given to fence.testing.check")
    for bound in explorer_bounds:
        problem = bound.problem() if isinstance(bound, ModelConfig) else f"{bound!r} is not a fence.ModelConfig"
        if problem:
            raise BadInput(f"{problem}; fix the explorer_bounds given to fence.testing.check")
    reports = check_policies(
        [chosen], profile=profile, seed=seed, configs=tuple(configs), destination=destination_factory,
        ledger=ledger_factory, explore=explore, explorer_bounds=tuple(explorer_bounds),
    )
    directory = _directory(out)
    specs = PlugInSpecs(policy_spec, destination_spec, ledger_spec)
    written = write_counterexamples(reports, directory, specs if specs.to_json() else None)
    unimportable = [f"the {what}" for what, spec in specs.to_json().items() if spec.startswith(UNIMPORTABLE)]
    return Checked(reports[0], directory, written, not_replayable_because=" and ".join(unimportable))


def check_target(
    target, url: str | None = None, *, profile: str = "quick", explore: bool = True, out: str | Path | None = None,
) -> Checked:
    """Both engines on a real job system at ``url`` (None: its server, from the environment or started here).

    ``target`` is a built-in row's name (``"procrastinate"``), a
    ``fence.targets.Target``, or the spec of one (``MODULE:ATTR``,
    ``FILE.py:ATTR``), as ``fence targets --row`` and ``--target`` take them.
    Without ``url``, the server the target names (``Target.server``) is
    ``$FENCE_POSTGRES_URL`` / ``$FENCE_REDIS_URL``, else a private one started
    and stopped by the project's scripts.

    The machines at the profile's configurations, then, for a target whose
    storage can be restored (``Target.explorable``) and unless ``explore`` is
    False, the explorer at ``fence.targets.TARGET_BOUND`` (``EXPLORER_BOUND`` with
    workers that may fail, as every configuration here: the bound the legend names): a guarded row can then be ``assert_proved`` within that
    bound; by the machines alone it is ``assert_not_found`` at best
    (``profile="deep"`` walks 2 units x 2 jobs x 2 attempts after it, for
    ``fence.targets.EXPLORER_DEEP_BUDGET`` seconds: what it finds is found, and
    it proves nothing more). ``lockstep_findings`` lists where the system
    moved differently from the model policy it claims. Counterexamples are
    named by the row and record the target, so that ``fence replay FILE``
    replays them on the real system (``replay_target`` here).
    """
    from fence.targets.replay import servers, write_target_counterexamples
    from fence.checking.verdicts import profile_settings
    from fence.targets import TARGET_BOUND, TARGET_PROFILES, judge_target

    if profile not in TARGET_PROFILES:
        raise BadInput(f"unknown profile {profile!r}: use one of {', '.join(TARGET_PROFILES)}")
    chosen, spec = _target(target)
    if url is None and chosen.server_problem():
        raise BadInput(f"target {chosen.row} {chosen.server_problem()} to check_target")
    chosen_profile = TARGET_PROFILES[profile]
    with servers({} if url is None else {chosen.server: url}) as url_of:
        found = judge_target(chosen, url if url is not None else url_of(chosen.server)[0],
                             configs=chosen_profile.configs,
                             run_settings=profile_settings(chosen_profile.examples, chosen_profile.steps),
                             explore=explore, faithfulness=chosen_profile.faithfulness,
                             deeper=chosen_profile.bounds[1:], failures=True)
    directory = _directory(out)
    written = write_target_counterexamples(found.report, chosen, spec, directory)
    unimportable = spec.removeprefix(UNIMPORTABLE) if spec and spec.startswith(UNIMPORTABLE) else ""
    option = {"postgres": " --postgres", "redis": " --redis"}.get(chosen.server, " --postgres")
    return Checked(found.report, directory, written, found.lockstep_findings,
                   not_replayable_because=unimportable and f"the target ({unimportable})", row=chosen.row,
                   bound=TARGET_BOUND, replay_options=f"{option} {url}" if url is not None else "",
                   assumption_violated=found.assumption_violated)


def _target(given) -> tuple:
    """The target, and the spec a counterexample records for it (None: a built-in row, found by its name)."""
    from fence.model.plugins import absolute
    from fence.targets.loading import checked_target, load_target, target_spec_of
    from fence.targets import TARGETS

    if isinstance(given, str):
        if ":" in given:
            return load_target(given), absolute(given)
        if given not in TARGETS:
            raise BadInput(f"unknown target {given!r}: use one of {', '.join(TARGETS)}, a fence.targets.Target, "
                           "or its spec (MODULE:ATTR or FILE.py:ATTR)")
        return TARGETS[given], None
    target = checked_target(given, repr(getattr(given, "row", given)))
    if TARGETS.get(target.row) is target:
        return target, None
    return target, target_spec_of(target) or f"{UNIMPORTABLE}a Target not found at any module's top level"


def replay_target(path: str | Path, url: str | None = None):
    """Replay a target's counterexample (a .json ``check_target`` or ``fence targets`` wrote) on its real system.

    What ``fence replay FILE`` does: the target is found again from the file,
    its server is ``url`` (None: from the environment, or started here), and
    the run is played on a world made from the target's storage, never on
    fence's model. Returns the replay: ``violation`` (None: it did not break
    again), ``broke_at``, ``steps``, and ``system`` (which system it ran on).
    """
    from fence.targets.loading import load_target_run
    from fence.targets.replay import replay_target as replay

    run = load_target_run(Path(path))
    server = run.target.server
    if url is not None and run.target.server_problem():
        server = "redis" if url.startswith(("redis://", "rediss://", "unix://")) else "postgres"
    given = {server: url} if url is not None else {}
    return replay(Path(path), postgres=given.get("postgres"), redis=given.get("redis"))


def _directory(out: str | Path | None) -> Path:
    if out is None:
        return Path(tempfile.mkdtemp(prefix="fence-check-"))
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    return directory
