"""dramatiq with its Redis broker, what only it shows: maintenance, ack sets, Retries, its own Worker (issue 27).

What every shipped target shows (the machines' duplicate and its replay, the
stale worker's ack refused as the model refuses it, the shipped failure path
freeing the job at once, the guarded row holding, the explorer's walks, fence
replay of the shipped row's duplicate) is in tests/test_targets_rows.py, run on
dramatiq as on every system. Here: as shipped, the RedisBroker's maintenance
puts a stalled worker's message back on its queue under the same message id,
and the next worker runs it again; dramatiq's ack is keyed by the worker's own
ack set, so a stale worker's late ack changes nothing; its failure does not:
the ``Retries`` middleware enqueues a retry whatever the worker holds. With
fence.guard on the task and ``recover_stalled`` instead of maintenance, the
stalled attempt's message is dead-lettered once, and the guard works in a task
a real dramatiq ``Worker`` runs: the stalled attempt abandoned, the fresh
message run, the stale commit refused.

Every test here needs Redis (the session's server, see conftest.py) and dramatiq
(the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import threading
import time

import pytest

from fence.model.destination import CommitResult
from fence.base.errors import IllegalMove
from fence.model.invariants import BY_NAME
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES, Decision
from fence.model.world import (
    Deliver, Fail, ModelConfig, Probe, Reserve, Retry, Scan, SendCommit, Settle, Start, Tick, World,
)
from fence.targets import TARGETS
from tests.target_explorer_checks import STALE_CONFIRM, STALE_SETTLE
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis

ONE = ModelConfig(capacity=1, jobs=1)
ONE_FAILING = ModelConfig(capacity=1, jobs=1, failures=True)
NAIVE = POLICIES["naive"]
GUARDED = POLICIES["abandon-fenced"]


dramatiq_module, shipped, guarded = system_fixtures("dramatiq")


def _message_of(ledger, reservation_id: str) -> tuple[str, str]:
    """The worker (broker_id) and redis_message_id of the message a reservation took (fence's record of it)."""
    taken = ledger.record(reservation_id)
    return taken.worker_id, taken.redis_id


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


def _delayed(client, queue: str) -> list:
    """The retries waiting on ``queue``'s delay queue, decoded."""
    import dramatiq

    return [dramatiq.Message.decode(data) for data in client.hvals(f"dramatiq:{queue}.DQ.msgs")]


# -- as shipped: maintenance, the naive policy ----------------------------------------------------


def test_maintenance_requeues_under_the_same_id_and_the_stale_ack_changes_nothing(shipped, dramatiq_module):
    """Why dramatiq refuses the stale ack (tests/test_targets_rows.py: as the naive model refuses it): the retry's
    worker takes the same redis_message_id into its own ack set, and the stalled worker's ack changes nothing."""
    world = _on(shipped, NAIVE)
    for action in STALE_CONFIRM:
        world.apply(action)
    assert "the ledger refuses: ack of job1/r1 changed nothing" in world.trace[-1].sentence
    (first_worker, first_id), (second_worker, second_id) = (_message_of(world.ledger, r)
                                                            for r in ("job1/r1", "job1/r2"))
    assert first_id == second_id and first_worker != second_worker
    client = shipped.session.client
    assert client.smembers(dramatiq_module.acks_key(second_worker, "job1")) == {second_id.encode()}
    assert not client.exists(dramatiq_module.acks_key(first_worker, "job1"))
    assert world.ledger.get("job1/r2").state.value == "reserved"
    assert len([e for e in world.observer.effects if e.key == "job1"]) == 1  # the retry has not run yet


def test_a_scan_before_the_heartbeat_timeout_is_refused_and_maintenance_recovers_nothing(shipped, dramatiq_module):
    """One tick into a lease of two: maintenance's query does not list the message, and the ledger refuses the expire."""
    from fence.model.ledger import Move

    world = _on(shipped, NAIVE)
    world.apply(Reserve("job1"))
    world.apply(Tick(1))
    assert world.ledger.expired(world.now) == []
    with pytest.raises(IllegalMove, match="maintenance's query does not list"):
        world.ledger.apply("job1/r1", Move.EXPIRE_AND_RELEASE)
    assert world.ledger.get("job1/r1").state.value == "reserved"


def test_the_duplicate_on_the_explorers_shortest_path_replays_on_a_fresh_database(shipped):
    """The duplicate on the explorer's shortest path, replayed on an emptied Redis by replay_actions."""
    chosen = [Reserve("job1"), Start("job1#1"), Deliver("register", "job1#1"), SendCommit("job1#1"),
              Deliver("commit", "job1#1"), Tick(2), Scan(0, "job1/r1"), Retry("job1"), Start("job1#2"),
              Deliver("register", "job1#2"), SendCommit("job1#2"), Deliver("commit", "job1#2")]
    replayed = replay_actions(NAIVE, ONE, chosen, BY_NAME["no_duplicate_writes"], shipped.destination_factory,
                              shipped.ledger_factory)
    assert replayed is not None and replayed.message == "job1 was written 2 times"
    written = [effect for effect in replayed.world.observer.effects if effect.key == "job1"]
    assert len(written) == 2 and written[0].attempt_id != written[1].attempt_id


# -- as shipped: the worker's failure path (Retries, then ack) --------------------------------------
def test_as_shipped_a_failed_task_is_acked_and_retried_after_its_backoff(shipped, dramatiq_module):
    """Retries enqueues the retry on the delay queue (eta 15-30 s on) and the worker acks: the job is freed at once
    (tests/test_targets_rows.py: where the model holds it for the janitor); a tick later the next worker takes the
    retry under a new id."""
    world = _on(shipped, NAIVE, ONE_FAILING)
    for action in [Reserve("job1"), Fail("job1#1")]:
        world.apply(action)
    client = shipped.session.client
    retry, = _delayed(client, "job1")
    assert retry.options["retries"] == 1 and retry.options["eta"] > time.time() * 1000
    assert client.hlen("dramatiq:job1.msgs") == 0  # the failed message was acked
    ledger = world.ledger
    with pytest.raises(IllegalMove, match="no message on queue"):
        ledger.reserve("job1", "job1#2", world.now, 2)  # the retry is not due yet: it stays on the delay queue
    assert len(_delayed(client, "job1")) == 1
    taken = ledger.reserve("job1", "job1#2", world.now + 1, 2)  # a tick later it is
    assert taken.state.value == "reserved" and _delayed(client, "job1") == []
    assert _message_of(ledger, taken.reservation_id)[1] not in {retry.options["redis_message_id"],
                                                               _message_of(ledger, "job1/r1")[1]}


def test_a_stale_workers_failure_enqueues_a_second_retry_of_the_job_the_retry_runs(shipped, dramatiq_module):
    """A finding: Retries acts whatever the worker holds, so a stalled worker that raises after maintenance gave its
    message to another puts a second copy of the job on the broker (accepted: the broker changed)."""
    world = _on(shipped, NAIVE, ONE_FAILING)
    for action in [Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Retry("job1")]:
        world.apply(action)
    said = world.apply(Fail("job1#1")).sentence
    assert said == "job1#1 fails before its effect and reports it: job1/r1 is unused"
    assert world.ledger.get("job1/r2").state.value == "reserved"
    retry, = _delayed(shipped.session.client, "job1")
    assert retry.options["retries"] == 1
    assert "job1#1's fail changed job1/r2" in world.observer.findings.by_invariant["stale_attempt_cannot_change_newer"][0]


def test_the_adapters_failure_is_what_a_real_dramatiq_worker_does(redis_url, dramatiq_module):
    """A real dramatiq Worker runs an actor that raises: the message is acked and one retry waits on the delay queue,
    as fail() leaves them."""
    import dramatiq
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    broker = dramatiq_module.make_broker(client)
    ran = threading.Event()

    @dramatiq.actor(broker=broker, queue_name="tickets", actor_name="raises")
    def raises(key: str) -> None:
        ran.set()
        raise RuntimeError("the task failed")

    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=50)
    try:
        raises.send("t1")
        worker.start()
        assert ran.wait(timeout=30), "the worker never ran the actor"
        deadline = time.monotonic() + 30
        while client.hlen("dramatiq:tickets.msgs") and time.monotonic() < deadline:
            time.sleep(0.02)  # the ack follows the middleware, on the worker's consumer thread
    finally:
        worker.stop()  # its delay consumer gives the prefetched retry back to the delay queue
        client.close()
    client = redis.Redis.from_url(redis_url)
    retry, = _delayed(client, "tickets")
    assert retry.options["retries"] == 1 and "eta" in retry.options
    assert client.hlen("dramatiq:tickets.msgs") == 0 and client.llen("dramatiq:tickets") == 0
    client.close()


