"""fence.guard's recovery for dramatiq with its Redis broker, as a user runs it: what replaces maintenance.

dramatiq's ``RedisBroker`` runs *maintenance* by chance on any command: every
message in the ack set of a worker whose heartbeat is older than
``heartbeat_timeout`` goes back on its queue, same message id, whether or not
that worker still runs it (dramatiq #692). ``recover_stalled`` abandons the
attempt first (unless it committed) and then acks the message as its worker,
or nacks it (dead-lettered) and enqueues a fresh one with a new
``redis_message_id``, so that no stale ack or commit touches the retry. Run it
as a loop beside workers whose maintenance is off::

    guard = Guard.open(DATABASE_URL)
    broker = make_broker(redis.Redis.from_url(REDIS_URL))  # maintenance_chance=0
    broker.add_middleware(CurrentMessage())

    @dramatiq.actor(broker=broker, max_retries=0)
    def send_ticket(key, body):
        redis_id = CurrentMessage.get_current_message().options["redis_message_id"]
        with guard.attempt(key, attempt_id(key, redis_id)) as attempt:
            attempt.commit(body)

    recover_stalled(broker, guard, lease_seconds=LEASE)  # every few seconds

A task that raises settles through the same ``settle``.
``fence.targets.dramatiq_redis`` drives dramatiq through fence's protocol and
uses these same calls for its guarded row.
"""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis, xq_name

from fence import Decision
from fence.guard import Guard

ACTOR = "fence_ticket"
NS = "dramatiq"
HEARTBEATS = f"{NS}:__heartbeats__"
"""Each worker broker's last command, ms: maintenance and ``recover_stalled`` read it."""
NEVER = 10**12
"""A worker broker's heartbeat_timeout (ms): its maintenance is off anyway; only the janitor's counts."""


def acks_key(worker_id: str, queue: str) -> str:
    """The ack set of the worker broker ``worker_id`` on ``queue``: the message ids it has fetched and not settled."""
    return f"{NS}:__acks__.{worker_id}.{queue}"


def make_broker(client, *, maintenance_chance: int = 0, heartbeat_timeout: int = NEVER) -> RedisBroker:
    """A worker process's broker (maintenance off by default), with fence's actor declared (Retries looks it up)."""
    broker = RedisBroker(client=client, maintenance_chance=maintenance_chance, heartbeat_timeout=heartbeat_timeout)
    dramatiq.Actor(lambda key: None, broker=broker, actor_name=ACTOR, queue_name="default", priority=0, options={})
    return broker


def publish(broker: RedisBroker, key: str) -> dramatiq.Message:
    """The job for ``key``: a message for fence's actor on the key's own queue."""
    return broker.enqueue(dramatiq.Message(queue_name=key, actor_name=ACTOR, args=(key,), kwargs={}, options={}))


def attempt_id(key: str, redis_message_id: str) -> str:
    """One attempt: the key and the enqueue's redis_message_id (a guarded retry is a fresh enqueue)."""
    return f"{key}@{redis_message_id}"


def as_worker(broker: RedisBroker, worker_id: str) -> RedisBroker:
    """A broker that acks and nacks in the ack sets of the worker ``worker_id`` (a stalled process)."""
    stand_in = make_broker(broker.client)
    stand_in.broker_id = worker_id
    return stand_in


def settle(worker: RedisBroker, message: dramatiq.Message, decision: Decision) -> None:
    """Settle a message ``worker`` holds: ack it (its effect exists), or nack it and enqueue it afresh.

    The fresh message is enqueued only if this nack dead-lettered the message
    (held before it, dead-lettered after it): a worker that acked it first, or
    a settle before, leaves nothing to retry.
    """
    consumer = worker.consume(message.queue_name, prefetch=1, timeout=0)
    if decision is Decision.EXISTING:
        consumer.ack(dramatiq.MessageProxy(message))
        return
    redis_id = message.options["redis_message_id"]
    held = worker.client.sismember(acks_key(worker.broker_id, message.queue_name), redis_id)
    consumer.nack(dramatiq.MessageProxy(message))
    if held and worker.client.zscore(f"{NS}:{xq_name(message.queue_name)}", redis_id) is not None:
        worker.enqueue(message.copy(options={"retries": 0}))  # a fresh redis_message_id: a new attempt


def recover_stalled(broker: RedisBroker, guard: Guard, *, lease_seconds: float) -> list[tuple[str, Decision]]:
    """What to run instead of dramatiq's maintenance (workers' ``maintenance_chance=0``): abandon before redelivering.

    For each message in the ack set of a worker whose heartbeat is older than
    ``lease_seconds``: ``guard.recover`` its attempt, then ``settle`` it as that
    worker. Under a Redis lock, so two recoveries never settle one message twice.
    Returns [(redis_message_id, Decision)] for the messages it settled.
    """
    client, settled = broker.client, []
    with client.lock(f"{NS}:__fence_recovery__", timeout=60):
        stalled = client.zrangebyscore(HEARTBEATS, 0, current_millis() - lease_seconds * 1000)
        for worker_id in (w.decode() for w in stalled):
            prefix = acks_key(worker_id, "")
            for name in client.keys(prefix + "*"):
                queue = name.decode()[len(prefix):]
                for redis_id in sorted(client.smembers(name)):
                    data = client.hget(f"{NS}:{queue}.msgs", redis_id)
                    if data is None:
                        continue  # its worker acked it in the meantime
                    message = dramatiq.Message.decode(data)
                    key = message.args[0]
                    decision = guard.recover(key, attempt_id(key, redis_id.decode()))
                    settle(as_worker(broker, worker_id), message, decision)
                    settled.append((redis_id.decode(), decision))
    return settled


__all__ = ["ACTOR", "HEARTBEATS", "NS", "acks_key", "as_worker", "attempt_id", "make_broker", "publish",
           "recover_stalled", "settle"]
