"""pgqueuer, what only it shows: its re-pick, its queue manager, and what that manager logs on a failure.

What every shipped target shows (the machines' duplicate and its replay, the
stale worker's log_jobs accepted on the re-picked row, pgqueuer #430; the
shipped failure path dropping the job; the guarded row holding; the explorer's
walks) is in tests/test_targets_rows.py, run on pgqueuer as on every system.
Here: the re-pick and the retry are one row, picked by two queue managers; the
guarded recovery runs the retry on a fresh row; the guard in a task run by
pgqueuer's own QueueManager; and a worker's failure (``fail``) is what that
manager logs when an entrypoint raises: as shipped the job is dropped, guarded
it is parked for the recovery.

Every test here needs PostgreSQL (the session's cluster, see conftest.py) and
pgqueuer (the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from fence.search.lockstep import replay_in_lockstep, without_refusal_reasons
from fence.model.policies import POLICIES, Decision
from fence.model.world import Deliver, Fail, ModelConfig, Probe, Reserve, SendCommit, Settle, Start, World
from tests.target_explorer_checks import STALE_CONFIRM, STALE_SETTLE, the_stale_commit_is_refused
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.postgres

ONE = ModelConfig(capacity=1, jobs=1)


pgqueuer_module, shipped, guarded = system_fixtures("pgqueuer")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


async def _emptied_queue(targets, queries):
    """pgqueuer's schema, its queue and log emptied (ids from 1 again): their qualified names."""
    await targets.ensure_schema(queries)
    names = queries.qbe.settings.qualified
    await queries.driver.execute(f"TRUNCATE {names.queue_table}, {names.queue_table_log} RESTART IDENTITY")
    return names


# -- as shipped: the stale re-pick in dequeue -----------------------------------------------------
def test_the_stale_repick_and_the_retry_are_one_row_picked_by_two_queue_managers(shipped):
    """pgqueuer #430's row: the next dequeue re-picks the stalled worker's job for the retry, the same job id under
    another queue manager, which is why the stale worker's log_jobs completes the retry's run."""
    world = _on(shipped, POLICIES["naive"])
    for action in STALE_CONFIRM:
        world.apply(action)
    picks = [world.ledger._records()[rid] for rid in ("job1/r1", "job1/r2")]
    assert picks[0].job.id == picks[1].job.id and picks[0].queue_manager != picks[1].queue_manager


# -- with the guard -------------------------------------------------------------------------
def test_the_guarded_recovery_runs_the_retry_on_a_fresh_row(guarded):
    """Guarded, the re-pick holds and the retry runs on a fresh row, not the re-picked one: so a stale settle's log_jobs
    meets no row of the retry's."""
    world = _on(guarded, POLICIES["abandon-fenced"])
    for action in STALE_SETTLE:
        world.apply(action)
    assert world.trace[-1].sentence.endswith("the ledger refuses")
    assert world.ledger._records()["job1/r1"].job.id != world.ledger._records()["job1/r2"].job.id