# -- guarded: recover_stalled instead of maintenance ------------------------------------------------
def test_the_guarded_recovery_dead_letters_once_and_the_stale_settle_enqueues_nothing(guarded, dramatiq_module):
    """The first settle dead-letters the attempt's message and enqueues a fresh one; the second removes nothing,
    enqueues nothing (tests/test_targets_rows.py: refused, as in the model)."""
    world = _on(guarded, GUARDED)
    for action in STALE_SETTLE:
        world.apply(action)
    assert world.trace[-1].sentence.endswith("job1/r1 is already unused: the ledger refuses")
    (_, first_id), (_, second_id) = (_message_of(world.ledger, r) for r in ("job1/r1", "job1/r2"))
    assert first_id != second_id
    client = guarded.session.client
    assert client.zrange("dramatiq:job1.XQ", 0, -1) == [first_id.encode()]  # dead-lettered once
    assert client.llen("dramatiq:job1") == 0 and client.hlen("dramatiq:job1.msgs") == 1  # only the retry's message


def test_guarded_a_failed_task_waits_for_its_guards_settle_and_dramatiq_is_not_called(guarded, dramatiq_module):
    """The guard's wrapper catches the failure: outcome_unknown with the message still in its worker's ack set and no
    Retries; its settle dead-letters it and runs the job afresh on a fresh message."""
    world = _on(guarded, GUARDED, ONE_FAILING)
    steps = [Reserve("job1"), Fail("job1#1"), Probe(0, "job1/r1"), Settle(0, "job1/r1"), Retry("job1")]
    for action in steps[:2]:  # in lockstep with the model: tests/test_targets_rows.py
        world.apply(action)
    worker, first_id = _message_of(world.ledger, "job1/r1")
    client = guarded.session.client
    assert world.ledger.get("job1/r1").state.value == "outcome_unknown"
    assert client.smembers(dramatiq_module.acks_key(worker, "job1")) == {first_id.encode()}
    assert _delayed(client, "job1") == []
    for action in steps[2:]:
        world.apply(action)
    assert world.ledger.get("job1/r1").state.value == "unused" and world.ledger.get("job1/r2").state.value == "reserved"
    assert _message_of(world.ledger, "job1/r2")[1] != first_id
    assert client.zrange("dramatiq:job1.XQ", 0, -1) == [first_id.encode()]
    # A second report of the same failure is refused: the settle took the job back.
    with pytest.raises(IllegalMove, match="fail on job1/r1: it is unused; the guard's wrapper settles only a job"):
        world.ledger.fail("job1", "job1#1")


