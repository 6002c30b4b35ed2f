"""The PostgreSQL queues of ``fence bench guard``: procrastinate, pgqueuer and DBOS, each enqueued and worked
through its library's own client and worker (a row each of ``fence.bench.guard_queues.RUNNERS``)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import time
from contextlib import asynccontextmanager
from typing import Callable, Sequence

from fence.base.errors import BadInput
from fence.bench.guard_effect import PAYLOAD, QUEUE, TASK, Effect, until_sigterm


# -- procrastinate (PostgreSQL) -------------------------------------------------------------------
def procrastinate_app(url: str, body: Callable | None = None):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name=TASK, queue=QUEUE, pass_context=True)
    def fence_bench_effect(context, key: str, enqueued_at: float) -> None:
        body(context, key, enqueued_at)

    return app, fence_bench_effect


def procrastinate_enqueue(url: str, keys: Sequence[str]) -> None:
    from fence.targets import procrastinate as recipe
    app, task = procrastinate_app(url)

    async def enqueue():
        async with app.open_async():
            await recipe.ensure_schema(app)
            await app.connector.execute_query_async(query=f"TRUNCATE {recipe.TABLES} RESTART IDENTITY CASCADE")
            for key in keys:  # the recipe keys a job by its queueing lock
                await task.configure(queueing_lock=key).defer_async(key=key, enqueued_at=time.time())

    asyncio.run(enqueue())


def procrastinate_work(url: str, effect: Effect, index: int) -> None:
    from fence.targets import procrastinate as recipe

    def body(context, key, enqueued_at):
        started = time.time()
        effect.work()
        effect.write(key, recipe.attempt_id(context.job))
        effect.done(key, enqueued_at, started)

    app, _ = procrastinate_app(url, body)

    async def work():
        async with app.open_async():  # wait=False: the worker returns once the queue is empty
            await app.run_worker_async(queues=[QUEUE], wait=False, concurrency=1, install_signal_handlers=False)

    asyncio.run(work())


# -- pgqueuer (PostgreSQL) ------------------------------------------------------------------------
def pgqueuer_enqueue(url: str, keys: Sequence[str]) -> None:
    import psycopg
    from pgqueuer import Queries

    from fence.targets import pgqueuer_recovery as recipe

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
async def pgqueuer_manager_queries(url: str, driver: str):
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


def pgqueuer_work(url: str, effect: Effect, index: int) -> None:
    from datetime import timedelta

    import psycopg
    from pgqueuer import QueueManager, Queries
    from pgqueuer.domain.types import QueueExecutionMode

    from fence.targets import pgqueuer_recovery as recipe

    async def work():
        # The recipe (guarded only) talks to pgqueuer on a psycopg connection of its own (a re-pick's recovery);
        # the guard's database is pgqueuer's, so each job's picks are read in its registration's statement
        # (log_in_guard_database, checked once). The manager's connection is the same in both modes.
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection, \
                pgqueuer_manager_queries(url, pgqueuer_driver()) as manager_queries:
            queries = Queries.from_psycopg_connection(connection)
            log = await recipe.log_in_guard_database(queries, effect.guard) if effect.guarded else None
            if effect.guarded and log is None:
                raise RuntimeError("the guard's connection does not reach pgqueuer's database: the bench puts both on one")
            manager = QueueManager(manager_queries)

            @manager.entrypoint(TASK)
            async def fence_bench_effect(job) -> None:
                started = time.time()
                await effect.work_async()
                key = recipe.key_of(job)
                if effect.guarded:
                    attempt = await recipe.guarded_attempt(queries, effect.guard, job, log)
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


# -- DBOS (PostgreSQL) ----------------------------------------------------------------------------
DBOS_APP = "fence_bench"
"""The application every worker launches as and the client enqueues for: its name and its version."""
DBOS_SCHEMA = "fence_bench_dbos"
"""DBOS's system tables for the bench, in a schema of their own."""
DBOS_POLLING = 0.05
"""Seconds between a DBOS worker's queue polls (DBOS's default is 1 s, which would hide the effect as arq's would)."""
DBOS_THREADS = 2
"""DBOS's workflow thread pool per process (``max_executor_threads``); each thread keeps its own connection."""


def dbos_client(url: str):
    from dbos import DBOSClient

    return DBOSClient(system_database_url=url, application_name=DBOS_APP, dbos_system_schema=DBOS_SCHEMA)


def dbos_enqueue(url: str, keys: Sequence[str]) -> None:
    from fence.targets import dbos_postgres as recipe

    client = dbos_client(url)
    try:
        with client._sys_db.engine.begin() as connection:
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7369302)")  # the target's: one migration at a time
            client._sys_db.run_migrations()
        with client._sys_db.engine.begin() as connection:
            # The target's tables (named in its schema, ``dbos.``), here in the bench's own schema.
            tables = (f"{DBOS_SCHEMA}.{table.rpartition('.')[2]}" for table in recipe.TABLES)
            connection.exec_driver_sql("TRUNCATE " + ", ".join(tables) + " CASCADE")
        if client.retrieve_queue(QUEUE) is None:
            client.register_queue(QUEUE, polling_interval_sec=DBOS_POLLING)
        for key in keys:  # the workflow id is the job's key, as the target's
            client.enqueue({"queue_name": QUEUE, "workflow_name": TASK, "workflow_id": key, "app_version": DBOS_APP},
                           key, time.time())
    finally:
        client.destroy()


def dbos_work(url: str, effect: Effect, index: int) -> None:
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
        until_sigterm()
    finally:
        DBOS.destroy(destroy_registry=True)


__all__ = [
    "DBOS_APP", "DBOS_POLLING", "DBOS_SCHEMA", "DBOS_THREADS", "PGQUEUER_DRIVER", "dbos_enqueue", "dbos_work",
    "pgqueuer_driver", "pgqueuer_enqueue", "pgqueuer_work", "procrastinate_enqueue", "procrastinate_work",
]