@pytest.mark.parametrize("picks_read", ["apart", pytest.param("in the registration", marks=pytest.mark.slow)])
def test_the_guard_in_a_task_run_by_pgqueuers_own_queue_manager(postgres_url, pgqueuer_module, picks_read):
    """A stale job re-picked by a real QueueManager is recovered (its attempt abandoned, a fresh row run), and the stale
    commit is refused: with the job's picks read apart, or in the registration's own statement (the guard's database
    is pgqueuer's: ``log_in_guard_database``)."""
    import uuid

    import psycopg
    from pgqueuer import QueueManager, Queries
    from pgqueuer.domain.types import QueueExecutionMode
    from pgqueuer.queries import EntrypointExecutionParameter

    from fence.guard import Guard

    targets = pgqueuer_module
    guard = Guard.open(postgres_url, namespace="fence_guard_test_pgqueuer")
    guard.destination.store.reset()
    ran: list[tuple[int, bool]] = []

    async def story():
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
            queries = Queries.from_psycopg_connection(connection)
            names = await _emptied_queue(targets, queries)
            await targets.enqueue_keyed(queries, "send_ticket", b"hello", "t1")
            # A worker takes the job, starts the task, and stalls: its heartbeat goes quiet.
            (stale_job,) = await queries.dequeue(
                batch_size=1, entrypoints={"send_ticket": EntrypointExecutionParameter(concurrency_limit=0)},
                queue_manager_id=uuid.uuid4(), global_concurrency_limit=None,
                heartbeat_timeout=timedelta(seconds=30))
            stale = guard.attempt("t1", targets.attempt_id(stale_job, 1)).__enter__()
            log = await targets.log_in_guard_database(queries, guard) if picks_read != "apart" else None
            assert (log is None) == (picks_read == "apart")
            await queries.driver.execute(f"UPDATE {names.queue_table} SET heartbeat = heartbeat - interval '10 minutes'")

            # pgqueuer's own queue manager, on a connection of its own, runs the guarded entrypoint. The
            # task's recovery talks to pgqueuer on the first connection: with psycopg, pgqueuer's LISTEN
            # holds the manager's connection for up to a second at a time.
            async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as worker_connection:
                manager = QueueManager(Queries.from_psycopg_connection(worker_connection))

                @manager.entrypoint("send_ticket")
                async def send_ticket(job) -> None:
                    attempt = await targets.guarded_attempt(queries, guard, job, log)
                    ran.append((job.id, attempt is not None))
                    if attempt is None:
                        return  # a stale re-pick: recovered, not run
                    with attempt:
                        attempt.commit(job.payload.decode())

                await manager.run(mode=QueueExecutionMode.drain, heartbeat_timeout=timedelta(seconds=30),
                                  dequeue_timeout=timedelta(seconds=0.1), batch_size=1,
                                  log_aggregation_interval=timedelta(0))
            history = {job_id: await targets.log_statuses(queries, job_id) for job_id in (1, 2)}
            return stale, stale_job, history

    try:
        stale, stale_job, history = asyncio.run(story())
        # The re-pick ran the recovery, not the body; the fresh row ran the body.
        assert ran == [(stale_job.id, False), (stale_job.id + 1, True)]
        assert history == {stale_job.id: ["queued", "picked", "picked", "exception"],
                           stale_job.id + 1: ["queued", "picked", "successful"]}
        the_stale_commit_is_refused(stale, guard, f"t1@{stale_job.id + 1}.1")
    finally:
        guard.close()


def test_the_picks_are_read_in_the_registration_only_where_the_guards_database_is_pgqueuers(
        postgres_url, pgqueuer_module, tmp_path):
    """log_in_guard_database names pgqueuer's log for a guard on pgqueuer's database, and None for a guard elsewhere;
    the one statement registers a first pick's attempt only, and a re-pick's registers nothing."""
    import uuid

    import psycopg
    from pgqueuer import Queries
    from pgqueuer.queries import EntrypointExecutionParameter

    from fence.guard import Guard

    targets = pgqueuer_module
    same, elsewhere = Guard.open(postgres_url, namespace="fence_guard_test_pgqueuer_picks"), \
        Guard.open(f"sqlite://{tmp_path}/guard.db")
    same.destination.store.reset()

    async def story():
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
            queries = Queries.from_psycopg_connection(connection)
            names = await _emptied_queue(targets, queries)
            log = await targets.log_in_guard_database(queries, same)
            assert await targets.log_in_guard_database(queries, elsewhere) is None
            await targets.enqueue_keyed(queries, "send_ticket", b"hello", "t1")

            async def pick():
                (job,) = await queries.dequeue(
                    batch_size=1, entrypoints={"send_ticket": EntrypointExecutionParameter(concurrency_limit=0)},
                    queue_manager_id=uuid.uuid4(), global_concurrency_limit=None,
                    heartbeat_timeout=timedelta(seconds=30))
                return job

            first = await pick()
            row, attempt = same.attempt_if("t1", targets.attempt_id(first, 1), targets.PICKS.format(log=log), (first.id,))
            await queries.driver.execute(f"UPDATE {names.queue_table} SET heartbeat = heartbeat - interval '10 minutes'")
            again = await pick()
            row_again, none = same.attempt_if("t1", "t1@never", targets.PICKS.format(log=log), (again.id,))
            return log, names, row, attempt, row_again, none

    try:
        log, names, row, attempt, row_again, none = asyncio.run(story())
        assert log.endswith(f".{names.queue_table_log}")
        assert row == (True, 1) and attempt.registered is not None and attempt.registered.value == "in_flight"
        assert row_again == (False, 2) and none is None
        assert same.destination.attempt_state("t1@never") is None  # nothing registered for the re-pick
        with attempt:
            attempt.commit("hello")
        assert [(e.key, e.attempt_id) for e in same.destination.effects()] == [("t1", "t1@1.1")]
    finally:
        same.close()
        elsewhere.close()


