"""DBOS (dbos-transact-py) on PostgreSQL as a fence target: its workflow table is the ledger.

Theory of operation
-------------------
A job is a DBOS workflow whose id is its key, on a queue of its own
(``DBOSClient.enqueue``), with one step that writes the ticket. Each ledger
move (``fence.targets.protocol``) is the system-database call DBOS's worker or
recovery makes: a reserve is a claim (``start_queued_workflows``: ENQUEUED to
PENDING under a fresh executor and ownership token, ``owner_xid``); a confirm
or failure the step's checkpoint and ``update_workflow_outcome`` (SUCCESS, or
ERROR, which is final), both owner-checked. DBOS keeps no lease: a recovery
service (Conductor, an operator) declares an executor dead and calls
``recover_pending_workflows`` (``reenqueue_for_recovery``: back to ENQUEUED).
fence plays that service: an executor is dead once a lease has passed since
its claim, in model ticks (nothing on the server is compared with a clock on
this path, so nothing there moves); the retry is the next claim of the row.

Guarded: the step commits through ``guard.attempt(key, running_attempt_id())``, and
``recover_dead_executor`` runs instead of DBOS's recovery: abandon the run
unless it committed, then SUCCESS under the dead claim's token, or re-enqueue.
The rerun's fresh token makes DBOS itself refuse the stale worker's writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.metadata import version

from dbos import DBOS, DBOSClient
from dbos._context import current_owner_xid
from dbos._error import DBOSWorkflowConflictIDError
from dbos._serialization import serialize_exception, serialize_value
from dbos._utils import INTERNAL_QUEUE_NAME

from fence import BadInput, Decision
from fence.guard import Guard
from fence.targets.protocol import (
    BackendError, IllegalMove, ModelTime, Move, ReservationState, Restorer, TargetLedger, TargetStorage,
    refused_unless,
)

TIME = ModelTime(tick_seconds=60.0)
"""Nominal: a tick stands for a minute of an executor's silence; nothing on the server is moved."""
APP = "fence"
"""The application name and version every claim and recovery names."""
TASK_NAME, STEP = "fence_ticket", "write_ticket"
TABLES = ("workflow_status", "workflow_input", "operation_outputs", "workflow_output")
"""DBOS's tables a world writes, in the order a load inserts them (a step's workflow first)."""
S = ReservationState
ROW = ("status", "executor_id", "owner_xid", "recovery_attempts", "queue_name")
"""What of a workflow decides an answer here; its instants decide none."""


def attempt_id(workflow_id: str, owner_xid: str) -> str:
    """One run's identity for the guard: the workflow and the ownership token its claim wrote (``owner_xid``).

    DBOS writes a fresh token at every claim of a workflow (a queue's dequeue, a
    direct start; recovery, resume and rewind re-enqueue it for one), so a
    resumed run never takes an abandoned run's identity. One token serves a
    whole dequeue batch: hence the workflow id with it. The running workflow
    keeps its token in DBOS's context (``running_attempt_id``: no database
    read per step); the recovery reads it from the row.
    """
    return f"{workflow_id}@{owner_xid}"


def running_attempt_id() -> str:
    """In a workflow or step DBOS runs: ``attempt_id`` of this run, from DBOS's context (nothing read from the database)."""
    workflow_id = DBOS.workflow_id
    if workflow_id is None:
        raise BadInput("running_attempt_id() names a run of a DBOS workflow: call it in a step or workflow DBOS runs")
    return attempt_id(workflow_id, current_owner_xid(workflow_id))


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
            done = sys_db.update_workflow_outcome(workflow_id, "SUCCESS", output=_value(sys_db, None), owner_xid=token)
        else:
            done = sys_db.reenqueue_for_recovery(workflow_id, [executor_id], INTERNAL_QUEUE_NAME)
        if done:
            settled.append((workflow_id, decision))
    return settled


def _value(sys_db, value) -> str:
    return serialize_value(value, None, sys_db.serializer)[0]


@dataclass(frozen=True)
class _Claim:
    """One reservation: a claim of the key's workflow by an executor of its own, under its own token."""

    reservation_id: str
    key: str
    owner: str
    executor_id: str
    token: str
    claimed_at: float
    deadline: float


