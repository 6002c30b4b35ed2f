"""The exhaustive explorer on pgqueuer: the same world, copied by restoring its database.

As tests/test_targets_explorer.py does for procrastinate: pgqueuer's ledger
(its queue table, its log and statistics, their sequences) and fence's
destination beside it are restorable (``fence._restore``), so the explorer's
generic path copies them as images and keys them by their ``snapshot()``, and
its FaithfulnessCheck replays paths from scratch on emptied tables. Here: the
shipped stale re-pick is violated and the explorer's counterexample replays on
a fresh database; the guarded recovery is proved within ``EXPLORER_BOUND``
with every danger reached (slow: about 25 s); and a restore or a snapshot that
forgets something is caught. With the worker's failure path (``failures=True``):
pgqueuer's failure, keyed by the job id alone, breaks both rows, and each
shortest counterexample replays on a fresh database.

Every test needs PostgreSQL and pgqueuer (see tests/test_targets_pgqueuer.py).
"""

from __future__ import annotations

import os

import pytest

from fence._errors import IllegalMove
from fence._explore import Outcome
from fence.targets import TARGET_BOUND, TARGETS, explore_target
from tests.target_explorer_checks import (
    FAITHFULNESS, guarded_row_proved, shipped_duplicate_replays, shortest_failure_finding_replays,
)

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pgqueuer_module():
    try:
        import fence.targets.pgqueuer as module
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the pgqueuer target for real, and it cannot be imported: {error}", pytrace=False)
        pytest.skip(f"pgqueuer is not installed ({error}): pip install -e '.[test]'")
    return module


@pytest.fixture
def shipped(postgres_url, pgqueuer_module):
    storage = TARGETS["pgqueuer"].open(postgres_url)
    yield storage
    storage.close()


@pytest.fixture
def guarded(postgres_url, pgqueuer_module):
    storage = TARGETS["pgqueuer+guard"].open(postgres_url)
    yield storage
    storage.close()


def test_the_explorer_finds_pgqueuers_duplicate_and_it_replays_on_a_fresh_database(shipped, postgres_url):
    """Breadth first on the shipped re-pick: a job written twice, whose path replays on another storage's emptied tables."""
    shipped_duplicate_replays("pgqueuer", shipped, postgres_url)


@pytest.mark.slow
def test_the_explorer_proves_the_guarded_row_within_its_bound_and_reaches_every_danger(guarded):
    """pgqueuer with fence.guard, every interleaving within EXPLORER_BOUND: nothing broken, every danger reached, copies faithful."""
    guarded_row_proved("pgqueuer+guard", guarded, destination_on_the_server=True)


# -- what the FaithfulnessCheck is for: a copy that forgets something -------------------------
def _forget_sequences(module, monkeypatch):
    """A load that leaves every sequence where the last user left it."""
    real = module.load_script

    def without_setval(image, tables, sequences):
        return ";\n".join(line for line in real(image, tables, sequences).split(";\n")
                          if not line.startswith("SELECT setval"))

    monkeypatch.setattr(module, "load_script", without_setval)


def _forget_heartbeats(module, monkeypatch):
    """A load that sets every row's heartbeat and execute_after to now: time restored as an instant, not as ticks."""
    real = module.load_script
    monkeypatch.setattr(module, "load_script", lambda image, tables, sequences: real(image, tables, sequences).replace(
        "_ticks_ago')::int", "_ticks_ago')::int * 0"))


def _forget_the_log(module, monkeypatch):
    """A load that empties pgqueuer's log and leaves it empty: which picks a row had, and how it ended, lost."""
    real = module.load_script

    def without_log(image, tables, sequences):
        return ";\n".join(line for line in real(image, tables, sequences).split(";\n")
                          if not line.startswith(f"INSERT INTO {tables[1]} "))

    monkeypatch.setattr(module, "load_script", without_log)


def _snapshot_without_time(module, monkeypatch):
    """A snapshot that drops the rows' heartbeat ticks and the picks' deadlines: when a lease runs out."""
    real = module.PgqueuerLedger.snapshot

    def timeless(self):
        import json

        rows, logged, counted, sequence, picks, *rest = real(self)
        rows = tuple(json.dumps({k: v for k, v in json.loads(r).items() if not k.endswith("_ticks_ago")}) for r in rows)
        return (rows, logged, counted, sequence, tuple(p[:-1] for p in picks), *rest)

    monkeypatch.setattr(module.PgqueuerLedger, "snapshot", timeless)


