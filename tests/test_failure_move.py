"""The worker's failure path: a worker that raises reports the failure to the ledger (``Fail``).

Behind ``ModelConfig.failures`` (off by default): a worker may raise before its
effect, after it, or after giving up on a refused commit, and report it with
the ledger's owner-checked ``fail(key, owner)``. fence's own ledger holds the
reservation as outcome_unknown, so every janitor policy settles a failed
attempt exactly as an expired one; a report the ledger refuses is a fact too.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from fence import POLICIES, Ledger, Move, PluginBroken, ReservationState
from fence.explore.results import Outcome
from fence.explore.walk import explore
from fence.model.invariants import FAILURE_DANGERS, required_dangers
from fence.search.machines import machine_for
from fence.live import AttemptSpec, ThreadRun
from fence.checking.verdicts import profile_settings, survey_config
from fence.model.world import (
    Deliver,
    Fail,
    ModelConfig,
    Probe,
    Reserve,
    Retry,
    Scan,
    SendCommit,
    Settle,
    Start,
    Tick,
    World,
    action_kinds,
)

FAILING = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=3, failures=True)
"""The explorer's CI bound with failures."""


def _world(policy: str = "abandon-fenced", **config) -> World:
    return World(POLICIES[policy], ModelConfig(failures=True, **config))


def _play(world: World, *actions) -> list[str]:
    return [world.apply(action).sentence for action in actions]


def test_without_failures_no_fail_is_ever_enabled_and_the_kinds_are_the_old_ones():
    """Off by default: no Fail in any phase, and the machines draw over the kinds they drew before."""
    world = World(POLICIES["naive"], ModelConfig())
    _play(world, Reserve("job1"), Start("job1#1"), SendCommit("job1#1"))
    assert world.enabled("fail") == []
    assert "fail" not in action_kinds(ModelConfig())
    assert machine_for(POLICIES["naive"], ModelConfig()).kinds == action_kinds(ModelConfig())
    assert required_dangers(POLICIES["abandon"], ModelConfig()) == required_dangers(POLICIES["abandon"])
    assert FAILURE_DANGERS[0] in required_dangers(POLICIES["abandon"], FAILING)


# States and transitions each built-in row walks at the CI bound, measured before the failure
# path existed (commit 74c8e16): with failures off the explorer must walk exactly these.
STATES_WITHOUT_FAILURES = {
    "naive": (655, 3339), "reconcile": (741, 3722), "fenced": (692, 3431), "witness": (2588, 11171),
    "witness-fenced": (2588, 11171), "abandon": (1727, 7272), "abandon-fenced": (1727, 7272),
    "abandon-fenced-shared": (1116, 4607),
}


@pytest.mark.parametrize("name", list(STATES_WITHOUT_FAILURES))
def test_without_failures_the_explorer_walks_the_states_it_walked_before(name):
    """The flag off changes nothing: every row's state and transition counts at the CI bound are the old ones."""
    found = explore(POLICIES[name], replace(FAILING, failures=False))
    assert (found.states, found.transitions) == STATES_WITHOUT_FAILURES[name]
    assert "failure_after_effect" not in found.reached and "failure_refused" not in found.reached


def test_a_failure_after_the_effect_holds_the_reservation_for_the_janitor():
    """A worker whose effect landed fails: the ledger holds its reservation, the danger is reached, the janitor settles it."""
    world = _world()
    _play(world, Reserve("job1"), Start("job1#1"), SendCommit("job1#1"), Deliver("commit", "job1#1"))
    sentence = world.apply(Fail("job1#1")).sentence
    assert sentence == "job1#1 fails after its effect landed and reports it: job1/r1 is outcome_unknown"
    assert world.ledger.get("job1/r1").state is ReservationState.OUTCOME_UNKNOWN
    assert world.observer.reservations["job1/r1"].state is ReservationState.OUTCOME_UNKNOWN
    assert world.reached["failure_after_effect"] == 1
    # Before any tick: the janitor acts on the failure as on an expired lease it holds.
    assert world.now == 0
    _play(world, Probe(0, "job1/r1"), Settle(0, "job1/r1"))
    assert world.ledger.get("job1/r1").state is ReservationState.CONFIRMED_EXISTING
    assert world.observer.findings.by_invariant == {}


