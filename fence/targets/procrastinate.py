"""procrastinate on PostgreSQL as a fence target: its job table is the ledger.

Theory of operation
-------------------
fence's ``World`` asks a ledger to reserve, confirm, list expired leases and
make the janitor's moves. Here every one of those is procrastinate's own call
on its own tables (``procrastinate.App.job_manager``), on a real PostgreSQL:

* a **reserve** for a job's key is a worker taking the job: ``defer`` (the key
  is the job's ``lock`` and ``queueing_lock``, and its queue, as procrastinate
  users key a job), ``register_worker``, then ``fetch_job`` on that worker. One
  reservation is one fetch by one worker (fence gives each attempt a worker of
  its own, so that each has its own heartbeat);
* a **confirm** is the worker's ``finish_job(job, succeeded)``: what
  procrastinate's worker calls when the task returns;
* a **failure report** (``fail``) is what procrastinate's worker does when the
  task raises (``Worker._process_job`` and ``_persist_job_status``): it asks
  the task's retry strategy (``Task.get_retry_exception``) and, on a retry
  decision, calls ``retry_job(job, retry_at=..., ...)`` (the same row back to
  ``todo``), else ``finish_job(job, failed)``. fence's task keeps
  procrastinate's default, no retry strategy, so the row is finished as
  failed. Like ``finish_job(succeeded)`` it is keyed by the job id alone: a
  stale worker's failure finishes whatever that row now is. Guarded, the
  task's guard wrapper catches the exception and settles through the guard
  before procrastinate finishes the row (``ProcrastinateLedger._fail``);
* a lease has **expired** when ``get_stalled_jobs(seconds_since_heartbeat=...)``
  lists the job: its worker's heartbeat is older than the lease;
* the **janitor's moves** are procrastinate's recovery. As shipped
  (``guarded=False``), the documented stalled-jobs recipe: ``retry_job(job)``
  puts the same row back to ``todo`` (the naive policy's expire-and-release),
  and the next attempt fetches that row again. Guarded (``guarded=True``,
  fence.guard): holding an expired lease unregisters its stalled worker (as
  procrastinate's own ``prune_stalled_workers`` does), a settle is
  ``finish_job(succeeded)`` or ``finish_job(failed)``, and the retry defers a
  fresh row, so that a stale worker's late ``finish_job`` meets a finished row
  and is refused instead of finishing the retry's.

Reservation states are read back from procrastinate's rows (``list_jobs``) and
the fetches fence made: a fetch whose worker still holds the ``doing`` row is
``reserved``; a ``doing`` row whose worker was unregistered is
``outcome_unknown``; ``succeeded`` is ``confirmed`` (``confirmed_existing``
when the finish reported an existing ticket: procrastinate keeps no result, so
fence remembers which finish it made); a fetch whose row went back to ``todo``
(or ``failed``) was given back: ``unused``. These are the system's answers: the
lockstep compares them with the model, and the observer never reads them.

Time moves without sleeping: a model tick is ``TICK_SECONDS`` of the
database's clock, and moving the clock on moves every worker's
``last_heartbeat`` back by that much. A lease of L ticks is judged with
``seconds_since_heartbeat = (L - 1/2) * TICK_SECONDS``: the half tick absorbs
the milliseconds of real time that pass between two statements, so a job is
stalled from the tick its lease runs out, never a tick early or late.

A refusal (``finish_job`` of a row that is not todo/doing, ``retry_job`` of a
row that is not doing, nothing to fetch) is raised as fence's ``IllegalMove``
with procrastinate's own words, which the world records as the ledger
refusing. Nothing else is refused: procrastinate checks neither the worker nor
the attempt, and that is what the lockstep reports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import procrastinate
import psycopg_pool
from procrastinate import exceptions as procrastinate_errors
from procrastinate import jobs as procrastinate_jobs

from fence import Decision
from fence.guard import Guard
from fence.targets.images import PostgresSession, PostgresTables, SchemaImage
from fence.targets.protocol import (
    BackendError, IllegalMove, ModelTime, Move, ReservationState, Taken, TargetLedger, TargetStorage,
)

TIME = ModelTime(tick_seconds=60.0)
"""One model tick is a minute of the database's clock."""
TICK_SECONDS = TIME.tick_seconds
TASK_NAME = "fence_ticket"
"""The task whose jobs fence defers: its body is the world's worker writing the ticket."""
TABLES = "procrastinate_jobs, procrastinate_workers, procrastinate_events, procrastinate_periodic_defers"
IMAGE_TABLES = ("procrastinate_workers", "procrastinate_jobs", "procrastinate_events", "procrastinate_periodic_defers")
"""What a ledger's image holds, in the order a load inserts them (a row's references first)."""