CAUGHT = {
    # mutation: how it is caught
    _forget_sequences: "unfaithful",
    _forget_the_log: "unfaithful",
    _snapshot_without_time: "unfaithful",
    # every load makes the heartbeats new: the copy's ledger still has stale_jobs' answer from before the load,
    # and the dequeue it makes on that answer re-picks nothing, so the FaithfulnessCheck's walk stops on a raise
    _forget_heartbeats: "raises",
}


@pytest.mark.parametrize("mutation", list(CAUGHT), ids=lambda mutation: mutation.__name__.strip("_"))
def test_a_restore_or_snapshot_that_forgets_something_is_caught(mutation, pgqueuer_module, postgres_url, monkeypatch):
    """Each mutation of the image or the snapshot stops the walk as unfaithful, or a false violation fails to replay."""
    mutation(pgqueuer_module, monkeypatch)
    storage = TARGETS["pgqueuer+guard"].open(postgres_url)
    try:
        if CAUGHT[mutation] == "raises":
            with pytest.raises(IllegalMove, match="dequeue did not re-pick"):
                explore_target(TARGETS["pgqueuer+guard"], storage, faithfulness=FAITHFULNESS, time_budget=60)
            return
        found = explore_target(TARGETS["pgqueuer+guard"], storage, faithfulness=FAITHFULNESS, time_budget=60)
    finally:
        storage.close()
    assert found.unfaithful is not None and ("answer" in found.unfaithful or "part" in found.unfaithful), found.unfaithful
    assert 0 < found.faithfulness_checks <= sum(FAITHFULNESS) and not found.exhausted
    assert found.outcome() is not Outcome.PROVED


# -- the worker's failure path: pgqueuer's log_failure, keyed by the job id alone ---------------
def test_a_stale_workers_failure_deletes_the_retrys_row_as_shipped(shipped, postgres_url):
    """The issue's class on pgqueuer: the first worker's failure (log_jobs exception) deletes the row its retry runs."""
    story = shortest_failure_finding_replays(
        "pgqueuer", shipped, postgres_url, "stale_attempt_cannot_change_newer",
        "job1#1's fail changed job1/r2, which belongs to job1#2")
    assert [sentence.split(" ")[0] for sentence in story] == ["a", "the", "janitor", "job1", "job1#1"]
    assert story[-1] == "job1#1 fails before its effect and reports it: job1/r2 is unused"


def test_a_stale_workers_failure_moves_the_row_the_guarded_recovery_holds(guarded, postgres_url):
    """A finding about pgqueuer+guard: a stale failure (log_jobs failed) parks the row the recovery re-picked.

    pgqueuer's log_jobs checks the job id alone, so the first worker's failure,
    after the recovery's re-pick took its row, sets that row 'failed' with no
    queue manager: a move the model's table forbids (the lease is the
    janitor's now), which invariant 4 reports. The recovery still settles the
    row by its id, but a parked row is also pgqueuer's to requeue_jobs, while
    the recovery holds it.
    """
    story = shortest_failure_finding_replays(
        "pgqueuer+guard", guarded, postgres_url, "capacity_conserved",
        "job1#1: the ledger accepted fail on job1/r1, which was outcome_unknown (the table allows confirm, "
        "confirm_existing, settle_existing, settle_unused): it left the table")
    assert story[1:3] == ["the clock advances 2 tick(s) to t=2; lease of job1/r1 has expired",
                          "janitor 0 sees job1/r1 expired and holds it as outcome_unknown"]


@pytest.mark.slow
def test_guarded_with_failures_only_the_stale_failure_breaks_and_every_danger_is_reached(guarded):
    """pgqueuer+guard exhausted with failures on (about 16,000 states, minutes): invariant 4 alone violated, every danger reached."""
    from fence._invariants import required_dangers

    found = explore_target(TARGETS["pgqueuer+guard"], guarded, TARGET_BOUND, faithfulness=FAITHFULNESS)
    assert found.unfaithful is None and found.faithfulness_checks == sum(FAITHFULNESS) and found.exhausted
    assert {name: r.outcome for name, r in found.results.items()} == {
        name: Outcome.VIOLATED if name == "capacity_conserved" else Outcome.PROVED for name in found.results}
    assert found.missing_dangers() == []
    assert all(found.reached[d.name] > 0 for d in required_dangers(TARGETS["pgqueuer+guard"].policy, TARGET_BOUND))
    assert found.reached["failure_after_effect"] > 0
