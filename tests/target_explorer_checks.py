"""What the explorer (and the machines) must show on every target, written once for every target.

tests/test_targets_rows.py calls these on every shipped system; what differs
between targets (how a restore or a snapshot can forget something) stays in
each target's own file, which calls ``mutated_walk_is_caught``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from fence.search.draws import source_independent_draws
from fence.explore.results import Outcome
from fence.model.invariants import BY_NAME, required_dangers
from fence.search.machines import InvariantViolation, machine_for
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES
from fence.checking.verdicts import Verdict, profile_settings
from fence.model.world import Confirm, Deliver, ModelConfig, Probe, Reserve, Retry, Scan, SendCommit, Settle, Start, Tick
from fence.targets import EXPLORER_BOUND, TARGET_BOUND, TARGETS, explore_target, judge_target

# Two janitors hold the same answer for one expired lease; one settles it, the job is
# retried, and then the other acts on its stale answer (every guarded row refuses it, as the model does).
STALE_SETTLE = [
    Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Probe(0, "job1/r1"), Probe(1, "job1/r1"),
    Settle(0, "job1/r1"), Retry("job1"), Settle(1, "job1/r1"),
]

# A worker outlives its lease: the system's recovery gives its job back, a retry takes it, and the first
# worker's commit lands and it confirms (finish_job, log_jobs, ack, its checkpoint: the system's own call).
STALE_CONFIRM = [
    Reserve("job1"), Tick(2), Start("job1#1"), Deliver("register", "job1#1"), SendCommit("job1#1"),
    Scan(0, "job1/r1"), Retry("job1"), Deliver("commit", "job1#1"), Deliver("ack", "job1#1"),
    Confirm("job1#1"),
]

FAITHFULNESS = (20, 40)
"""New states and merges the FaithfulnessCheck replays in these tests (each replay: a fresh world)."""


def machines_duplicate_replays(shipped) -> list[str]:
    """The machines on the shipped (naive) storage find a job written twice; their run, replayed on the emptied
    server, writes it twice again, by two attempts: the replayed story's action kinds, in order."""
    naive, one, duplicate = POLICIES["naive"], ModelConfig(capacity=1, jobs=1), BY_NAME["no_duplicate_writes"]
    machine = machine_for(naive, one, [duplicate], shipped.destination_factory, ledger_factory=shipped.ledger_factory)
    run = settings(max_examples=60, stateful_step_count=30, derandomize=True, database=None, deadline=None,
                   phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    with pytest.raises(InvariantViolation) as found, source_independent_draws():
        run_state_machine_as_test(machine, settings=run)
    chosen = [step.action for step in found.value.trace if not step.drain]

    replayed = replay_actions(naive, one, chosen, duplicate, shipped.destination_factory, shipped.ledger_factory)
    assert replayed is not None and replayed.message == "job1 was written 2 times"
    # fence's recorded facts: two writes for the key, by two attempts that the queue each let run.
    written = [effect for effect in replayed.world.observer.effects if effect.key == "job1"]
    assert len(written) == 2 and written[0].attempt_id != written[1].attempt_id
    return [step.action.kind for step in replayed.world.trace]


def guarded_row_holds(row: str, url: str, examples: int, *, failures: bool) -> dict:
    """The machines on ``row`` at 1 unit x 1 job, ``examples`` examples: no invariant broken, no lockstep
    difference, every danger reached (the failure path's too, with ``failures``); what they reached."""
    config = ModelConfig(capacity=1, jobs=1, failures=failures)
    found = judge_target(TARGETS[row], url, configs=[ModelConfig(capacity=1, jobs=1)],
                         run_settings=profile_settings(examples, 30), explore=False, failures=failures)
    report = found.report
    assert {name: cell.verdict for name, cell in report.cells.items()} == {
        name: Verdict.NOT_FOUND for name in report.cells
    }, {name: cell.detail for name, cell in report.cells.items()}
    reached = report.reached[config]
    assert all(reached[danger.name] > 0 for danger in required_dangers(POLICIES["abandon-fenced"], config)), dict(reached)
    assert found.lockstep_findings == []
    return reached


def shipped_duplicate_replays(row: str, shipped, url: str) -> None:
    """Breadth first on the shipped row: a job written twice, whose path replays on another storage's emptied server."""
    target = TARGETS[row]
    duplicate = BY_NAME["no_duplicate_writes"]
    found = explore_target(target, shipped, invariants=(duplicate,), stop_when_all_violated=True,
                           faithfulness=FAITHFULNESS)
    assert found.unfaithful is None and found.faithfulness_checks > 0
    result = found.results[duplicate.name]
    assert result.outcome is Outcome.VIOLATED and result.counterexample.message == "job1 was written 2 times"
    # The explorer's path, on a storage of its own: the server emptied, the same two writes.
    chosen = [step.action for step in result.counterexample.steps if not step.drain]
    assert len(chosen) == result.depth
    replayed = _replayed_on_a_fresh_storage(target, url, EXPLORER_BOUND, chosen, duplicate)
    assert replayed is not None and replayed.message == "job1 was written 2 times"
    written = [effect for effect in replayed.world.observer.effects if effect.key == "job1"]
    assert len(written) == 2 and written[0].attempt_id != written[1].attempt_id
    assert shipped.session.restorer.loads > 0  # the copies took turns on the server


def _replayed_on_a_fresh_storage(target, url: str, config, chosen, invariant):
    """``chosen`` replayed from scratch on a storage of its own, opened on ``url`` and closed after."""
    fresh = target.open(url)
    try:
        return replay_actions(target.policy, config, chosen, invariant, fresh.destination_factory, fresh.ledger_factory)
    finally:
        fresh.close()


def guarded_row_proved(row: str, guarded, *, destination_on_the_server: bool, bound=EXPLORER_BOUND) -> None:
    """Every interleaving within ``bound`` (EXPLORER_BOUND: workers that never fail): nothing broken, every danger
    reached (the failure path's too, where the bound has failures), copies faithful."""
    found = explore_target(TARGETS[row], guarded, bound, faithfulness=FAITHFULNESS)
    assert found.unfaithful is None and found.faithfulness_checks == sum(FAITHFULNESS)
    assert found.exhausted and found.states > 100 and found.transitions > found.states
    assert {name: r.outcome for name, r in found.results.items()} == {name: Outcome.PROVED for name in found.results}
    assert found.missing_dangers() == []
    assert all(found.reached[d.name] > 0 for d in required_dangers(TARGETS[row].policy, bound))
    assert found.outcome() is Outcome.PROVED
    # The copies really took turns on the server (a walk that never restored proved nothing about restores).
    # Without failures nearly every state has a server image of its own; with them many states differ only
    # in fence's records (a caught failure, a worker's phase) and share one image, which needs no load.
    if bound.failures:
        assert guarded.session.restorer.loads > 0
    else:
        assert guarded.session.restorer.loads > found.states
    # The expectation is checked against the storage itself, so a wrong table entry fails here, by name.
    assert destination_on_the_server == (guarded.store is not None), f"{row}: its destination is not where the test says"
    if destination_on_the_server:
        assert guarded.restorers["destination"].loads > 0


def shortest_failure_finding_replays(row: str, storage, url: str, invariant: str, message: str) -> list[str]:
    """The explorer's shortest violation of ``invariant`` with failures on (``TARGET_BOUND``), ending in a fail,
    replayed on a fresh database: its chosen steps' sentences there."""
    target = TARGETS[row]
    judged = BY_NAME[invariant]
    found = explore_target(target, storage, TARGET_BOUND, invariants=(judged,), stop_when_all_violated=True,
                           faithfulness=FAITHFULNESS)
    assert found.unfaithful is None and found.faithfulness_checks > 0
    result = found.results[invariant]
    assert result.outcome is Outcome.VIOLATED and result.counterexample.message == message
    chosen = [step.action for step in result.counterexample.steps if not step.drain]
    assert chosen[-1].kind == "fail"
    replayed = _replayed_on_a_fresh_storage(target, url, TARGET_BOUND, chosen, judged)
    assert replayed is not None and replayed.message == message
    return [step.sentence for step in replayed.world.trace if not step.drain]


def mutated_walk_is_caught(row: str, url: str, how: str, *, bound=EXPLORER_BOUND, said=("answer", "part")) -> None:
    """The explorer on ``row`` at ``bound`` with a mutation of its image or snapshot in place: the walk stops as
    unfaithful ("unfaithful", its reason naming one of ``said``), or, where every load makes the world new, the false
    violation it finds does not break again when replayed from scratch and is not reported ("does not replay").
    Never proved either way."""
    storage = TARGETS[row].open(url)
    try:
        found = explore_target(TARGETS[row], storage, bound, faithfulness=FAITHFULNESS, time_budget=60)
    finally:
        storage.close()
    if how == "does not replay":
        # Neither reported as a violation nor proved (this once raised an AssertionError instead).
        assert found.unfaithful is not None and "does not break it when replayed from scratch" in found.unfaithful
        assert found.outcome() is Outcome.UNDETERMINED
        return
    assert how == "unfaithful", how
    assert found.unfaithful is not None and any(word in found.unfaithful for word in said), found.unfaithful
    assert 0 < found.faithfulness_checks <= sum(FAITHFULNESS) and not found.exhausted
    assert found.outcome() is not Outcome.PROVED


def zset_scores_now(keys: tuple) -> tuple:
    """A Redis image's keys with every sorted set's scores at 0: time restored as an instant, not as ticks ago."""
    return tuple((name, kind, tuple((member, 0) for member, _ in value) if kind == "zset" else value)
                 for name, kind, value in keys)


def the_stale_commit_is_refused(stale, guard, fresh_attempt_id: str) -> None:
    """The stalled task wakes up and writes: its guard refuses (ABANDONED), and the only effect is the fresh attempt's."""
    from fence.guard import Refused
    from fence.model.destination import CommitResult

    with pytest.raises(Refused) as refused:
        stale.commit("hello")
    assert refused.value.result is CommitResult.ABANDONED
    assert [(e.key, e.attempt_id) for e in guard.destination.effects()] == [("t1", fresh_attempt_id)]


def snapshot_without_time(ledger_class, monkeypatch) -> None:
    """``ledger_class.snapshot()`` made to forget when each lease runs out, through the public target API alone:
    its records (``_records()``) without their deadlines, and ``RedisDatabase.snapshot`` without TTL ticks and with
    every sorted set's scores at 0. No layout of the adapter's own snapshot is assumed."""
    from dataclasses import replace

    from fence.targets.images import RedisDatabase

    real_snapshot, real_keys = ledger_class.snapshot, RedisDatabase.snapshot

    def timeless(self):
        records = self._records()
        self._records = lambda: {rid: replace(record, deadline=0) for rid, record in records.items()}
        try:
            return real_snapshot(self)
        finally:
            del self._records

    def keys_without_time(self, image, now, **options):
        return tuple((name, kind, tuple((member, 0) for member, _ in value) if kind == "zset" else value)
                     for name, kind, value, *_ in real_keys(self, image, now, **options))

    monkeypatch.setattr(ledger_class, "snapshot", timeless)
    monkeypatch.setattr(RedisDatabase, "snapshot", keys_without_time)
