"""fence.guard's recovery for celery on Redis, as a user runs it: what replaces kombu's restore_visible.

kombu's ``restore_visible`` puts an unacked message back on its queue once its
delivery is older than ``visibility_timeout``, whether or not a worker still
runs it. ``recover_expired`` abandons the attempt first (unless it committed)
and then acks the message or rejects it and publishes a fresh one (a new task
id and delivery tag), so that a stale ack can never touch the retry's
delivery. Run it as a periodic task or a loop beside the workers::

    guard = Guard.open(DATABASE_URL)

    @app.task(bind=True, acks_late=True)
    def send_ticket(self, key, body):
        with guard.attempt(key, attempt_id(key, self.request.id)) as attempt:
            attempt.commit(body)

    app.conf.broker_transport_options = {"visibility_timeout": 10 * LEASE}  # kombu never restores first
    recover_expired(app, guard, lease_seconds=LEASE)  # every few seconds

``fence.targets.celery_redis`` drives celery through fence's protocol and uses
these same calls for its guarded row.
"""

from __future__ import annotations

import time
from typing import Callable

import celery
import redis
from kombu.transport import redis as kombu_redis
from kombu.transport.redis import Mutex, MutexHeld

from fence import Decision
from fence.guard import Guard

UNACKED = kombu_redis.Channel.unacked_key
UNACKED_INDEX = kombu_redis.Channel.unacked_index_key
"""kombu's keys for unacked messages (tag -> message) and their delivery times (tag -> seconds)."""


# -- what restore_visible sees --------------------------------------------------------------
def tags_past(client: redis.Redis, seconds: float, index_key: str = UNACKED_INDEX) -> list[str]:
    """The delivery tags unacked for longer than ``seconds``, in the order restore_visible takes them.

    The same query as ``QoS.restore_visible`` (newest delivery first); a read.
    """
    ceil = time.time() - seconds
    found = client.zrange(index_key, ceil, 0, desc=True, byscore=True)
    return [tag.decode() for tag in found]


def unacked_message(client: redis.Redis, channel, tag: str):
    """The message kombu holds unacked under ``tag`` (a kombu Message), its exchange and routing key; or None."""
    from kombu.utils.json import loads

    stored = client.hget(channel.unacked_key, tag)
    if stored is None:
        return None
    raw, exchange, routing_key = loads(stored)
    return channel.Message(raw, channel=channel), exchange, routing_key


# -- the recovery, as a user runs it ------------------------------------------------------
def attempt_id(key: str, task_id: str) -> str:
    """One attempt's identity: the key and the celery task id (the guarded retry is a fresh message)."""
    return f"{key}@{task_id}"


def task_key(args, kwargs) -> str:
    """A task's idempotency key: its ``key`` keyword argument, else its first positional argument."""
    if "key" in kwargs:
        return kwargs["key"]
    if args:
        return args[0]
    raise ValueError("the task has no key argument: fence.guard keys a task by its 'key' or first argument")


def recover_expired(
    app: celery.Celery, guard: Guard, *, lease_seconds: float,
    key_of: Callable[[tuple, dict], str] = task_key,
) -> list[tuple[str, Decision]]:
    """What to run instead of kombu's restore_visible: abandon before redelivering.

    For each message unacked for longer than ``lease_seconds`` (the query
    restore_visible makes): abandon its attempt at the destination unless it
    committed (``Guard.recover``), then ack it (its effect exists) or reject it
    and publish a fresh message for the same task and arguments (a new task id,
    a new delivery tag). Under the lock restore_visible takes, so that two
    recoveries never work at once. kombu's ``visibility_timeout`` must stay far
    above ``lease_seconds``, or kombu restores the message itself first.
    The fresh message carries the task's name, arguments and queue, not the
    first one's other options (priority, eta, headers of your own).
    Returns [(task id, Decision)] for the messages it settled.
    """
    settled = []
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        client = channel.client
        try:
            with Mutex(client, channel.unacked_mutex_key, channel.unacked_mutex_expire):
                for tag in tags_past(client, lease_seconds, channel.unacked_index_key):
                    held = unacked_message(client, channel, tag)
                    if held is None:
                        continue  # its worker acked it in the meantime
                    message, _, routing_key = held
                    args, kwargs, _ = message.decode()
                    key = key_of(args, kwargs)
                    decision = guard.recover(key, attempt_id(key, message.headers["id"]))
                    if decision is Decision.EXISTING:
                        channel.basic_ack(tag)
                    else:
                        channel.basic_reject(tag, requeue=False)
                        app.send_task(message.headers["task"], args=args, kwargs=kwargs, queue=routing_key,
                                      connection=connection)
                    settled.append((message.headers["id"], decision))
        except MutexHeld:
            return []  # another recovery is at work
    return settled


__all__ = ["UNACKED", "UNACKED_INDEX", "attempt_id", "recover_expired", "tags_past", "task_key", "unacked_message"]
