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

import asyncio
import json
from dataclasses import dataclass
from functools import cached_property

import procrastinate
import psycopg_pool
from procrastinate import exceptions as procrastinate_errors
from procrastinate import jobs as procrastinate_jobs

from fence._errors import BackendError, IllegalMove, StaleAttempt
from fence._ledger import Move, Reservation, ReservationState
from fence._policies import Decision
from fence._restore import Restorer
from fence.guard import Guard
from fence.targets._common import TargetLedger, TargetStorage

TICK_SECONDS = 60.0
"""How much of the database's clock one model tick is."""
TASK_NAME = "fence_ticket"
"""The task whose jobs fence defers: its body is the world's worker writing the ticket."""
TABLES = "procrastinate_jobs, procrastinate_workers, procrastinate_events, procrastinate_periodic_defers"
IMAGE_TABLES = ("procrastinate_workers", "procrastinate_jobs", "procrastinate_events", "procrastinate_periodic_defers")
"""What a ledger's image holds, in the order a load inserts them (a row's references first)."""

S = ReservationState
FINISHED = procrastinate_jobs.Status.SUCCEEDED.value
EXISTING_FINISHES = frozenset({Move.CONFIRM_EXISTING, Move.SETTLE_EXISTING})


def stalled_after(lease_ticks: float) -> float:
    """procrastinate's ``seconds_since_heartbeat`` for a lease of that many ticks (see the module doc)."""
    return (lease_ticks - 0.5) * TICK_SECONDS


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


# -- the ledger's image: what the explorer copies (fence._restore) ----------------------------
@dataclass(frozen=True)
class Image:
    """Everything a world keeps in procrastinate's tables, as a value: each table's rows, as JSON
    text ordered by id, and every id sequence's state.

    A worker's ``last_heartbeat`` is kept as whole ticks before the database's
    clock at the dump (``heartbeat_ticks_ago``), and a load sets it that far
    before the clock at the load: the model's time is in those ticks, while the
    real seconds that pass between two calls (the half tick of the module doc)
    are not part of any state. Events keep their timestamps as they are: only
    ``select_stalled_jobs_by_started`` and ``delete_old_jobs`` read them, and
    fence calls neither.
    """

    tables: tuple[str, ...]
    """Per ``IMAGE_TABLES``: a JSON array of the rows."""
    sequences: str
    """A JSON array of [last_value, is_called] per ``IMAGE_TABLES``."""

    @cached_property
    def rows(self) -> dict[str, list[dict]]:
        return {table: json.loads(text) for table, text in zip(IMAGE_TABLES, self.tables)}

    @cached_property
    def job_sequence(self) -> tuple:
        """The job id sequence's state: it decides the next job's id, which procrastinate's refusals name."""
        return tuple(json.loads(self.sequences)[IMAGE_TABLES.index("procrastinate_jobs")])


def dump_query(sequences: dict[str, str]) -> str:
    """One statement that reads a ledger's ``Image`` (the sequences' names as pg_get_serial_sequence gives them)."""
    parts = []
    for table in IMAGE_TABLES:
        row = "to_jsonb(t)"
        if table == "procrastinate_workers":
            row = (f"(to_jsonb(t) - 'last_heartbeat') || jsonb_build_object('heartbeat_ticks_ago', "
                   f"round(extract(epoch FROM now() - t.last_heartbeat) / {TICK_SECONDS})::int)")
        parts.append(f"(SELECT coalesce(jsonb_agg({row} ORDER BY t.id), '[]') FROM {table} t)::text AS {table}")
    sequence_states = ", ".join(
        f"(SELECT jsonb_build_array(last_value, is_called) FROM {sequences[table]})" for table in IMAGE_TABLES
    )
    return f"SELECT {', '.join(parts)}, jsonb_build_array({sequence_states})::text AS sequences"


def _literal(text: str) -> str:
    """A SQL string literal (the session checks standard_conforming_strings is on)."""
    return "'" + text.replace("'", "''") + "'"


