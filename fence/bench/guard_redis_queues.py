"""The Redis queues of ``fence bench guard``: celery, dramatiq and arq, each enqueued and worked through its
library's own client and worker (a row each of ``fence.bench.guard_queues.RUNNERS``); their effects go to
PostgreSQL as every queue's do."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Sequence

from fence.bench.guard_effect import PAYLOAD, QUEUE, TASK, Effect, until_sigterm


# -- celery (Redis) -------------------------------------------------------------------------------
def celery_app(url: str, body: Callable | None = None):
    import celery

    app = celery.Celery("fence_bench", broker=url, set_as_current=False)
    app.conf.update(task_acks_late=True, task_ignore_result=True, worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True)

    @app.task(name=TASK, bind=True, acks_late=True, shared=False)
    def fence_bench_effect(self, key: str, enqueued_at: float) -> None:
        body(self.request, key, enqueued_at)

    return app, fence_bench_effect


def celery_enqueue(url: str, keys: Sequence[str]) -> None:
    app, task = celery_app(url)
    for key in keys:
        task.apply_async(args=[key, time.time()], queue=QUEUE)
    app.close()


def celery_work(url: str, effect: Effect, index: int) -> None:
    from fence.targets import celery_redis as recipe

    def body(request, key, enqueued_at):
        started = time.time()
        effect.work()
        effect.write(key, recipe.attempt_id(key, request.id))
        effect.done(key, enqueued_at, started)

    app, _ = celery_app(url, body)
    # What `celery -A app worker -P solo -c 1 -Q fence_bench` runs; SIGTERM is its warm shutdown.
    app.worker_main(["worker", "--pool=solo", "--concurrency=1", f"--queues={QUEUE}", f"--hostname=bench{index}@%h",
                     "--without-mingle", "--without-gossip", "--without-heartbeat", "--loglevel=WARNING"])


# -- dramatiq (Redis) -----------------------------------------------------------------------------
def dramatiq_actor(url: str, body: Callable | None = None):
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.middleware import CurrentMessage

    broker = RedisBroker(url=url)
    broker.add_middleware(CurrentMessage())

    @dramatiq.actor(broker=broker, queue_name=QUEUE, actor_name=TASK, max_retries=0)
    def fence_bench_effect(key: str, enqueued_at: float) -> None:
        body(key, enqueued_at)

    return broker, fence_bench_effect


def dramatiq_enqueue(url: str, keys: Sequence[str]) -> None:
    broker, actor = dramatiq_actor(url)
    for key in keys:
        actor.send(key, time.time())
    broker.close()


def dramatiq_work(url: str, effect: Effect, index: int) -> None:
    import dramatiq
    from dramatiq.middleware import CurrentMessage

    from fence.targets import dramatiq_redis as recipe

    def body(key, enqueued_at):
        started = time.time()
        effect.work()
        redis_id = CurrentMessage.get_current_message().options["redis_message_id"]
        effect.write(key, recipe.attempt_id(key, redis_id))
        effect.done(key, enqueued_at, started)

    broker, _ = dramatiq_actor(url, body)
    # What the `dramatiq` command runs in each of its processes, with --threads 1.
    worker = dramatiq.Worker(broker, worker_threads=1)
    worker.start()
    until_sigterm()
    worker.stop()
    broker.close()


# -- arq (Redis) ----------------------------------------------------------------------------------
ARQ_POLL_DELAY = 0.05
"""arq polls every 0.5 s by default, which would cap a process at max_jobs per half second and hide the effect."""


def arq_enqueue(url: str, keys: Sequence[str]) -> None:
    from arq.connections import RedisSettings, create_pool

    async def enqueue():
        pool = await create_pool(RedisSettings.from_dsn(url))
        try:
            for key in keys:  # the recipe's job ids: KEY#n, its fresh run KEY#n+1
                await pool.enqueue_job(TASK, key, time.time(), _job_id=f"{key}#1")
        finally:
            await pool.aclose()

    asyncio.run(enqueue())


def arq_work(url: str, effect: Effect, index: int) -> None:
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


__all__ = ["ARQ_POLL_DELAY", "arq_enqueue", "arq_work", "celery_enqueue", "celery_work", "dramatiq_enqueue",
           "dramatiq_work"]
