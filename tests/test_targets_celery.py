"""celery with kombu's Redis transport, the second target: fence's machines on the real library and a real Redis.

As shipped (acks_late, kombu's restore_visible with visibility_timeout) it is
fence's naive policy: the machines find its duplicate write, and the run they
found replays on an emptied Redis database. Where it moves differently from
the naive model (a restored message keeps its delivery tag, so a stale
worker's ack acks the retry's delivery), the lockstep reports it. With
fence.guard on the task and recover_expired instead of restore_visible, the
machines find nothing within the stated bound and reach every danger, and the
guard works in a task run by a real celery worker. A worker's failure (``fail``)
is what that worker does with an acks_late task that raised: the message is
acked and gone (tests/test_targets_explorer_celery.py has what the explorer
finds with failures on).

Every test here needs Redis (the session's server, see conftest.py) and celery
(the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

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

pytestmark = pytest.mark.redis

ONE = ModelConfig(capacity=1, jobs=1)
GUARDED_EXAMPLES = 40
"""Examples of the guarded row in every run: enough to reach every danger (the test checks it)."""
NAIVE = POLICIES["naive"]
REDIS_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "redis.sh"


celery_module, shipped, guarded = system_fixtures("celery")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


# -- as shipped: the naive policy, on the real system ---------------------------------------
def test_the_machines_find_a_duplicate_on_celery_and_it_replays_on_a_fresh_database(shipped):
    """The machines on celery find a job written twice; its run, replayed on an emptied Redis, writes it twice again."""
    kinds = machines_duplicate_replays(shipped)
    # kombu's restore_visible gave the message back, and the second attempt took it again
    assert set(kinds) >= {"scan", "retry"}


# A worker outlives its visibility timeout: restore_visible gives its message back, the retry
# takes it again, and the first worker's commit lands and it acks.
STALE_ACK = [
    Reserve("job1"), Tick(2), Start("job1#1"), Deliver("register", "job1#1"), SendCommit("job1#1"),
    Scan(0, "job1/r1"), Retry("job1"), Deliver("commit", "job1#1"), Deliver("ack", "job1#1"),
    Confirm("job1#1"),
]


def test_a_stale_ack_acks_the_retrys_delivery_where_the_model_refuses(shipped, celery_module):
    """Lockstep finding: the restored message keeps its delivery tag, so the first worker's ack acks the retry's delivery."""
    world = _on(shipped, NAIVE)
    difference = replay_in_lockstep(STALE_ACK, world, World(NAIVE, ONE), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "confirm: the step's story"
    assert "the ledger refuses" in difference.detail and "job1#1 confirms: job1/r2 is confirmed" in difference.detail
    assert world.ledger.delivery_of("job1/r1") == world.ledger.delivery_of("job1/r2")  # same tag, same task id
    # Then the retry's worker dies: nothing is left for restore_visible to give back, ever.
    for action in [Start("job1#2"), Tick(2)]:
        world.apply(action)
    session = shipped.session
    janitor = session.channel(visibility_timeout=celery_module.visible_after(ONE.lease))
    janitor.qos.restore_visible(interval=1)
    assert session.client.hlen(celery_module.UNACKED) == 0 and session.client.llen("job1") == 0
    # and the observer, judging fence's facts, calls it what it is
    broken = replay_actions(NAIVE, ONE, STALE_ACK, BY_NAME["stale_attempt_cannot_change_newer"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None and broken.message == "job1#1's confirm changed job1/r2, which belongs to job1#2"


def test_an_ack_of_a_restored_message_not_yet_taken_again_changes_nothing(shipped):
    """Before the retry takes it, a stale ack removes nothing (kombu says nothing): refused like the model, and the message runs again."""
    early = [Reserve("job1"), Tick(2), Start("job1#1"), SendCommit("job1#1"), Scan(0, "job1/r1"),
             Deliver("commit", "job1#1"), Deliver("ack", "job1#1"), Confirm("job1#1"), Retry("job1")]
    world = _on(shipped, NAIVE)
    assert replay_in_lockstep(early, world, World(NAIVE, ONE), same_story=without_refusal_reasons) is None
    confirm = world.trace[-2].sentence
    assert "the ledger refuses" in confirm and "removed nothing" in confirm
    assert world.ledger.current("job1").state.value == "reserved"  # the retry holds the same message


def test_one_restore_visible_restores_what_the_scans_restore(shipped, celery_module):
    """kombu's plain restore_visible() gives back every expired message; fence's scans page it one message at a time."""
    two = ModelConfig(capacity=2, jobs=2)
    world = _on(shipped, NAIVE, two)
    for action in [Reserve("job1"), Reserve("job2"), Tick(2)]:
        world.apply(action)
    assert [r.reservation_id for r in world.ledger.expired(world.now)] == ["job1/r1", "job2/r1"]
    janitor = shipped.session.channel(visibility_timeout=celery_module.visible_after(two.lease))
    janitor.qos.restore_visible()  # its defaults: up to 10 messages, and the first call scans
    world.ledger.read_again()
    assert [r.state.value for r in world.ledger.reservations()] == ["unused", "unused"]
    assert shipped.session.client.llen("job1") == shipped.session.client.llen("job2") == 1


# -- with the guard -------------------------------------------------------------------------
def test_the_guarded_recovery_refuses_a_stale_settle_like_the_model(guarded):
    """With a fresh message per retry, a janitor's stale basic_reject removes nothing and is refused, as in the model."""
    policy = POLICIES["abandon-fenced"]
    world = _on(guarded, policy)
    assert replay_in_lockstep(STALE_SETTLE, world, World(policy, ONE), same_story=without_refusal_reasons) is None
    assert world.trace[-1].sentence.endswith("the ledger refuses")
    (tag1, task1), (tag2, task2) = world.ledger.delivery_of("job1/r1"), world.ledger.delivery_of("job1/r2")
    assert tag1 != tag2 and task1 != task2