def load_script(image: Image, sequences: dict[str, str]) -> str:
    """One transaction, as one script, that makes procrastinate's tables hold exactly ``image``.

    Rows are inserted with their ids; the triggers procrastinate fires on an
    insert (an event, a NOTIFY nobody listens to) run, and the events they wrote
    are replaced by the image's. Then every sequence is set as it was.
    """
    statements = ["BEGIN"]
    statements += [f"DELETE FROM {table}" for table in reversed(IMAGE_TABLES)]
    for table, text in zip(IMAGE_TABLES, image.tables):
        rows = f"{_literal(text)}::jsonb"
        overriding = ""
        if table == "procrastinate_workers":
            rows = (f"(SELECT coalesce(jsonb_agg(w || jsonb_build_object('last_heartbeat', now() - "
                    f"make_interval(secs => (w->>'heartbeat_ticks_ago')::int * {TICK_SECONDS}))), '[]') "
                    f"FROM jsonb_array_elements({rows}) w)")
            overriding = " OVERRIDING SYSTEM VALUE"  # its id is GENERATED ALWAYS
        if table == "procrastinate_events":
            statements.append("DELETE FROM procrastinate_events")  # what the jobs' insert triggers wrote
        statements.append(f"INSERT INTO {table}{overriding} SELECT * FROM jsonb_populate_recordset(NULL::{table}, {rows})")
    states = json.loads(image.sequences)
    statements.append("SELECT " + ", ".join(
        f"setval({_literal(sequences[table])}, {int(last)}, {'true' if called else 'false'})"
        for table, (last, called) in zip(IMAGE_TABLES, states)
    ))
    statements.append("COMMIT")
    return ";\n".join(statements)


# -- the ledger ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Fetch:
    """One reservation as fence made it: which row, fetched by which worker, for which attempt."""

    reservation_id: str
    key: str
    owner: str
    job_id: int
    worker_id: int
    deadline: float


