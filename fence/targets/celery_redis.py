"""celery with kombu's Redis transport as a fence target: the queue is the ledger.

Theory of operation
-------------------
celery with ``acks_late`` on Redis keeps a delivered task message in two
places until it is acked: kombu's ``unacked`` hash (tag -> message) and its
``unacked_index`` sorted set (tag -> delivery time). ``QoS.restore_visible``,
called from every worker's event loop, puts back on its queue each message
whose delivery is older than ``visibility_timeout``, whether or not a worker
still runs it (kombu #337, celery #7009, #4400). fence's ``World`` drives that
through its ledger protocol, every queue move a real celery or kombu call on a
real Redis server:

* a **reserve** for a job's key is a worker channel taking the task message
  with its ack pending, as a celery worker with ``acks_late`` does:
  ``Channel.basic_get(queue, no_ack=False)`` (kombu's ``QoS.append`` records
  the delivery in ``unacked`` and ``unacked_index``). The message is published
  first, when the queue has none, by a real celery ``App``: the task
  ``fence_ticket`` with ``acks_late=True``, ``apply_async(args=[key],
  queue=key)`` (one queue per key). Each reservation is taken on a channel of
  its own (a worker), so that each has its own ack state (``Session.worker``);
* a **confirm** is the worker's ack after the body ran: ``Message.ack()``
  (``basic_ack``, which ``QoS.ack`` turns into ZREM and HDEL of the tag);
* a lease has **expired** when the query ``restore_visible`` makes (``ZRANGE
  unacked_index BYSCORE REV (now - visibility_timeout) 0``) lists its tag;
* the **janitor** as shipped (``guarded=False``, the naive policy) is kombu's
  own ``QoS.restore_visible`` with ``visibility_timeout``: a scan of one expired
  reservation is ``restore_visible(start=i, num=1, interval=1)``, where i is
  the reservation's place in that query's answer, so that the machines can put
  other events between two restores (one ``restore_visible()`` restores every
  listed message the same way, one ``restore_by_tag`` each; a test checks it).
  The next attempt takes the restored message again.

kombu refuses nothing: ``basic_ack`` of a tag that is no longer unacked (the
message was restored, or acked already) returns as quietly as any other. A
move that removed nothing is reported to the world as refused (``IllegalMove``,
naming the tag), since nothing moved; a move that removed something is
accepted, whoever made it. That is where celery on Redis parts from the naive
model, and the lockstep reports it: a restored message keeps its delivery tag
(``_do_restore_message`` pushes the same payload back), so the first worker's
late ack of a message that was restored *and taken again* removes the retry's
entry from ``unacked``. The stale worker acks the retry's delivery ("job1#1
confirms: job1/r2 is confirmed", where the model refuses the stale confirm);
should the retry's worker then die, nothing restores the message.

Guarded (``guarded=True``, ``celery+guard``): fence.guard on the task's side
effect, with the attempt named by its celery task id, and a recovery that
replaces ``restore_visible`` (kombu's ``visibility_timeout`` is set far above
the recovery's lease, so kombu restores nothing itself). The recovery's scan
takes an expired delivery from its worker (fence's record; kombu has no such
state: the message stays in ``unacked`` and the worker's late ack still
counts, as the model's late ack beats the janitor); its settle is
``basic_ack(tag)`` when the guard found the attempt committed, or
``basic_reject(tag, requeue=False)`` when it abandoned it; the retry publishes
a fresh message (a new task id and a new delivery tag), so that a stale ack
can never touch the retry's delivery. ``recover_expired`` (``fence.targets.celery_recovery``)
is that recovery as a user runs it.

A worker whose task **fails** (``fail``) makes the call celery's worker makes for
an ``acks_late`` task that raised (``Request.on_failure``): with
``task_acks_on_failure_or_timeout`` (celery's default, both rows) it acks the
message (``Message.ack``), else it rejects it without requeueing
(``Message.reject(requeue=False)``); either way kombu removes the tag from
``unacked``, the message is gone and the task never runs again (``unused``).
Like an ack, a failure whose tag is no longer unacked removed nothing and is
refused; one whose tag a newer delivery holds removes that delivery's entry.
That is the shipped row's failure path. Guarded, the task's guard wrapper
catches the exception before celery sees it and asks ``guard.recover(key,
attempt)``: EXISTING, the task returns and celery acks the message; otherwise
the wrapper publishes a fresh message for the key and returns, and celery acks
the old one, the same acks the recovery's settle makes
(``TargetLedger._fail_through_guard``: until then only the worker knows, and
the delivery is ``outcome_unknown``). celery's own handler would ack the
message with the effect unknown, and checks nothing but the tag.

Reservation states are read back from Redis (which tags ``unacked`` holds)
and the deliveries fence made: a delivery whose tag is unacked is
``reserved`` (``outcome_unknown`` once the guarded recovery took it); an acked
one is ``confirmed`` (``confirmed_existing`` when the recovery acked it); one
that was restored, rejected or taken again is ``unused``. These are the
system's answers: the lockstep compares them with the model, and the observer
never reads them.

Time moves without sleeping (``fence.targets.protocol``, "Model time"): a tick
is ``TICK_SECONDS`` of Redis time; moving it moves every delivery time in
``unacked_index`` back, the only write fence makes to kombu's keys itself
besides each world's FLUSHDB and the explorer's restores (the image is every
key, delivery times as ticks; ``snapshot()`` names tags and task ids by rank).
A lease of L ticks is a ``visibility_timeout`` of ``(L - 1/2) * TICK_SECONDS``.

The destination is fence's own in-memory one (``TicketService``, held to its
SQL versions by tests/test_backends.py): the system under test is the queue.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Callable

import celery
import kombu
import redis

from fence.targets.celery_recovery import (  # the recipe, importable from here as before
    UNACKED, UNACKED_INDEX, attempt_id, recover_expired, tags_past, task_key, unacked_message,
)
from fence.targets.images import RedisImage, RedisSession, dump_redis, load_redis, ranked_ids
from fence.targets.protocol import (
    EXISTING_MOVES, BackendError, IllegalMove, ModelTime, Move, ReservationState, Taken, TargetLedger, TargetStorage,
    library_id,
)

TIME = ModelTime(tick_seconds=600.0)
"""One model tick is ten minutes of Redis time."""
TICK_SECONDS = TIME.tick_seconds
TASK_NAME = "fence_ticket"
"""The task whose messages fence publishes: its body is the world's worker writing the ticket."""
NEVER_WITHIN_A_RUN = 10_000 * TICK_SECONDS
"""The guarded target's kombu ``visibility_timeout``: its own restore never fires in a run."""

