"""The queues of ``fence bench guard``, and the worker process it starts for each.

A queue is a row of ``RUNNERS``: its library, its server, how jobs are
enqueued (in the bench's process, ``fence.bench.guard_cost``) and how a worker
works them (in a worker process of its own, started as ``python -m
fence.bench.guard_queues worker ...``: the library's own worker, as the library
starts it). ``Effect`` is what each task writes, unguarded or through
fence.guard, and the record of each finished job the bench counts and times.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from fence.base.errors import BadInput

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


def _until_sigterm() -> None:
    """Block until SIGTERM: how the bench stops a worker that never stops by itself."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(0.1):
        pass


# -- procrastinate (PostgreSQL) -------------------------------------------------------------------
def _procrastinate_app(url: str, body: Callable | None = None):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name=TASK, queue=QUEUE, pass_context=True)
    def fence_bench_effect(context, key: str, enqueued_at: float) -> None:
        body(context, key, enqueued_at)

    return app, fence_bench_effect


def _procrastinate_enqueue(url: str, keys: Sequence[str]) -> None:
    from fence.targets import procrastinate as recipe
    app, task = _procrastinate_app(url)

    async def enqueue():
        async with app.open_async():
            await recipe.ensure_schema(app)
            await app.connector.execute_query_async(query=f"TRUNCATE {recipe.TABLES} RESTART IDENTITY CASCADE")
            for key in keys:  # the recipe keys a job by its queueing lock
                await task.configure(queueing_lock=key).defer_async(key=key, enqueued_at=time.time())

    asyncio.run(enqueue())


def _procrastinate_work(url: str, effect: Effect, index: int) -> None:
    from fence.targets import procrastinate as recipe

    def body(context, key, enqueued_at):
        started = time.time()
        effect.work()
        effect.write(key, recipe.attempt_id(context.job))
        effect.done(key, enqueued_at, started)

    app, _ = _procrastinate_app(url, body)

    async def work():
        async with app.open_async():  # wait=False: the worker returns once the queue is empty
            await app.run_worker_async(queues=[QUEUE], wait=False, concurrency=1, install_signal_handlers=False)

    asyncio.run(work())


# -- pgqueuer (PostgreSQL) ------------------------------------------------------------------------
def _pgqueuer_enqueue(url: str, keys: Sequence[str]) -> None:
    import psycopg
    from pgqueuer import Queries

    from fence.targets import pgqueuer as recipe

    async def enqueue():
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
            queries = Queries.from_psycopg_connection(connection)
            await recipe.ensure_schema(queries)
            names = queries.qbe.settings.qualified
            await queries.driver.execute(f"TRUNCATE {names.queue_table}, {names.queue_table_log} RESTART IDENTITY")
            for key in keys:
                await recipe.enqueue_keyed(queries, TASK, json.dumps({"enqueued_at": time.time()}).encode(), key)

    asyncio.run(enqueue())


PGQUEUER_DRIVER = "FENCE_BENCH_PGQUEUER_DRIVER"  # "asyncpg" or "psycopg"; unset: asyncpg if it imports, as pgq run


def pgqueuer_driver() -> str:
    """The QueueManager's driver (psycopg's stalls a drain 1 s at a time: see ``fence.bench.guard_cost``)."""
    forced = os.environ.get(PGQUEUER_DRIVER)
    if forced and forced not in ("asyncpg", "psycopg"):
        raise BadInput(f"{PGQUEUER_DRIVER}={forced!r}: name asyncpg or psycopg, or unset it")
    return forced or ("asyncpg" if importlib.util.find_spec("asyncpg") else "psycopg")


@asynccontextmanager
async def _pgqueuer_manager_queries(url: str, driver: str):
    from pgqueuer import Queries
    if driver == "asyncpg":
        import asyncpg
        connection = await asyncpg.connect(url)
        try:
            yield Queries.from_asyncpg_connection(connection)
        finally:
            await connection.close()
    else:
        import psycopg
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
            yield Queries.from_psycopg_connection(connection)


def _pgqueuer_work(url: str, effect: Effect, index: int) -> None:
    from datetime import timedelta

    import psycopg
    from pgqueuer import QueueManager, Queries
    from pgqueuer.domain.types import QueueExecutionMode

    from fence.targets import pgqueuer as recipe

    async def work():
        # The recipe (guarded only) reads the job's picks on a psycopg connection of its own; the manager's
        # connection is the same in both modes.
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection, \
                _pgqueuer_manager_queries(url, pgqueuer_driver()) as manager_queries:
            queries = Queries.from_psycopg_connection(connection)
            manager = QueueManager(manager_queries)

            @manager.entrypoint(TASK)
            async def fence_bench_effect(job) -> None:
                started = time.time()
                await effect.work_async()
                key = recipe.key_of(job)
                if effect.guarded:
                    attempt = await recipe.guarded_attempt(queries, effect.guard, job)
                    if attempt is None:
                        raise RuntimeError(f"job {job.id} was re-picked in a benchmark run: a stalled worker")
                    with attempt:
                        attempt.commit(PAYLOAD)
                else:
                    effect.write(key, recipe.attempt_id(job, 1))
                effect.done(key, json.loads(job.payload)["enqueued_at"], started)

            await manager.run(mode=QueueExecutionMode.drain, batch_size=1, dequeue_timeout=timedelta(seconds=0.1),
                              log_aggregation_interval=timedelta(0))

    asyncio.run(work())


