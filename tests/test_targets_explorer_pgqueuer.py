"""The exhaustive explorer on pgqueuer, what only it shows: restores and snapshots that forget something.

pgqueuer's ledger (its queue table, its log and statistics, their sequences)
and fence's destination beside it are restorable (``fence.model.restore``), so
the explorer's generic path copies them as images and keys them by their
``snapshot()``, and its FaithfulnessCheck replays paths from scratch on emptied
tables. What every target shows (the shipped re-pick's duplicate found and
replayed; the stale worker's failure, keyed by the job id alone, the shortest
breach of 5; the guarded row proved with and without failures) is in
tests/test_targets_rows.py. Here: a restore or a snapshot of pgqueuer's tables
that forgets something is caught.

Every test needs PostgreSQL and pgqueuer (see tests/test_targets_pgqueuer.py).
"""

from __future__ import annotations

import pytest

from fence.base.errors import IllegalMove
from fence.targets import TARGETS, explore_target
from tests.target_explorer_checks import FAITHFULNESS, mutated_walk_is_caught
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.postgres


pgqueuer_module, _, _ = system_fixtures("pgqueuer")


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
    if CAUGHT[mutation] == "raises":
        storage = TARGETS["pgqueuer+guard"].open(postgres_url)
        try:
            with pytest.raises(IllegalMove, match="dequeue did not re-pick"):
                explore_target(TARGETS["pgqueuer+guard"], storage, faithfulness=FAITHFULNESS, time_budget=60)
        finally:
            storage.close()
        return
    mutated_walk_is_caught("pgqueuer+guard", postgres_url, CAUGHT[mutation])
