"""DBOS (dbos-transact-py) on PostgreSQL as a fence target: its workflow table is the ledger.

A job is a DBOS workflow whose id is its key, on a queue of its own, with one
step that writes the ticket; each move is the system-database call DBOS's
worker or recovery makes, and fence plays the recovery service that declares
an executor dead once a lease has passed since its claim (nothing on the
server is moved). The table of moves, and why the shipped row writes twice:
docs/explanation/queues.md, "DBOS". The guard's recovery, as a user runs it,
is ``fence.targets.dbos_recovery``.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

from dbos import DBOSClient
from dbos._error import DBOSWorkflowConflictIDError
from dbos._serialization import serialize_exception, serialize_value

from fence.targets.dbos_recovery import (  # the recipe, importable from here as before
    APP, INTERNAL_QUEUE_NAME, attempt_id, recover_dead_executor, running_attempt_id, serialized,
)
from fence.targets.images import PostgresSession, PostgresTables
from fence.targets.protocol import (
    ModelTime, Move, ReservationState, Taken, TargetLedger, TargetStorage, refused_by, refused_unless,
)

TIME = ModelTime(tick_seconds=60.0)
"""Nominal: a tick stands for a minute of an executor's silence; nothing on the server is moved."""
TASK_NAME, STEP = "fence_ticket", "write_ticket"
TABLES = {"dbos.workflow_status": itemgetter("workflow_uuid", "status", "executor_id", "owner_xid",
                                             "recovery_attempts", "queue_name"),
          "dbos.workflow_input": lambda row: None,
          "dbos.operation_outputs": lambda step: (step["workflow_uuid"], step["function_id"], step["error"] is None),
          "dbos.workflow_output": lambda outcome: (outcome["workflow_uuid"], outcome["error"] is None)}
"""DBOS's tables a world writes, in the order a load inserts them (a step's workflow first), and what of a row
decides an answer: which steps and outcomes are stored, output or error; no instant, no serialized value."""
S = ReservationState


@dataclass(frozen=True)
class _Claim(Taken):
    """One reservation: a claim of the key's workflow by an executor of its own, under its own token."""

    executor_id: str
    token: str


