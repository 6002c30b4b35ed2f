"""fence.guard's recovery for pgqueuer, as a user runs it: a stale re-pick recovers instead of running the body.

pgqueuer's dequeue re-picks a job whose heartbeat is stale, on the same row,
and completion (``log_jobs``) is keyed by the job id alone, so a worker that
fell silent completes the row another worker re-picked (pgqueuer #430). A
guarded entrypoint enqueues with ``enqueue_keyed`` and starts with
``guarded_attempt``: a first pick runs its body under the guard; a re-pick
abandons every earlier attempt unless one committed, then logs the row
successful, or as an exception with a fresh row for the retry, so that a stale
``log_jobs`` meets no row. ``settle_failure`` is the entrypoint's ``except``.
Where the guard's database is pgqueuer's (``log_in_guard_database``, checked
once at a worker's start), the picks are read in the registration's own
statement: a first pick then costs the guard's two round trips, no third.

``fence.targets.pgqueuer`` drives pgqueuer through fence's protocol and uses
these same calls for its guarded row.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pgqueuer import Job, Queries
from pgqueuer.domain.errors import DuplicateJobError
from pgqueuer.domain.models import TracebackRecord

from fence import Decision
from fence.guard import Guard, GuardedAttempt
from fence.targets.protocol import IllegalMove, refused_unless

KEY_HEADER = "fence_key"
"""The job header that carries its idempotency key (pgqueuer's Job has no dedupe_key field)."""


async def ensure_schema(queries: Queries) -> None:
    """pgqueuer's schema through its own install (or upgrade), once per database, under its lock."""
    async with queries.schema_lock():
        if await queries.schema_is_installed():
            await queries.upgrade()
        else:
            await queries.install()


# -- the recovery, as a user runs it ------------------------------------------------------
async def enqueue_keyed(queries: Queries, entrypoint: str, payload: bytes | None, key: str) -> int:
    """Enqueue a job for ``key``: its dedupe_key (one live job per key) and the header fence.guard reads."""
    try:
        (job_id,) = await queries.enqueue(entrypoint, payload, dedupe_key=key, headers={KEY_HEADER: key})
    except DuplicateJobError as error:
        raise IllegalMove(f"pgqueuer refused enqueue({entrypoint!r}, dedupe_key={key!r}): "
                          f"{type(error).__name__} {error}".rstrip()) from None
    return job_id


def key_of(job: Job) -> str:
    """A job's idempotency key: the header ``enqueue_keyed`` set."""
    key = (job.headers or {}).get(KEY_HEADER)
    if not isinstance(key, str):
        raise ValueError(f"job {job.id} has no {KEY_HEADER!r} header: enqueue it with enqueue_keyed")
    return key


def attempt_id(job: Job, pick: int) -> str:
    """One attempt's identity: the key, the row and which pick of that row it is."""
    return f"{key_of(job)}@{job.id}.{pick}"


async def log_statuses(queries: Queries, job_id: int) -> list[str]:
    """The statuses pgqueuer's log holds for one job, oldest first: ``job_log_history``'s own query.

    Read through the query builder rather than ``Queries.job_log_history``:
    with psycopg, a log row that carries a traceback comes back as a dict,
    and pgqueuer 1.6's ``Log`` model (which parses it as JSON text) raises
    TypeError on it, so a job once retried with a traceback could not be read.
    """
    rows = await queries.driver.fetch(queries.qbq.build_job_log_history_query(), job_id, 10_000)
    return [row["status"] for row in rows]


async def picks_of(queries: Queries, job: Job) -> int:
    """How many times pgqueuer's dequeue has picked this row: its ``picked`` entries in pgqueuer's log."""
    return (await log_statuses(queries, job.id)).count("picked")


async def complete(queries: Queries, job: Job, status: str, traceback: TracebackRecord | None = None) -> None:
    """``log_jobs`` for one job, as pgqueuer's queue manager flushes it; IllegalMove if no row had its id.

    pgqueuer changes nothing, and says nothing, when the row is gone: fence
    reads whether it was there first (one connection, so nothing moves between).
    """
    present = await queries.queue_job_by_id(job.id)
    await queries.log_jobs([(job, status, traceback)])
    refused_unless(present is not None, f"pgqueuer's log_jobs({job.id}, {status}) changed nothing: no row {job.id} in its queue")


async def settle_existing(queries: Queries, job: Job) -> None:
    """The recovery found the effect: the re-picked row is logged ``successful``."""
    await complete(queries, job, "successful")


async def settle_unused(queries: Queries, job: Job) -> int:
    """The recovery abandoned the attempt: log the re-picked row as an exception, enqueue a fresh row.

    The fresh row has a new id, so the stale worker's late ``log_jobs`` (by the
    old id) meets no row. Two calls, not one transaction: a recovery that dies
    between them leaves the job logged with no fresh row (never run twice,
    possibly never again; pgqueuer has no call that does both).
    """
    record = TracebackRecord(
        job_id=job.id, timestamp=datetime.now(timezone.utc), exception_type="Abandoned",
        exception_message="abandoned by fence.guard after a stale re-pick; retried on a fresh row",
        traceback="", additional_context=None,
    )
    await complete(queries, job, "exception", record)
    return await enqueue_keyed(queries, job.entrypoint, job.payload, key_of(job))


async def fail_job(queries: Queries, job: Job) -> None:
    """What pgqueuer's queue manager logs when an entrypoint with its default ``on_failure="delete"`` raised.

    ``log_jobs`` with status ``exception`` (``log_failure``): the row goes,
    keyed by the job id alone; IllegalMove if no row had that id. The traceback
    is a fixed one (pgqueuer's carries a timestamp and the raising frames,
    which decide nothing here).
    """
    record = TracebackRecord(
        job_id=job.id, timestamp=datetime.now(timezone.utc), exception_type="TaskFailed",
        exception_message="the entrypoint raised", traceback="", additional_context=None,
    )
    await complete(queries, job, "exception", record)


async def settle_failure(queries: Queries, guard: Guard, job: Job) -> Decision:
    """A guarded entrypoint's ``except`` block: settle its own job through the guard, as after a stale re-pick.

    Abandons every pick's attempt unless one committed (this one included),
    then logs the row successful, or as an exception with a fresh row.
    pgqueuer's own log of the failure that follows meets no row and changes nothing.
    """
    return await recover_repick(queries, guard, job, await picks_of(queries, job) + 1)


async def recover_repick(queries: Queries, guard: Guard, job: Job, pick: int) -> Decision:
    """A stale re-pick's recovery: abandon every earlier pick's attempt unless one committed, then settle.

    EXISTING: the row is logged successful. UNUSED: every earlier attempt can
    never write; the row is logged as an exception and a fresh row enqueued.
    """
    decision = Decision.UNUSED
    for earlier in range(1, pick):
        decision = guard.recover(key_of(job), attempt_id(job, earlier))
    if decision is Decision.EXISTING:
        await settle_existing(queries, job)
    else:
        await settle_unused(queries, job)
    return decision


PICKS = "SELECT count(*) = 1 AS register, count(*) AS picks FROM {log} WHERE job_id = ? AND status = 'picked'"
"""``picks_of`` as the guard's read (``Guard.attempt_if``): a first pick registers its attempt in the same statement."""


async def log_in_guard_database(queries: Queries, guard: Guard) -> str | None:
    """pgqueuer's log table as the guard's connection names it (with its schema) when the guard's database is
    pgqueuer's, else None: check it once, at a worker's start, and hand it to ``guarded_attempt``.

    The same database is the same backend seen from both sides: pgqueuer's
    connection names its backend (pid and start) and its database, and the
    guard's connection must find that backend in ``pg_stat_activity`` on its
    own database. A guard whose role may not read another role's backend start
    (no ``pg_read_all_stats``) gets None, and the picks are read apart.
    """
    store = getattr(guard.destination, "store", None)
    if store is None or store.dialect.name != "postgresql":
        return None
    (ours,) = await queries.driver.fetch(
        "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS log, current_database() AS database, "
        "pg_backend_pid() AS pid, (SELECT (extract(epoch FROM backend_start) * 1000000)::bigint "
        "FROM pg_stat_activity WHERE pid = pg_backend_pid()) AS since "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)",
        queries.qbe.settings.qualified.queue_table_log,
    ) or [None]
    if ours is None or ours["since"] is None:
        return None
    (seen,) = guard.read(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = ? AND datname = ? "
        "AND (extract(epoch FROM backend_start) * 1000000)::bigint = ?) AND current_database() = ?",
        (ours["pid"], ours["database"], ours["since"], ours["database"]),
    )
    return ours["log"] if seen else None


