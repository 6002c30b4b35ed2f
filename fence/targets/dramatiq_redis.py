"""dramatiq with its Redis broker as a fence target: the broker's keys are the ledger.

Theory of operation
-------------------
dramatiq's ``RedisBroker`` keeps a queue as a list of message ids
(``dramatiq:KEY``) and a hash of their data. A worker process is a broker of
its own ``broker_id``: a fetch moves a message id into its ack set
(``dramatiq:__acks__.<broker_id>.KEY``), an ack removes it, and each command
stamps its heartbeat (``dramatiq:__heartbeats__``, ms). Its recovery is the
*maintenance* any command runs by chance: every ack set of a worker whose
heartbeat is older than ``heartbeat_timeout`` goes back on its queue, same
message id, whether or not the worker still runs it (dramatiq #692; dramatiq_sqs
#53, #59). Each ledger move (``fence.targets.protocol``) is dramatiq's own call:
a reserve ``next(broker.consume(KEY))`` by the reservation's own worker broker
(maintenance off; one queue per key; a due retry on ``KEY.DQ`` moved to KEY
first, as the delay-queue consumer does); a confirm ``consumer.ack``; a failure
what ``Worker`` does when an actor raises (``emit_after("process_message")``:
``Retries`` enqueues a retry on ``KEY.DQ``; then ack or nack); a lease expired
when maintenance's own query lists it; as shipped, the janitor is maintenance,
forced on a janitor broker. dramatiq refuses nothing, so a move is accepted
only if it changed the broker's keys (``only_if_it_moves``).

Guarded: the attempt is named by the enqueue's ``redis_message_id``, and
``recover_stalled`` runs instead of maintenance: abandon the attempt unless it
committed, then ack it as its worker, or nack it and enqueue a fresh message,
so no stale ack or commit touches the retry. A tick is 60 s of Redis time:
moving it moves heartbeats, nack instants and retry etas back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import dramatiq
from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker
from dramatiq.common import current_millis, dq_name, xq_name

from fence import Decision
from fence.guard import Guard
from fence.targets.images import RedisImage, RedisSession, ranked_ids
from fence.targets.protocol import IllegalMove, ModelTime, Move, ReservationState, TargetLedger, TargetStorage

TIME = ModelTime(tick_seconds=60.0)
"""One model tick is a minute of Redis time: a retry's first backoff (15-30 s) is due a tick on."""
TICK_SECONDS = TIME.tick_seconds
ACTOR = "fence_ticket"
NS = "dramatiq"
HEARTBEATS = f"{NS}:__heartbeats__"
NEVER = 10**12
"""A worker broker's heartbeat_timeout (ms): its maintenance is off anyway; only the janitor's counts."""
S = ReservationState


def acks_key(worker_id: str, queue: str) -> str:
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


# -- the recovery, as a user runs it ------------------------------------------------------------
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


# -- time in the broker's keys: heartbeats and nack times in ms (``images``), a retry's eta here ---------------
MS_TIMESTAMPS = (HEARTBEATS, f"{NS}:*.XQ")
"""Sorted sets scored by instants in ms: heartbeats, and each dead-letter queue's nack times."""


def _with_eta(data: bytes, move) -> bytes:
    message = dramatiq.Message.decode(data)
    if "eta" not in message.options:
        return data
    return message.copy(options={"eta": move(message.options["eta"])}).encode()


def _etas(image: RedisImage, move) -> RedisImage:
    """``image`` with each delayed retry's eta mapped by ``move`` (to ticks ahead, or back to an instant)."""
    return RedisImage(tuple((name, kind, tuple((field, _with_eta(data, move)) for field, data in value)
                             if kind == "hash" and name.endswith(b".DQ.msgs") else value)
                            for name, kind, value in image.keys), image.ttls)


_INSTANT = re.compile(rb'"(message_timestamp|requeue_timestamp)": ?\d+')
"""Instants no answer compares with the clock (no max_age): left out of the snapshot."""


# -- the ledger ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Take:
    reservation_id: str
    key: str
    owner: str
    worker_id: str
    redis_id: str
    data: bytes
    deadline: float