def test_the_guard_in_a_task_run_by_a_real_dramatiq_worker(redis_url, dramatiq_module, tmp_path):
    """A stalled attempt is abandoned by recover_stalled, the fresh message runs on a dramatiq Worker, the stale
    commit is refused and the stale ack touches nothing."""
    import dramatiq
    import redis
    from dramatiq.middleware import CurrentMessage

    from fence.guard import Guard, Refused
    from fence.targets import dramatiq_recovery as targets  # the recipe, as a user runs it

    guard = Guard.open(f"sqlite://{tmp_path}/guard.db")
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    broker = targets.make_broker(client)  # maintenance off: recover_stalled is the recovery
    broker.add_middleware(CurrentMessage())
    ran = threading.Event()

    @dramatiq.actor(broker=broker, queue_name="tickets", actor_name="send_ticket", max_retries=0)
    def send_ticket(key: str, body: str) -> None:
        redis_id = CurrentMessage.get_current_message().options["redis_message_id"]
        with guard.attempt(key, targets.attempt_id(key, redis_id)) as attempt:
            attempt.commit(body)
        ran.set()

    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=50)
    try:
        first = send_ticket.send("t1", "hello")
        # A worker process takes the message into its ack set, starts the task, and stalls.
        stalled = targets.make_broker(client)
        consumer = stalled.consume("tickets", prefetch=1, timeout=0)
        message = next(consumer)
        stale_id = message.options["redis_message_id"]
        assert stale_id == first.options["redis_message_id"]
        stale = guard.attempt("t1", targets.attempt_id("t1", stale_id)).__enter__()
        # Ten minutes pass without a heartbeat from it, and the recovery runs instead of maintenance.
        client.zincrby(targets.HEARTBEATS, -600_000, stalled.broker_id)
        assert targets.recover_stalled(broker, guard, lease_seconds=300) == [(stale_id, Decision.UNUSED)]
        assert targets.recover_stalled(broker, guard, lease_seconds=300) == []  # nothing left to settle
        # dramatiq's own worker runs the fresh message.
        worker.start()
        assert ran.wait(timeout=30), "the worker never ran the fresh message"
        with pytest.raises(Refused) as refused:
            stale.commit("hello")  # the stalled task wakes up and writes
        assert refused.value.result is CommitResult.ABANDONED
        consumer.ack(message)  # and its late ack touches nothing: the fresh message has an id of its own
    finally:
        worker.stop()
    try:
        effects = guard.destination.effects()
        assert len(effects) == 1 and effects[0].key == "t1"
        assert effects[0].attempt_id not in (targets.attempt_id("t1", stale_id),)
        assert client.hlen("dramatiq:tickets.msgs") == 0 and client.llen("dramatiq:tickets") == 0
        assert client.zrange("dramatiq:tickets.XQ", 0, -1) == [stale_id.encode()]  # the stalled attempt, dead-lettered
    finally:
        client.close()
        guard.close()


# -- the server ----------------------------------------------------------------------------------------


def test_on_an_unreachable_redis_the_target_is_one_line(dramatiq_module):
    """A Redis nobody listens on: BackendError in one line naming the script that starts one."""
    from fence.base.errors import BackendError

    with pytest.raises(BackendError) as unreachable:
        TARGETS["dramatiq"].open("redis://127.0.0.1:1/0")
    assert "\n" not in str(unreachable.value) and "scripts/redis.sh start" in str(unreachable.value)