BINDINGS = b"_kombu.binding"
"""The prefix of kombu's binding keys (``_kombu.binding.<exchange>``, ``_kombu.binding_permanent.<exchange>``)."""

S = ReservationState


def visible_after(lease_ticks: float) -> float:
    """kombu's ``visibility_timeout`` for a lease of that many ticks (see the module doc)."""
    return TIME.timeout(lease_ticks)


def make_app(url: str, *, visibility_timeout: float) -> celery.Celery:
    """A celery App on the Redis at ``url``, acks_late, with fence's one task."""
    app = celery.Celery("fence_target", broker=url, set_as_current=False)
    app.conf.update(task_acks_late=True, broker_transport_options={"visibility_timeout": visibility_timeout})

    @app.task(name=TASK_NAME, acks_late=True, shared=False)  # shared: every later App would get it too
    def fence_ticket(key: str) -> None:  # run by fence's world, never by a celery worker
        raise RuntimeError("fence drives this task's attempts itself")

    return app


# -- the ledger's image: what the explorer copies (fence.targets.protocol) ----------------------------
Image = RedisImage
"""Every key of the session's Redis database; the delivery times in kombu's ``unacked_index`` as
ticks ago. Delivery tags and task ids are kept as they are (kombu and celery answer with them);
``CeleryLedger.snapshot()`` names them by rank. No key fence drives has an expiry (kombu's restore
mutex is gone again when restore_visible returns)."""


def dump_keys(client: redis.Redis) -> Image:
    """Every key of the client's database, read back as an ``Image``."""
    return dump_redis(client, TIME, timestamps=(UNACKED_INDEX,))


def load_keys(client: redis.Redis, image: Image) -> None:
    """Make the client's database hold exactly ``image``: FLUSHDB and every key written back, in one transaction."""
    load_redis(client, image, TIME, timestamps=(UNACKED_INDEX,))




class _Taken:
    """A message as its worker took it; a copy is a copy of the kombu Message (its ack state) on the same channel."""

    __slots__ = ("message",)

    def __init__(self, message: kombu.Message) -> None:
        self.message = message

    def __deepcopy__(self, memo: dict) -> _Taken:
        return _Taken(copy.copy(self.message))


