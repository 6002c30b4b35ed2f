"""arq on Redis, what only it shows: in-progress keys, its re-pick, the guarded recovery inside arq's own Worker.

What every shipped target shows (the machines' duplicate and its replay by
fence replay, the stale worker's finish accepted on the retry's run, the
shipped failure path finishing the job at once, the guarded row holding, the
explorer's walks) is in tests/test_targets_rows.py, run on arq as on every
system. Here: arq has no recovery step of its own: a job whose in-progress key
expired is picked again by the next ``start_jobs``, under the same id, and
``finish_job(id)`` finishes whoever runs it. With fence.guard, the pick of a
job that ran before runs the guard's recovery, which moves the key to a fresh
job id: a stale finish changes nothing and is refused. The guarded recovery
also runs inside arq's own ``Worker``: the stalled attempt is abandoned, the
fresh job runs, the stale commit is refused.

Every test needs Redis (the session's server, see conftest.py) and arq (the
test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from fence.model.policies import POLICIES
from fence.targets import arq_recovery  # the recipe as a user runs it: it imports no arq
from fence.model.world import Fail, ModelConfig, Reserve, World
from fence.targets.protocol import IllegalMove, Move
from tests.target_explorer_checks import STALE_CONFIRM, the_stale_commit_is_refused
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis

ONE = ModelConfig(capacity=1, jobs=1)
ONE_FAILING = ModelConfig(capacity=1, jobs=1, failures=True)
NAIVE = POLICIES["naive"]


arq_module, shipped, guarded = system_fixtures("arq")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


def _client(storage) -> redis.Redis:
    return storage.session.client


# -- states read back from arq's keys ----------------------------------------------------------
def test_a_pick_is_arqs_in_progress_key_and_its_expiry_is_the_keys_ttl(shipped):
    """reserve enqueues KEY#1 and start_jobs sets its in-progress key; the lease runs out when that key's TTL does."""
    ledger = shipped.ledger_factory(1)
    ledger.reserve("job1", "w1", 0, 2)
    client = _client(shipped)
    assert client.zscore("arq:queue", "job1#1") is not None and client.exists("arq:in-progress:job1#1")
    assert ledger.expired(1) == []
    assert [r.reservation_id for r in ledger.expired(2)] == ["job1/r1"]
    assert not client.exists("arq:in-progress:job1#1")  # gone with its TTL; the job still queued
    with pytest.raises(IllegalMove, match="not a move of arq's janitor"):
        ledger.apply("job1/r1", Move.EXPIRE_AND_HOLD)  # as shipped there is no hold
    assert ledger.apply("job1/r1", Move.EXPIRE_AND_RELEASE).state.value == "unused"
    again = ledger.reserve("job1", "w2", 2, 2)  # the next start_jobs picks the same job id
    assert again.reservation_id == "job1/r2" and client.exists("arq:in-progress:job1#1")


def test_a_pick_held_by_another_workers_in_progress_key_is_refused(shipped):
    """start_jobs skips a job another worker's in-progress key holds: the second reserve is refused, nothing changes."""
    ledger = shipped.ledger_factory(1)
    ledger.reserve("job1", "w1", 0, 2)
    with pytest.raises(IllegalMove, match="did not pick job job1#1"):
        ledger.reserve("job1", "w2", 1, 2)
    assert [r.state.value for r in ledger.reservations()] == ["reserved"]


def test_as_shipped_a_stale_finish_finishes_the_retrys_run(shipped):
    """Why arq accepts the stale finish (tests/test_targets_rows.py has the lockstep's finding): finish_job keys on the
    job id alone, so the first worker's finish finishes the retry's run, and the retry's pick is gone."""
    world = _on(shipped, NAIVE)
    for action in STALE_CONFIRM:
        world.apply(action)
    client = _client(shipped)
    assert client.zcard("arq:queue") == 0 and not client.exists("arq:in-progress:job1#1")


def test_as_shipped_a_failed_task_is_finished_failed_and_never_run_again(shipped, arq_module):
    """run_job finishes a task that raised (a failed result): gone (tests/test_targets_rows.py: where the naive model
    holds it for the janitor)."""
    from arq.jobs import deserialize_result

    world = _on(shipped, NAIVE, ONE_FAILING)
    for action in [Reserve("job1"), Fail("job1#1")]:
        world.apply(action)
    client = _client(shipped)
    assert client.zcard("arq:queue") == 0 and not client.exists("arq:job:job1#1")
    assert deserialize_result(client.get("arq:result:job1#1")).success is False


# -- with the guard ----------------------------------------------------------------------------
def test_the_guarded_recovery_moves_the_key_to_a_fresh_job_and_refuses_the_stale_finish(guarded):
    """Hold (the recovery's start_jobs), settle unused (finish, enqueue KEY#2): the stale worker's finish is refused."""
    ledger = guarded.ledger_factory(1)
    ledger.reserve("job1", "w1", 0, 2)
    (expired,) = ledger.expired(2)
    with pytest.raises(IllegalMove, match="ran before"):
        ledger.reserve("job1", "w2", 2, 2)  # a plain worker's pick of it runs the recovery, the janitor's move
    assert ledger.apply(expired.reservation_id, Move.EXPIRE_AND_HOLD).state.value == "outcome_unknown"
    assert ledger.apply(expired.reservation_id, Move.SETTLE_UNUSED).state.value == "unused"
    client = _client(guarded)
    assert [m for m, _ in client.zrange("arq:queue", 0, -1, withscores=True)] == [b"job1#2"]
    assert ledger.reserve("job1", "w2", 2, 2).state.value == "reserved"
    with pytest.raises(IllegalMove, match=r"finish_job\(job1#1\) changed nothing"):
        ledger.confirm("job1", "w1")
    with pytest.raises(IllegalMove):
        ledger.apply(expired.reservation_id, Move.SETTLE_EXISTING)  # settled already
    assert ledger.confirm("job1", "w2").state.value == "confirmed"


