"""procrastinate, the first target: fence's machines on the real library and a real PostgreSQL.

The shipped stalled-jobs recipe behaves like fence's naive policy: the machines
find its duplicate write, and the run they found replays on a fresh database.
Where procrastinate moves differently from the naive model (a stale worker's
finish_job finishes the retry's row), the lockstep reports it. With fence.guard
on the task and the guarded recipe, the machines find nothing within the
stated bound and reach every danger, and the guard works in a task run by
procrastinate's own worker.

Every test here needs PostgreSQL (the session's cluster, see conftest.py) and
procrastinate (the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from fence.search import counterexample
from fence.model.destination import CommitResult
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

pytestmark = pytest.mark.postgres

PINNED_NAIVE = sorted((Path(__file__).parent / "pinned").glob("naive__*.json"))
ONE = ModelConfig(capacity=1, jobs=1)
FAILING = ModelConfig(capacity=1, jobs=1, failures=True)
"""One unit, one job, workers that may fail: procrastinate's own failure path runs (``fail``)."""
GUARDED_EXAMPLES = 40
"""Examples of the guarded row in every run: enough to reach every danger (the test checks it)."""


procrastinate_module, shipped, guarded = system_fixtures("procrastinate")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


# -- as shipped: the naive policy, on the real system ---------------------------------------
@pytest.mark.parametrize("path", PINNED_NAIVE, ids=[p.stem for p in PINNED_NAIVE])
def test_the_models_naive_counterexamples_replay_on_procrastinate(path, shipped):
    """Each pinned counterexample of the naive model, replayed on procrastinate's tables, breaks the same invariant."""
    policy, config, invariant, actions, drains = counterexample.load(path)
    chosen = [action for action, drain in zip(actions, drains) if not drain]
    replayed = replay_actions(policy, config, chosen, BY_NAME[invariant], shipped.destination_factory, shipped.ledger_factory)
    assert replayed is not None, f"{path.stem} did not break {invariant} on procrastinate"
    assert replayed.world.observer.findings.first(invariant) or BY_NAME[invariant].check(replayed.world)


def test_the_machines_find_a_duplicate_on_procrastinate_and_it_replays_on_a_fresh_database(shipped):
    """The machines on procrastinate find a job written twice; its run, replayed on emptied tables, writes it twice again."""
    kinds = machines_duplicate_replays(shipped)
    assert set(kinds) >= {"scan", "retry"}


# The story of a worker that outlives its lease, told as the world's actions.
STALE_FINISH = [
    Reserve("job1"), Tick(2), Start("job1#1"), Deliver("register", "job1#1"), SendCommit("job1#1"),
    Scan(0, "job1/r1"), Retry("job1"), Deliver("commit", "job1#1"), Deliver("ack", "job1#1"),
    Confirm("job1#1"),
]


