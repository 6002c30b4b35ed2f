"""arq on Redis as a fence target: arq's own worker calls on a real Redis server are the ledger.

Each ledger move is arq's call, as docs/explanation/queues.md ("arq on Redis")
tells: a reserve ``enqueue_job`` (once per key, id ``KEY#1``) then
``start_jobs([ID])`` (its ``run_job`` task cancelled: fence's world runs the
body), a confirm or failure ``finish_job``, a lease expired when the job is
queued with no in-progress key; as shipped the janitor's release is that expiry
itself, guarded the recovery of ``fence.targets.arq_recovery`` (its names
importable from here too). Moving the model on shortens every TTL.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from operator import attrgetter

from arq import Worker, func
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import default_queue_name, in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import deserialize_job_raw, deserialize_result, serialize_result

from fence.targets.arq_recovery import TASK_NAME, attempt_id, fresh_job_id, guarded_task  # the recipe
from fence.targets.images import RedisSession, scores_zeroed
from fence.targets.protocol import (
    IllegalMove, ModelTime, Move, ReservationState, Taken, TargetLedger, TargetStorage, refused_unless,
)

TIME = ModelTime(tick_seconds=60.0)
DECIDING = {default_queue_name: scores_zeroed, f"{job_key_prefix}*": lambda job: repr(deserialize_job_raw(job)[:4]),
            f"{result_key_prefix}*": lambda result: repr(attrgetter("success", "job_try")(deserialize_result(result)))}
"""What of arq's keys decides an answer: not its enqueue and finish instants (queue scores, in the pickles)."""


@dataclass(frozen=True)
class Pick(Taken):
    job_id: str


class ArqLedger(TargetLedger):
    JOB, JANITOR, GUARD_CATCHES_FAILURES = "job_id", "arq's janitor", True
    STATE = {"_job_of": dict, "_released": set}
    """Each key's job id now; as shipped, the picks whose in-progress key expired (for a re-pick)."""

    def _queued(self, job_id: str) -> bool:
        self._reading()
        return self._session.client.zscore(default_queue_name, job_id) is not None

    def _state(self, pick: Pick) -> ReservationState:
        if not self._queued(pick.job_id):  # finished, whoever called finish_job (a released pick's worker too)
            return self._finished_state(pick.job_id)
        return ReservationState.UNUSED if pick.reservation_id in self._released else ReservationState.RESERVED

    def _past_lease(self, pick: Pick) -> bool:
        """What start_jobs checks: the job is queued and no worker's in-progress key holds it."""
        self._reading()
        return (self._newest(pick) is pick and pick.reservation_id not in self._held and self._queued(pick.job_id)
                and not self._session.client.exists(in_progress_key_prefix + pick.job_id))

    def _start(self, job_id: str) -> bool:
        self._writing()
        return self._session.start(self._lease, job_id)

    def _enqueue(self, key: str, job_id: str) -> None:
        self._job_of[key] = job_id
        self._writing()
        self._session.run(self._session.pool.enqueue_job(TASK_NAME, key, _job_id=job_id))

    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> Pick:
        self._publish_once(key, lambda: self._enqueue(key, f"{key}#1"))  # a guarded retry enqueues its own (_settle)
        job_id = self._job_of[key]
        if self.guarded and any(p.job_id == job_id for p in self._records().values()):
            raise IllegalMove(f"reserve {key!r} for {owner!r}: job {job_id} ran before; a worker's pick of it runs "
                              "the guard's recovery (the janitor's expire_and_hold), not the task")
        refused_unless(self._start(job_id), f"reserve {key!r} for {owner!r}: arq's start_jobs did not pick job "
                       f"{job_id} (finished, or another worker's in-progress key holds it)")
        return Pick(reservation_id, key, owner, deadline, job_id)

    def _finish(self, job_id: str, move: Move, success: bool) -> None:
        self._moved(lambda: self._queued(job_id), lambda: self._session.finish(self._lease, job_id, success),
                    f"arq's finish_job({job_id}) changed nothing: the job was finished already",
                    finishing=(job_id, move))

    def _confirm(self, pick: Pick, move: Move) -> None:
        self._finish(pick.job_id, move, success=True)

    def _fail(self, pick: Pick) -> None:
        self._finish(pick.job_id, Move.FAIL, success=False)  # run_job: a task that raised is finished, failed

    def _release(self, pick: Pick) -> None:
        self._released.add(pick.reservation_id)  # arq's recovery is the expiry: the next start_jobs re-picks

    def _hold(self, pick: Pick) -> None:
        refused_unless(self._start(pick.job_id), f"start_jobs did not pick job {pick.job_id} for the recovery")

    def _settle(self, pick: Pick, move: Move) -> None:
        refused_unless(self._reservation(pick).state is ReservationState.OUTCOME_UNKNOWN,
                       f"{move.value} on {pick.reservation_id}: neither the recovery nor a caught failure holds it")
        self._finish(pick.job_id, move, success=True)  # the recovery's task returns; arq finishes the job
        if move is Move.SETTLE_UNUSED:
            self._enqueue(pick.key, fresh_job_id(pick.job_id))
        self._failures_caught.discard(pick.reservation_id)


class Session(RedisSession):
    """arq's pool and a ``Worker`` per lease (its in-progress keys live ``TIME.timeout(lease)``), on one loop."""

    LIBRARIES = {"arq": "arq", "redis-py": "redis"}

    def __init__(self, url: str) -> None:
        super().__init__(url, TIME, deciding=DECIDING)
        self.pool: ArqRedis = self.library(url, "arq", lambda: self.run(create_pool(RedisSettings.from_dsn(url))))
        self.closing(lambda: self.run(self.pool.aclose()))

    def arq_worker(self, lease: float) -> Worker:
        return self.worker(lease, lambda: self.on_loop(lambda: Worker(
            functions=[func(never_run, name=TASK_NAME)], redis_pool=self.pool, handle_signals=False,
            job_timeout=TIME.timeout(lease) - 10, keep_result=TIME.seconds(1000), poll_delay=0)))

    def start(self, lease: float, job_id: str) -> bool:
        """``start_jobs([job_id])``: did it pick the job (set its in-progress key)?"""
        worker = self.arq_worker(lease)
        self.run(worker.start_jobs([job_id.encode()]))
        task = worker.tasks.pop(job_id, None)
        if task is None:
            return False
        task.cancel()  # run_job never starts: fence's world runs the body
        self.run(asyncio.sleep(0))  # its done callback gives the worker's slot back
        return True

    def finish(self, lease: float, job_id: str, success: bool) -> None:
        """``finish_job`` with the result ``run_job`` stores (the body's value, or its exception)."""
        worker = self.arq_worker(lease)
        result = serialize_result(TASK_NAME, (), {}, 1, 0, success, "done" if success else RuntimeError("raised"),
                                  0, 0, f"{job_id}:{TASK_NAME}", default_queue_name, job_id=job_id)
        self.run(worker.finish_job(job_id, True, result, worker.keep_result_s, False, None, None))


async def never_run(ctx: dict, *args) -> None:
    raise RuntimeError("fence's world runs this task's body itself")


class ArqStorage(TargetStorage):
    LEDGER, SESSION, WHAT, URL_SCHEMES = ArqLedger, Session, "an arq target", ("redis://", "rediss://", "unix://")


__all__ = ["TASK_NAME", "ArqLedger", "ArqStorage", "attempt_id", "fresh_job_id", "guarded_task"]
