"""A small Redis job queue with retries, and a fence target for it written only on the public API.

The library (``JobList``) is what a team might write in an afternoon: one list
of waiting jobs and one sorted set of started jobs (a job id scored by the
instant it started) per job key; a worker takes a job onto the started set and
finishes it by its id, or fails it (the job raised: straight back on the
list); ``requeue_stale`` puts every started job older than a timeout back on
the list, under the same id, and counts a retry. Nothing is ever refused:
finishing or failing a job that is not started does nothing.

The adapter below it (``JobListLedger``, ``JobListStorage``, ``ROW``) drives
that library through fence's ledger protocol with ``fence.targets.protocol``
and ``fence.targets.images``, and nothing private. Run it with::

    from fence.testing import check_target
    check_target(ROW, "redis://127.0.0.1:6379/0")   # both engines, the one observer

It claims the naive policy (a stale job is retried whether or not its effect
happened) and is found worse than naive, as celery on Redis is: a job keeps its
id when it is requeued, so a stale worker's late ``finish`` finishes the retry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from fence import POLICIES
from fence.targets import Target
from fence.targets.images import RedisSession
from fence.targets.protocol import IllegalMove, ModelTime, Move, ReservationState, Taken, TargetLedger, TargetStorage


# -- the library under test -----------------------------------------------------------------
class JobList:
    """Jobs per key: ``waiting:KEY`` (a list of ids), ``started:KEY`` (id -> start instant), ``job:ID``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def enqueue(self, key: str) -> int:
        job_id = self.client.incr("next_id")
        self.client.hset(f"job:{job_id}", mapping={"key": key, "retries": 0, "status": "waiting"})
        self.client.lpush(f"waiting:{key}", job_id)
        return job_id

    def take(self, key: str) -> int | None:
        job_id = self.client.rpop(f"waiting:{key}")
        if job_id is None:
            return None
        self.client.zadd(f"started:{key}", {job_id: time.time()})
        self.client.hset(f"job:{int(job_id)}", "status", "started")
        return int(job_id)

    def finish(self, key: str, job_id: int) -> None:
        if self.client.zrem(f"started:{key}", job_id):
            self.client.hset(f"job:{job_id}", "status", "done")

    def fail(self, key: str, job_id: int) -> None:
        """The job raised: back on its list at once, under the same id, counting a retry."""
        if self.client.zrem(f"started:{key}", job_id):
            self.client.hincrby(f"job:{job_id}", "retries", 1)
            self.client.hset(f"job:{job_id}", "status", "waiting")
            self.client.lpush(f"waiting:{key}", job_id)

    def stale(self, key: str, timeout: float) -> list[int]:
        return [int(j) for j in self.client.zrangebyscore(f"started:{key}", "-inf", time.time() - timeout)]

    def requeue_stale(self, key: str, timeout: float) -> None:
        for job_id in self.stale(key, timeout):
            self.client.zrem(f"started:{key}", job_id)
            self.client.hincrby(f"job:{job_id}", "retries", 1)
            self.client.hset(f"job:{job_id}", "status", "waiting")
            self.client.lpush(f"waiting:{key}", job_id)


# -- the fence target: the adapter --------------------------------------------------------------
# ADAPTER BEGINS: tests/test_example_target.py caps the lines from here to the end marker
TIME = ModelTime(tick_seconds=60.0)
S = ReservationState


@dataclass(frozen=True)
class Take(Taken):
    job_id: int


class JobListLedger(TargetLedger):
    """A reserve is ``take`` (after ``enqueue`` for a new key), a confirm ``finish``, a failure ``fail``, the janitor
    ``requeue_stale``."""

    JOB = "job_id"  # a requeued job keeps its id: the newest take of it is the one the job list's answers concern

    def _state(self, take: Take) -> ReservationState:
        self._reading()
        status = self._session.client.hget(f"job:{take.job_id}", "status")
        if status == b"done":
            return self._confirmed(take.job_id)  # the job list keeps no result: fence's record of the finish
        return S.RESERVED if status == b"started" else S.UNUSED

    def _past_lease(self, take: Take) -> bool:
        self._reading()
        return take.job_id in self._session.jobs.stale(take.key, TIME.timeout(self._lease))

    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> Take:
        self._writing()
        self._publish_once(key, lambda: self._session.jobs.enqueue(key))
        job_id = self._session.jobs.take(key)
        if job_id is None:
            raise IllegalMove(f"reserve {key!r} for {owner!r}: no job waiting for that key")
        return Take(reservation_id, key, owner, deadline, job_id)

    def _started_only(self, take: Take, call, what: str, finishing=None) -> None:
        """The job list refuses nothing: ``call`` is accepted only if it took the job off the started set."""
        self._moved(lambda: self._session.client.zscore(f"started:{take.key}", take.job_id), call,
                    f"{what}({take.job_id}) changed nothing: the job was not started", finishing)

    def _confirm(self, take: Take, move: Move) -> None:
        self._started_only(take, lambda: self._session.jobs.finish(take.key, take.job_id), "finish",
                           finishing=(take.job_id, move))  # the job list keeps no result: fence keeps the move

    def _fail(self, take: Take) -> None:
        self._started_only(take, lambda: self._session.jobs.fail(take.key, take.job_id), "fail")

    def _release(self, take: Take) -> None:
        self._writing()
        self._session.jobs.requeue_stale(take.key, TIME.timeout(self._lease))  # one key: one reservation


class Session(RedisSession):
    def __init__(self, url: str) -> None:
        super().__init__(url, TIME, timestamps=("started:*",))  # start instants, as ticks in every image
        self.jobs = JobList(self.client)


class JobListStorage(TargetStorage):
    LEDGER, SESSION, WHAT = JobListLedger, Session, "the Redis job list example"  # the effect: fence's in-memory destination


ROW = Target(
    row="redis-job-list", system="redis", policy=POLICIES["naive"], server="redis",
    recovery="requeue_stale(key, timeout): every started job of the key older than the timeout, back on its list",
    time="each started job's start instant is moved back in started:KEY, 60 s per tick",
    storage="redis_job_list:JobListStorage", explorable=True,
)
# ADAPTER ENDS
