"""The exhaustive explorer on DBOS, what only it shows: restores and snapshots of DBOS's tables that forget something.

DBOS's ledger is restorable: its image is the four tables a world writes
(``workflow_status``, ``workflow_input``, ``operation_outputs``,
``workflow_output``) as JSON, loaded after deleting theirs; its snapshot keeps
of each workflow only what decides an answer (status, executor, ownership
token, dispatch count, queue) and, per claim, whether its executor is silent
for a lease. What every target shows (DBOS's own recovery violated and the
explorer's counterexample replayed; the guarded row proved within
``TARGET_BOUND``, slow) is in tests/test_targets_rows.py. Here: a restore or
snapshot that forgets something is caught.

Every test needs PostgreSQL and dbos (see tests/test_targets_dbos.py).
"""

from __future__ import annotations

import pytest

from fence.explore.results import Outcome
from fence.targets import TARGET_BOUND, TARGETS, explore_target
from tests.target_explorer_checks import FAITHFULNESS
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.postgres


dbos_module, _, _ = system_fixtures("dbos")


# -- what the FaithfulnessCheck is for: a copy that forgets something -------------------------
# Each mutation goes through the public target protocol (a ledger's load and snapshot, its reservations and
# bookkeeping, DBOS's own table), not through the adapter's image or snapshot layout.
def _forget_the_owner_tokens(module, monkeypatch, postgres_url):
    """A load that leaves every workflow with no ownership token: a copy's claims are no longer its own."""
    import psycopg

    connection = psycopg.connect(postgres_url, autocommit=True)
    real = module.DbosLedger.load

    def tokenless(self, image):
        real(self, image)
        connection.execute("UPDATE dbos.workflow_status SET owner_xid = NULL")

    monkeypatch.setattr(module.DbosLedger, "load", tokenless)
    return connection.close


def _snapshot_without_time(module, monkeypatch, postgres_url):
    """A snapshot of what the ledger answers, its bookkeeping and the server's image, but not when each claim was
    made (a reservation's deadline): when a lease runs out."""
    def timeless(self):
        answers = tuple((r.reservation_id, r.key, r.owner, r.state) for r in self.reservations())
        return answers, self.bookkeeping(), self.image()

    monkeypatch.setattr(module.DbosLedger, "snapshot", timeless)
    return lambda: None


CAUGHT = {
    # mutation: the row it is walked on
    _forget_the_owner_tokens: "dbos",
    _snapshot_without_time: "dbos+guard",
}


@pytest.mark.parametrize("mutation", list(CAUGHT), ids=lambda mutation: mutation.__name__.strip("_"))
def test_a_restore_or_snapshot_that_forgets_something_is_caught(mutation, dbos_module, postgres_url, monkeypatch):
    """Each mutation of the image or the snapshot stops the walk as unfaithful, instead of proving anything."""
    undo = mutation(dbos_module, monkeypatch, postgres_url)
    row = CAUGHT[mutation]
    storage = TARGETS[row].open(postgres_url)
    try:
        found = explore_target(TARGETS[row], storage, TARGET_BOUND, faithfulness=FAITHFULNESS, time_budget=120)
    finally:
        storage.close()
        undo()
    assert found.unfaithful is not None, "the walk trusted a copy that forgets something"
    assert found.outcome() is not Outcome.PROVED