class ProcrastinateLedger(TargetLedger):
    """fence.Ledger's interface on procrastinate's job table (see the module doc).

    Restorable (``fence._restore``): its copies share the session, each with its
    own ``Image`` of procrastinate's tables, loaded before it next reaches them;
    so the explorer copies it like any plug-in.
    """

    SHARED = ("_session",)

    def __init__(self, session: Session, capacity: int, *, guarded: bool) -> None:
        self.capacity = capacity
        self.guarded = guarded
        self._session = session
        self._fetches: dict[str, _Fetch] = {}
        self._count_by_key: dict[str, int] = {}
        self._finished_by: dict[int, Move] = {}
        """Which move finished each row (procrastinate keeps no result)."""
        self._now = 0.0
        self._lease: float | None = None
        self._rows: dict[int, procrastinate_jobs.Job] | None = None
        self._stalled_jobs: list[procrastinate_jobs.Job] | None = None
        """What list_jobs and get_stalled_jobs answered since the last call that may change them."""
        self._restoring(session.restorer)  # procrastinate's tables as they are now: the storage emptied them

    # -- the image (fence._restore) ---------------------------------------------------------
    def dump(self) -> Image:
        return self._session.dump()

    def load(self, image: Image) -> None:
        self._session.load(image)

    # -- talking to procrastinate ------------------------------------------------------
    def _run(self, coroutine):
        """A call that may change procrastinate's rows: what was read before is read again."""
        self._restorer.claim(self)
        self._restorer.changing(self)
        self._rows = self._stalled_jobs = None
        return self._session.run(coroutine)

    def _jobs(self) -> dict[int, procrastinate_jobs.Job]:
        if self._rows is None:
            self._restorer.claim(self)
            jobs = self._session.run(self._session.app.job_manager.list_jobs_async())
            self._rows = {job.id: job for job in jobs}
        return self._rows

    def _move_time(self, now: float | None) -> None:
        """Move the database's idea of 'now' on to ``now`` (ticks): heartbeats move back."""
        if now is None or now <= self._now:
            return
        seconds = (now - self._now) * TICK_SECONDS
        self._run(self._session.app.connector.execute_query_async(
            query="UPDATE procrastinate_workers SET last_heartbeat = last_heartbeat - make_interval(secs => %(s)s)",
            s=seconds,
        ))
        self._now = now

    def _stalled(self) -> list[procrastinate_jobs.Job]:
        if self._lease is None:
            return []
        if self._stalled_jobs is None:
            self._restorer.claim(self)
            self._stalled_jobs = list(self._session.run(self._session.app.job_manager.get_stalled_jobs(
                seconds_since_heartbeat=stalled_after(self._lease))))
        return self._stalled_jobs

    # -- reading ------------------------------------------------------------------------
    def _state(self, fetch: _Fetch) -> ReservationState:
        job = self._jobs().get(fetch.job_id)
        if job is None:
            return S.UNUSED
        if self._latest_fetch(fetch.job_id) is not fetch:
            return S.UNUSED  # the row was fetched again: it had gone back to todo (retry_job)
        if job.status == "doing":
            return S.OUTCOME_UNKNOWN if job.worker_id is None else S.RESERVED
        if job.status == FINISHED:
            return S.CONFIRMED_EXISTING if self._finished_by.get(job.id) in EXISTING_FINISHES else S.CONFIRMED
        return S.UNUSED  # todo (given back by retry_job), failed, aborted, cancelled

    def _records(self) -> dict[str, _Fetch]:
        return self._fetches

    def expired(self, now: float | None = None) -> list[Reservation]:
        """The reservations whose job get_stalled_jobs lists, with their worker still on it."""
        self._move_time(now)
        stalled = {(job.id, job.worker_id) for job in self._stalled() if job.worker_id is not None}
        return [
            r for f in self._fetches.values()
            if (f.job_id, f.worker_id) in stalled and (r := self._reservation(f)).state is S.RESERVED
        ]

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
        rows = image.rows
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
            (f.reservation_id, f.key, f.owner, f.job_id, worker(f.worker_id), f.deadline) for f in self._fetches.values()
        )
        finished = tuple(sorted((job_id, move.value) for job_id, move in self._finished_by.items()))
        return (jobs, heartbeats, periodic, image.job_sequence, fetches, tuple(sorted(self._count_by_key.items())),
                finished, self._lease)

    # -- moving -------------------------------------------------------------------------
    def reserve(self, key: str, owner: str, now: float | None, lease: float) -> Reservation:
        if self._lease is not None and lease != self._lease:
            raise ValueError(f"this ledger judges every lease as {self._lease} ticks, not {lease}")
        self._move_time(now)
        self._lease = lease
        app = self._session.app
        job_manager = app.job_manager
        waiting = [j for j in self._jobs().values() if j.queue == key and j.status == "todo"]
        if not waiting and (self.guarded or not any(f.key == key for f in self._fetches.values())):
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
        count = self._count_by_key.get(key, 0) + 1
        self._count_by_key[key] = count
        fetch = _Fetch(f"{key}/r{count}", key, owner, job.id, worker, (now or 0) + lease)
        self._fetches[fetch.reservation_id] = fetch
        return self._reservation(fetch)

    def owner_move(self, key: str, owner: str, move: Move) -> Reservation:
        """The worker's finish_job(job, succeeded) on the row it fetched, as procrastinate's worker calls it."""
        if move not in (Move.CONFIRM, Move.CONFIRM_EXISTING):
            raise IllegalMove(f"{move.value} is the janitor's move, not an owner's")
        mine = [f for f in self._fetches.values() if f.key == key and f.owner == owner]
        if not mine:
            raise StaleAttempt(f"{move.value} {key!r} by {owner!r}: it never fetched a job for that key")
        fetch = mine[-1]
        self._run(finish(self._session.app.job_manager, fetch.job_id, procrastinate_jobs.Status.SUCCEEDED))
        self._finished_by[fetch.job_id] = move
        return self._reservation(self._latest_fetch(fetch.job_id))

    def confirm(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM)

    def confirm_existing(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM_EXISTING)

    def apply(self, reservation_id: str, move: Move) -> Reservation:
        """A janitor's move, made with procrastinate's calls on the reservation's row."""
        fetch = self._fetches[reservation_id]
        job_manager = self._session.app.job_manager
        if move in (Move.EXPIRE_AND_RELEASE, Move.EXPIRE_AND_HOLD):
            stalled = [j for j in self._stalled() if j.id == fetch.job_id and j.worker_id == fetch.worker_id]
            if not stalled:
                raise IllegalMove(
                    f"{move.value} on {reservation_id}: get_stalled_jobs does not list job {fetch.job_id} "
                    f"on worker {fetch.worker_id}"
                )
            if move is Move.EXPIRE_AND_RELEASE:
                self._release(stalled[0])
            else:
                self._run(hold(job_manager, stalled[0]))
        elif move is Move.SETTLE_EXISTING:
            self._run(finish(job_manager, fetch.job_id, procrastinate_jobs.Status.SUCCEEDED))
            self._finished_by[fetch.job_id] = move
        elif move is Move.SETTLE_UNUSED:
            job = self._jobs().get(fetch.job_id)
            if job is None:
                raise IllegalMove(f"{move.value} on {reservation_id}: job {fetch.job_id} is gone")
            self._release(job)
        else:
            raise IllegalMove(f"{move.value} is an owner's move, not the janitor's")
        return self._reservation(self._latest_fetch(fetch.job_id))

    def _release(self, job: procrastinate_jobs.Job) -> None:
        job_manager = self._session.app.job_manager
        if self.guarded:
            self._run(finish(job_manager, job.id, procrastinate_jobs.Status.FAILED))
            return
        try:  # the documented recipe: the same row back to todo
            self._run(job_manager.retry_job(job))
        except procrastinate_errors.ConnectorException as error:
            raise IllegalMove(f"procrastinate refused retry_job({job.id}): {refusal(error)}") from None

    def _latest_fetch(self, job_id: int) -> _Fetch:
        """The last fetch of a row (the shipped recipe fetches one row again and again)."""
        return [f for f in self._fetches.values() if f.job_id == job_id][-1]


