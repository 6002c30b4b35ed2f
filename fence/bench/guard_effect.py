"""What each task of ``fence bench guard`` writes, in a worker process: ``Effect``, and the names the queues share.

``Effect`` is the task's side effect at the destination (PostgreSQL in both
modes), unguarded (a plain ``INSERT``) or through fence.guard, and the record
of each finished job the bench counts and times (``fence.bench.guard_cost``).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

QUEUE = "fence_bench"
TASK = "fence_bench_effect"
PAYLOAD = "ticket"
GUARD_NAMESPACE = "fence_bench_guard"
PLAIN_TABLE = "fence_bench.effects"


# -- the effect, in a worker process --------------------------------------------------------------
class Effect:
    """The task's side effect at the destination, in one mode, and the record of each finished job.

    Each worker thread keeps a connection of its own (a guard, or a plain
    connection), opened at its first job: a guard's connection is one
    transaction at a time, and DBOS runs its workflows on a pool of threads.
    """

    def __init__(self, mode: str, destination_url: str, record: Path, work_seconds: float = 0.0) -> None:
        self.guarded = mode == "guarded"
        self._url = destination_url
        self.work_seconds = work_seconds
        """What the task does before its effect, in both modes (``--work-ms``): 0, the cheapest task."""
        self._per_thread = threading.local()
        self._record = open(record, "a", buffering=1)
        self._lock = threading.Lock()
        self.connect()  # the worker's own thread connects before its first job, as a worker does at start-up

    def connect(self):
        """This thread's guard (guarded) or plain connection (unguarded), opened once."""
        opened = getattr(self._per_thread, "opened", None)
        if opened is None:
            if self.guarded:
                from fence.guard import Guard

                opened = Guard.open(self._url, namespace=GUARD_NAMESPACE)
            else:
                import psycopg

                opened = psycopg.connect(self._url, autocommit=True)
            self._per_thread.opened = opened
        return opened

    @property
    def guard(self):
        return self.connect()

    def work(self) -> None:
        """The task's own work before its effect (a blocking call of ``work_seconds``), in a sync worker."""
        if self.work_seconds:
            time.sleep(self.work_seconds)

    async def work_async(self) -> None:
        """The same, awaited, in an asyncio worker (pgqueuer, arq)."""
        if self.work_seconds:
            await asyncio.sleep(self.work_seconds)

    def write(self, key: str, attempt_id: str) -> None:
        """The effect: a plain insert, or the guard's attempt and commit."""
        if self.guarded:
            with self.connect().attempt(key, attempt_id) as attempt:
                attempt.commit(PAYLOAD)
        else:
            self.connect().execute(f"INSERT INTO {PLAIN_TABLE} (key, attempt_id, payload) VALUES (%s, %s, %s)",
                                   (key, attempt_id, PAYLOAD))

    def done(self, key: str, enqueued_at: float, started_at: float) -> None:
        with self._lock:
            self._record.write(f"{key} {enqueued_at!r} {started_at!r} {time.time()!r}\n")


def until_sigterm() -> None:
    """Block until SIGTERM: how the bench stops a worker that never stops by itself."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(0.1):
        pass


__all__ = ["GUARD_NAMESPACE", "PAYLOAD", "PLAIN_TABLE", "QUEUE", "TASK", "Effect", "until_sigterm"]
