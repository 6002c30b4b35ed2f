"""arq on Redis as a fence target: arq's own worker calls on a real Redis server are the ledger.

Theory of operation
-------------------
arq keeps a job as ``arq:job:ID``, its id in the ``arq:queue`` sorted set until
it finishes, and, while a worker runs it, ``arq:in-progress:ID`` with a TTL of
``job_timeout + 10`` s. arq has no recovery of its own: when the in-progress key
expires, the next poll (``Worker.start_jobs``) picks the job again, same id
(arq #402); and ``Worker.finish_job(ID, ...)`` finishes whoever calls it, so a
stale worker's late finish finishes the retry's run. The ledger's moves
(``fence.targets.protocol``) are arq's calls: a reserve ``enqueue_job`` (once
per key, id ``KEY#1``) then ``start_jobs([ID])`` (its ``run_job`` task is
cancelled: fence's world runs the body); a confirm or failure ``finish_job``
with a success or the exception; a lease expired when the job is queued with no
in-progress key; as shipped, the janitor's release is that expiry itself.

Guarded (``guarded_task``): the attempt is ``ID@try``; a pick of a job that ran
before runs the guard's recovery instead of the body: the janitor's hold is
that ``start_jobs``, its settle ``finish_job``, and an abandon also enqueues a
fresh job ``KEY#n+1``, so nothing stale can finish the rerun. One tick is 60 s;
moving the model on shortens every TTL (``RedisDatabase.move_time``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from arq import Worker, func
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import default_queue_name, in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import deserialize_job_raw, deserialize_result, serialize_result

from fence.guard import Guard
from fence.targets.images import RedisImage, RedisSession
from fence.targets.protocol import (
    BackendError, IllegalMove, ModelTime, Move, ReservationState, TargetLedger, TargetStorage, refused_unless,
)

TIME = ModelTime(tick_seconds=60.0)
TASK_NAME = "fence_ticket"
S = ReservationState


# -- the recipe, as a user writes it ----------------------------------------------------------
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


# -- the ledger ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pick:
    reservation_id: str
    key: str
    owner: str
    job_id: str
    deadline: float


class ArqLedger(TargetLedger):
    """A reserve is ``start_jobs`` (after ``enqueue_job``), a confirm or failure ``finish_job`` (see the module doc)."""

    JOB, JANITOR, GUARD_CATCHES_FAILURES = "job_id", "arq's janitor", True

    def __init__(self, session: Session, capacity: int, *, guarded: bool) -> None:
        super().__init__(session, capacity, guarded=guarded, time=TIME)
        self._job_of: dict[str, str] = {}  # key -> the job id that runs it now
        self._released: set[str] = set()  # as shipped: picks whose in-progress key expired, for a re-pick
        self._restoring(session.restorer)

    def _queued(self, job_id: str) -> bool:
        self._reading()
        return self._session.client.zscore(default_queue_name, job_id) is not None

    def _state(self, pick: Pick) -> ReservationState:
        if not self._queued(pick.job_id):  # finished, whoever called finish_job (a released pick's worker too)
            return self._finished_state(pick.job_id)
        return S.UNUSED if pick.reservation_id in self._released else S.RESERVED

    def _past_lease(self, pick: Pick) -> bool:
        """What start_jobs checks: the job is queued and no worker's in-progress key holds it."""
        self._reading()
        return (self._newest(pick) is pick and pick.reservation_id not in self._held and self._queued(pick.job_id)
                and not self._session.client.exists(in_progress_key_prefix + pick.job_id))

    def snapshot(self) -> tuple:
        return (tuple(self._records().values()), self._session.database.snapshot(canonical_image(self.image()), self._now),
                tuple(sorted(self._job_of.items())), tuple(sorted(self._released)), self.bookkeeping())

    def _start(self, job_id: str) -> bool:
        """arq's ``Worker.start_jobs([job_id])``: did it set the in-progress key (pick the job)?"""
        self._writing()
        return self._session.start(self._lease, job_id)

    def _enqueue(self, key: str, job_id: str) -> None:
        self._job_of[key] = job_id
        self._writing()
        self._session.run(self._session.pool.enqueue_job(TASK_NAME, key, _job_id=job_id))

    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> Pick:
        if key not in self._job_of:
            self._enqueue(key, f"{key}#1")
        job_id = self._job_of[key]
        if self.guarded and any(p.job_id == job_id for p in self._records().values()):
            raise IllegalMove(f"reserve {key!r} for {owner!r}: job {job_id} ran before; a worker's pick of it runs "
                              "the guard's recovery (the janitor's expire_and_hold), not the task")
        refused_unless(self._start(job_id), f"reserve {key!r} for {owner!r}: arq's start_jobs did not pick job "
                       f"{job_id} (finished, or another worker's in-progress key holds it)")
        return Pick(reservation_id, key, owner, job_id, deadline)

    def _finish(self, job_id: str, move: Move, success: bool) -> None:
        """arq's ``Worker.finish_job``; accepted only if it took the job off the queue (arq refuses nothing)."""
        self._moved(lambda: self._queued(job_id), lambda: self._session.finish(self._lease, job_id, success),
                    f"arq's finish_job({job_id}) changed nothing: the job was finished already")
        self._finished(job_id, move)

    def _confirm(self, pick: Pick, move: Move) -> None:
        self._finish(pick.job_id, move, success=True)

    def _fail(self, pick: Pick) -> None:
        self._finish(pick.job_id, Move.FAIL, success=False)  # run_job: a task that raised is finished, failed

    def _release(self, pick: Pick) -> None:
        self._released.add(pick.reservation_id)  # arq's recovery is the expiry: the next start_jobs re-picks

    def _hold(self, pick: Pick) -> None:
        refused_unless(self._start(pick.job_id), f"start_jobs did not pick job {pick.job_id} for the recovery")

    def _settle(self, pick: Pick, move: Move) -> None:
        refused_unless(self._reservation(pick).state is S.OUTCOME_UNKNOWN,
                       f"{move.value} on {pick.reservation_id}: neither the recovery nor a caught failure holds it")
        self._finish(pick.job_id, move, success=True)  # the recovery's task returns; arq finishes the job
        if move is Move.SETTLE_UNUSED:
            self._enqueue(pick.key, fresh_job_id(pick.job_id))
        self._failures_caught.discard(pick.reservation_id)