# -- celery (Redis) -------------------------------------------------------------------------------
def _celery_app(url: str, body: Callable | None = None):
    import celery

    app = celery.Celery("fence_bench", broker=url, set_as_current=False)
    app.conf.update(task_acks_late=True, task_ignore_result=True, worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True)

    @app.task(name=TASK, bind=True, acks_late=True, shared=False)
    def fence_bench_effect(self, key: str, enqueued_at: float) -> None:
        body(self.request, key, enqueued_at)

    return app, fence_bench_effect


def _celery_enqueue(url: str, keys: Sequence[str]) -> None:
    app, task = _celery_app(url)
    for key in keys:
        task.apply_async(args=[key, time.time()], queue=QUEUE)
    app.close()


def _celery_work(url: str, effect: Effect, index: int) -> None:
    from fence.targets import celery_redis as recipe

    def body(request, key, enqueued_at):
        started = time.time()
        effect.work()
        effect.write(key, recipe.attempt_id(key, request.id))
        effect.done(key, enqueued_at, started)

    app, _ = _celery_app(url, body)
    # What `celery -A app worker -P solo -c 1 -Q fence_bench` runs; SIGTERM is its warm shutdown.
    app.worker_main(["worker", "--pool=solo", "--concurrency=1", f"--queues={QUEUE}", f"--hostname=bench{index}@%h",
                     "--without-mingle", "--without-gossip", "--without-heartbeat", "--loglevel=WARNING"])


# -- dramatiq (Redis) -----------------------------------------------------------------------------
def _dramatiq_actor(url: str, body: Callable | None = None):
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.middleware import CurrentMessage

    broker = RedisBroker(url=url)
    broker.add_middleware(CurrentMessage())

    @dramatiq.actor(broker=broker, queue_name=QUEUE, actor_name=TASK, max_retries=0)
    def fence_bench_effect(key: str, enqueued_at: float) -> None:
        body(key, enqueued_at)

    return broker, fence_bench_effect


def _dramatiq_enqueue(url: str, keys: Sequence[str]) -> None:
    broker, actor = _dramatiq_actor(url)
    for key in keys:
        actor.send(key, time.time())
    broker.close()


def _dramatiq_work(url: str, effect: Effect, index: int) -> None:
    import dramatiq
    from dramatiq.middleware import CurrentMessage

    from fence.targets import dramatiq_redis as recipe

    def body(key, enqueued_at):
        started = time.time()
        effect.work()
        redis_id = CurrentMessage.get_current_message().options["redis_message_id"]
        effect.write(key, recipe.attempt_id(key, redis_id))
        effect.done(key, enqueued_at, started)

    broker, _ = _dramatiq_actor(url, body)
    # What the `dramatiq` command runs in each of its processes, with --threads 1.
    worker = dramatiq.Worker(broker, worker_threads=1)
    worker.start()
    _until_sigterm()
    worker.stop()
    broker.close()


# -- arq (Redis) ----------------------------------------------------------------------------------
ARQ_POLL_DELAY = 0.05
"""arq polls every 0.5 s by default, which would cap a process at max_jobs per half second and hide the effect."""


def _arq_enqueue(url: str, keys: Sequence[str]) -> None:
    from arq.connections import RedisSettings, create_pool

    async def enqueue():
        pool = await create_pool(RedisSettings.from_dsn(url))
        try:
            for key in keys:  # the recipe's job ids: KEY#n, its fresh run KEY#n+1
                await pool.enqueue_job(TASK, key, time.time(), _job_id=f"{key}#1")
        finally:
            await pool.aclose()

    asyncio.run(enqueue())


def _arq_work(url: str, effect: Effect, index: int) -> None:
    from arq import Worker, func
    from arq.connections import RedisSettings

    from fence.targets import arq_redis as recipe

    async def fence_bench_effect(ctx: dict, key: str, enqueued_at: float) -> str:
        started = time.time()
        await effect.work_async()
        if effect.guarded:
            outcome = await recipe.guarded_task(ctx, effect.guard, key, PAYLOAD)
            if outcome != "written":
                raise RuntimeError(f"job {ctx['job_id']} was re-picked in a benchmark run ({outcome}): a stalled worker")
        else:
            effect.write(key, recipe.attempt_id(ctx["job_id"], ctx["job_try"]))
        effect.done(key, enqueued_at, started)
        return "written"

    # burst: the worker returns once the queue is empty
    worker = Worker(functions=[func(fence_bench_effect, name=TASK)], redis_settings=RedisSettings.from_dsn(url),
                    burst=True, handle_signals=False, poll_delay=ARQ_POLL_DELAY)
    worker.run()  # on the loop the Worker took when it was made