# -- the worker's failure path: what pgqueuer's queue manager logs when an entrypoint raises -----
ONE_FAILING = ModelConfig(capacity=1, jobs=1, failures=True)
FAILURE_AFTER_EFFECT = [
    Reserve("job1"), Start("job1#1"), SendCommit("job1#1"), Deliver("commit", "job1#1"), Fail("job1#1"),
    Probe(0, "job1/r1"), Settle(0, "job1/r1"),
]


@pytest.mark.postgres
def test_guarded_a_failure_goes_to_the_guard_and_the_settle_ends_the_row_like_the_model(guarded):
    """Guarded: the entrypoint catches its failure (pgqueuer logs nothing yet); the settle ends the row, in lockstep."""
    policy = POLICIES["abandon-fenced"]
    world, mirror = _on(guarded, policy, ONE_FAILING), World(policy, ONE_FAILING)
    assert replay_in_lockstep(FAILURE_AFTER_EFFECT[:5], world, mirror, same_story=without_refusal_reasons) is None
    assert world.trace[-1].sentence == "job1#1 fails after its effect landed and reports it: job1/r1 is outcome_unknown"
    job = world.ledger._records()["job1/r1"].job
    assert guarded.session.run(guarded.session.queries.job_status([job.id])) == [(job.id, "picked")]
    assert world.reached["failure_after_effect"] == 1
    # The janitor finds the effect: the settle's log_jobs(successful) ends the row, as the model settles it.
    assert replay_in_lockstep(FAILURE_AFTER_EFFECT[5:], world, mirror, same_story=without_refusal_reasons) is None
    assert world.ledger.get("job1/r1").state.value == "confirmed_existing"
    assert guarded.session.run(guarded.session.queries.job_status([job.id])) == [(job.id, "successful")]


@pytest.mark.postgres
def test_the_adapters_failure_is_what_pgqueuers_own_queue_manager_logs(postgres_url, pgqueuer_module):
    """A real QueueManager runs two raising entrypoints: pgqueuer's default drops the row, the guarded one settles it.

    The dropped row has the statuses of the adapter's fail_job; the guarded
    entrypoint's settle_failure abandons its attempt and enqueues a fresh row,
    and pgqueuer's own log of the failure afterwards changes nothing.
    """
    import psycopg
    from pgqueuer import QueueManager, Queries
    from pgqueuer.domain.types import QueueExecutionMode

    from fence.guard import Guard

    targets = pgqueuer_module
    guard = Guard.open(postgres_url, namespace="fence_guard_test_pgqueuer_failure")
    guard.destination.store.reset()

    async def story():
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
            queries = Queries.from_psycopg_connection(connection)
            await _emptied_queue(targets, queries)
            dropped = await targets.enqueue_keyed(queries, "dropped", b"x", "t1")
            parked = await targets.enqueue_keyed(queries, "guarded", b"x", "t2")
            async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as worker_connection:
                manager = QueueManager(Queries.from_psycopg_connection(worker_connection))

                @manager.entrypoint("dropped")
                async def raises_and_is_dropped(job) -> None:
                    raise RuntimeError("the task failed")

                @manager.entrypoint("guarded")
                async def raises_into_its_guard(job) -> None:
                    if job.id != parked:  # the fresh row the settle enqueued: this run writes the ticket
                        with guard.attempt("t2", targets.attempt_id(job, 1)) as attempt:
                            attempt.commit("ticket")
                        return
                    try:
                        guard.attempt("t2", targets.attempt_id(job, 1)).__enter__()  # started, never committed
                        raise RuntimeError("the task failed")
                    except RuntimeError:
                        settled.append((job.id, await targets.settle_failure(queries, guard, job)))
                        raise

                await manager.run(mode=QueueExecutionMode.drain, heartbeat_timeout=timedelta(seconds=30),
                                  dequeue_timeout=timedelta(seconds=0.1), batch_size=1,
                                  log_aggregation_interval=timedelta(0))
            after_manager = ({j.id: j.status for j in await queries.browse_queue()},
                             {i: await targets.log_statuses(queries, i) for i in (dropped, parked, parked + 1)})
            return dropped, parked, after_manager

    settled = []
    try:
        dropped, parked, after_manager = asyncio.run(story())
    finally:
        guard.close()
    rows, logged = after_manager
    assert settled == [(parked, Decision.UNUSED)]
    assert rows == {}  # the fresh row ran too
    assert logged == {dropped: ["queued", "picked", "exception"], parked: ["queued", "picked", "exception"],
                      parked + 1: ["queued", "picked", "successful"]}