def canonical_image(image: RedisImage) -> RedisImage:
    """The image without what differs between equal states: enqueue and finish instants (queue scores, pickles)."""
    keys = []
    for name, kind, value in image.keys:
        if name == default_queue_name.encode():
            value = tuple((member, 0) for member, _ in value)
        elif name.startswith(job_key_prefix.encode()):
            function, args, kwargs, job_try, _ = deserialize_job_raw(value)
            value = repr((function, args, kwargs, job_try))
        elif name.startswith(result_key_prefix.encode()):
            result = deserialize_result(value)
            value = repr((result.success, result.job_try))
        keys.append((name, kind, value))
    return RedisImage(tuple(keys), image.ttls)


class Session(RedisSession):
    """arq's pool (``create_pool``) and a ``Worker`` per lease beside fence's client, on one event loop."""

    LIBRARIES = {"arq": "arq", "redis-py": "redis"}

    def __init__(self, url: str) -> None:
        super().__init__(url, TIME)
        try:
            self.pool: ArqRedis = self.run(create_pool(RedisSettings.from_dsn(url)))
        except Exception as error:
            self.close()
            raise BackendError(f"{url}: arq cannot reach Redis there ({error})") from None
        self._workers: dict[float, Worker] = {}

    def worker(self, lease: float) -> Worker:
        """An arq Worker whose in-progress keys live ``TIME.timeout(lease)`` seconds (``job_timeout + 10``)."""
        if lease not in self._workers:
            asyncio.set_event_loop(self.loop)  # arq's Worker takes the current loop
            self._workers[lease] = Worker(
                functions=[func(never_run, name=TASK_NAME)], redis_pool=self.pool, handle_signals=False,
                job_timeout=TIME.timeout(lease) - 10, keep_result=TIME.seconds(1000), poll_delay=0,
            )
        return self._workers[lease]

    def start(self, lease: float, job_id: str) -> bool:
        worker = self.worker(lease)
        self.run(worker.start_jobs([job_id.encode()]))
        task = worker.tasks.pop(job_id, None)
        if task is None:
            return False
        task.cancel()  # run_job never starts: fence's world runs the body
        self.run(asyncio.sleep(0))  # its done callback gives the worker's slot back
        return True

    def finish(self, lease: float, job_id: str, success: bool) -> None:
        """``finish_job`` with the result ``run_job`` stores (the body's value, or its exception)."""
        worker = self.worker(lease)
        result = serialize_result(TASK_NAME, (), {}, 1, 0, success, "done" if success else RuntimeError("raised"),
                                  0, 0, f"{job_id}:{TASK_NAME}", default_queue_name, job_id=job_id)
        self.run(worker.finish_job(job_id, True, result, worker.keep_result_s, False, None, None))

    def close(self) -> None:
        try:
            if getattr(self, "pool", None) is not None:
                self.run(self.pool.aclose())
        finally:
            super().close()


async def never_run(ctx: dict, *args) -> None:
    raise RuntimeError("fence's world runs this task's body itself")


class ArqStorage(TargetStorage):
    LEDGER, SESSION, WHAT, URL_SCHEMES = ArqLedger, Session, "an arq target", ("redis://", "rediss://", "unix://")


__all__ = ["TASK_NAME", "ArqLedger", "ArqStorage", "attempt_id", "fresh_job_id", "guarded_task"]