class DramatiqLedger(TargetLedger):
    """fence's ledger protocol on dramatiq's RedisBroker (see the module doc)."""

    GUARD_CATCHES_FAILURES = True

    def __init__(self, session: Session, capacity: int, *, guarded: bool) -> None:
        super().__init__(session, capacity, guarded=guarded, time=TIME)
        self._published: set[str] = set()
        self._restoring(session.restorer)

    def dump(self) -> RedisImage:
        now, tick = current_millis(), TIME.tick_seconds * 1000
        return _etas(self._session.dump(), lambda eta: math.ceil((eta - now) / tick))

    def load(self, image: RedisImage) -> None:
        now, tick = current_millis(), TIME.tick_seconds * 1000
        self._session.load(_etas(image, lambda ticks: int(now + (ticks - 0.5) * tick)))

    def snapshot(self) -> tuple:
        canonical = ranked_ids(erase=[(_INSTANT, rb'"\1":0')])
        now = self._now  # etas as the tick they fall due (ms instants: the database's snapshot)
        image = _etas(self.image(), lambda ahead: int(now + ahead))
        # What decides no answer is left out: the heartbeat of a worker that holds nothing (each worker
        # fetches once), a dead-lettered message (nothing reads it back; its 7-day TTL is beyond any run),
        # and whether an outcome_unknown reservation was held by the recovery or caught by its guard
        # (either way the worker may ack it, the janitor settles it, and nothing else is taken).
        holding = {(name, member) for name, kind, value in image.keys if name.startswith(b"dramatiq:__acks__.")
                   for member in value}
        workers = {name.split(b".")[1] for name, _ in holding}
        keys = []
        for name, kind, value in image.keys:
            if name == HEARTBEATS.encode():
                value = tuple((worker, tick) for worker, tick in value if worker in workers)
            if not name.endswith((b".XQ", b".XQ.msgs")) and value:
                keys.append((name, kind, value))
        keys = self._session.database.snapshot(RedisImage(tuple(keys)), now, canonical=canonical)
        held = lambda t: (acks_key(t.worker_id, t.key).encode(), t.redis_id.encode()) in holding  # noqa: E731
        takes = tuple((t.reservation_id, t.key, t.owner, canonical(t.worker_id), canonical(t.redis_id), t.deadline,
                       held(t) and t.reservation_id in self._held | self._failures_caught)
                      for t in self._records().values())
        return (takes, keys, self.finished_moves(), tuple(sorted(self._published)),
                tuple(sorted(self._count_by_key.items())), self._lease)

    def _move_clock(self, ticks: float) -> None:
        super()._move_clock(ticks)  # heartbeats and nack times
        client, ms = self._session.client, int(TIME.seconds(ticks) * 1000)
        for name in client.keys(f"{NS}:*.DQ.msgs"):
            for field, data in client.hgetall(name).items():
                client.hset(name, field, _with_eta(data, lambda eta: eta - ms))

    # -- reading ------------------------------------------------------------------------
    def _held_by_worker(self, take: _Take) -> bool:
        self._reading()
        return bool(self._session.client.sismember(acks_key(take.worker_id, take.key), take.redis_id))

    def _state(self, take: _Take) -> ReservationState:
        # Out of its worker's ack set: acked, or requeued by maintenance, failed, dead-lettered by the recovery.
        return S.RESERVED if self._held_by_worker(take) else self._finished_state(take.reservation_id)

    def _past_lease(self, take: _Take) -> bool:
        """Maintenance's query: the worker's heartbeat older than the timeout, the message in its ack set."""
        self._reading()
        cutoff = current_millis() - TIME.timeout(self._lease) * 1000
        stalled = self._session.client.zrangebyscore(HEARTBEATS, 0, cutoff)
        return take.worker_id.encode() in stalled and self._held_by_worker(take)

    def _unexpired_because(self, take: _Take) -> str:
        return "maintenance's query does not list its message (or the recovery or its guard's wrapper holds it)"

    # -- moving -------------------------------------------------------------------------
    def _moving(self, take: _Take, call, move: Move, what: str, also=lambda: None) -> None:
        """dramatiq's ``call`` for ``take``: accepted only if it changed the worker's ack set (or ``also``)."""
        self._moved(lambda: (self._held_by_worker(take), also()), call,
                    f"{what} of {take.reservation_id} changed nothing: its message is no longer in its worker's "
                    "ack set, and dramatiq takes the call without a word")
        self._finished(take.reservation_id, move)

    def _proxy(self, take: _Take) -> dramatiq.MessageProxy:
        return dramatiq.MessageProxy(dramatiq.Message.decode(take.data))

    def _confirm(self, take: _Take, move: Move) -> None:
        consumer = self._session.worker(take.reservation_id).consume(take.key, prefetch=1, timeout=0)
        self._moving(take, lambda: consumer.ack(self._proxy(take)), move, "ack")

    def _fail(self, take: _Take) -> None:
        worker = self._session.worker(take.reservation_id)
        message = self._proxy(take)

        def raised() -> None:  # dramatiq's Worker: the middleware's after_process_message, then ack or nack
            try:
                raise RuntimeError(f"{take.reservation_id}'s task raised")
            except RuntimeError as error:
                worker.emit_after("process_message", message, exception=error)
            consumer = worker.consume(take.key, prefetch=1, timeout=0)
            (consumer.nack if message.failed else consumer.ack)(message)

        delayed = lambda: self._session.client.hlen(f"{NS}:{dq_name(take.key)}.msgs")  # noqa: E731
        self._moving(take, raised, Move.FAIL, "the failure handler", also=delayed)

    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> _Take:
        worker = self._session.worker(reservation_id)
        self._writing()
        if key not in self._published:
            publish(worker, key)
            self._published.add(key)
        delayed = worker.consume(dq_name(key), prefetch=1, timeout=0)
        if (retry := next(delayed)) is not None:  # the worker's delay-queue consumer
            if retry.options["eta"] > current_millis():
                delayed.requeue([retry])
            else:
                options = {k: v for k, v in retry.options.items() if k != "eta"}
                worker.enqueue(dramatiq.Message(**{**retry.asdict(), "queue_name": key, "options": options}))
                delayed.ack(retry)
        message = next(worker.consume(key, prefetch=1, timeout=0))
        if message is None:
            raise IllegalMove(f"reserve {key!r} for {owner!r}: dramatiq's fetch found no message on queue {key!r}")
        return _Take(reservation_id, key, owner, worker.broker_id, message.options["redis_message_id"],
                     message.encode(), deadline)

    def _release(self, take: _Take) -> None:
        """Maintenance, forced on the janitor broker's qsize of the key's queue."""
        janitor = self._session.janitor
        janitor.heartbeat_timeout = int(TIME.timeout(self._lease) * 1000)
        self._moving(take, lambda: janitor.do_qsize(take.key), Move.EXPIRE_AND_RELEASE, "maintenance")

    def _settle(self, take: _Take, move: Move) -> None:
        decision = Decision.EXISTING if move is Move.SETTLE_EXISTING else Decision.UNUSED
        worker = self._session.worker(take.reservation_id)
        self._moving(take, lambda: settle(worker, dramatiq.Message.decode(take.data), decision), move, "settle")

    def message_of(self, reservation_id: str) -> tuple[str, str]:
        """The worker (broker_id) and redis_message_id of the message a reservation took."""
        return self._records()[reservation_id].worker_id, self._records()[reservation_id].redis_id


class Session(RedisSession):
    """fence's client on one Redis database; a worker broker per reservation id, one janitor broker."""

    LIBRARIES = {"dramatiq": "dramatiq", "redis-py": "redis"}

    def __init__(self, url: str) -> None:
        super().__init__(url, TIME, milliseconds=MS_TIMESTAMPS)
        self._workers: dict[str, RedisBroker] = {}
        self.janitor = make_broker(self.client, maintenance_chance=MAINTENANCE_SCALE)

    def worker(self, reservation_id: str) -> RedisBroker:
        """The worker process that takes a reservation's message: the same in every world and copy (no state of
        its own decides what its commands do, beside its broker_id)."""
        if reservation_id not in self._workers:
            self._workers[reservation_id] = make_broker(self.client)
        return self._workers[reservation_id]



class DramatiqStorage(TargetStorage):
    """World factories on dramatiq's RedisBroker: each world starts on an emptied database."""

    LEDGER, SESSION, WHAT = DramatiqLedger, Session, "a dramatiq target"


__all__ = ["ACTOR", "HEARTBEATS", "TICK_SECONDS", "DramatiqLedger", "DramatiqStorage", "acks_key", "as_worker",
           "attempt_id", "make_broker", "publish", "recover_stalled", "settle"]