# -- one connection per storage, a fresh database per world ---------------------------------
class Session:
    """One procrastinate App on one event loop, opened once; ``run`` awaits a call on it."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.app = make_app(url)
        self.pool = None
        try:
            # procrastinate's own pool checks each connection with a round trip before
            # every query; fence's is one loopback connection, and the check doubled a step.
            self.pool = psycopg_pool.AsyncConnectionPool(
                url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
            )
            self.run(self.pool.open(wait=True))
            self.run(self.app.open_async(pool=self.pool))
            self.run(ensure_schema(self.app))
            self.sequences = self._sequences()
        except Exception as error:
            self.close()
            raise BackendError(f"{url}: cannot open procrastinate there ({refusal(error)})") from None
        self.restorer = Restorer()
        """Which ledger's image procrastinate's tables hold (fence._restore)."""
        self._dump_query = dump_query(self.sequences)

    def _sequences(self) -> dict[str, str]:
        connector = self.app.connector
        conforming = self.run(connector.execute_query_one_async(query="SHOW standard_conforming_strings"))
        if conforming["standard_conforming_strings"] != "on":
            raise BackendError("standard_conforming_strings is off; fence's restore needs it on")
        rows = self.run(connector.execute_query_all_async(
            query="SELECT t AS name, pg_get_serial_sequence(t, 'id') AS sequence FROM unnest(%(tables)s::text[]) t",
            tables=list(IMAGE_TABLES),
        ))
        return {row["name"]: row["sequence"] for row in rows}

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def empty(self) -> None:
        """Empty procrastinate's tables for a fresh world (the ledger using them keeps its image)."""
        self.restorer.release()
        self.run(self.app.connector.execute_query_async(query=f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE"))

    def dump(self) -> Image:
        row = self.run(self.app.connector.execute_query_one_async(query=self._dump_query))
        return Image(tuple(row[table] for table in IMAGE_TABLES), row["sequences"])

    def load(self, image: Image) -> None:
        script = load_script(image, self.sequences)

        async def load() -> None:
            async with self.pool.connection() as connection:
                await connection.execute(script)

        self.run(load())

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        row = self.run(self.app.connector.execute_query_one_async(query="SHOW server_version"))
        return {"procrastinate": version("procrastinate"), "postgresql": row["server_version"]}

    def close(self) -> None:
        try:
            if self.pool is not None:
                self.run(self.app.close_async())
                self.run(self.pool.close())
        finally:
            self.loop.close()


class ProcrastinateStorage(TargetStorage):
    """World factories on procrastinate: each world starts on empty procrastinate tables.

    The destination is fence's own SQL destination on the same database, in a
    schema of its own (``fence_targets``): the task's ticket is a row there.
    Like ``ModelStorage``, one world at a time lives on it.
    """

    LEDGER = ProcrastinateLedger
    WHAT = "a procrastinate target"

    def __init__(self, url: str, *, guarded: bool) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise BackendError(f"{url!r}: procrastinate runs on PostgreSQL; give a postgresql:// URL")
        super().__init__(url, namespace="fence_targets")
        self.guarded = guarded
        self._open_session(lambda: Session(url))


__all__ = [
    "TICK_SECONDS", "ProcrastinateLedger", "ProcrastinateStorage", "attempt_id", "defer_fresh", "finish",
    "hold", "key_of", "make_app", "recover_stalled_jobs", "stalled_after",
]
