"""DBOS on PostgreSQL, what only it shows: claims and ownership tokens, ERROR, its own queue worker.

What every shipped target shows (the machines' duplicate and its replay by
fence replay, the stale worker's completion refused as the model refuses it,
the shipped failure path freeing the job at once, the guarded row holding,
the explorer's walks) is in tests/test_targets_rows.py, run on DBOS as on
every system. Here: as shipped (a dead executor's pending workflows
re-enqueued by DBOS's own recovery, the next claim re-running every step not
checkpointed) every claim writes an ownership token (``owner_xid``), which DBOS
checks at the step checkpoint and at the outcome, yet the ticket is written
twice; a worker whose step raised is ERROR at once, for good. With fence.guard
on the step and ``recover_dead_executor`` instead of DBOS's recovery, the
failure is the guard's until the settle, and the guard works in a workflow run
by DBOS's own queue worker.

Every test needs PostgreSQL (the session's cluster, see conftest.py) and dbos
(the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fence.model.destination import CommitResult
from fence.base.errors import BadInput
from fence.model.invariants import BY_NAME
from fence.search.lockstep import replay_in_lockstep, without_refusal_reasons
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES, Decision
from fence.model.world import Deliver, Fail, ModelConfig, Probe, Reserve, SendCommit, Settle, Start, World
from fence.targets.protocol import IllegalMove, Move
from tests.target_explorer_checks import STALE_CONFIRM
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.postgres

ONE = ModelConfig(capacity=1, jobs=1)
ONE_FAILING = ModelConfig(capacity=1, jobs=1, failures=True)
NAIVE, GUARDED = POLICIES["naive"], POLICIES["abandon-fenced"]


dbos_module, shipped, guarded = system_fixtures("dbos")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


@pytest.fixture(scope="module")
def client(postgres_url, dbos_module):
    """DBOS's own client on the targets' system database: how these tests read DBOS's answers."""
    from dbos import DBOSClient

    opened = DBOSClient(system_database_url=postgres_url, application_name="fence")
    yield opened
    opened.destroy()


def _row(client, workflow_id: str) -> dict:
    """A workflow's status as DBOS's client reports it."""
    status = client.retrieve_workflow(workflow_id).get_status()
    return {"status": status.status, "executor_id": status.executor_id, "recovery_attempts": status.recovery_attempts}


# -- the protocol, read back from DBOS's tables --------------------------------------------------
def test_a_claim_is_dboss_own_and_expires_only_with_its_executor(shipped, client):
    """A reserve is a claim under an executor and a token of its own; the lease runs out at the model's tick, not before."""
    ledger = _on(shipped, NAIVE).ledger
    first = ledger.reserve("job1", "job1#1", 0, 2)
    row = _row(client, "job1")
    assert first.state.value == "reserved"
    assert (row["status"], row["executor_id"], row["recovery_attempts"]) == ("PENDING", "executor-job1/r1", 1)
    assert ledger.expired(1) == [] and [r.reservation_id for r in ledger.expired(2)] == ["job1/r1"]
    # DBOS's recovery of the dead executor puts the same workflow back; the next claim takes it again.
    assert ledger.apply("job1/r1", Move.EXPIRE_AND_RELEASE).state.value == "unused"
    assert _row(client, "job1")["status"] == "ENQUEUED"
    assert ledger.reserve("job1", "job1#2", 2, 2).state.value == "reserved"
    assert (_row(client, "job1")["executor_id"], _row(client, "job1")["recovery_attempts"]) == ("executor-job1/r2", 2)
    # The retry's executor is alive: nothing more to recover, and a second recovery of the dead one touches nothing.
    assert ledger.expired(3) == []
    with pytest.raises(IllegalMove, match="not dead with it PENDING"):
        ledger.apply("job1/r1", Move.EXPIRE_AND_RELEASE)