S = ReservationState
FINISHED = procrastinate_jobs.Status.SUCCEEDED.value


def stalled_after(lease_ticks: float) -> float:
    """procrastinate's ``seconds_since_heartbeat`` for a lease of that many ticks (see the module doc)."""
    return TIME.timeout(lease_ticks)


def make_app(url: str) -> procrastinate.App:
    """A procrastinate App on ``url`` with fence's one task (the jobs fence defers name it)."""
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=url)
    )

    @app.task(name=TASK_NAME)
    def fence_ticket(key: str) -> None:  # run by fence's world, never by a procrastinate worker
        raise RuntimeError("fence drives this task's attempts itself")

    return app


async def ensure_schema(app: procrastinate.App) -> None:
    """procrastinate's schema, applied once to a database that has none."""
    connector = app.connector
    await connector.execute_query_async(query="SELECT pg_advisory_lock(7369301)")
    try:
        found = await connector.execute_query_one_async(query="SELECT to_regclass('procrastinate_jobs') AS found")
        if found["found"] is None:
            await app.schema_manager.apply_schema_async()
    finally:
        await connector.execute_query_async(query="SELECT pg_advisory_unlock(7369301)")


def refusal(error: Exception) -> str:
    """procrastinate's own words for a refused call (its ConnectorException wraps the database's)."""
    cause = error.__cause__ or error
    return str(cause).strip().splitlines()[0]


# -- the recovery, as a user runs it ------------------------------------------------------
def key_of(job: procrastinate_jobs.Job) -> str:
    """A job's idempotency key: its queueing lock (fence defers every job with one)."""
    if not job.queueing_lock:
        raise ValueError(f"job {job.id} has no queueing_lock: fence.guard keys a job by it")
    return job.queueing_lock


def attempt_id(job: procrastinate_jobs.Job) -> str:
    """One attempt's identity: the key and the row (a guarded retry is always a fresh row)."""
    return f"{key_of(job)}@{job.id}"


async def hold(job_manager, job: procrastinate_jobs.Job) -> None:
    """Take a stalled job from its worker: unregister the worker, as prune_stalled_workers does."""
    if job.worker_id is not None:
        await job_manager.unregister_worker(job.worker_id)


async def finish(job_manager, job_id: int, status: procrastinate_jobs.Status) -> None:
    """``finish_job`` by id, as procrastinate's worker calls it; IllegalMove with its words if refused."""
    try:
        await job_manager.finish_job_by_id_async(job_id=job_id, status=status, delete_job=False)
    except procrastinate_errors.ConnectorException as error:
        raise IllegalMove(f"procrastinate refused finish_job({job_id}, {status.value}): {refusal(error)}") from None


async def defer_fresh(app: procrastinate.App, job: procrastinate_jobs.Job) -> int:
    """A new row for the same work (task, arguments, key): the guarded retry."""
    task = app.tasks[job.task_name]
    deferred = task.configure(queue=job.queue, lock=job.lock, queueing_lock=job.queueing_lock)
    return await deferred.defer_async(**job.task_kwargs)