def test_a_stale_worker_finishes_the_retrys_row_where_the_model_refuses(shipped):
    """Lockstep finding: procrastinate lets the first worker's finish_job finish the row the retry holds; the naive model refuses it."""
    naive = POLICIES["naive"]
    difference = replay_in_lockstep(STALE_FINISH, _on(shipped, naive), World(naive, ONE), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "confirm: the step's story"
    assert "the ledger refuses" in difference.detail and "job1#1 confirms: job1/r2 is confirmed" in difference.detail
    # and the observer, judging fence's facts, calls it what it is
    broken = replay_actions(naive, ONE, STALE_FINISH, BY_NAME["stale_attempt_cannot_change_newer"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None and broken.message == "job1#1's confirm changed job1/r2, which belongs to job1#2"


# -- with the guard -------------------------------------------------------------------------
def test_the_guarded_recipe_refuses_a_stale_settle_like_the_model(guarded):
    """With the guard's recovery (a fresh row per retry), a janitor's stale settle meets a finished row and is refused, as in the model."""
    policy = POLICIES["abandon-fenced"]
    world = _on(guarded, policy)
    assert replay_in_lockstep(STALE_SETTLE, world, World(policy, ONE), same_story=without_refusal_reasons) is None
    assert world.trace[-1].sentence.endswith("the ledger refuses")


def test_the_shipped_retry_job_lets_a_stale_settle_give_back_the_retrys_row(shipped):
    """Why the guard retries on a fresh row: with retry_job on the same row, even abandon-fenced's janitor frees the retry's unit."""
    policy = POLICIES["abandon-fenced"]
    difference = replay_in_lockstep(STALE_SETTLE, _on(shipped, policy), World(policy, ONE), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "settle: the step's story"
    broken = replay_actions(policy, ONE, STALE_SETTLE, BY_NAME["capacity_conserved"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None and "freed its unit again" in broken.message


def test_the_guarded_row_holds_within_the_bound_and_reaches_every_danger(postgres_url, procrastinate_module):
    """procrastinate with fence.guard, workers that never fail: no invariant broken, no lockstep difference, every danger
    reached (1 unit, 1 job). With failures it is violated: the tests after the next."""
    guarded_row_holds("procrastinate+guard", postgres_url, GUARDED_EXAMPLES, failures=False)


@pytest.mark.slow
def test_the_guarded_row_holds_at_both_configurations(postgres_url, procrastinate_module):
    """The guarded row at fence verdicts' configurations (1x1 and 2x2), 150 examples each, workers that never fail:
    nothing found, every danger reached."""
    found = judge_target(TARGETS["procrastinate+guard"], postgres_url,
                         run_settings=profile_settings(150, 30), explore=False, failures=False)
    assert all(cell.verdict is Verdict.NOT_FOUND for cell in found.report.cells.values())
    assert found.lockstep_findings == []


# -- the worker's failure path: procrastinate's own, on both rows ------------------------------
FAIL_WHILE_HELD = [Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Fail("job1#1")]
"""The guarded recovery holds a stalled job (its worker unregistered); that worker's task then raises."""
STALE_FAILURE = [Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Retry("job1"), Fail("job1#1")]
"""The shipped recipe gave the row to a retry (retry_job); the first worker's task then raises."""


def test_guarded_a_failure_goes_to_the_guard_and_is_refused_once_the_recovery_holds_the_job(guarded):
    """The guarded recipe's failure path (issue 25): the guard's wrapper, not finish_job(failed), takes the report,
    so a stalled worker's failure no longer finishes the row the recovery took from it (procrastinate's own handler
    did: it checks no worker). Refused, as the model refuses it."""
    policy = POLICIES["abandon-fenced"]
    assert replay_actions(policy, FAILING, FAIL_WHILE_HELD, BY_NAME["capacity_conserved"],
                          guarded.destination_factory, guarded.ledger_factory) is None
    same = replay_in_lockstep(FAIL_WHILE_HELD, _on(guarded, policy, FAILING), World(policy, FAILING),
                              same_story=without_refusal_reasons)
    assert same is None


def test_guarded_a_caught_failure_is_outcome_unknown_until_the_janitor_settles_it_as_the_model(guarded):
    """Caught by the guard's wrapper, the failed attempt holds its unit until the settle, exactly as in the model."""
    policy = POLICIES["abandon-fenced"]
    steps = [Reserve("job1"), Fail("job1#1"), Probe(0, "job1/r1"), Settle(0, "job1/r1"), Retry("job1")]
    assert replay_in_lockstep(steps, _on(guarded, policy, FAILING), World(policy, FAILING),
                              same_story=without_refusal_reasons) is None


def test_procrastinates_own_failure_path_frees_the_job_at_once_where_the_model_holds_it(shipped):
    """The lockstep's finding on the shipped row: finish_job(failed) leaves the fetch unused at once; the model holds
    it as outcome_unknown for the recovery to settle."""
    policy = POLICIES["naive"]
    difference = replay_in_lockstep([Reserve("job1"), Fail("job1#1")], _on(shipped, policy, FAILING),
                                    World(policy, FAILING), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "fail: the step's story"
    assert "job1/r1 is unused" in difference.detail and "job1/r1 is outcome_unknown" in difference.detail


def test_a_stale_workers_failure_finishes_the_retrys_row_as_shipped(shipped):
    """As shipped, retry_job gives the same row to the retry; the first worker's failure then finishes it (5 broken)."""
    policy = POLICIES["naive"]
    broken = replay_actions(policy, FAILING, STALE_FAILURE, BY_NAME["stale_attempt_cannot_change_newer"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None and broken.message == "job1#1's fail changed job1/r2, which belongs to job1#2"
    assert replay_actions(policy, FAILING, STALE_FAILURE, BY_NAME["stale_attempt_cannot_change_newer"]) is None


def test_the_guard_in_a_task_run_by_procrastinates_own_worker(postgres_url, procrastinate_module):
    """A stalled attempt is abandoned by the guarded recipe, the fresh row runs on a real worker, the stale commit is refused."""
    import procrastinate

    from fence.guard import Guard, Refused

    targets = procrastinate_module
    guard = Guard.open(postgres_url, namespace="fence_guard_test")
    guard.destination.store.reset()
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=postgres_url))

    @app.task(name="send_ticket", pass_context=True)
    def send_ticket(context, key: str, body: str) -> None:
        with guard.attempt(key, targets.attempt_id(context.job)) as attempt:
            attempt.commit(body)

    async def story():
        async with app.open_async():
            await targets.ensure_schema(app)
            await app.connector.execute_query_async(query=f"TRUNCATE {targets.TABLES} RESTART IDENTITY CASCADE")
            job_manager = app.job_manager
            await send_ticket.configure(queue="tickets", lock="t1", queueing_lock="t1").defer_async(key="t1", body="hello")
            # A worker takes the job, starts the task, and stalls: its heartbeat goes quiet.
            stalled_worker = await job_manager.register_worker()
            stale_job = await job_manager.fetch_job(queues=["tickets"], worker_id=stalled_worker)
            stale = guard.attempt("t1", targets.attempt_id(stale_job)).__enter__()
            await app.connector.execute_query_async(
                query="UPDATE procrastinate_workers SET last_heartbeat = last_heartbeat - interval '10 minutes'")
            recovered = await targets.recover_stalled_jobs(app, guard, seconds_since_heartbeat=30)
            # procrastinate's own worker runs the fresh row.
            await app.run_worker_async(queues=["tickets"], wait=False, install_signal_handlers=False)
            rows = await job_manager.list_jobs_async()
            return stale, stale_job, recovered, rows

    try:
        stale, stale_job, recovered, rows = asyncio.run(story())
        assert [(job.id, decision) for job, decision in recovered] == [(stale_job.id, Decision.UNUSED)]
        assert [(row.id, row.status) for row in rows] == [(stale_job.id, "failed"), (stale_job.id + 1, "succeeded")]
        with pytest.raises(Refused) as refused:
            stale.commit("hello")  # the stalled task wakes up and writes
        assert refused.value.result is CommitResult.ABANDONED
        effects = guard.destination.effects()
        assert [(e.key, e.attempt_id) for e in effects] == [("t1", f"t1@{stale_job.id + 1}")]
    finally:
        guard.close()


# -- the command line -------------------------------------------------------------------------
FENCE = [sys.executable, "-m", "fence.cli.main"]


def test_cli_targets_on_an_unreachable_postgres_is_one_line_and_exit_2(procrastinate_module):
    """fence targets with a PostgreSQL URL nobody listens on says so in one line and exits 2."""
    result = subprocess.run([*FENCE, "targets", "--profile", "quick", "--postgres", "postgresql://fence@127.0.0.1:1/fence"],
                            capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(("PostgreSQL:", "["))]  # not progress
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("fence: ") and "cannot reach PostgreSQL" in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("row", ["procrastinate", "pgqueuer"])
def test_a_session_that_fails_to_open_closes_the_storage_opened_before_it(row, postgres_url, procrastinate_module, monkeypatch):
    """A target storage opens fence's destination tables, then its job system's session; if the
    session fails, the tables' connection is closed before the error goes on (not leaked)."""
    import importlib

    from fence.backends import ModelStorage

    module, _, storage_class = TARGETS[row].storage.partition(":")
    closed = []
    real_close = ModelStorage.close
    monkeypatch.setattr(ModelStorage, "close", lambda self: (closed.append(self.store), real_close(self)))

    def no_session(*_args, **_kwargs):
        raise RuntimeError("the job system refused the session")

    monkeypatch.setattr(getattr(importlib.import_module(module), storage_class), "SESSION", no_session)
    with pytest.raises(RuntimeError, match="refused the session"):
        TARGETS[row].open(postgres_url)
    assert len(closed) == 1 and closed[0] is not None


@pytest.mark.slow
def test_cli_targets_prints_both_rows_and_replays_what_it_found(postgres_url, procrastinate_module, tmp_path):
    """fence targets --profile quick: the shipped row violated with replayed counterexamples; the guarded row proved on
    1, 2, 3, 5, 7 and violated on 4 and 6 by procrastinate's failure path (issue 25), so the exit status is 1."""
    report = tmp_path / "targets.txt"
    result = subprocess.run([*FENCE, "targets", "--profile", "quick", "--postgres", postgres_url, "--report", str(report)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:3]}
    guarded = [cell.split("(")[0] for cell in rows["procrastinate+guard"]]
    assert rows["procrastinate"][0].startswith("violated")
    assert guarded == ["proved", "proved", "proved", "violated", "proved", "violated", "proved"], rows
    assert "explorer: violated within 1 unit(s) x 1 job(s) x 2 attempt(s), lease 2, horizon 2" in result.stdout
    assert "DID NOT REPLAY" not in result.stdout and "replayed on a fresh database: job1 was written 2 times" in result.stdout
    assert report.read_text().startswith("# command: fence targets")