class DbosLedger(TargetLedger):
    """fence's ledger protocol on DBOS's system database (see the module doc)."""

    JOB, EITHER_RECOVERY, GUARD_CATCHES_FAILURES = "key", True, True

    def __init__(self, session: Session, capacity: int, *, guarded: bool) -> None:
        super().__init__(session, capacity, guarded=guarded, time=TIME)
        self._restoring(session.restorer)

    def _workflows(self) -> dict[str, dict]:
        return self._answered("workflows", lambda: {row["workflow_uuid"]: row for row in self._session.workflows()})

    def _state(self, claim: _Claim) -> ReservationState:
        row = self._workflows().get(claim.key, {})
        if row.get("status") == "PENDING" and row["owner_xid"] == claim.token:
            return S.RESERVED
        return self._confirmed(claim.key) if row.get("status") == "SUCCESS" else S.UNUSED  # ENQUEUED again, ERROR, gone

    def _silent(self, claim: _Claim) -> bool:
        """Has its executor been silent for a lease at the ledger's clock (the recovery service's word)?"""
        return self._lease is not None and self._now - claim.claimed_at >= TIME.timeout(self._lease) / TIME.tick_seconds

    def _past_lease(self, claim: _Claim) -> bool:
        """Its executor is silent for a lease, and DBOS's recovery query lists the workflow on it."""
        if not self._silent(claim):
            return False
        self._reading()
        pending = self._session.sys_db.get_pending_workflows(claim.executor_id, APP)
        return any(p.workflow_id == claim.key for p in pending)

    def _unexpired_because(self, claim: _Claim) -> str:
        return f"{claim.executor_id} is not dead with it PENDING"

    def _move_clock(self, ticks: float) -> None:
        """Nothing on the server: DBOS compares none of its stored instants with a clock on this path."""

    def _finish(self, claim: _Claim, status: str) -> None:
        """The worker's step checkpoint and workflow outcome, owner-checked, as DBOS's worker writes them."""
        sys_db = self._session.sys_db
        if status == "ERROR":  # the step raised: its error is checkpointed, then the workflow's
            value, serialization = serialize_exception(RuntimeError(f"{claim.reservation_id}'s step raised"), None,
                                                       sys_db.serializer)
            recorded, outcome = {"output": None, "error": value}, {"error": value}
        else:
            value, serialization = serialize_value(claim.key, None, sys_db.serializer)
            recorded, outcome = {"output": value, "error": None}, {"output": value}
        self._writing()
        try:
            sys_db.record_operation_result({
                "workflow_uuid": claim.key, "function_id": 1, "function_name": STEP, "started_at_epoch_ms": 0,
                "serialization": serialization, "child_workflow_id": None, **recorded,
            }, completed_at_epoch_ms=0, owner_xid=claim.token)
        except DBOSWorkflowConflictIDError as refused:
            raise IllegalMove(f"{status} by {claim.reservation_id}: DBOS refused the step checkpoint: {refused}") \
                from None
        landed = sys_db.update_workflow_outcome(claim.key, status, owner_xid=claim.token, **outcome)
        refused_unless(landed, f"{status} by {claim.reservation_id}: DBOS did not record the outcome")

    def _confirm(self, claim: _Claim, move: Move) -> None:
        self._finish(claim, "SUCCESS")
        self._finished(claim.key, move)

    def _fail(self, claim: _Claim) -> None:
        self._finish(claim, "ERROR")

    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> _Claim:
        published = key in self._workflows()
        self._writing()
        queue = self._session.queue(key)
        if not published:
            self._session.client.enqueue({"queue_name": key, "workflow_name": TASK_NAME, "workflow_id": key,
                                          "app_version": APP}, key)
        rid = reservation_id
        claim = _Claim(rid, key, owner, f"executor-{rid}", f"claim-{rid}", deadline - self._lease, deadline)
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
            refused_unless(sys_db.update_workflow_outcome(claim.key, "SUCCESS", output=_value(sys_db, claim.key),
                                                          owner_xid=claim.token),
                           f"{move.value} on {claim.reservation_id}: the workflow is no longer PENDING under its claim")
            self._finished(claim.key, move)
        self._failures_caught.discard(claim.reservation_id)

    def snapshot(self) -> tuple:
        """The workflows as far as they decide an answer (``ROW``), which steps are checkpointed (output or
        error), which outcomes stored, and fence's own records; DBOS's instants and serialized values left out."""
        workflows, _, steps, outputs = (json.loads(text) for text in self.image())
        claims = tuple(self._records().values())
        return (tuple(sorted((w["workflow_uuid"],) + tuple(w[k] for k in ROW) for w in workflows)),
                tuple(sorted((s["workflow_uuid"], s["function_id"], s["error"] is None) for s in steps)),
                tuple(sorted((o["workflow_uuid"], o["error"] is None) for o in outputs)),
                claims, self.bookkeeping(), tuple(self._silent(c) for c in claims))


