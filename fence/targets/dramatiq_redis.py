"""dramatiq with its Redis broker as a fence target: the broker's keys are the ledger.

Each ledger move is dramatiq's own call, as docs/explanation/queues.md ("dramatiq
with its Redis broker") tells: a reserve is a fetch by the reservation's own
worker broker (a due retry moved from ``KEY.DQ`` first), a confirm an ack, a
failure what ``Worker`` does when an actor raises, the shipped janitor
maintenance forced on a janitor broker, the guarded one
``fence.targets.dramatiq_recovery`` (its names importable from here too).
dramatiq refuses nothing: a move is accepted only if it changed the broker's keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import dramatiq
from dramatiq.brokers.redis import MAINTENANCE_SCALE
from dramatiq.common import current_millis, dq_name

from fence import Decision
from fence.targets.dramatiq_recovery import (  # the recipe, importable from here as before
    ACTOR, HEARTBEATS, NS, acks_key, as_worker, attempt_id, make_broker, publish, recover_stalled, settle,
)
from fence.targets.images import InstantsIn, RedisSession, left_out, ranked_ids
from fence.targets.protocol import (
    IllegalMove, ModelTime, Move, ReservationState, Taken, TargetLedger, TargetStorage, library_id, not_in_snapshot,
)

TIME = ModelTime(tick_seconds=60.0)
"""One model tick is a minute of Redis time: a retry's first backoff (15-30 s) is due a tick on."""
TICK_SECONDS = TIME.tick_seconds
ETAS = InstantsIn(f"{NS}:*.DQ.msgs", read=lambda data: dramatiq.Message.decode(data).options.get("eta"),
                  write=lambda data, eta: dramatiq.Message.decode(data).copy(options={"eta": eta}).encode(),
                  per_second=1000)
"""A delayed retry's eta (ms), in its message on the delay queue."""
DECIDING = {f"{NS}:*.XQ": left_out, f"{NS}:*.XQ.msgs": left_out}
"""Dead-lettered messages: nothing reads them back, and they outlive any run."""
_INSTANT = re.compile(rb'"(message_timestamp|requeue_timestamp)": ?\d+')
"""Instants no answer compares with the clock (no max_age): left out of the snapshot."""


@dataclass(frozen=True)
class _Take(Taken):
    worker_id: str = library_id()  # its worker broker's uuid
    redis_id: str = library_id()
    data: bytes = not_in_snapshot()  # the message as fetched: found again by its redis_id


class DramatiqLedger(TargetLedger):
    GUARD_CATCHES_FAILURES = True
    UNEXPIRED_BECAUSE = ("maintenance's query does not list its message "
                         "(or the recovery or its guard's wrapper holds it)")

    def snapshot(self) -> tuple:
        # Left out, as they decide no answer: the heartbeat of a worker that holds nothing (each fetches once), a
        # dead-lettered message (``DECIDING``), and whether an outcome_unknown reservation was held by the recovery
        # or caught by its guard (either way its worker may ack it, the janitor settles it, nothing else is taken).
        canonical, image = ranked_ids(erase=[(_INSTANT, rb'"\1":0')]), self.image()
        holding = {(name, m) for name, _, value in image.keys if name.startswith(b"dramatiq:__acks__.") for m in value}
        busy = {name.split(b".")[1] for name, _ in holding}
        keys = self._session.snapshot(image, self._now, canonical=canonical, deciding={  # first: ids ranked by keys
            HEARTBEATS: lambda beats: tuple(beat for beat in beats if beat[0] in busy) or None})
        held = lambda t: (acks_key(t.worker_id, t.key).encode(), t.redis_id.encode()) in holding  # noqa: E731
        takes = tuple(taken + (held(t) and t.reservation_id in self._held | self._failures_caught,)
                      for t, taken in zip(self._records().values(), self.records_snapshot(canonical)))
        return (takes, keys, self.finished_moves(), self.published(),
                tuple(sorted(self._count_by_key.items())), self._lease)

    def _held_by_worker(self, take: _Take) -> bool:
        self._reading()
        return bool(self._session.client.sismember(acks_key(take.worker_id, take.key), take.redis_id))

    def _state(self, take: _Take) -> ReservationState:
        # Out of its worker's ack set: acked, or requeued by maintenance, failed, dead-lettered by the recovery.
        return ReservationState.RESERVED if self._held_by_worker(take) else self._finished_state(take.reservation_id)

    def _past_lease(self, take: _Take) -> bool:
        """Maintenance's query: the worker's heartbeat older than the timeout, the message in its ack set."""
        self._reading()
        cutoff = current_millis() - TIME.timeout(self._lease) * 1000
        stalled = self._session.client.zrangebyscore(HEARTBEATS, 0, cutoff)
        return take.worker_id.encode() in stalled and self._held_by_worker(take)

    def _moving(self, take: _Take, call, move: Move, what: str, also=lambda: None) -> None:
        self._moved(lambda: (self._held_by_worker(take), also()), call,
                    f"{what} of {take.reservation_id} changed nothing: its message is no longer in its worker's "
                    "ack set, and dramatiq takes the call without a word", finishing=(take.reservation_id, move))

    def _confirm(self, take: _Take, move: Move) -> None:
        consumer = self._session.worker(take.reservation_id).consume(take.key, prefetch=1, timeout=0)
        self._moving(take, lambda: consumer.ack(dramatiq.MessageProxy(dramatiq.Message.decode(take.data))), move, "ack")

    def _fail(self, take: _Take) -> None:
        worker = self._session.worker(take.reservation_id)
        message = dramatiq.MessageProxy(dramatiq.Message.decode(take.data))

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
        self._publish_once(key, lambda: publish(worker, key))
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
        return _Take(reservation_id, key, owner, deadline, worker.broker_id, message.options["redis_message_id"],
                     message.encode())

    def _release(self, take: _Take) -> None:
        janitor = self._session.janitor  # maintenance, forced by its qsize of the key's queue
        janitor.heartbeat_timeout = int(TIME.timeout(self._lease) * 1000)
        self._moving(take, lambda: janitor.do_qsize(take.key), Move.EXPIRE_AND_RELEASE, "maintenance")

    def _settle(self, take: _Take, move: Move) -> None:
        decision = Decision.EXISTING if move is Move.SETTLE_EXISTING else Decision.UNUSED
        worker = self._session.worker(take.reservation_id)
        self._moving(take, lambda: settle(worker, dramatiq.Message.decode(take.data), decision), move, "settle")


class Session(RedisSession):
    LIBRARIES = {"dramatiq": "dramatiq", "redis-py": "redis"}

    def __init__(self, url: str) -> None:  # heartbeats and nack instants in ms, retry etas in their messages
        super().__init__(url, TIME, milliseconds=(HEARTBEATS, f"{NS}:*.XQ"), instants=(ETAS,), deciding=DECIDING)
        self.janitor = make_broker(self.client, maintenance_chance=MAINTENANCE_SCALE)

    def new_worker(self):
        return make_broker(self.client)


class DramatiqStorage(TargetStorage):
    LEDGER, SESSION, WHAT = DramatiqLedger, Session, "a dramatiq target"


__all__ = ["ACTOR", "HEARTBEATS", "TICK_SECONDS", "DramatiqLedger", "DramatiqStorage", "acks_key", "as_worker",
           "attempt_id", "make_broker", "publish", "recover_stalled", "settle"]