@pytest.mark.parametrize(
    ("steps", "point"),
    [
        ((Reserve("job1"),), "before its effect"),
        ((Reserve("job1"), Start("job1#1"), SendCommit("job1#1")), "while its commit is in flight"),
        ((Reserve("job1"), Start("job1#1"), SendCommit("job1#1"), Deliver("commit", "job1#1"),
          Deliver("ack", "job1#1")), "after its effect landed"),
    ],
)
def test_a_worker_may_fail_at_every_point_of_its_life(steps, point):
    """Fail is enabled before the effect, while the commit is in flight and after it landed, and says where."""
    world = _world()
    _play(world, *steps)
    assert world.enabled("fail") == [Fail("job1#1")]
    assert point in world.apply(Fail("job1#1")).sentence
    assert world.enabled("fail") == []  # once: a failed worker never moves again
    assert world.attempts["job1#1"].phase.value == "failed"


def test_a_worker_that_gives_up_on_a_refused_commit_may_report_the_failure():
    """After the janitor abandoned it, a commit's refusal leaves the worker 'refused', and its report is refused too."""
    world = _world(lease=1)
    _play(
        world, Reserve("job1"), Start("job1#1"), SendCommit("job1#1"), Tick(1), Scan(0, "job1/r1"),
        Probe(0, "job1/r1"), Deliver("commit", "job1#1"), Deliver("ack", "job1#1"),
    )
    assert world.attempts["job1#1"].phase.value == "refused"
    sentence = world.apply(Fail("job1#1")).sentence
    assert sentence.startswith("job1#1 fails after its commit was refused ('abandoned') and reports it; the ledger refuses")
    assert world.reached["failure_refused"] == 1
    assert world.ledger.get("job1/r1").state is ReservationState.OUTCOME_UNKNOWN


def test_a_stale_attempts_failure_report_is_refused_by_the_owner_check_and_recorded():
    """After the retry took the key, the first attempt's report is refused (StaleAttempt), recorded, and moves nothing."""
    world = _world("naive", lease=1)
    _play(world, Reserve("job1"), Start("job1#1"), Tick(1), Scan(0, "job1/r1"), Retry("job1"))
    before = world.ledger.snapshot()
    found_before = {name: list(found) for name, found in world.observer.findings.by_invariant.items()}
    sentence = world.apply(Fail("job1#1")).sentence
    assert "the ledger refuses" in sentence and "belongs to 'job1#2'" in sentence
    assert world.reached["failure_refused"] == 1
    assert world.ledger.snapshot() == before
    assert world.observer.findings.by_invariant == found_before  # naive's early release, nothing new


def test_with_one_shared_identity_a_stale_failure_report_moves_the_retrys_reservation():
    """Shared identity: the ledger cannot tell the stale attempt's report from the retry's (invariant 5 breaks)."""
    world = _world("abandon-fenced-shared", lease=1)
    _play(
        world, Reserve("job1"), Start("job1#1"), Tick(1), Scan(0, "job1/r1"), Probe(0, "job1/r1"),
        Settle(0, "job1/r1"), Retry("job1"), Fail("job1#1"),
    )
    assert world.ledger.get("job1/r2").state is ReservationState.OUTCOME_UNKNOWN
    found = world.observer.findings.first("stale_attempt_cannot_change_newer")
    assert found == "job1#1's fail changed job1/r2, which belongs to job1#2"