def test_the_guarded_row_holds_within_the_bound_and_reaches_every_danger(redis_url, celery_module):
    """celery with fence.guard: no invariant broken, no lockstep difference, every danger reached (1 unit, 1 job)."""
    guarded_row_holds("celery+guard", redis_url, GUARDED_EXAMPLES, failures=False)


@pytest.mark.slow
def test_the_guarded_row_holds_at_both_configurations(redis_url, celery_module):
    """The guarded row at fence verdicts' configurations (1x1 and 2x2), 150 examples each: nothing found, every danger reached."""
    found = judge_target(TARGETS["celery+guard"], redis_url, run_settings=profile_settings(150, 30), explore=False)
    assert all(cell.verdict is Verdict.NOT_FOUND for cell in found.report.cells.values())
    assert found.lockstep_findings == []


def test_the_guard_in_a_task_run_by_a_real_celery_worker(redis_url, celery_module, tmp_path):
    """A stalled attempt is abandoned by recover_expired, the fresh message runs on a celery worker, the stale commit is refused."""
    import celery
    import redis
    from celery.contrib.testing.worker import start_worker

    from fence.guard import Guard, Refused

    targets = celery_module
    guard = Guard.open(f"sqlite://{tmp_path}/guard.db")
    app = celery.Celery("fence_guard_test", broker=redis_url, set_as_current=False)
    app.conf.update(task_acks_late=True, broker_transport_options={"visibility_timeout": targets.NEVER_WITHIN_A_RUN})
    ran = threading.Event()

    @app.task(name="send_ticket", bind=True, acks_late=True, shared=False)
    def send_ticket(self, key: str, body: str) -> None:
        with guard.attempt(key, targets.attempt_id(key, self.request.id)) as attempt:
            attempt.commit(body)
        ran.set()

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        first = send_ticket.apply_async(args=["t1", "hello"], queue="tickets")
        # A worker takes the message with its ack pending, starts the task, and stalls.
        with app.connection_for_write() as connection:
            stalled = connection.channel()
            message = stalled.basic_get("tickets", no_ack=False)
            assert message.headers["id"] == first.id
            stale = guard.attempt("t1", targets.attempt_id("t1", first.id)).__enter__()
            # Ten minutes pass (its delivery time moves back), and the recovery runs instead of restore_visible.
            client.zincrby(targets.UNACKED_INDEX, -600, message.delivery_tag)
            recovered = targets.recover_expired(app, guard, lease_seconds=300)
            assert recovered == [(first.id, Decision.UNUSED)]
            # celery's own worker runs the fresh message.
            with start_worker(app, pool="solo", perform_ping_check=False, queues=["tickets"], shutdown_timeout=30):
                assert ran.wait(timeout=60), "the worker never ran the fresh message"
            with pytest.raises(Refused) as refused:
                stale.commit("hello")  # the stalled task wakes up and writes
            assert refused.value.result is CommitResult.ABANDONED
            message.ack()  # and its late ack touches nothing: the fresh message had a tag of its own
            stalled.do_restore = False
        effects = guard.destination.effects()
        assert len(effects) == 1 and effects[0].key == "t1" and effects[0].attempt_id != targets.attempt_id("t1", first.id)
        assert client.hlen(targets.UNACKED) == 0 and client.llen("tickets") == 0
    finally:
        client.close()
        guard.close()