async def recover_stalled_jobs(app: procrastinate.App, guard: Guard, *, seconds_since_heartbeat: float = 30.0):
    """procrastinate's stalled-jobs recipe with fence's guard: what to run instead of retry_job.

    For each stalled job: take it from its stalled worker, abandon its attempt
    at the destination unless it committed (``Guard.recover``), then finish it
    as succeeded (its effect exists) or as failed and defer a fresh row for
    the same work. A job its worker finished in the meantime is left alone.
    Returns [(job, Decision)] for the jobs it settled.
    """
    settled = []
    job_manager = app.job_manager
    for job in await job_manager.get_stalled_jobs(seconds_since_heartbeat=seconds_since_heartbeat):
        await hold(job_manager, job)
        decision = guard.recover(key_of(job), attempt_id(job))
        try:
            if decision is Decision.EXISTING:
                await finish(job_manager, job.id, procrastinate_jobs.Status.SUCCEEDED)
            else:
                await finish(job_manager, job.id, procrastinate_jobs.Status.FAILED)
                await defer_fresh(app, job)
        except IllegalMove:
            continue  # its own worker finished it first: nothing to recover
        settled.append((job, decision))
    return settled


# -- the ledger's image: what the explorer copies (fence.targets.protocol) ----------------------------
TABLES_IMAGE = PostgresTables(
    IMAGE_TABLES, TIME, timed={"procrastinate_workers": {"last_heartbeat": "heartbeat_ticks_ago"}},
    identity=("procrastinate_workers",), refilled_by_triggers=("procrastinate_events",), cascade=True,
)
"""procrastinate's four tables and their sequences, a worker's heartbeat as ticks ago. Events keep
their timestamps as they are: only ``select_stalled_jobs_by_started`` and ``delete_old_jobs`` read
them, and fence calls neither; the events a job's insert trigger writes are replaced by the image's."""
Image = SchemaImage


# -- the ledger ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Fetch(Taken):
    """One reservation as fence made it: which row, fetched by which worker, for which attempt."""

    job_id: int
    worker_id: int


