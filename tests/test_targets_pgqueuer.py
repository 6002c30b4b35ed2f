"""pgqueuer, the second target: fence's machines on the real library and a real PostgreSQL.

As shipped, pgqueuer's stale re-pick in dequeue behaves like fence's naive
policy: the machines find its duplicate write, and the run they found replays
on a fresh database. Where pgqueuer moves differently from the naive model (a
stale worker's log_jobs completes the row the re-pick is running, pgqueuer
#430), the lockstep reports it. With fence.guard on the task and the re-pick
made the recovery, the machines find nothing within the stated bound and
reach every danger, and the guard works in a task run by pgqueuer's own
QueueManager. A worker's failure (``fail``) is what that QueueManager logs when
an entrypoint raises: as shipped the job is dropped, guarded it is parked for
the recovery (tests/test_targets_explorer_pgqueuer.py has what the explorer
finds with failures on).

Every test here but the missing-library one needs PostgreSQL (the session's
cluster, see conftest.py) and pgqueuer (the test extra): skipped without them
locally, failed under CI.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from fence.search import counterexample
from fence.model.destination import CommitResult
from fence.base.errors import BadInput
from fence.model.invariants import BY_NAME
from fence.search.lockstep import replay_in_lockstep, without_refusal_reasons
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES, Decision
from fence.checking.verdicts import Verdict, profile_settings
from fence.model.world import (
    Confirm, Deliver, Fail, ModelConfig, Probe, Reserve, Retry, Scan, SendCommit, Settle, Start, Tick, World,
)
from fence.targets import TARGETS, judge_target
from tests.target_explorer_checks import STALE_SETTLE, guarded_row_holds, machines_duplicate_replays
from tests.target_fixtures import system_fixtures

PINNED_NAIVE = sorted((Path(__file__).parent / "pinned").glob("naive__*.json"))
ONE = ModelConfig(capacity=1, jobs=1)
GUARDED_EXAMPLES = 40
"""Examples of the guarded row in every run: enough to reach every danger (the test checks it)."""


pgqueuer_module, shipped, guarded = system_fixtures("pgqueuer")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


# -- as shipped: the naive policy, on the real system ---------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("path", PINNED_NAIVE, ids=[p.stem for p in PINNED_NAIVE])
def test_the_models_naive_counterexamples_replay_on_pgqueuer(path, shipped):
    """Each pinned counterexample of the naive model, replayed on pgqueuer's tables, breaks the same invariant."""
    policy, config, invariant, actions, drains = counterexample.load(path)
    chosen = [action for action, drain in zip(actions, drains) if not drain]
    replayed = replay_actions(policy, config, chosen, BY_NAME[invariant], shipped.destination_factory, shipped.ledger_factory)
    assert replayed is not None, f"{path.stem} did not break {invariant} on pgqueuer"
    assert replayed.world.observer.findings.first(invariant) or BY_NAME[invariant].check(replayed.world)


@pytest.mark.postgres
def test_the_machines_find_a_duplicate_on_pgqueuer_and_it_replays_on_a_fresh_database(shipped):
    """The machines on pgqueuer find a job written twice; its run, replayed on emptied tables, writes it twice again."""
    kinds = machines_duplicate_replays(shipped)
    # ...the second run is the stale re-pick: a scan (the re-pick) comes before the retry that ran it.
    assert "scan" in kinds and "retry" in kinds and kinds.index("scan") < kinds.index("retry")


# The story of pgqueuer #430, told as the world's actions: a worker outlives its heartbeat,
# the next dequeue re-picks its job for a retry, and the first worker then completes.
STALE_COMPLETION = [
    Reserve("job1"), Tick(2), Start("job1#1"), Deliver("register", "job1#1"), SendCommit("job1#1"),
    Scan(0, "job1/r1"), Retry("job1"), Deliver("commit", "job1#1"), Deliver("ack", "job1#1"),
    Confirm("job1#1"),
]