# -- the worker's failure path: what celery's worker does with an acks_late task that raised ------
ONE_FAILING = ModelConfig(capacity=1, jobs=1, failures=True)


def test_as_shipped_a_failed_task_is_acked_and_never_run_again(shipped, celery_module):
    """celery acks a failed acks_late task (task_acks_on_failure_or_timeout): gone, where the model holds it for the janitor."""
    difference = replay_in_lockstep([Reserve("job1"), Fail("job1#1")], _on(shipped, NAIVE, ONE_FAILING),
                                    World(NAIVE, ONE_FAILING), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "fail: the step's story"
    assert "the world under test: 'job1#1 fails before its effect and reports it: job1/r1 is unused'" in difference.detail
    client = shipped.session.client
    assert client.hlen(celery_module.UNACKED) == 0 and client.llen("job1") == 0  # not requeued either
    broken = replay_actions(NAIVE, ONE_FAILING, [Reserve("job1"), Fail("job1#1")], BY_NAME["everything_settles"],
                            shipped.destination_factory, shipped.ledger_factory)
    assert broken is not None
    assert broken.message == "job1/r1 stayed outcome_unknown after the drain, though no attempt was left running"


def test_without_acks_on_failure_the_failed_task_is_rejected_and_gone_all_the_same(shipped, celery_module):
    """task_acks_on_failure_or_timeout=False: celery rejects without requeueing; kombu removes the tag just as an ack does."""
    shipped.session.app.conf.task_acks_on_failure_or_timeout = False
    world = _on(shipped, NAIVE, ONE_FAILING)
    world.apply(Reserve("job1"))
    tag, _ = world.ledger.delivery_of("job1/r1")
    assert world.apply(Fail("job1#1")).sentence == "job1#1 fails before its effect and reports it: job1/r1 is unused"
    client = shipped.session.client
    assert client.hlen(celery_module.UNACKED) == 0 and client.llen("job1") == 0
    assert world.ledger._messages["job1/r1"].message._state == "REJECTED" and tag not in world.ledger._unacked()


def test_guarded_a_failure_goes_to_the_guard_and_settles_as_the_model(guarded):
    """Guarded, the wrapper catches the failure (celery never acks it on failure): outcome_unknown until the settle,
    and a stalled worker's failure after the recovery held its delivery is refused, as the model refuses it."""
    policy = POLICIES["abandon-fenced"]
    caught = [Reserve("job1"), Fail("job1#1"), Probe(0, "job1/r1"), Settle(0, "job1/r1"), Retry("job1")]
    assert replay_in_lockstep(caught, _on(guarded, policy, ONE_FAILING), World(policy, ONE_FAILING),
                              same_story=without_refusal_reasons) is None
    while_held = [Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Fail("job1#1")]
    assert replay_in_lockstep(while_held, _on(guarded, policy, ONE_FAILING), World(policy, ONE_FAILING),
                              same_story=without_refusal_reasons) is None


def test_the_adapters_failure_is_what_a_real_celery_worker_does(redis_url, celery_module):
    """A real celery worker runs an acks_late task that raises: the message leaves unacked and its queue, as fail() leaves it."""
    import celery
    import redis
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_failure

    targets = celery_module
    app = celery.Celery("fence_failure_test", broker=redis_url, set_as_current=False)
    app.conf.update(task_acks_late=True, broker_transport_options={"visibility_timeout": targets.NEVER_WITHIN_A_RUN})
    failed = threading.Event()

    @app.task(name="raises", acks_late=True, shared=False)
    def raises(key: str) -> None:
        raise RuntimeError("the task failed")

    def heard(sender=None, **_) -> None:
        if getattr(sender, "name", None) == "raises":
            failed.set()

    task_failure.connect(heard, weak=False)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        raises.apply_async(args=["t1"], queue="tickets")
        with start_worker(app, pool="solo", perform_ping_check=False, queues=["tickets"], shutdown_timeout=30):
            assert failed.wait(timeout=60), "the worker never ran the task"
        assert app.conf.task_acks_on_failure_or_timeout  # celery's default, as in both rows
        assert client.hlen(targets.UNACKED) == 0 and client.zcard(targets.UNACKED_INDEX) == 0
        assert client.llen("tickets") == 0
    finally:
        task_failure.disconnect(heard)
        client.close()


# -- the extra, the server, the command line ---------------------------------------------------
def test_without_celery_the_target_is_one_line_naming_the_extra(monkeypatch):
    """A missing celery is BadInput in one line that names the pip extra, before any server is touched."""
    monkeypatch.delitem(sys.modules, "fence.targets.celery_redis", raising=False)
    monkeypatch.setitem(sys.modules, "celery", None)
    with pytest.raises(BadInput) as missing:
        TARGETS["celery"].open("redis://127.0.0.1:1/0")
    message = str(missing.value)
    assert "\n" not in message and "pip install 'fence[celery]'" in message


def test_redis_sh_starts_a_private_server_and_stops_it():
    """scripts/redis.sh start prints a 127.0.0.1 URL that answers; stop ends it and deletes its directory."""
    import redis

    started = subprocess.run(["bash", str(REDIS_SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stderr
    url = started.stdout.strip().splitlines()[-1]
    try:
        assert url.startswith("redis://127.0.0.1:") and url.endswith("/0")
        with redis.Redis.from_url(url) as client:
            assert client.ping() and client.config_get("save") == {"save": ""}
        status = subprocess.run(["bash", str(REDIS_SCRIPT), "status", url], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and url in status.stdout
    finally:
        stopped = subprocess.run(["bash", str(REDIS_SCRIPT), "stop", url], capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    status = subprocess.run(["bash", str(REDIS_SCRIPT), "status", url], capture_output=True, text=True, timeout=60)
    assert status.returncode == 3
    port = url.rsplit(":", 1)[1].split("/")[0]
    assert not Path(os.environ.get("TMPDIR", "/tmp"), f"fence-redis-{port}").exists()


FENCE = [sys.executable, "-m", "fence.cli.main"]


def test_cli_targets_on_an_unreachable_redis_is_one_line_and_exit_2(celery_module):
    """fence targets with a Redis URL nobody listens on says so in one line and exits 2."""
    result = subprocess.run([*FENCE, "targets", "--row", "celery", "--profile", "quick", "--redis", "redis://127.0.0.1:1/0"],
                            capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(("Redis:", "["))]  # not progress
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("fence: ") and "cannot reach Redis" in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def test_cli_targets_without_celery_is_one_line_naming_the_extra():
    """fence targets --row celery without celery installed: one line naming the extra, exit 2."""
    blocked = ("import sys; sys.modules['celery'] = None; from fence.cli.main import main; "
               "sys.exit(main(['targets', '--row', 'celery', '--profile', 'quick', '--redis', 'redis://127.0.0.1:1/0']))")
    result = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(("Redis:", "["))]  # not progress
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("fence: ") and "pip install 'fence[celery]'" in lines[0], result.stderr


@pytest.mark.slow
def test_cli_targets_prints_both_celery_rows_and_replays_what_it_found(redis_url, celery_module, tmp_path):
    """fence targets --profile quick on the celery rows: the shipped row violated and replayed; the guarded row proved
    but on 4 and 6, which celery's failure path breaks (issue 25: a task that raised is acked, so the recovery never
    sees it, and a stalled worker's ack on failure removes the delivery the recovery holds), so the exit status is 1."""
    report = tmp_path / "targets.txt"
    result = subprocess.run([*FENCE, "targets", "--row", "celery", "--row", "celery+guard", "--profile", "quick",
                             "--redis", redis_url, "--report", str(report)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:3]}
    guarded = [cell.split("(")[0] for cell in rows["celery+guard"]]
    assert rows["celery"][0].startswith("violated")
    assert guarded == ["proved", "proved", "proved", "violated", "proved", "violated", "proved"], rows
    assert "DID NOT REPLAY" not in result.stdout and "replayed on a fresh database: job1 was written 2 times" in result.stdout
    # Invariant 5's shortest story is now the stale worker's ack on failure (issue 25); the stale ack on success
    # stays pinned by its own replay above (test of STALE_ACK).
    stale = re.search(r"job1#(\d)'s fail changed job1/r(\d), which belongs to job1#(\d)", result.stdout)
    assert stale and int(stale[1]) < int(stale[2]) == int(stale[3]), result.stdout
    assert report.read_text().startswith("# command: fence targets")
