"""fence.guard's recovery for arq, as a user writes it: the task's body runs the recovery on a re-pick.

arq has no recovery step of its own: when a worker dies, its job's
``arq:in-progress:ID`` key expires and the next worker's ``start_jobs`` picks
the job again, under the same id and ``job_try`` + 1 (arq #402); and
``finish_job(ID)`` finishes whoever calls it. ``guarded_task`` is the body of
a task with fence.guard: a pick of a job that ran before abandons the earlier
tries (unless one committed) and runs the key afresh on a new job id, so that
a stale worker's late finish or commit never counts for the new run::

    guard = Guard.open(DATABASE_URL)

    async def send_ticket(ctx, key, body):
        return await guarded_task(ctx, guard, key, body)

    class WorkerSettings:
        functions = [func(send_ticket, name=TASK_NAME)]

    await pool.enqueue_job(TASK_NAME, key, body, _job_id=f"{key}#1")  # job ids KEY#n

``fence.targets.arq_redis`` drives arq through fence's protocol and makes the
same calls for its guarded row.
"""

from __future__ import annotations

from fence.guard import Guard

TASK_NAME = "fence_ticket"


def attempt_id(job_id: str, job_try: int) -> str:
    """One run of one arq job: its id and its try (arq counts tries in ``arq:retry:ID``)."""
    return f"{job_id}@{job_try}"


def fresh_job_id(job_id: str) -> str:
    """The id of the job that runs a key afresh after the recovery abandoned ``job_id`` (``KEY#n`` -> ``KEY#n+1``)."""
    key, _, number = job_id.rpartition("#")
    return f"{key}#{int(number) + 1}"


async def guarded_task(ctx: dict, guard: Guard, key: str, payload: str) -> str:
    """The body of an arq task with fence.guard: a pick of a job that ran before runs the recovery instead.

    ``job_try > 1`` means an earlier run was lost (its in-progress key
    expired): abandon every earlier try unless one committed, and run the key
    afresh on a new job id, so that a stale worker's late finish or commit can
    never count for the new run. Returns what happened: ``written``,
    ``existing`` or ``rerun``.
    """
    job_id, job_try = ctx["job_id"], ctx["job_try"]
    if job_try > 1:
        decisions = [guard.recover(key, attempt_id(job_id, earlier)).value for earlier in range(1, job_try)]
        if "existing" in decisions:
            return "existing"
        await ctx["redis"].enqueue_job(TASK_NAME, key, payload, _job_id=fresh_job_id(job_id))
        return "rerun"
    with guard.attempt(key, attempt_id(job_id, job_try)) as attempt:
        attempt.commit(payload)
    return "written"


__all__ = ["TASK_NAME", "attempt_id", "fresh_job_id", "guarded_task"]