def test_a_stale_workers_completion_is_refused_but_the_ticket_is_written_twice_all_the_same(shipped):
    """DBOS's ownership token refuses the first worker's checkpoint after a retry claimed (tests/test_targets_rows.py:
    as the model does), but the stale worker's effect has landed: once the retry writes too, the ticket is written
    twice. The guard is what stops that."""
    retry_commits = [Start("job1#2"), Deliver("register", "job1#2"), SendCommit("job1#2"), Deliver("commit", "job1#2")]
    broken = replay_actions(NAIVE, ONE, STALE_CONFIRM + retry_commits, BY_NAME["no_duplicate_writes"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None and broken.message == "job1 was written 2 times"


def test_as_shipped_a_failed_workflow_is_error_for_good(shipped, client):
    """DBOS's worker marks a workflow whose step raised ERROR at once, the step's error checkpointed
    (tests/test_targets_rows.py: where the model holds it for the janitor)."""
    world = _on(shipped, NAIVE, ONE_FAILING)
    for action in [Reserve("job1"), Fail("job1#1")]:
        world.apply(action)
    assert _row(client, "job1")["status"] == "ERROR"
    (step,) = client.list_workflow_steps("job1")
    assert step["function_id"] == 1 and isinstance(step["error"], RuntimeError)  # a rerun would replay the failure


# -- with the guard -------------------------------------------------------------------------------


FAILURE_AFTER_EFFECT = [
    Reserve("job1"), Start("job1#1"), SendCommit("job1#1"), Deliver("commit", "job1#1"), Fail("job1#1"),
    Probe(0, "job1/r1"), Settle(0, "job1/r1"),
]


def test_guarded_a_failure_goes_to_the_guard_and_the_recovery_settles_it_like_the_model(guarded, client):
    """Guarded, DBOS's ERROR is never written: the failure is the guard's until the settle completes the workflow."""
    world, mirror = _on(guarded, GUARDED, ONE_FAILING), World(GUARDED, ONE_FAILING)
    assert replay_in_lockstep(FAILURE_AFTER_EFFECT[:5], world, mirror, same_story=without_refusal_reasons) is None
    assert world.trace[-1].sentence == "job1#1 fails after its effect landed and reports it: job1/r1 is outcome_unknown"
    assert _row(client, "job1")["status"] == "PENDING" and world.reached["failure_after_effect"] == 1
    assert replay_in_lockstep(FAILURE_AFTER_EFFECT[5:], world, mirror, same_story=without_refusal_reasons) is None
    assert world.ledger.get("job1/r1").state.value == "confirmed_existing" and _row(client, "job1")["status"] == "SUCCESS"
    # A second failure report of the same worker has nothing of its own left to act on.
    with pytest.raises(IllegalMove, match="guard's wrapper settles only a job its worker still holds"):
        world.ledger.fail("job1", "job1#1")


# -- inside DBOS's own worker ---------------------------------------------------------------------
WORKER = r'''
import sys, threading
from dbos import DBOS, DBOSClient, SetWorkflowID
from fence.guard import Guard, Refused
from fence.targets.dbos_postgres import recover_dead_executor, running_attempt_id

url, guard_url, schema = sys.argv[1:4]
guard = Guard.open(guard_url)
stalled, wake, runs, refused = threading.Event(), threading.Event(), [], []

@DBOS.step()
def write_ticket(key, body):
    if body == "raise":
        raise RuntimeError("the step raised")
    run = running_attempt_id()
    runs.append(run)
    with guard.attempt(key, run) as attempt:
        if len(runs) == 1:
            stalled.set()
            wake.wait(60)  # the first run stalls here, its effect not yet written
        try:
            attempt.commit(body)
        except Refused as error:
            refused.append((run, error.result.value))
            raise

@DBOS.workflow()
def send_ticket(key, body):
    write_ticket(key, body)
    return "sent"

DBOS(config={"name": "tickets", "system_database_url": url, "application_version": "v1",
             "executor_id": "executor-a", "dbos_system_schema": schema, "log_level": "ERROR"})
DBOS.launch()
client = DBOSClient(system_database_url=url, application_name="tickets", dbos_system_schema=schema)
try:
    queue = DBOS.register_queue("tickets", polling_interval_sec=0.05)
    with SetWorkflowID("t1"):
        handle = queue.enqueue(send_ticket, "t1", "hello")
    assert stalled.wait(60), "DBOS's worker never started the workflow"
    # executor-a is declared dead while its run stalls: the guarded recovery runs instead of DBOS's.
    print("recovered", recover_dead_executor(client, guard, "executor-a", app_version="v1"))
    print("result", handle.get_result(polling_interval_sec=0.05))  # DBOS's queue worker claimed it again and ran it afresh
    wake.set()
    stale = handle.get_status()
    while len(refused) < 1:
        threading.Event().wait(0.05)
    print("runs", runs, "refused", refused)
    print("effects", [(e.key, e.attempt_id) for e in guard.destination.effects()])
    print("status", stale.status, stale.recovery_attempts)
    with SetWorkflowID("t2"):
        failing = queue.enqueue(send_ticket, "t2", "raise")
    try:
        failing.get_result(polling_interval_sec=0.05)
    except RuntimeError:
        pass
    steps = [(s["function_id"], s["error"] is not None) for s in client.list_workflow_steps("t2")]
    print("failed", failing.get_status().status, steps)
finally:
    wake.set()
    DBOS.destroy(destroy_registry=True)
    client.destroy()
    guard.close()
'''


def test_the_guard_in_a_workflow_run_by_dboss_own_worker(postgres_url, dbos_module, tmp_path):
    """A stalled run abandoned by recover_dead_executor, the workflow run afresh by DBOS's queue worker, the stale commit refused.

    In a process of its own (DBOS is one instance per process): a launched DBOS
    whose queue worker claims the workflow; its step registers its attempt and
    stalls; the executor is declared dead and the guarded recovery abandons
    that attempt and re-enqueues the workflow; DBOS's worker claims it again and
    the fresh run commits; the stalled run wakes, its commit is refused, and DBOS
    parks it (its checkpoint is refused too). A step that raises, unguarded,
    leaves the workflow ERROR with the step's error checkpointed: what the
    shipped row's ``fail`` writes.
    """
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    import psycopg

    schema = "dbos_worker_test"
    with psycopg.connect(postgres_url, autocommit=True) as connection:  # DBOS launches on a schema of its own, new
        connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    result = subprocess.run([sys.executable, str(script), postgres_url, f"sqlite://{tmp_path}/guard.db", schema],
                            capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines["recovered"] == f"[('t1', {Decision.UNUSED!r})]"
    assert lines["result"] == "sent"
    claim = r"t1@[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # the workflow and its claim's token
    runs = re.fullmatch(rf"\['({claim})', '({claim})'\] refused \[\('({claim})', '(\w+)'\)\]", lines["runs"])
    assert runs is not None, lines["runs"]
    stale, fresh, refused, why = runs.groups()
    assert stale != fresh and refused == stale and why == CommitResult.ABANDONED.value
    assert lines["effects"] == f"[('t1', '{fresh}')]"
    assert lines["status"] == "SUCCESS 2"
    assert lines["failed"] == "ERROR [(1, True)]"


def test_outside_a_workflow_the_running_attempt_is_one_line_saying_where_to_call_it(dbos_module):
    """running_attempt_id names a run from DBOS's context: outside a workflow DBOS runs there is none, said in words."""
    with pytest.raises(BadInput, match="call it in a step or workflow DBOS runs"):
        dbos_module.running_attempt_id()


@pytest.mark.parametrize("move", [Move.CONFIRM, Move.SETTLE_EXISTING])
def test_unknown_moves_are_refused_in_words(guarded, move):
    """An owner's move given to apply, or a settle of a workflow nobody holds, is refused naming the reservation."""
    ledger = _on(guarded, GUARDED).ledger
    ledger.reserve("job1", "job1#1", 0, 2)
    ledger.confirm("job1", "job1#1")
    with pytest.raises(IllegalMove, match="job1/r1|owner's move"):
        ledger.apply("job1/r1", move)