# -- DBOS (PostgreSQL) ----------------------------------------------------------------------------
DBOS_APP = "fence_bench"
"""The application every worker launches as and the client enqueues for: its name and its version."""
DBOS_SCHEMA = "fence_bench_dbos"
"""DBOS's system tables for the bench, in a schema of their own."""
DBOS_POLLING = 0.05
"""Seconds between a DBOS worker's queue polls (DBOS's default is 1 s, which would hide the effect as arq's would)."""
DBOS_THREADS = 2
"""DBOS's workflow thread pool per process (``max_executor_threads``); each thread keeps its own connection."""


def _dbos_client(url: str):
    from dbos import DBOSClient

    return DBOSClient(system_database_url=url, application_name=DBOS_APP, dbos_system_schema=DBOS_SCHEMA)


def _dbos_enqueue(url: str, keys: Sequence[str]) -> None:
    from fence.targets import dbos_postgres as recipe

    client = _dbos_client(url)
    try:
        with client._sys_db.engine.begin() as connection:
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7369302)")  # the target's: one migration at a time
            client._sys_db.run_migrations()
        with client._sys_db.engine.begin() as connection:
            connection.exec_driver_sql("TRUNCATE " + ", ".join(f"{DBOS_SCHEMA}.{t}" for t in recipe.TABLES) + " CASCADE")
        if client.retrieve_queue(QUEUE) is None:
            client.register_queue(QUEUE, polling_interval_sec=DBOS_POLLING)
        for key in keys:  # the workflow id is the job's key, as the target's
            client.enqueue({"queue_name": QUEUE, "workflow_name": TASK, "workflow_id": key, "app_version": DBOS_APP},
                           key, time.time())
    finally:
        client.destroy()


def _dbos_work(url: str, effect: Effect, index: int) -> None:
    from dbos import DBOS

    from fence.targets import dbos_postgres as recipe

    @DBOS.step()
    def fence_bench_write(key: str, enqueued_at: float) -> None:
        started = time.time()
        effect.work()
        workflow_id = DBOS.workflow_id
        if effect.guarded:  # the recipe's attempt id: the workflow and its claim's token, from DBOS's context
            effect.write(key, recipe.running_attempt_id())
        else:
            effect.write(key, f"{workflow_id}#1")
        effect.done(key, enqueued_at, started)

    @DBOS.workflow(name=TASK)
    def fence_bench_effect(key: str, enqueued_at: float) -> None:
        fence_bench_write(key, enqueued_at)

    DBOS(config={"name": DBOS_APP, "system_database_url": url, "application_version": DBOS_APP,
                 "executor_id": f"bench-{index}", "dbos_system_schema": DBOS_SCHEMA, "log_level": "ERROR",
                 "max_executor_threads": DBOS_THREADS})
    DBOS.launch()  # its queue thread claims the queue's workflows and runs them on DBOS's own thread pool
    try:
        _until_sigterm()
    finally:
        DBOS.destroy(destroy_registry=True)


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
                _procrastinate_enqueue, _procrastinate_work, True,
                "App.run_worker_async(wait=False, concurrency=1)"),
    QueueRunner("pgqueuer", "pgqueuer", ("pgqueuer", "psycopg"), "pgqueuer", "postgres",
                _pgqueuer_enqueue, _pgqueuer_work, True,
                "QueueManager.run(mode=drain, batch_size=1)"),  # on pgqueuer_driver(): the record says which
    QueueRunner("celery", "celery", ("celery", "redis", "psycopg"), "celery", "redis",
                _reset_redis_then(_celery_enqueue), _celery_work, False,
                "app.worker_main: worker --pool=solo --concurrency=1, acks_late"),
    QueueRunner("dramatiq", "dramatiq", ("dramatiq", "redis", "psycopg"), "dramatiq", "redis",
                _reset_redis_then(_dramatiq_enqueue), _dramatiq_work, False,
                "dramatiq.Worker(RedisBroker, worker_threads=1)"),
    QueueRunner("arq", "arq", ("arq", "psycopg"), "arq", "redis",
                _reset_redis_then(_arq_enqueue), _arq_work, True,
                f"arq Worker(burst=True, max_jobs=10, poll_delay={ARQ_POLL_DELAY})"),
    QueueRunner("dbos", "dbos", ("dbos", "psycopg"), "dbos", "postgres",
                _dbos_enqueue, _dbos_work, False,
                f"DBOS.launch(): its queue thread (database-backed queue, polling {DBOS_POLLING} s, no worker "
                f"concurrency limit), max_executor_threads={DBOS_THREADS}; a workflow of one step"),
)}


# -- a worker process -----------------------------------------------------------------------------
def _worker_main(argv: Sequence[str]) -> int:
    name, mode, queue_url, postgres_url, record, index, work_seconds = argv
    effect = Effect(mode, postgres_url, Path(record), float(work_seconds))
    RUNNERS[name].work(queue_url, effect, int(index))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        sys.exit("fence: python -m fence.bench.guard_queues is fence bench guard's worker process; run 'fence bench guard'")
    sys.exit(_worker_main(sys.argv[2:]))
