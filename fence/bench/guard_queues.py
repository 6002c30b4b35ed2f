"""The queues of ``fence bench guard`` as a table (``RUNNERS``), and the worker process it starts for each.

A queue is a row of ``RUNNERS``: its library, its server, how jobs are
enqueued (in the bench's process, ``fence.bench.guard_cost``) and how a worker
works them (in a worker process of its own, started as ``python -m
fence.bench.guard_queues worker ...``: the library's own worker, as the library
starts it). The rows' calls are in ``guard_postgres_queues`` (procrastinate,
pgqueuer, DBOS) and ``guard_redis_queues`` (celery, dramatiq, arq);
``guard_effect.Effect`` is what each task writes, unguarded or through
fence.guard, and the record of each finished job the bench counts and times.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from fence.bench.guard_effect import GUARD_NAMESPACE, PLAIN_TABLE, Effect
from fence.bench.guard_postgres_queues import (
    DBOS_POLLING, DBOS_THREADS, PGQUEUER_DRIVER, dbos_enqueue, dbos_work, pgqueuer_driver, pgqueuer_enqueue,
    pgqueuer_work, procrastinate_enqueue, procrastinate_work,
)
from fence.bench.guard_redis_queues import (
    ARQ_POLL_DELAY, arq_enqueue, arq_work, celery_enqueue, celery_work, dramatiq_enqueue, dramatiq_work,
)


# -- the table ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueRunner:
    """One queue of the bench: its library, its server, how jobs are enqueued and how a worker process works."""

    name: str
    library: str
    """As pip names it: its version goes into the evidence."""
    modules: tuple[str, ...]
    """What must import for the queue to run (else: the extra to install)."""
    extra: str
    server: str
    """"postgres" or "redis": where the queue lives (the effects always go to PostgreSQL)."""
    enqueue: Callable[[str, Sequence[str]], None]
    """In the bench's process: empty the queue, then enqueue one job per key through the library's client."""
    work: Callable[[str, Effect, int], None]
    """In a worker process: the library's own worker on the queue, until it drains (or SIGTERM)."""
    stops_when_drained: bool
    """True: the worker returns once the queue is empty; False: the bench stops it with SIGTERM."""
    worker: str
    """How the worker process runs, for the evidence."""

    def missing(self) -> str | None:
        """None, or one line naming the extra to install."""
        absent = [name for name in self.modules if importlib.util.find_spec(name) is None]
        if absent:
            return (f"{self.name}: {absent[0]} is not installed: pip install -e '.[{self.extra}]' "
                    f"(or '.[test]' for every queue)")
        return None


def _reset_redis_then(enqueue):
    def both(url: str, keys: Sequence[str]) -> None:
        import redis

        with redis.Redis.from_url(url) as client:
            client.flushdb()
        enqueue(url, keys)
    return both


RUNNERS: dict[str, QueueRunner] = {runner.name: runner for runner in (
    QueueRunner("procrastinate", "procrastinate", ("procrastinate", "psycopg"), "procrastinate", "postgres",
                procrastinate_enqueue, procrastinate_work, True,
                "App.run_worker_async(wait=False, concurrency=1)"),
    QueueRunner("pgqueuer", "pgqueuer", ("pgqueuer", "psycopg"), "pgqueuer", "postgres",
                pgqueuer_enqueue, pgqueuer_work, True,
                "QueueManager.run(mode=drain, batch_size=1)"),  # on pgqueuer_driver(): the record says which
    QueueRunner("celery", "celery", ("celery", "redis", "psycopg"), "celery", "redis",
                _reset_redis_then(celery_enqueue), celery_work, False,
                "app.worker_main: worker --pool=solo --concurrency=1, acks_late"),
    QueueRunner("dramatiq", "dramatiq", ("dramatiq", "redis", "psycopg"), "dramatiq", "redis",
                _reset_redis_then(dramatiq_enqueue), dramatiq_work, False,
                "dramatiq.Worker(RedisBroker, worker_threads=1)"),
    QueueRunner("arq", "arq", ("arq", "psycopg"), "arq", "redis",
                _reset_redis_then(arq_enqueue), arq_work, True,
                f"arq Worker(burst=True, max_jobs=10, poll_delay={ARQ_POLL_DELAY})"),
    QueueRunner("dbos", "dbos", ("dbos", "psycopg"), "dbos", "postgres",
                dbos_enqueue, dbos_work, False,
                f"DBOS.launch(): its queue thread (database-backed queue, polling {DBOS_POLLING} s, no worker "
                f"concurrency limit), max_executor_threads={DBOS_THREADS}; a workflow of one step"),
)}


# -- a worker process -----------------------------------------------------------------------------
def _worker_main(argv: Sequence[str]) -> int:
    name, mode, queue_url, postgres_url, record, index, work_seconds = argv
    effect = Effect(mode, postgres_url, Path(record), float(work_seconds))
    RUNNERS[name].work(queue_url, effect, int(index))
    return 0


__all__ = ["GUARD_NAMESPACE", "PGQUEUER_DRIVER", "PLAIN_TABLE", "RUNNERS", "QueueRunner", "pgqueuer_driver"]


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        sys.exit("fence: python -m fence.bench.guard_queues is fence bench guard's worker process; run 'fence bench guard'")
    sys.exit(_worker_main(sys.argv[2:]))