async def guarded_attempt(queries: Queries, guard: Guard, job: Job, log: str | None = None) -> GuardedAttempt | None:
    """What a pgqueuer entrypoint calls first: its guarded attempt, or None when this run was a recovery.

    pgqueuer's dequeue re-picks a stale job on the same row and cannot be told
    not to, so the run it starts decides: a first pick gets its attempt
    (``with attempt: attempt.commit(payload)``); a re-pick (the row's log has
    more than one pick) recovers instead (``recover_repick``) and returns
    None: the task returns without running its body.

    Any second pick of a row is recovered this way, including a job the task
    retried with ``RetryRequested`` (``retry_job`` re-queues the same row): it
    too runs again on a fresh row, with its delay and attempt count dropped.

    With ``log`` (``log_in_guard_database``: the guard's database is
    pgqueuer's) the picks are read in the registration's own statement
    (``Guard.attempt_if``): a first pick costs the guard's two round trips and
    no more. The attempt it returns is registered already.
    """
    if log is not None:
        (_, pick), attempt = guard.attempt_if(key_of(job), attempt_id(job, 1), PICKS.format(log=log), (job.id,))
        if attempt is not None:
            return attempt
        if pick == 0:  # not in pgqueuer's log at all: as the read apart does, an attempt named pick 0
            return guard.attempt(key_of(job), attempt_id(job, 0))
        await recover_repick(queries, guard, job, pick)
        return None
    pick = await picks_of(queries, job)
    if pick > 1:
        await recover_repick(queries, guard, job, pick)
        return None
    return guard.attempt(key_of(job), attempt_id(job, pick))


__all__ = [
    "KEY_HEADER", "PICKS", "attempt_id", "complete", "enqueue_keyed", "ensure_schema", "fail_job", "guarded_attempt",
    "key_of", "log_in_guard_database", "log_statuses", "picks_of", "recover_repick", "settle_existing", "settle_failure", "settle_unused",
]
