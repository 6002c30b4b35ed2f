"""fence.guard's recovery for DBOS, as a user runs it: what replaces DBOS's recovery of a dead executor.

DBOS keeps no lease: a recovery service (Conductor, an operator) declares an
executor dead and ``recover_pending_workflows`` re-enqueues its PENDING
workflows, so the next claim re-runs every step not checkpointed, the one
whose effect may have landed included. A guarded step commits through
``guard.attempt(key, running_attempt_id())``; ``recover_dead_executor`` runs
instead of DBOS's recovery: abandon the run unless it committed, then SUCCESS
under the dead claim's token, or re-enqueue (the rerun's fresh token makes
DBOS itself refuse the stale worker's writes)::

    guard = Guard.open(DATABASE_URL)

    @DBOS.step()
    def write_ticket(key, body):
        with guard.attempt(key, running_attempt_id()) as attempt:
            attempt.commit(body)

    recover_dead_executor(client, guard, dead_executor_id, app_version=VERSION)

``fence.targets.dbos_postgres`` drives DBOS through fence's protocol and uses
these same calls for its guarded row (docs/explanation/queues.md, "DBOS").
"""

from __future__ import annotations

from dbos import DBOS, DBOSClient
from dbos._context import current_owner_xid
from dbos._serialization import serialize_value
from dbos._utils import INTERNAL_QUEUE_NAME

from fence import BadInput, Decision
from fence.guard import Guard

APP = "fence"
"""The application name and version every claim and recovery of fence's DBOS target names."""


def attempt_id(workflow_id: str, owner_xid: str) -> str:
    """One run's identity for the guard: the workflow and the ownership token its claim wrote (``owner_xid``).

    DBOS writes a fresh token at every claim of a workflow (a queue's dequeue, a
    direct start; recovery, resume and rewind re-enqueue it for one), so a
    resumed run never takes an abandoned run's identity. One token serves a
    whole dequeue batch: hence the workflow id with it.
    """
    return f"{workflow_id}@{owner_xid}"


def running_attempt_id() -> str:
    """In a workflow or step DBOS runs: ``attempt_id`` of this run, from DBOS's context (nothing read from the database)."""
    workflow_id = DBOS.workflow_id
    if workflow_id is None:
        raise BadInput("running_attempt_id() names a run of a DBOS workflow: call it in a step or workflow DBOS runs")
    return attempt_id(workflow_id, current_owner_xid(workflow_id))


def serialized(sys_db, value) -> str:
    """``value`` as DBOS stores a workflow's output."""
    return serialize_value(value, None, sys_db.serializer)[0]


def recover_dead_executor(
    client: DBOSClient, guard: Guard, executor_id: str, *, app_version: str = APP,
) -> list[tuple[str, Decision]]:
    """DBOS's recovery of a dead executor with fence's guard: what to call instead of ``recover_pending_workflows``.

    For each workflow PENDING on ``executor_id``: abandon its run unless it
    committed, then mark it SUCCESS (under the dead claim's token) or re-enqueue
    it for a fresh claim. A workflow its worker finished meanwhile is left alone.
    A dead executor's id must not be reused while its recovery runs (Conductor's
    are unique): the run abandoned is the one on that executor. ``app_version``
    is the dead executor's application version, as DBOS's recovery names it.
    """
    sys_db, settled = client._sys_db, []
    for pending in sys_db.get_pending_workflows(executor_id, app_version):
        workflow_id = pending.workflow_id
        # The token first: a claim since would have moved the row off the dead executor, so a row still
        # PENDING on it after this read holds the dead run's token.
        token, status = sys_db.get_workflow_owner(workflow_id), sys_db.get_workflow_status(workflow_id)
        if status is None or (status["status"], status["executor_id"]) != ("PENDING", executor_id):
            continue  # finished, or recovered and claimed by a live executor meanwhile: not the dead run's
        decision = guard.recover(workflow_id, attempt_id(workflow_id, token))
        if decision is Decision.EXISTING:
            done = sys_db.update_workflow_outcome(workflow_id, "SUCCESS", output=serialized(sys_db, None), owner_xid=token)
        else:
            done = sys_db.reenqueue_for_recovery(workflow_id, [executor_id], INTERNAL_QUEUE_NAME)
        if done:
            settled.append((workflow_id, decision))
    return settled


__all__ = ["APP", "INTERNAL_QUEUE_NAME", "attempt_id", "recover_dead_executor", "running_attempt_id", "serialized"]
