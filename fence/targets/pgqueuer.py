"""pgqueuer on PostgreSQL as a fence target: its queue table is the ledger, its dequeue the recovery.

Theory of operation
-------------------
pgqueuer has no janitor. A queue manager's ``dequeue`` takes queued jobs *and*
re-picks any ``picked`` job whose ``heartbeat`` is older than the
``heartbeat_timeout`` (the ``next_stale`` part of its one dequeue statement),
on the same row, for itself. Completion (``log_jobs``) and heartbeats
(``update_heartbeat``) are keyed by the job id alone. So a worker that fell
silent and then wakes up completes the row that another worker re-picked and
is running (pgqueuer #430, PR #675: jobs re-picked while still running and
executed twice).

fence drives pgqueuer's own ``Queries`` (its query builder, on the schema
pgqueuer's ``install`` creates) through fence's ledger protocol:

* a **reserve** for a job's key is a queue manager taking the job:
  ``enqueue`` (the key is the job's ``dedupe_key`` and a header, and its
  entrypoint, so that a dequeue for a key takes that key's job) when the key
  has no job, then ``dequeue(batch_size=1)`` under a fresh
  ``queue_manager_id``. Each attempt is its own queue manager, so each has its
  own claim on the row;
* a **confirm** is the worker's ``log_jobs([(job, "successful", None)])``: what
  pgqueuer's queue manager flushes when the task returns. It checks nothing
  but the id; when no row has that id it changes nothing, silently, and fence
  reports that as the ledger refusing;
* a lease has **expired** when ``stale_jobs(threshold)`` (pgqueuer's own query,
  the same predicate as ``next_stale``) lists the job with the attempt's
  queue manager still on it;
* the **janitor's expiry move is pgqueuer's stale re-pick**: ``dequeue`` under a
  fresh queue manager, which re-picks the row through ``next_stale``. As
  shipped (``guarded=False``) that queue manager runs the job again: the
  re-pick is the naive policy's expire-and-release, and the retry's attempt
  is handed the re-picked job (``update_heartbeat``: the call pgqueuer's
  ``Heartbeat`` makes for a running job, so that its lease starts with the
  attempt, as the model's does). Guarded (``guarded=True``, fence.guard and
  ``guarded_attempt``): the re-picking task runs the recovery instead of the
  body, so the re-pick is the hold; a settle is that task's ``log_jobs``:
  ``successful`` (the effect exists), or ``exception`` and a fresh row
  ``enqueue``\\ d for the retry, so that a stale worker's late ``log_jobs``
  meets no row and changes nothing instead of completing the retry's.

Reservation states are read back from pgqueuer's rows (``browse_queue``) and
its log (``job_status``), and the picks fence made: a pick whose queue manager
still holds the ``picked`` row is ``reserved``; a row re-picked by another
queue manager is ``unused`` as shipped (given to a retry) and
``outcome_unknown`` guarded (held by the recovery); a row gone with
``successful`` last in the log is ``confirmed`` (``confirmed_existing`` when
fence's move reported an existing ticket: pgqueuer keeps no result); gone with
``exception`` is ``unused``; and a pick of a row that a newer attempt was
handed is ``unused``. These are the system's answers: the lockstep compares
them with the model, and the observer never reads them.

Time moves without sleeping: a model tick is ``TICK_SECONDS`` of the
database's clock, and moving the clock on moves every row's ``heartbeat`` and
``execute_after`` (the two timestamps the dequeue compares with ``NOW()``)
back by that much. A lease of L ticks is a ``heartbeat_timeout`` of
``(L - 1/2) * TICK_SECONDS``: the half tick absorbs the milliseconds of real
time between two statements, so a job is stale from the tick its lease runs
out, never a tick early or late. That is the only SQL of fence's own on
pgqueuer's tables, with the ``TRUNCATE`` that empties them for each world and
the explorer's restores: the ledger is restorable (``fence.targets.protocol``), its
``Image`` the queue table, its log and statistics and their id sequences
(heartbeats as ticks), its ``snapshot()`` that image with each queue manager
named by rank.

A worker whose task **fails** (``fail``) makes the call pgqueuer's queue manager
makes when an entrypoint raises (``QueueManager.log_failure``): ``log_jobs([(job,
status, traceback)])`` on the job it was given, keyed by the job id alone. As
shipped the entrypoint has pgqueuer's default ``on_failure="delete"``: status
``exception``, the row is deleted and the job never runs again (``unused``).
Like a completion, a failure that meets no row changes nothing and is
refused. Guarded, pgqueuer's handler never sees the exception: the guarded
entrypoint catches it and settles through the guard as the recovery settles a
stale re-pick (``settle_failure``: abandon unless committed, then ``log_jobs``
``successful``, or ``exception`` and a fresh row); until then only the worker
knows (``TargetLedger._fail_through_guard``: ``outcome_unknown``). pgqueuer's
``on_failure="hold"`` parks the row instead, but a stalled worker's
``log_jobs`` would then move a row the recovery re-picked (it is keyed by the
job id alone), where the model refuses that report.

A refusal (a dequeue that takes nothing, an enqueue pgqueuer rejects as a
duplicate, a ``log_jobs`` that found no row) is raised as fence's
``IllegalMove``, in pgqueuer's words where it has any; the world records it as
the ledger refusing. Nothing else is refused: pgqueuer checks neither the
queue manager nor the attempt, and that is what the lockstep reports.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from pgqueuer import Job, Queries
from pgqueuer.queries import EntrypointExecutionParameter

from fence.targets.images import PostgresSession, PostgresTables, SchemaImage
from fence.targets.pgqueuer_recovery import (  # the recipe, importable from here as before
    KEY_HEADER, PICKS, attempt_id, complete, enqueue_keyed, ensure_schema, fail_job, guarded_attempt, key_of,
    log_in_guard_database, log_statuses, picks_of, recover_repick, settle_existing, settle_failure, settle_unused,
)
from fence.targets.protocol import IllegalMove, ModelTime, Move, ReservationState, Taken, TargetLedger, TargetStorage

TIME = ModelTime(tick_seconds=60.0)
"""One model tick is a minute of the database's clock."""
TICK_SECONDS = TIME.tick_seconds