class DbosLedger(TargetLedger):
    """fence's ledger protocol on DBOS's system database (see the module doc)."""

    JOB, EITHER_RECOVERY, GUARD_CATCHES_FAILURES = "key", True, True
    EXPIRES_AT_DEADLINE = True  # the recovery service's word decides, not an instant in DBOS's tables
    UNEXPIRED_BECAUSE = "{record.executor_id} is not dead with it PENDING"

    def _workflows(self) -> dict[str, dict]:
        return self._answered("workflows", lambda: {row["workflow_uuid"]: row for row in self._session.workflows()})

    def _state(self, claim: _Claim) -> ReservationState:
        row = self._workflows().get(claim.key, {})
        if row.get("status") == "PENDING" and row["owner_xid"] == claim.token:
            return S.RESERVED
        return self._confirmed(claim.key) if row.get("status") == "SUCCESS" else S.UNUSED  # ENQUEUED again, ERROR, gone

    def _past_lease(self, claim: _Claim) -> bool:
        """Its executor is silent for a lease, and DBOS's recovery query lists the workflow on it."""
        if not self._past_deadline(claim):  # its executor silent for a lease: the recovery service's word
            return False
        self._reading()
        pending = self._session.sys_db.get_pending_workflows(claim.executor_id, APP)
        return any(p.workflow_id == claim.key for p in pending)

    def _finish(self, claim: _Claim, status: str) -> None:
        """The worker's step checkpoint and workflow outcome, owner-checked, as DBOS's worker writes them."""
        sys_db = self._session.sys_db
        if status == "ERROR":  # the step raised: its error is checkpointed, then the workflow's
            field, (value, serialization) = "error", serialize_exception(
                RuntimeError(f"{claim.reservation_id}'s step raised"), None, sys_db.serializer)
        else:
            field, (value, serialization) = "output", serialize_value(claim.key, None, sys_db.serializer)
        self._writing()
        refused = f"{status} by {claim.reservation_id}: DBOS refused the step checkpoint"
        with refused_by(DBOSWorkflowConflictIDError, refused):
            sys_db.record_operation_result({
                "workflow_uuid": claim.key, "function_id": 1, "function_name": STEP, "started_at_epoch_ms": 0,
                "serialization": serialization, "child_workflow_id": None, "output": None, "error": None, field: value,
            }, completed_at_epoch_ms=0, owner_xid=claim.token)
        landed = sys_db.update_workflow_outcome(claim.key, status, owner_xid=claim.token, **{field: value})
        refused_unless(landed, f"{status} by {claim.reservation_id}: DBOS did not record the outcome")

    def _confirm(self, claim: _Claim, move: Move) -> None:
        self._finish(claim, "SUCCESS")
        self._finished(claim.key, move)

    def _fail(self, claim: _Claim) -> None:
        self._finish(claim, "ERROR")

    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> _Claim:
        queue = self._session.queue(key)
        self._publish_once(key, lambda: self._session.client.enqueue(
            {"queue_name": key, "workflow_name": TASK_NAME, "workflow_id": key, "app_version": APP}, key))
        self._writing()
        rid = reservation_id
        claim = _Claim(rid, key, owner, deadline, f"executor-{rid}", f"claim-{rid}")
        claimed, _ = self._session.sys_db.start_queued_workflows(queue, claim.executor_id, APP, None, 0,
                                                                 owner_xid=claim.token)
        refused_unless(claimed, f"reserve {key!r} for {owner!r}: no workflow ENQUEUED on DBOS queue {key!r} to claim")
        return claim

    def _release(self, claim: _Claim) -> None:
        """DBOS's recovery of the dead executor's workflow: back to ENQUEUED, for the next claim."""
        self._writing()
        refused_unless(self._session.sys_db.reenqueue_for_recovery(claim.key, [claim.executor_id], INTERNAL_QUEUE_NAME),
                       f"nothing PENDING on {claim.executor_id} to re-enqueue")

    def _settle(self, claim: _Claim, move: Move) -> None:
        """``recover_dead_executor``'s settle: re-enqueued, or SUCCESS under the dead claim's token."""
        if move is Move.SETTLE_UNUSED:
            self._release(claim)
        else:
            self._writing()
            sys_db = self._session.sys_db
            refused_unless(sys_db.update_workflow_outcome(claim.key, "SUCCESS", output=serialized(sys_db, claim.key),
                                                          owner_xid=claim.token),
                           f"{move.value} on {claim.reservation_id}: the workflow is no longer PENDING under its claim")
            self._finished(claim.key, move)
        self._failures_caught.discard(claim.reservation_id)


class Session(PostgresSession):
    """A DBOSClient on the system database (schema ``dbos``, migrated once); the image on a connection of its own."""

    SYSTEM = "dbos"

    def open_library(self, url: str) -> PostgresTables:
        self.own_connection(url)  # DBOS is not on asyncio: the image is read and written on the session's own
        self.client = DBOSClient(system_database_url=url, application_name=APP, retry_connection_errors=False)
        self.closing(self.client.destroy)
        self.sys_db = self.client._sys_db
        self.queues: dict = {}
        with self.sys_db.engine.begin() as connection:
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7369302)")  # one migration at a time
            self.sys_db.run_migrations()
        # No column timed: DBOS compares none of its stored instants with a clock on this path.
        return PostgresTables(TABLES, TIME, cascade=True, ordered_by=dict.fromkeys(TABLES, "t::text"), deciding=TABLES)

    def queue(self, name: str):
        """The key's queue (configuration, not state: registered once, kept across worlds)."""
        if name not in self.queues:
            if self.client.retrieve_queue(name) is None:
                self.client.register_queue(name)
            self.queues[name] = self.client.retrieve_queue(name)
        return self.queues[name]

    def workflows(self) -> list[dict]:
        return self.rows("SELECT workflow_uuid, status, executor_id, owner_xid FROM dbos.workflow_status")


class DbosStorage(TargetStorage):
    """World factories on DBOS: each world starts on emptied DBOS tables; the ticket goes to fence's in-memory
    destination (the system under test is the workflow table)."""

    LEDGER, SESSION, WHAT, URL_SCHEMES = DbosLedger, Session, "a DBOS target", ("postgresql://", "postgres://")


__all__ = ["APP", "DbosLedger", "DbosStorage", "attempt_id", "recover_dead_executor", "running_attempt_id"]
