"""The exhaustive explorer on pgqueuer: the same world, copied by restoring its database.

As tests/test_targets_explorer.py does for procrastinate: pgqueuer's ledger
(its queue table, its log and statistics, their sequences) and fence's
destination beside it are restorable (``fence.model.restore``), so the explorer's
generic path copies them as images and keys them by their ``snapshot()``, and
its FaithfulnessCheck replays paths from scratch on emptied tables. Here: the
shipped stale re-pick is violated and the explorer's counterexample replays on
a fresh database; the guarded recovery is proved within ``EXPLORER_BOUND``
with every danger reached (slow: about 25 s); and a restore or a snapshot that
forgets something is caught. With the worker's failure path (``failures=True``):
pgqueuer's failure, keyed by the job id alone, breaks the shipped row (its
shortest counterexample replays on a fresh database); the guarded
entrypoint's failure goes to its guard, and that row is proved (slow).

Every test needs PostgreSQL and pgqueuer (see tests/test_targets_pgqueuer.py).
"""

from __future__ import annotations


import pytest

from fence.base.errors import IllegalMove
from fence.explore.results import Outcome
from fence.targets import TARGET_BOUND, TARGETS, explore_target
from tests.target_explorer_checks import (
    FAITHFULNESS, guarded_row_proved, shipped_duplicate_replays, shortest_failure_finding_replays,
)
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.postgres


pgqueuer_module, shipped, guarded = system_fixtures("pgqueuer")


def test_the_explorer_finds_pgqueuers_duplicate_and_it_replays_on_a_fresh_database(shipped, postgres_url):
    """Breadth first on the shipped re-pick: a job written twice, whose path replays on another storage's emptied tables."""
    shipped_duplicate_replays("pgqueuer", shipped, postgres_url)


@pytest.mark.slow
def test_the_explorer_proves_the_guarded_row_within_its_bound_and_reaches_every_danger(guarded):
    """pgqueuer with fence.guard, every interleaving within EXPLORER_BOUND: nothing broken, every danger reached, copies faithful."""
    guarded_row_proved("pgqueuer+guard", guarded, destination_on_the_server=True)


# -- what the FaithfulnessCheck is for: a copy that forgets something -------------------------
def _mutated_load(module, monkeypatch, mutate) -> None:
    """The adapter's session loading ``mutate(script, session)`` instead of its image's load script."""
    def load(session, image):
        session.run(session.execute(mutate(session.image.load_script(image, session.sequences), session)))

    monkeypatch.setattr(module.Session, "load", load)


def _forget_sequences(module, monkeypatch):
    """A load that leaves every sequence where the last user left it."""
    _mutated_load(module, monkeypatch, lambda script, session: ";\n".join(
        line for line in script.split(";\n") if not line.startswith("SELECT setval")))


def _forget_heartbeats(module, monkeypatch):
    """A load that sets every row's heartbeat and execute_after to now: time restored as an instant, not as ticks."""
    _mutated_load(module, monkeypatch, lambda script, session: script.replace("_ticks_ago')::int", "_ticks_ago')::int * 0"))


def _forget_the_log(module, monkeypatch):
    """A load that empties pgqueuer's log and leaves it empty: which picks a row had, and how it ended, lost."""
    _mutated_load(module, monkeypatch, lambda script, session: ";\n".join(
        line for line in script.split(";\n") if not line.startswith(f"INSERT INTO {session.tables[1]} ")))


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


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole walk on the server: minutes, more on a busy machine
def test_guarded_with_failures_the_row_is_proved_and_every_danger_is_reached(guarded):
    """pgqueuer+guard exhausted with failures on (minutes): the entrypoint's failure goes to its guard, so nothing
    breaks, failure_after_effect reached. (With on_failure='hold' as the guarded failure path, a stalled worker's
    log_jobs moved the row the recovery re-picked, breaking 4: issue 25's finding.)"""
    guarded_row_proved("pgqueuer+guard", guarded, destination_on_the_server=True, bound=TARGET_BOUND)