S = ReservationState


def heartbeat_timeout(lease_ticks: float) -> timedelta:
    """pgqueuer's ``heartbeat_timeout`` for a lease of that many ticks (see the module doc)."""
    return timedelta(seconds=TIME.timeout(lease_ticks))


# -- the ledger's image: what the explorer copies (fence.targets.protocol) ----------------------------
TIMES_AS_TICKS = ("heartbeat", "execute_after")
"""The queue rows' instants the dequeue compares with ``NOW()``: kept as whole ticks before the clock."""
Image = SchemaImage
"""pgqueuer's queue table, its log and its statistics, and their sequences. Every instant but
``TIMES_AS_TICKS`` (a row's ``created``/``updated``, a log entry's ``created``) is kept as it is: no
call fence makes compares them with the clock, and the log's order by ``created`` is its order by id."""


def tables_image(tables: tuple[str, ...]) -> PostgresTables:
    """The image of pgqueuer's tables (queue, log, statistics, qualified), the queue rows' times as ticks."""
    return PostgresTables(tables, TIME, timed={tables[0]: {c: f"{c}_ticks_ago" for c in TIMES_AS_TICKS}},
                          identity=tables)


# -- the ledger ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Pick(Taken):
    """One reservation as fence made it: which row, picked by which queue manager, for which attempt."""

    job: Job
    queue_manager: uuid.UUID

    @property
    def job_id(self) -> int:
        return self.job.id