def test_the_naive_policy_is_violated_through_a_failure_alone():
    """With no tick allowed (horizon 0) nothing expires: naive breaks only because a failed worker's unit is freed."""
    no_clock = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=0)
    without = explore(POLICIES["naive"], no_clock)
    assert without.results["no_early_release"].outcome is not Outcome.VIOLATED
    found = explore(POLICIES["naive"], replace(no_clock, failures=True))
    result = found.results["no_early_release"]
    assert result.outcome is Outcome.VIOLATED
    kinds = [step.action.kind for step in result.counterexample.steps if not step.drain]
    assert "fail" in kinds and "tick" not in kinds
    # The shortest: the worker fails while its commit is in flight, and the janitor frees its unit.
    assert kinds == ["reserve", "start", "send_commit", "fail", "probe", "settle"]


@pytest.mark.slow  # 38 s; in every run the explorer finds naive broken by a failure alone (above) and the targets' rows walk failures
def test_the_explorer_proves_abandon_fenced_with_the_failure_danger_reached():
    """At the CI bound with failures, abandon-fenced holds all seven, and a failure after the effect was reached."""
    found = explore(POLICIES["abandon-fenced"], FAILING)
    assert found.exhausted
    assert {name: r.outcome for name, r in found.results.items()} == {name: Outcome.PROVED for name in found.results}
    assert found.reached["failure_after_effect"] > 0
    assert found.missing_dangers() == []
    assert found.outcome() is Outcome.PROVED


def test_the_explorer_says_undetermined_when_the_failure_danger_is_never_reached():
    """A bound too short for a commit to land before a failure proves nothing about the failure path."""
    too_short = ModelConfig(capacity=1, jobs=1, max_attempts=1, lease=2, horizon=3, failures=True)
    found = explore(POLICIES["abandon-fenced"], too_short, max_depth=3)
    assert found.reached["failure_after_effect"] == 0
    assert "failure_after_effect" in found.missing_dangers()
    assert found.outcome() is Outcome.UNDETERMINED


def test_hypothesis_reaches_the_failure_danger_and_finds_the_naive_policy_violated():
    """The machines draw Fail where failures are modelled: naive is broken, abandon-fenced reaches the danger unbroken."""
    run = profile_settings(100, 30, derandomize=True)
    one_unit = ModelConfig(failures=True)  # the verdicts' first configuration: horizon 30
    naive = survey_config(POLICIES["naive"], one_unit, run_settings=run)
    assert naive.reached["failure_after_effect"] > 0
    assert "no_early_release" in naive.counterexamples
    safe = survey_config(POLICIES["abandon-fenced"], one_unit, run_settings=run)
    assert safe.error is None
    assert safe.reached["failure_after_effect"] > 0
    assert safe.counterexamples == {}


@pytest.mark.realclock
@pytest.mark.parametrize(("policy", "broken"), [("naive", {"no_release_while_effect_exists"}), ("abandon-fenced", set())])
def test_a_real_worker_that_fails_after_its_effect_is_settled_by_the_janitor_loop(policy, broken):
    """Real threads: the failure report reaches the ledger long before the lease ends; the janitor loop settles it."""
    run = ThreadRun(POLICIES[policy], lease=30.0)
    run.start()
    run.launch(AttemptSpec("job1", "job1#1", work=0.0, fail="after-effect"))
    assert run.wait(timeout=20.0)
    record = run.records["job1#1"]
    assert record.failed == "outcome_unknown"
    assert run.facts.observer.reached["failure_after_effect"] == 1
    # Settled before the lease could expire: by the failure, not by expiry.
    assert run.expired_owners == []
    assert set(run.facts.judge(teardown=False)) == broken


@pytest.mark.realclock
def test_a_real_worker_whose_failure_comes_after_the_janitor_took_its_lease_is_refused():
    """Real threads: a report after the janitor held the expired lease is refused by the ledger and recorded."""
    run = ThreadRun(POLICIES["abandon-fenced"], lease=0.01)
    run.start()
    # Its work outlasts the lease a hundredfold, so the janitor holds the lease before the report.
    run.launch(AttemptSpec("job1", "job1#1", work=1.0, fail="before-effect"))
    assert run.wait(timeout=20.0)
    assert run.records["job1#1"].failed == "refused"
    assert run.facts.observer.reached["failure_refused"] == 1
    assert run.expired_owners == ["job1#1"]