@pytest.mark.postgres
def test_a_stale_workers_log_jobs_completes_the_repicked_row_where_the_model_refuses(shipped):
    """Lockstep finding: pgqueuer lets the first worker's log_jobs complete the row the re-pick runs; the naive model refuses it."""
    naive = POLICIES["naive"]
    world = _on(shipped, naive)
    difference = replay_in_lockstep(STALE_COMPLETION, world, World(naive, ONE), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "confirm: the step's story"
    assert "the ledger refuses" in difference.detail and "job1#1 confirms: job1/r2 is confirmed" in difference.detail
    # The re-pick and the retry were one row: the same job id, picked by two queue managers.
    picks = [world.ledger._records()[rid] for rid in ("job1/r1", "job1/r2")]
    assert picks[0].job.id == picks[1].job.id and picks[0].queue_manager != picks[1].queue_manager
    # and the observer, judging fence's facts, calls it what it is
    broken = replay_actions(naive, ONE, STALE_COMPLETION, BY_NAME["stale_attempt_cannot_change_newer"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None and broken.message == "job1#1's confirm changed job1/r2, which belongs to job1#2"


# -- with the guard -------------------------------------------------------------------------
@pytest.mark.postgres
def test_the_guarded_recovery_refuses_a_stale_settle_like_the_model(guarded):
    """Guarded (the re-pick holds, a fresh row per retry), a stale settle's log_jobs meets no row and is refused, as in the model."""
    policy = POLICIES["abandon-fenced"]
    world = _on(guarded, policy)
    assert replay_in_lockstep(STALE_SETTLE, world, World(policy, ONE), same_story=without_refusal_reasons) is None
    assert world.trace[-1].sentence.endswith("the ledger refuses")
    # The retry ran on a fresh row, not on the re-picked one.
    assert world.ledger._records()["job1/r1"].job.id != world.ledger._records()["job1/r2"].job.id


@pytest.mark.postgres
def test_the_guarded_row_holds_within_the_bound_and_reaches_every_danger(postgres_url, pgqueuer_module):
    """pgqueuer with fence.guard: no invariant broken, no lockstep difference, every danger reached (1 unit, 1 job)."""
    guarded_row_holds("pgqueuer+guard", postgres_url, GUARDED_EXAMPLES, failures=False)


@pytest.mark.slow
@pytest.mark.postgres
def test_the_guarded_row_holds_at_both_configurations(postgres_url, pgqueuer_module):
    """The guarded row at fence verdicts' configurations (1x1 and 2x2), 150 examples each: nothing found, every danger reached."""
    found = judge_target(TARGETS["pgqueuer+guard"], postgres_url, run_settings=profile_settings(150, 30), explore=False)
    assert all(cell.verdict is Verdict.NOT_FOUND for cell in found.report.cells.values())
    assert found.lockstep_findings == []


@pytest.mark.postgres
def test_the_guard_in_a_task_run_by_pgqueuers_own_queue_manager(postgres_url, pgqueuer_module):
    """A stale job re-picked by a real QueueManager is recovered (its attempt abandoned, a fresh row run), and the stale commit is refused."""
    import uuid

    import psycopg
    from pgqueuer import QueueManager, Queries
    from pgqueuer.domain.types import QueueExecutionMode
    from pgqueuer.queries import EntrypointExecutionParameter

    from fence.guard import Guard, Refused

    targets = pgqueuer_module
    guard = Guard.open(postgres_url, namespace="fence_guard_test_pgqueuer")
    guard.destination.store.reset()
    ran: list[tuple[int, bool]] = []

    async def story():
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as connection:
            queries = Queries.from_psycopg_connection(connection)
            await targets.ensure_schema(queries)
            names = queries.qbe.settings.qualified
            await queries.driver.execute(f"TRUNCATE {names.queue_table}, {names.queue_table_log} RESTART IDENTITY")
            await targets.enqueue_keyed(queries, "send_ticket", b"hello", "t1")
            # A worker takes the job, starts the task, and stalls: its heartbeat goes quiet.
            (stale_job,) = await queries.dequeue(
                batch_size=1, entrypoints={"send_ticket": EntrypointExecutionParameter(concurrency_limit=0)},
                queue_manager_id=uuid.uuid4(), global_concurrency_limit=None,
                heartbeat_timeout=timedelta(seconds=30))
            stale = guard.attempt("t1", targets.attempt_id(stale_job, 1)).__enter__()
            await queries.driver.execute(f"UPDATE {names.queue_table} SET heartbeat = heartbeat - interval '10 minutes'")

            # pgqueuer's own queue manager, on a connection of its own, runs the guarded entrypoint. The
            # task's recovery talks to pgqueuer on the first connection: with psycopg, pgqueuer's LISTEN
            # holds the manager's connection for up to a second at a time.
            async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as worker_connection:
                manager = QueueManager(Queries.from_psycopg_connection(worker_connection))

                @manager.entrypoint("send_ticket")
                async def send_ticket(job) -> None:
                    attempt = await targets.guarded_attempt(queries, guard, job)
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
        with pytest.raises(Refused) as refused:
            stale.commit("hello")  # the stalled task wakes up and writes
        assert refused.value.result is CommitResult.ABANDONED
        effects = guard.destination.effects()
        assert [(e.key, e.attempt_id) for e in effects] == [("t1", f"t1@{stale_job.id + 1}.1")]
    finally:
        guard.close()


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
def test_guarded_a_stalled_workers_failure_after_the_recovery_repicked_its_row_is_refused_like_the_model(guarded):
    """pgqueuer's own log_jobs would move the re-picked row (keyed by job id); the guard's wrapper refuses, as the model."""
    policy = POLICIES["abandon-fenced"]
    steps = [Reserve("job1"), Tick(2), Scan(1, "job1/r1"), Fail("job1#1")]
    assert replay_in_lockstep(steps, _on(guarded, policy, ONE_FAILING), World(policy, ONE_FAILING),
                              same_story=without_refusal_reasons) is None


@pytest.mark.postgres
def test_as_shipped_a_failed_job_is_deleted_and_never_run_again(shipped):
    """pgqueuer's default on_failure='delete': the row goes with 'exception', where the model holds it for the janitor."""
    naive = POLICIES["naive"]
    difference = replay_in_lockstep([Reserve("job1"), Fail("job1#1")], _on(shipped, naive, ONE_FAILING),
                                    World(naive, ONE_FAILING), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "fail: the step's story"
    assert "the world under test: 'job1#1 fails before its effect and reports it: job1/r1 is unused'" in difference.detail
    # The observer, on fence's facts: nothing ever settles the failed job, and it never has its effect.
    broken = replay_actions(naive, ONE_FAILING, [Reserve("job1"), Fail("job1#1")], BY_NAME["everything_settles"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None
    assert broken.message == "job1/r1 stayed outcome_unknown after the drain, though no attempt was left running"


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
            await targets.ensure_schema(queries)
            names = queries.qbe.settings.qualified
            await queries.driver.execute(f"TRUNCATE {names.queue_table}, {names.queue_table_log} RESTART IDENTITY")
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


# -- a missing library, and the command line ----------------------------------------------
def test_a_missing_pgqueuer_is_one_line_naming_the_extra(monkeypatch):
    """Without pgqueuer, opening its target is BadInput naming the extra to install, before any server is reached."""
    monkeypatch.setitem(sys.modules, "pgqueuer", None)  # import pgqueuer now raises ImportError
    monkeypatch.delitem(sys.modules, "fence.targets.pgqueuer", raising=False)
    for row in ("pgqueuer", "pgqueuer+guard"):
        with pytest.raises(BadInput) as missing:
            TARGETS[row].open("postgresql://fence@127.0.0.1:1/fence")
        message = str(missing.value)
        assert "\n" not in message and message.startswith(f"target {row}:")
        assert message.endswith("install it with pip install 'fence[pgqueuer]'")


@pytest.mark.slow
@pytest.mark.postgres
def test_cli_targets_prints_the_pgqueuer_rows_and_replays_what_it_found(postgres_url, pgqueuer_module, tmp_path):
    """fence targets --row pgqueuer --row pgqueuer+guard: shipped violated and replayed; the guarded row proved but
    on 4, which pgqueuer's failure path breaks (issue 25: log_jobs(failed) checks only the job id, so a stalled
    worker's failure parks the row the recovery holds), so the exit status is 1."""
    result = subprocess.run(
        [sys.executable, "-m", "fence.cli.main", "targets", "--profile", "quick", "--postgres", postgres_url,
         "--row", "pgqueuer", "--row", "pgqueuer+guard"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:3]}
    guarded = [cell.split("(")[0] for cell in rows["pgqueuer+guard"]]
    assert rows["pgqueuer"][0].startswith("violated")
    assert guarded == ["proved", "proved", "proved", "violated", "proved", "proved", "proved"], rows
    assert "DID NOT REPLAY" not in result.stdout and "replayed on a fresh database: job1 was written 2 times" in result.stdout