class ProcrastinateLedger(TargetLedger):
    """fence.Ledger's interface on procrastinate's job table (see the module doc).

    Restorable (``fence.targets.protocol``): its copies share the session, each with its
    own ``Image`` of procrastinate's tables, loaded before it next reaches them;
    so the explorer copies it like any plug-in.
    """

    JOB = "job_id"  # the shipped recipe fetches one row again and again
    EITHER_RECOVERY = True  # procrastinate's calls serve the guard's policy on the shipped storage too (tests)
    GUARD_CATCHES_FAILURES = True  # the task's guard wrapper catches its exception (``_fail``'s doc)

    # -- talking to procrastinate ------------------------------------------------------
    def _run(self, coroutine):
        """A call that may change procrastinate's rows: what was read before is read again."""
        self._writing()
        return self._session.run(coroutine)

    def _jobs(self) -> dict[int, procrastinate_jobs.Job]:
        manager = self._session.app.job_manager
        return self._answered("rows", lambda: {job.id: job for job in self._session.run(manager.list_jobs_async())})

    def _stalled(self) -> list[procrastinate_jobs.Job]:
        if self._lease is None:
            return []
        return self._answered("stalled", lambda: list(self._session.run(self._session.app.job_manager.get_stalled_jobs(
            seconds_since_heartbeat=stalled_after(self._lease)))))

    # -- reading ------------------------------------------------------------------------
    def _state(self, fetch: _Fetch) -> ReservationState:
        job = self._jobs().get(fetch.job_id)
        if job is not None and job.status == "doing":
            return S.OUTCOME_UNKNOWN if job.worker_id is None else S.RESERVED
        if job is not None and job.status == FINISHED:
            return self._confirmed(job.id)
        return S.UNUSED  # gone, todo (given back by retry_job), failed, aborted, cancelled

    def _stalled_job(self, fetch: _Fetch) -> procrastinate_jobs.Job | None:
        """get_stalled_jobs' answer for its job, with its worker still on it."""
        return next((j for j in self._stalled() if j.id == fetch.job_id and j.worker_id == fetch.worker_id), None)

    def _past_lease(self, fetch: _Fetch) -> bool:
        return self._stalled_job(fetch) is not None

    def _unexpired_because(self, fetch: _Fetch) -> str:
        return f"get_stalled_jobs does not list job {fetch.job_id} on worker {fetch.worker_id}"

    def snapshot(self) -> tuple:
        """Everything that decides this ledger's next answers, with what varies between equal states made canonical.

        procrastinate's rows (from the image: no query) and fence's own records
        of its fetches. Canonical: a worker is named by its rank among the
        registered workers (its id appears in no answer; a fetch that came to
        nothing used one up), a worker that was unregistered is "gone" (its id is
        never given again), a heartbeat is the tick of the ledger's clock it
        stands at (the ledger moves heartbeats back only when asked, so the same
        state may be seen at two ledger clocks), and a job's ``scheduled_at``
        only as set or not (fence never schedules; retry_job sets it to the
        past). Job ids stay as they are: procrastinate's refusals name them.
        Events are left out: no call fence makes reads them (see ``Image``).
        """
        image = self.image()
        rows = dict(zip(IMAGE_TABLES, image.rows))
        live = {worker["id"]: rank for rank, worker in enumerate(rows["procrastinate_workers"])}

        def worker(worker_id):
            return None if worker_id is None else live.get(worker_id, "gone")

        heartbeats = tuple(self._now - w["heartbeat_ticks_ago"] for w in rows["procrastinate_workers"])
        jobs = tuple(
            json.dumps({**job, "worker_id": worker(job["worker_id"]), "scheduled_at": job["scheduled_at"] is not None},
                       sort_keys=True)
            for job in rows["procrastinate_jobs"]
        )
        periodic = tuple(json.dumps(row, sort_keys=True) for row in rows["procrastinate_periodic_defers"])
        fetches = tuple(
            (f.reservation_id, f.key, f.owner, f.job_id, worker(f.worker_id), f.deadline)
            for f in self._records().values()
        )
        return (jobs, heartbeats, periodic, image.sequence(IMAGE_TABLES.index("procrastinate_jobs")), fetches,
                tuple(sorted(self._count_by_key.items())), self.finished_moves(), self.failures_caught(), self._lease)

    # -- moving -------------------------------------------------------------------------
    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> _Fetch:
        app = self._session.app
        job_manager = app.job_manager
        waiting = [j for j in self._jobs().values() if j.queue == key and j.status == "todo"]
        if not waiting and (self.guarded or not any(f.key == key for f in self._records().values())):
            task = app.tasks[TASK_NAME].configure(queue=key, lock=key, queueing_lock=key)
            try:
                self._run(task.defer_async(key=key))
            except procrastinate_errors.AlreadyEnqueued as error:
                raise IllegalMove(f"reserve {key!r} for {owner!r}: procrastinate refused the defer: {error}") from None
        worker = self._run(job_manager.register_worker())
        job = self._run(job_manager.fetch_job(queues=[key], worker_id=worker))
        if job is None:
            self._run(job_manager.unregister_worker(worker))
            raise IllegalMove(f"reserve {key!r} for {owner!r}: procrastinate's fetch_job found no job to run in queue {key!r}")
        return _Fetch(reservation_id, key, owner, deadline, job.id, worker)

    def _finish(self, job_id: int, status: procrastinate_jobs.Status, move: Move | None = None) -> None:
        self._run(finish(self._session.app.job_manager, job_id, status))
        if move is not None:
            self._finished(job_id, move)

    def _confirm(self, fetch: _Fetch, move: Move) -> None:
        """The worker's finish_job(job, succeeded) on the row it fetched, as procrastinate's worker calls it."""
        self._finish(fetch.job_id, procrastinate_jobs.Status.SUCCEEDED, move)

    def _fail(self, fetch: _Fetch) -> None:
        """procrastinate's worker when the task raises: the task's retry strategy decides retry_job or finish_job(failed).

        As ``Worker._process_job`` and ``_persist_job_status`` do it, on the job
        id the worker fetched (procrastinate checks neither the worker nor the
        attempt); a row that is not ``doing`` (or ``todo``) is refused in
        procrastinate's own words. Guarded, the task's guard wrapper catches
        the exception and asks ``guard.recover(key_of(job), attempt_id(job))``:
        EXISTING, it returns and procrastinate finishes the row succeeded;
        otherwise it re-raises, procrastinate finishes the row failed, and the
        retry is a fresh row, as after a stalled job. Until then only the worker
        knows (``_fail_through_guard``); the janitor's settle makes those finishes.
        """
        app = self._session.app
        job = self._jobs().get(fetch.job_id)
        if job is None:
            raise IllegalMove(f"fail on job {fetch.job_id}: procrastinate has no such row")
        raised = RuntimeError(f"the task of {fetch.reservation_id} raised")
        job_retry = app.tasks[job.task_name].get_retry_exception(exception=raised, job=job)
        decision = job_retry.retry_decision if job_retry else None
        if decision is None:
            self._finish(job.id, procrastinate_jobs.Status.FAILED)
        else:
            self._retry(job, retry_at=decision.retry_at, priority=decision.priority, queue=decision.queue,
                        lock=decision.lock)

    def _retry(self, job: procrastinate_jobs.Job, **retry) -> None:
        try:  # the same row back to todo
            self._run(self._session.app.job_manager.retry_job(job, **retry))
        except procrastinate_errors.ConnectorException as error:
            raise IllegalMove(f"procrastinate refused retry_job({job.id}): {refusal(error)}") from None

    def _give_back(self, job: procrastinate_jobs.Job) -> None:
        if self.guarded:  # the guard's retry defers a fresh row
            self._finish(job.id, procrastinate_jobs.Status.FAILED)
        else:
            self._retry(job)  # the documented recipe: the same row back to todo

    def _release(self, fetch: _Fetch) -> None:
        self._give_back(self._stalled_job(fetch))

    def _hold(self, fetch: _Fetch) -> None:
        self._run(hold(self._session.app.job_manager, self._stalled_job(fetch)))

    def _settle(self, fetch: _Fetch, move: Move) -> None:
        """``recover_stalled_jobs``' settle: finish_job succeeded, or the row given back."""
        if move is Move.SETTLE_EXISTING:
            self._finish(fetch.job_id, procrastinate_jobs.Status.SUCCEEDED, move)
            return
        job = self._jobs().get(fetch.job_id)
        if job is None:
            raise IllegalMove(f"{move.value} on {fetch.reservation_id}: job {fetch.job_id} is gone")
        self._give_back(job)