class _LedgerWithoutFail:
    """A user's ledger written before the failure path: every member of the protocol but ``fail``."""

    def __init__(self, capacity: int) -> None:
        self._inner = Ledger(capacity)

    def reserve(self, key: str, owner: str, now: float, lease: float):
        return self._inner.reserve(key, owner, now, lease)

    def get(self, reservation_id: str):
        return self._inner.get(reservation_id)

    def reservations(self):
        return self._inner.reservations()

    def expired(self, now: float):
        return self._inner.expired(now)

    def current(self, key: str):
        return self._inner.current(key)

    def apply(self, reservation_id: str, move: Move):
        return self._inner.apply(reservation_id, move)

    def owner_move(self, key: str, owner: str, move: Move):
        return self._inner.owner_move(key, owner, move)

    def snapshot(self):
        return self._inner.snapshot()

    @property
    def free(self) -> int:
        return self._inner.free

    @property
    def held(self) -> int:
        return self._inner.held


class _LedgerWhoseFailAnswersNothing(_LedgerWithoutFail):
    def fail(self, key: str, owner: str):
        self._inner.fail(key, owner)
        return None


def test_a_ledger_without_fail_is_asked_the_owner_move_the_table_names():
    """A plug-in ledger with no ``fail`` gets ``owner_move(key, owner, Move.FAIL)``, which its table already makes."""
    world = World(POLICIES["abandon-fenced"], ModelConfig(failures=True), ledger_factory=_LedgerWithoutFail)
    _play(world, Reserve("job1"), Start("job1#1"), SendCommit("job1#1"), Deliver("commit", "job1#1"))
    assert world.apply(Fail("job1#1")).sentence.endswith("job1/r1 is outcome_unknown")
    assert world.reached["failure_after_effect"] == 1


def test_a_ledger_whose_fail_returns_no_reservation_breaks_its_protocol_in_one_line():
    """``fail`` must return the key's Reservation (or refuse): None stops the run naming the ledger and the method."""
    world = World(POLICIES["abandon-fenced"], ModelConfig(failures=True), ledger_factory=_LedgerWhoseFailAnswersNothing)
    _play(world, Reserve("job1"))
    with pytest.raises(PluginBroken) as broken:
        world.apply(Fail("job1#1"))
    message = str(broken.value)
    assert "fail('job1', 'job1#1') returned None" in message and "\n" not in message


class _FailWithoutOwnerCheck(Ledger):
    """A seeded bug, the issue's class: the failure handler acts on the key's current record, whoever owns it
    (an idempotency decorator's delete-on-exception that removes the retry's in-progress record)."""

    def fail(self, key: str, owner: str):
        return self.apply(self.current(key).reservation_id, Move.FAIL)


def test_a_failure_handler_that_skips_the_owner_check_is_found_to_move_the_retrys_reservation():
    """abandon-fenced over a ledger whose fail() moves whatever the key holds: a stale failure moves the retry's."""
    found = explore(POLICIES["abandon-fenced"], FAILING, ledger_factory=_FailWithoutOwnerCheck, max_depth=8)
    result = found.results["stale_attempt_cannot_change_newer"]
    assert result.outcome is Outcome.VIOLATED
    steps = [step for step in result.counterexample.steps if not step.drain]
    assert steps[-1].action.kind == "fail" and "job1#2" in result.counterexample.message
    # fence's own ledger refuses the same report (the owner check): nothing to find at that depth.
    safe = explore(POLICIES["abandon-fenced"], FAILING, max_depth=8)
    assert safe.results["stale_attempt_cannot_change_newer"].outcome is not Outcome.VIOLATED
