"""procrastinate, what only it shows: its stalled-jobs recipe, its failure path and its own worker.

What every shipped target shows (the machines' duplicate and its replay, the
stale worker's finish_job accepted on the retry's row, the shipped failure
path freeing the job at once, the guarded row holding, the explorer's walks)
is in tests/test_targets_rows.py, run on procrastinate as on every system.
Here: the shipped recipe's retry_job on the same row (why the guard retries on
a fresh row), its failure handler finishing the retry's row, the guard in a
task procrastinate's own worker runs, and the command line on PostgreSQL.

Every test here needs PostgreSQL (the session's cluster, see conftest.py) and
procrastinate (the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from fence.model.invariants import BY_NAME
from fence.search.lockstep import replay_in_lockstep, without_refusal_reasons
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES, Decision
from fence.model.world import Fail, ModelConfig, Reserve, Retry, Scan, Tick, World
from fence.targets import TARGETS
from tests.target_explorer_checks import STALE_SETTLE, the_stale_commit_is_refused
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.postgres

ONE = ModelConfig(capacity=1, jobs=1)
FAILING = ModelConfig(capacity=1, jobs=1, failures=True)
"""One unit, one job, workers that may fail: procrastinate's own failure path runs (``fail``)."""


procrastinate_module, shipped, guarded = system_fixtures("procrastinate")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


# -- as shipped: retry_job on the same row --------------------------------------------------------
def test_the_shipped_retry_job_lets_a_stale_settle_give_back_the_retrys_row(shipped):
    """Why the guard retries on a fresh row: with retry_job on the same row, even abandon-fenced's janitor frees the retry's unit."""
    policy = POLICIES["abandon-fenced"]
    difference = replay_in_lockstep(STALE_SETTLE, _on(shipped, policy), World(policy, ONE), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "settle: the step's story"
    broken = replay_actions(policy, ONE, STALE_SETTLE, BY_NAME["capacity_conserved"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None and "freed its unit again" in broken.message


# -- the worker's failure path, as shipped: procrastinate's finish_job(failed) --------------------
STALE_FAILURE = [Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Retry("job1"), Fail("job1#1")]
"""The shipped recipe gave the row to a retry (retry_job); the first worker's task then raises."""


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

    from fence.guard import Guard

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
        the_stale_commit_is_refused(stale, guard, f"t1@{stale_job.id + 1}")
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