class Session:
    """One DBOSClient on the system database (schema ``dbos``, migrated once), and the tables' image."""

    def __init__(self, url: str) -> None:
        try:
            self.client = DBOSClient(system_database_url=url, application_name=APP, retry_connection_errors=False)
        except Exception as error:
            raise BackendError(f"{url}: cannot open DBOS's system database there ({error})") from None
        self.sys_db = self.client._sys_db
        with self.sys_db.engine.begin() as connection:
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7369302)")  # one migration at a time
            self.sys_db.run_migrations()
        self.queues: dict = {}
        self.restorer = Restorer()

    def queue(self, name: str):
        """The key's queue (configuration, not state: registered once, kept across worlds)."""
        if name not in self.queues:
            if self.client.retrieve_queue(name) is None:
                self.client.register_queue(name)
            self.queues[name] = self.client.retrieve_queue(name)
        return self.queues[name]

    def workflows(self) -> list[dict]:
        with self.sys_db.engine.connect() as connection:
            return [dict(r._mapping) for r in connection.exec_driver_sql(
                "SELECT workflow_uuid, status, executor_id, owner_xid FROM dbos.workflow_status")]

    def dump(self) -> tuple[str, ...]:
        """Each table's rows as JSON text, in a fixed order (the image the explorer copies a world by)."""
        with self.sys_db.engine.connect() as connection:
            return tuple(connection.exec_driver_sql(self._dump).one())

    def load(self, image: tuple[str, ...]) -> None:
        with self.sys_db.engine.begin() as connection:
            for table in reversed(TABLES):  # DELETE, not TRUNCATE: a copy's load is cheap on tables this small
                connection.exec_driver_sql(f"DELETE FROM dbos.{table}")
            for table, rows in zip(TABLES, image):
                connection.exec_driver_sql(f"INSERT INTO dbos.{table} SELECT * FROM "
                                           f"json_populate_recordset(NULL::dbos.{table}, %s::json)", (rows,))

    _dump = "SELECT " + ", ".join(f"(SELECT coalesce(json_agg(t ORDER BY t::text), '[]') FROM dbos.{t} t)::text"
                                  for t in TABLES)
    _empty = "TRUNCATE " + ", ".join(f"dbos.{t}" for t in TABLES) + " CASCADE"

    def empty(self) -> None:
        self.restorer.release()
        with self.sys_db.engine.begin() as connection:
            connection.exec_driver_sql(self._empty)

    def versions(self) -> dict[str, str]:
        with self.sys_db.engine.connect() as connection:
            server = connection.exec_driver_sql("SHOW server_version").scalar()
        return {"dbos": version("dbos"), "postgresql": server}

    def close(self) -> None:
        self.client.destroy()


class DbosStorage(TargetStorage):
    """World factories on DBOS: each world starts on emptied DBOS tables; the ticket goes to fence's in-memory
    destination (the system under test is the workflow table)."""

    LEDGER, SESSION, WHAT, URL_SCHEMES = DbosLedger, Session, "a DBOS target", ("postgresql://", "postgres://")


__all__ = ["DbosLedger", "DbosStorage", "attempt_id", "recover_dead_executor", "running_attempt_id"]
