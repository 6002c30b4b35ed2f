"""celery with kombu's Redis transport, what only it shows: delivery tags, restore_visible, its worker's acks.

What every shipped target shows (the machines' duplicate and its replay, the
stale worker's ack accepted on the retry's delivery, the shipped failure path
acking the job at once, the guarded row holding, the explorer's walks) is in
tests/test_targets_rows.py, run on celery as on every system. Here: why kombu
accepts the stale ack (a restored message keeps its delivery tag), what
restore_visible itself does, the guarded recovery's fresh message, the guard
in a task run by a real celery worker, what that worker does with an
acks_late task that raised, scripts/redis.sh, and the command line on Redis.

Every test here needs Redis (the session's server, see conftest.py) and celery
(the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fence.model.destination import CommitResult
from fence.search.lockstep import replay_in_lockstep, without_refusal_reasons
from fence.model.policies import POLICIES, Decision
from fence.model.world import (
    Confirm, Deliver, Fail, ModelConfig, Reserve, Retry, Scan, SendCommit, Start, Tick, World,
)
from tests.target_explorer_checks import STALE_CONFIRM, STALE_SETTLE
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis

ONE = ModelConfig(capacity=1, jobs=1)
NAIVE = POLICIES["naive"]
REDIS_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "redis.sh"


celery_module, shipped, guarded = system_fixtures("celery")


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


# -- as shipped: the naive policy, on the real system ---------------------------------------


def test_a_stale_ack_acks_the_retrys_delivery_and_nothing_is_left_to_restore(shipped, celery_module):
    """Why celery accepts the stale ack (tests/test_targets_rows.py has the lockstep's finding): the restored message
    keeps its delivery tag and task id, so the first worker's ack acks the retry's delivery; and when the retry's
    worker then dies, nothing is left for restore_visible to give back, ever."""
    world = _on(shipped, NAIVE)
    for action in STALE_CONFIRM:
        world.apply(action)
    assert world.ledger.delivery_of("job1/r1") == world.ledger.delivery_of("job1/r2")  # same tag, same task id
    for action in [Start("job1#2"), Tick(2)]:
        world.apply(action)
    session = shipped.session
    janitor = session.channel(visibility_timeout=celery_module.visible_after(ONE.lease))
    janitor.qos.restore_visible(interval=1)
    assert session.client.hlen(celery_module.UNACKED) == 0 and session.client.llen("job1") == 0



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
def test_the_guarded_recovery_retries_on_a_fresh_message(guarded):
    """recover_expired publishes a fresh message per retry (a new delivery tag and task id), so a janitor's stale
    basic_reject removes nothing (tests/test_targets_rows.py: refused, as in the model)."""
    world = _on(guarded, POLICIES["abandon-fenced"])
    for action in STALE_SETTLE:
        world.apply(action)
    assert world.trace[-1].sentence.endswith("the ledger refuses")
    (tag1, task1), (tag2, task2) = world.ledger.delivery_of("job1/r1"), world.ledger.delivery_of("job1/r2")
    assert tag1 != tag2 and task1 != task2



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
    """celery acks a failed acks_late task (task_acks_on_failure_or_timeout): gone, not requeued either, where the
    model holds it for the janitor (tests/test_targets_rows.py: the lockstep's finding, and it never settles)."""
    world = _on(shipped, NAIVE, ONE_FAILING)
    for action in [Reserve("job1"), Fail("job1#1")]:
        world.apply(action)
    client = shipped.session.client
    assert client.hlen(celery_module.UNACKED) == 0 and client.llen("job1") == 0



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