def test_a_guarded_failure_goes_to_the_guard_and_its_settle_runs_the_key_afresh(guarded):
    """The wrapper catches the failure (outcome_unknown, arq still shows it running); the settle finishes it, KEY#2 next."""
    ledger = guarded.ledger_factory(1)
    ledger.reserve("job1", "w1", 0, 2)
    assert ledger.fail("job1", "w1").state.value == "outcome_unknown"
    client = _client(guarded)
    assert client.exists("arq:in-progress:job1#1")  # arq's failure handler never ran
    assert ledger.expired(2) == []  # the wrapper holds it, not the lease
    with pytest.raises(IllegalMove, match="outcome_unknown"):
        ledger.fail("job1", "w1")
    assert ledger.apply("job1/r1", Move.SETTLE_UNUSED).state.value == "unused"
    assert ledger.reserve("job1", "w2", 0, 2).state.value == "reserved" and client.exists("arq:in-progress:job1#2")


# -- inside arq's own Worker ---------------------------------------------------------------------
def _worker(arq_module, pool, guard, stalls: asyncio.Event | None = None, started: list | None = None):
    """An arq Worker running send_ticket: guarded_task, or (``stalls``) a run that registers its attempt and hangs."""
    from arq import Worker, func

    async def send_ticket(ctx, key, payload):
        if stalls is not None:
            attempt = guard.attempt(key, arq_recovery.attempt_id(ctx["job_id"], ctx["job_try"])).__enter__()
            started.append(attempt)
            await stalls.wait()
        return await arq_recovery.guarded_task(ctx, guard, key, payload)

    return Worker(functions=[func(send_ticket, name=arq_recovery.TASK_NAME)], redis_pool=pool, burst=True,
                  handle_signals=False, poll_delay=0.01, job_timeout=60)


def test_the_guard_in_a_task_run_by_arqs_own_worker(redis_url, arq_module, tmp_path):
    """A stalled attempt is abandoned by the recovery arq's worker runs on its re-pick, the fresh job runs, the stale commit is refused."""
    from arq.connections import RedisSettings, create_pool
    from arq.jobs import deserialize_result

    from fence.guard import Guard

    guard = Guard.open(f"sqlite://{tmp_path}/guard.db")
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    stalled_loop, loop = asyncio.new_event_loop(), asyncio.new_event_loop()
    first_pool = None
    try:
        # The first worker picks t1#1, registers its attempt and stalls (its loop never runs again).
        asyncio.set_event_loop(stalled_loop)
        first_pool = stalled_loop.run_until_complete(create_pool(RedisSettings.from_dsn(redis_url)))
        stalled_loop.run_until_complete(first_pool.enqueue_job(arq_recovery.TASK_NAME, "t1", "hello", _job_id="t1#1"))
        started: list = []
        first = _worker(arq_module, first_pool, guard, asyncio.Event(), started)

        async def until_started():
            await first.start_jobs([b"t1#1"])
            while not started:
                await asyncio.sleep(0.01)

        stalled_loop.run_until_complete(until_started())
        (stale,) = started
        # Its in-progress key runs out (the time passing, without sleeping); the next worker re-picks the job.
        assert client.pttl("arq:in-progress:t1#1") > 0
        client.pexpire("arq:in-progress:t1#1", 1)
        asyncio.set_event_loop(loop)
        pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(redis_url)))
        second = _worker(arq_module, pool, guard)
        loop.run_until_complete(second.main())  # burst: the re-pick (try 2, the recovery), then the fresh job
        loop.run_until_complete(pool.aclose())
        results = {job: deserialize_result(client.get(f"arq:result:{job}")).result for job in ("t1#1", "t1#2")}
        assert results == {"t1#1": "rerun", "t1#2": "written"}
        the_stale_commit_is_refused(stale, guard, arq_recovery.attempt_id("t1#2", 1))
        assert client.zcard("arq:queue") == 0
    finally:
        for each in (stalled_loop, loop):  # the stalled run ends at last (arq puts back nothing: the job is done)
            pending = asyncio.all_tasks(each)
            for task in pending:
                task.cancel()
            each.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        if first_pool is not None:
            stalled_loop.run_until_complete(first_pool.aclose())
        for each in (stalled_loop, loop):
            each.close()
        asyncio.set_event_loop(None)
        client.close()
        guard.close()


def test_the_adapters_failure_is_what_arqs_worker_does_with_a_task_that_raised(redis_url, arq_module):
    """arq's Worker runs a task that raises: the job leaves the queue with a failed result, as fail() leaves it."""
    from arq import Worker, func
    from arq.connections import RedisSettings, create_pool
    from arq.jobs import deserialize_result

    async def raises(ctx, key):
        raise RuntimeError("the task failed")

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(redis_url)))
        loop.run_until_complete(pool.enqueue_job("raises", "t1", _job_id="t1#1"))
        worker = Worker(functions=[func(raises, name="raises")], redis_pool=pool, burst=True, handle_signals=False,
                        poll_delay=0.01)
        loop.run_until_complete(worker.main())
        loop.run_until_complete(pool.aclose())
        assert client.zcard("arq:queue") == 0 and not client.exists("arq:job:t1#1", "arq:in-progress:t1#1")
        assert deserialize_result(client.get("arq:result:t1#1")).success is False
    finally:
        loop.close()
        asyncio.set_event_loop(None)
        client.close()