class PgqueuerLedger(TargetLedger):
    """fence.Ledger's interface on pgqueuer's queue table (see the module doc).

    Restorable (``fence.targets.protocol``): its copies share the session, each with its
    own ``Image`` of pgqueuer's tables, loaded before it next reaches them; so
    the explorer copies it like any plug-in.
    """

    JOB = "job_id"  # as shipped, a row is picked again and again
    GUARD_CATCHES_FAILURES = True

    def __init__(self, session: Session, capacity: int, *, guarded: bool) -> None:
        super().__init__(session, capacity, guarded=guarded)
        self._repicks: dict[str, tuple[Job, uuid.UUID]] = {}
        """By reservation: the row as a stale re-pick took it from that reservation's queue manager, and who took it."""

    # -- talking to pgqueuer -----------------------------------------------------------
    @property
    def _queries(self) -> Queries:
        return self._session.queries

    def _run(self, coroutine):
        """A call that may change pgqueuer's rows: what was read before is read again."""
        self._writing()
        return self._session.run(coroutine)

    def _jobs(self) -> dict[int, Job]:
        return self._answered("rows", lambda: {job.id: job for job in self._session.run(self._queries.browse_queue(
            limit=10_000))})

    def _last_logged(self, job_id: int) -> str | None:
        """The job's last status in pgqueuer's log (where a completed row's outcome is kept)."""
        def read() -> dict[int, str]:
            ids = sorted({p.job.id for p in self._records().values()})
            return dict(self._session.run(self._queries.job_status(ids))) if ids else {}

        return self._answered("logged", read).get(job_id)

    def _move_clock(self, ticks: float) -> None:
        """The database's clock moves on: every row's heartbeat and execute_after move back."""
        self._answers.pop("stale", None)  # moving time changes which rows are stale, and nothing else fence reads
        self._restorer.claim(self)
        self._restorer.changing(self)
        self._session.move_time(ticks)

    def _stale_picks(self) -> set[tuple[int, uuid.UUID]]:
        """(job id, queue manager) of every row pgqueuer's stale_jobs lists."""
        if self._lease is None:
            return set()
        return self._answered("stale", lambda: {(job.id, job.queue_manager_id) for job in self._session.run(
            self._queries.stale_jobs(heartbeat_timeout(self._lease), limit=10_000))})

    def _dequeue(self, key: str) -> tuple[Job, uuid.UUID] | None:
        """pgqueuer's dequeue for the key's entrypoint, by a queue manager of its own: a fresh pick or a stale re-pick."""
        queue_manager = uuid.uuid4()
        jobs = self._run(self._queries.dequeue(
            batch_size=1,
            entrypoints={key: EntrypointExecutionParameter(concurrency_limit=0)},
            queue_manager_id=queue_manager,
            global_concurrency_limit=None,
            heartbeat_timeout=heartbeat_timeout(self._lease),
        ))
        return (jobs[0], queue_manager) if jobs else None

    # -- reading ------------------------------------------------------------------------
    def _state(self, pick: _Pick) -> ReservationState:
        row = self._jobs().get(pick.job.id)
        if row is None:
            if self._last_logged(pick.job.id) != "successful":
                return S.UNUSED  # logged exception (abandoned by the guarded recovery)
            return self._confirmed(pick.job.id)
        if row.status == "picked":
            if row.queue_manager_id == pick.queue_manager:
                return S.RESERVED
            # Another queue manager's stale re-pick took the row: the recovery holding it, or a retry's run.
            return S.OUTCOME_UNKNOWN if self.guarded else S.UNUSED
        return S.UNUSED  # queued again: not this pick's any more

    def _past_lease(self, pick: _Pick) -> bool:
        """stale_jobs lists its row, with its queue manager still on it."""
        return (pick.job.id, pick.queue_manager) in self._stale_picks()

    def snapshot(self) -> tuple:
        """Everything that decides this ledger's next answers, with what varies between equal states made canonical.

        pgqueuer's rows (from the image: no query) and fence's own records of its
        picks. Canonical: a queue manager (a fresh uuid4 per dequeue) is named by
        its rank in fence's records (the picks in order, then the re-picks), a
        heartbeat and an execute_after by the tick of the ledger's clock they
        stand at, a row's ``created``/``updated`` and a log entry's ``created``
        and id are left out (only the log's order decides anything, and it is
        kept), and a traceback's timestamp too. Job ids stay as they are, with
        the sequence that decides the next one: fence's refusals name them.
        """
        image = self.image()
        queue, log, statistics = image.rows
        ranks: dict[str, int] = {}

        def manager(queue_manager) -> int | None:
            if queue_manager is None:
                return None
            return ranks.setdefault(str(queue_manager), len(ranks))

        def job(j: Job) -> tuple:
            return (j.id, j.entrypoint, j.payload, json.dumps(j.headers, sort_keys=True), j.priority)

        picks = tuple((p.reservation_id, p.key, p.owner, job(p.job), manager(p.queue_manager), p.deadline)
                      for p in self._records().values())
        repicks = tuple((rid, job(j), manager(qm)) for rid, (j, qm) in self._repicks.items())
        rows = tuple(
            json.dumps({**{k: v for k, v in row.items() if k not in ("created", "updated")},
                        "queue_manager_id": manager(row["queue_manager_id"]),
                        **{f"{c}_ticks_ago": self._now - row[f"{c}_ticks_ago"] for c in TIMES_AS_TICKS}},
                       sort_keys=True)
            for row in queue
        )
        logged = tuple(
            json.dumps({**{k: v for k, v in row.items() if k not in ("id", "created")},
                        "traceback": None if row["traceback"] is None
                        else {k: v for k, v in row["traceback"].items() if k != "timestamp"}}, sort_keys=True)
            for row in log
        )
        counted = tuple(json.dumps({k: v for k, v in row.items() if k not in ("id", "created")}, sort_keys=True)
                        for row in statistics)
        return (rows, logged, counted, image.sequence(0), picks, repicks, tuple(sorted(self._count_by_key.items())),
                self.finished_moves(), self.failures_caught(), self._lease)

    # -- moving -------------------------------------------------------------------------
    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> _Pick:
        mine = [p for p in self._records().values() if p.key == key]
        repicked = self._repicks.pop(mine[-1].reservation_id, None) if mine and not self.guarded else None
        if repicked is not None:
            # As shipped, the retry is the run the stale re-pick started: its task beats once as it starts.
            job, queue_manager = repicked
            self._run(self._queries.update_heartbeat([job.id]))
        else:
            if not any(j.entrypoint == key and j.status in ("queued", "picked") for j in self._jobs().values()):
                self._run(enqueue_keyed(self._queries, key, key.encode(), key))
            picked = self._dequeue(key)
            if picked is None:
                raise IllegalMove(f"reserve {key!r} for {owner!r}: pgqueuer's dequeue took no job for entrypoint {key!r}")
            job, queue_manager = picked
        return _Pick(reservation_id, key, owner, deadline, job, queue_manager)

    def _confirm(self, pick: _Pick, move: Move) -> None:
        """The worker's log_jobs(job, successful) on the job it was given, as pgqueuer's queue manager flushes it."""
        self._run(complete(self._queries, pick.job, "successful"))
        self._finished(pick.job.id, move)

    def _fail(self, pick: _Pick) -> None:
        """The worker's task raised: pgqueuer's log_failure on the job it was given (``fail_job``), keyed by the
        job id alone: refused only when its row is gone (nothing moved). Guarded, the entrypoint catches it
        (``settle_failure``): see the module doc."""
        self._run(fail_job(self._queries, pick.job))

    def _unexpired_because(self, pick: _Pick) -> str:
        return f"stale_jobs does not list job {pick.job.id} on the queue manager that picked it for {pick.reservation_id}"

    def _release(self, pick: _Pick) -> None:
        """pgqueuer's stale re-pick: a dequeue by a fresh queue manager (as shipped, the retry's run; guarded,
        the recovery's)."""
        picked = self._dequeue(pick.key)
        if picked is None or picked[0].id != pick.job.id:
            raise IllegalMove(f"pgqueuer's dequeue did not re-pick job {pick.job.id} for {pick.reservation_id}"
                              + (f" (it took job {picked[0].id})" if picked else ""))
        self._repicks[pick.reservation_id] = picked

    _hold = _release

    def _settle(self, pick: _Pick, move: Move) -> None:
        """The guarded recovery's log_jobs on the row it re-picked, or on a caught failure's row."""
        held = self._repicks.get(pick.reservation_id)
        job = held[0] if held is not None else pick.job if pick.reservation_id in self._failures_caught else None
        if job is None:
            raise IllegalMove(f"{move.value} on {pick.reservation_id}: no recovery re-picked its job, "
                              "and its worker caught no failure")
        if move is Move.SETTLE_EXISTING:
            self._run(settle_existing(self._queries, job))
            self._finished(job.id, move)
        else:
            self._run(settle_unused(self._queries, job))