# -- the ledger ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Delivery(Taken):
    """One reservation as fence made it: which message (its delivery tag and task id, uuid4s), for which attempt."""

    tag: str = library_id()
    task_id: str = library_id()


class CeleryLedger(TargetLedger):
    """fence.Ledger's interface on celery and kombu's Redis transport (see the module doc).

    Restorable (``fence.targets.protocol``): its copies share the session (its client
    and kombu channels), each with its own ``Image`` of the Redis database,
    loaded before it next reaches it, and its own copy of each taken message's
    ack state; so the explorer copies it like any plug-in.
    """

    JOB = "tag"  # as shipped, a restored message is taken again under its tag
    GUARD_CATCHES_FAILURES = True  # the task's guard wrapper catches it and settles through the guard (module doc)

    def __init__(self, session: Session, capacity: int, *, guarded: bool) -> None:
        super().__init__(session, capacity, guarded=guarded)
        self._messages: dict[str, _Taken] = {}
        """Each reservation's message as its worker channel took it (the ack goes through it)."""
        self._published: set[str] = set()
        self._acked: dict[str, tuple[str, Move]] = {}
        """tag -> (the delivery it was unacked under when a move removed it, that move)."""

    # -- the image (fence.targets.protocol) ---------------------------------------------------------
    def dump(self) -> Image:
        return dump_keys(self._session.client)

    def load(self, image: Image) -> None:
        load_keys(self._session.client, image)
        # What this copy read before is no longer the server's word on order: a load writes
        # every delivery time of one tick as the same score, and Redis ranks equal scores
        # by tag, where the reads before ranked them by the real instants they were taken at.
        self._forget_reads()

    # -- talking to Redis ----------------------------------------------------------------
    def _read(self) -> tuple[set[str], list[str]]:
        """Which tags kombu holds unacked, and which restore_visible's query lists: one round trip."""
        with self._session.client.pipeline(transaction=False) as pipe:
            pipe.hkeys(UNACKED)
            if self._lease is not None:
                pipe.zrange(UNACKED_INDEX, time.time() - self._timeout(), 0, desc=True, byscore=True)
            answers = pipe.execute()
        return {tag.decode() for tag in answers[0]}, [tag.decode() for tag in answers[1]] if self._lease is not None else []

    def _unacked(self) -> set[str]:
        return self._answered("tags", self._read)[0]

    def _janitor_channel(self):
        """The janitor's channel: restore_visible reads ``visibility_timeout`` from it (as shipped)."""
        return self._session.janitor(NEVER_WITHIN_A_RUN if self.guarded else self._timeout())

    def _timeout(self) -> float:
        """Seconds after which a delivery is past its lease: kombu's visibility_timeout, or the recovery's lease."""
        return visible_after(self._lease)

    def _visible_tags(self) -> list[str]:
        """The tags restore_visible's query lists (``tags_past``), read with the unacked tags."""
        return self._answered("tags", self._read)[1]

    # -- reading ------------------------------------------------------------------------
    def _state(self, delivery: _Delivery) -> ReservationState:
        if delivery.tag in self._unacked():
            return S.RESERVED
        removed_from, move = self._acked.get(delivery.tag, (None, None))
        if removed_from == delivery.reservation_id and move not in (Move.SETTLE_UNUSED, Move.FAIL):
            return S.CONFIRMED_EXISTING if move in EXISTING_MOVES else S.CONFIRMED
        return S.UNUSED  # restored to its queue, rejected, or acked on its task's failure

    def _past_lease(self, delivery: _Delivery) -> bool:
        """restore_visible's query lists its tag."""
        return delivery.tag in self._visible_tags()

    def _unexpired_because(self, delivery: _Delivery) -> str:
        return f"restore_visible's query does not list its delivery tag as unacked for {self._timeout():.0f} s under it"

    def snapshot(self) -> tuple:
        """Everything that decides this ledger's next answers, with what varies between equal states made canonical.

        The database's keys (from the image: no query) and fence's own records
        of its deliveries. Canonical: a delivery tag or a celery task id (a
        uuid4 per publish) is named by its rank in fence's records (the
        deliveries in order), then by first appearance in the keys, wherever it
        appears (a key, a hash field, inside a message's JSON), and a delivery
        time in ``unacked_index`` by the tick of the ledger's clock it stands at.

        kombu's binding keys (``_kombu.binding.*``) are in the image but not in
        the snapshot: whether they exist depends on kombu's in-memory record of
        what this process bound (its ``BrokerState``, shared by every world on
        the session), not on the world, and they decide no answer here: fence
        publishes to the anonymous exchange, which kombu routes by routing key
        alone, when it publishes and when restore_visible puts a message back
        (checked: a message unacked under another exchange stops the snapshot).
        """
        canonical = ranked_ids()
        deliveries = tuple(delivery + (self._messages[d.reservation_id].message._state,)
                           for d, delivery in zip(self._records().values(), self.records_snapshot(canonical)))
        image = self.image()
        for name, kind, value in image.keys:
            if kind == "hash" and name.decode() == UNACKED:
                routed = {json.loads(entry)[1] for _, entry in value}
                if routed - {""}:
                    raise BackendError(f"a message in kombu's unacked was published to exchange(s) {sorted(routed)}: "
                                       "the snapshot leaves out the bindings, which only the anonymous exchange ignores")
        keys = self._session.database.snapshot(image, self._now, leave_out=(BINDINGS,), canonical=canonical)
        acked = tuple(sorted((canonical(tag), rid, move.value) for tag, (rid, move) in self._acked.items()))
        return (deliveries, keys, acked, tuple(sorted(self._held)), self.failures_caught(), tuple(sorted(self._published)),
                tuple(sorted(self._count_by_key.items())), self._lease)

    def delivery_of(self, reservation_id: str) -> tuple[str, str]:
        """The delivery tag and celery task id of the message a reservation took."""
        delivery = self._records()[reservation_id]
        return delivery.tag, delivery.task_id

    def read_again(self) -> None:
        """Forget what Redis answered: someone else (a test's own restore_visible) moved kombu's keys."""
        self._forget_reads()

    # -- moving -------------------------------------------------------------------------
    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> _Delivery:
        worker = self._session.worker(reservation_id)
        self._writing()
        message = worker.basic_get(key, no_ack=False)
        if message is None and (self.guarded or key not in self._published):
            self._session.publish(key)
            self._published.add(key)
            message = worker.basic_get(key, no_ack=False)
        self._forget_reads()
        if message is None:
            raise IllegalMove(f"reserve {key!r} for {owner!r}: kombu's basic_get found no message in queue {key!r}")
        self._messages[reservation_id] = _Taken(message)
        return _Delivery(reservation_id, key, owner, deadline, message.delivery_tag, message.headers["id"])

    def _removing(self, delivery: _Delivery, move: Move, call: Callable[[], None], what: str) -> None:
        """Make kombu's ``call`` on its tag: accepted only if it removed the tag from unacked (kombu refuses nothing)."""
        self._moved(lambda: delivery.tag in self._unacked(), call,
                    f"kombu's {what} removed nothing: no delivery of its tag was unacked any more "
                    "(restored, rejected or acked before), and kombu accepts the call without a word")
        self._acked[delivery.tag] = (self._newest(delivery).reservation_id, move)

    def _confirm(self, delivery: _Delivery, move: Move) -> None:
        """The worker's ack after the body ran (Message.ack, basic_ack), as celery's worker with acks_late makes it."""
        self._removing(delivery, move, self._messages[delivery.reservation_id].message.ack,
                       f"ack of {delivery.reservation_id}")

    def _fail(self, delivery: _Delivery) -> None:
        """The worker's task raised: celery's acks_late failure path (``Request.on_failure``, see the module doc)."""
        message = self._messages[delivery.reservation_id].message
        if self._session.app.conf.task_acks_on_failure_or_timeout:
            call, what = message.ack, "ack on failure"
        else:
            call, what = (lambda: message.reject(requeue=False)), "reject(requeue=False) on failure"
        self._removing(delivery, Move.FAIL, call, f"{what} of {delivery.reservation_id}")

    def _release(self, delivery: _Delivery) -> None:
        self._restore_visible(delivery.tag)

    def _settle(self, delivery: _Delivery, move: Move) -> None:
        janitor, tag = self._janitor_channel(), delivery.tag
        if move is Move.SETTLE_EXISTING:
            self._removing(delivery, move, lambda: janitor.basic_ack(tag), f"basic_ack of {delivery.reservation_id}'s tag")
        else:
            self._removing(delivery, move, lambda: janitor.basic_reject(tag, requeue=False),
                           f"basic_reject(requeue=False) of {delivery.reservation_id}'s tag")

    def _restore_visible(self, tag: str) -> None:
        """kombu's restore_visible, paged to the one message at ``tag``'s place in its own order.

        The place is read with the server holding this copy (a claim may load its image,
        which ranks a tick's deliveries anew: see ``load``), never from a read made before.
        """
        self._restorer.claim(self)
        place = self._visible_tags().index(tag)
        before = set(self._unacked())
        self._writing()
        self._janitor_channel().qos.restore_visible(start=place, num=1, interval=1)
        self._forget_reads()
        restored = before - self._unacked()
        if restored != {tag}:
            raise BackendError(f"restore_visible(start={place}, num=1) restored {sorted(restored)}, not [{tag}]")