# -- one connection per storage, a fresh database per world ---------------------------------
class Session(PostgresSession):
    """One procrastinate App on one event loop, opened once, on a pool of one connection."""

    SYSTEM = "procrastinate"

    def open_library(self, url: str) -> PostgresTables:
        self.app = make_app(url)
        # procrastinate's own pool checks each connection with a round trip before
        # every query; fence's is one loopback connection, and the check doubled a step.
        self.pool = psycopg_pool.AsyncConnectionPool(url, min_size=1, max_size=1, open=False,
                                                     kwargs={"autocommit": True})
        self.closing(lambda: self.run(self.pool.close()))
        try:
            self.run(self.pool.open(wait=True))
            self.run(self.app.open_async(pool=self.pool))
            self.closing(lambda: self.run(self.app.close_async()))  # before the pool's
            self.run(ensure_schema(self.app))
        except Exception as error:
            raise BackendError(refusal(error)) from None  # in procrastinate's words; the session closes both
        return TABLES_IMAGE

    async def execute(self, script: str) -> None:
        async with self.pool.connection() as connection:
            await connection.execute(script)

    async def fetch(self, query: str) -> list:
        return await self.app.connector.execute_query_all_async(query=query)


class ProcrastinateStorage(TargetStorage):
    """World factories on procrastinate: each world starts on empty procrastinate tables.

    The destination is fence's own SQL destination on the same database, in a
    schema of its own (``fence_targets``): the task's ticket is a row there.
    Like ``ModelStorage``, one world at a time lives on it.
    """

    LEDGER, SESSION, WHAT = ProcrastinateLedger, Session, "a procrastinate target"
    URL_SCHEMES, DESTINATION_SCHEMA = ("postgresql://", "postgres://"), "fence_targets"


__all__ = [
    "TICK_SECONDS", "ProcrastinateLedger", "ProcrastinateStorage", "attempt_id", "defer_fresh", "finish",
    "hold", "key_of", "make_app", "recover_stalled_jobs", "stalled_after",
]