# -- one connection per storage, a fresh database per world ---------------------------------
class Session(PostgresSession):
    """One psycopg connection and pgqueuer's Queries on it, on one event loop."""

    SYSTEM = "pgqueuer"

    def open_library(self, url: str) -> PostgresTables:
        self.connection = self.run(psycopg.AsyncConnection.connect(url, autocommit=True))
        self.closing(lambda: self.run(self.connection.close()))
        self.queries = Queries.from_psycopg_connection(self.connection)
        self.run(ensure_schema(self.queries))
        names = self.queries.qbe.settings.qualified
        self.tables = (names.queue_table, names.queue_table_log, names.statistics_table)
        """What a ledger's image holds, in the order a load inserts them."""
        return tables_image(self.tables)

    async def execute(self, script: str) -> None:
        await self.connection.execute(script)

    async def fetch(self, query: str) -> list:
        return await self.queries.driver.fetch(query)


class PgqueuerStorage(TargetStorage):
    """World factories on pgqueuer: each world starts on empty pgqueuer tables.

    The destination is fence's own SQL destination on the same database, in a
    schema of its own (``fence_targets_pgqueuer``): the task's ticket is a row
    there. Like ``ModelStorage``, one world at a time lives on it.
    """

    LEDGER, SESSION, WHAT = PgqueuerLedger, Session, "a pgqueuer target"
    URL_SCHEMES, DESTINATION_SCHEMA = ("postgresql://", "postgres://"), "fence_targets_pgqueuer"


__all__ = [
    "KEY_HEADER", "PICKS", "TICK_SECONDS", "PgqueuerLedger", "PgqueuerStorage", "attempt_id", "complete",
    "enqueue_keyed", "ensure_schema", "fail_job", "guarded_attempt", "heartbeat_timeout", "key_of",
    "log_in_guard_database", "log_statuses", "picks_of",
    "recover_repick", "settle_failure", "settle_existing", "settle_unused",
]