# -- one connection per storage, an emptied database per world ------------------------------
class Session(RedisSession):
    """One celery App on one Redis database, its kombu connections, and fence's own redis-py client beside them.

    fence's client reads kombu's keys (for the ledger's states, which the
    lockstep compares), moves time (``unacked_index`` scores) and empties the
    database between worlds; every queue move goes through celery and kombu.
    """

    LIBRARIES = {"celery": "celery", "kombu": "kombu", "redis-py": "redis"}

    def __init__(self, url: str, *, visibility_timeout: float) -> None:
        super().__init__(url, TIME, timestamps=(UNACKED_INDEX,))
        self._connections: dict[float | None, kombu.Connection] = {}
        try:
            self.app = make_app(url, visibility_timeout=visibility_timeout)
            self.producer = self.app.amqp.Producer(self._connection(None))
        except Exception as error:
            self.close()
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendError(f"{url}: cannot reach Redis there ({reason}); start one with scripts/redis.sh start") from None

    def _connection(self, visibility_timeout: float | None) -> kombu.Connection:
        """The app's connection, or one whose channels restore after ``visibility_timeout`` seconds."""
        if visibility_timeout not in self._connections:
            options = {} if visibility_timeout is None else {"visibility_timeout": visibility_timeout}
            connection = self.app.connection_for_write(transport_options=options)
            connection.connect()
            self.closing(connection.release)  # after its channels: they are opened after it
            self._connections[visibility_timeout] = connection
        return self._connections[visibility_timeout]

    def channel(self, *, visibility_timeout: float | None = None):
        """A new channel: one worker, or (with ``visibility_timeout``) the janitor."""
        channel = self._connection(visibility_timeout).channel()
        # A closed channel would restore what it holds unacked (restore_at_shutdown):
        # a world's workers are dropped, not shut down, and their messages die with the database.
        channel.do_restore = False
        self.closing(channel.close)
        return channel

    def new_worker(self):
        """A worker channel, for ``RedisSession.worker``'s one per reservation id.

        Every world (and every copy of one) that makes reservation ``job1/r2``
        takes it on the same channel: kombu's Redis transport keeps nothing on
        a channel that decides what basic_get or basic_ack do to the database
        (its in-memory record of delivered messages is only read at close, and
        fence's channels never restore at close), so a channel per reservation
        is a worker per attempt, and copies need no channels of their own.
        """
        return self.channel()

    def janitor(self, visibility_timeout: float):
        """The janitor's channel, whose restore_visible uses ``visibility_timeout`` (one per timeout)."""
        return self.worker(("janitor", visibility_timeout),
                           lambda: self.channel(visibility_timeout=visibility_timeout))

    def publish(self, key: str) -> None:
        """The task message for ``key``, published by celery itself (acks_late, the key's own queue)."""
        self.app.tasks[TASK_NAME].apply_async(args=[key], queue=key, producer=self.producer)


class CeleryStorage(TargetStorage):
    """World factories on celery and Redis: each world starts on an emptied Redis database.

    The destination is fence's in-memory one (``ModelStorage('memory:')``): the
    task's ticket is a write there. Like ``ModelStorage``, one world at a time
    lives on it.
    """

    LEDGER = CeleryLedger
    WHAT = "a celery target"

    def __init__(self, url: str, *, guarded: bool) -> None:
        if not url.startswith(("redis://", "unix://")):
            raise BackendError(f"{url!r}: celery's Redis transport needs a redis:// URL")
        super().__init__("memory:")
        self.guarded = guarded
        # Guarded, kombu's own restore must never beat the recovery (see recover_expired);
        # as shipped, the janitor's channel gets the visibility timeout of the runs' lease.
        self._open_session(lambda: Session(url, visibility_timeout=NEVER_WITHIN_A_RUN if guarded else 3600))


__all__ = [
    "NEVER_WITHIN_A_RUN", "TICK_SECONDS", "UNACKED", "UNACKED_INDEX", "CeleryLedger", "CeleryStorage",
    "attempt_id", "make_app", "recover_expired", "tags_past", "task_key", "unacked_message", "visible_after",
]
