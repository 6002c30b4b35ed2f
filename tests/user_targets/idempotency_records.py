"""A user's target on fence's public names only: an idempotency decorator whose failure handler deletes the record.

The library (``IdempotencyRecords``) is the shape of a common idempotency
decorator on Redis: one record per key (``idem:KEY``, a hash of the attempt
running it, its status and when its lease runs out). A call starts by creating
the record if there is none (and is refused while one exists), stores the
result on success, and on an exception deletes the key's record so that the
call can be made again. The recovery is fence's guard (``abandon-fenced``):
a record whose lease ran out is taken by the janitor, its attempt abandoned
at the destination unless it committed, and the record settled (completed,
or deleted for the retry).

The bug is the delete-on-exception: it deletes the key's record, not the
failing attempt's. An attempt the recovery abandoned (its commit refused)
raises, and its handler deletes the *retry's* in-progress record, so a third
attempt starts while the second still runs (issue 25 found that class in a
real decorator). ``tests/test_targets_failure.py`` finds it through ``fence
targets --target`` and ``fence.testing.check_target``.

Model time: a record keeps its lease's end as a model tick (``deadline``), so
no stored instant moves with the clock; that is this target's own choice, fit
for a library written for the test.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from fence import POLICIES
from fence.targets import Target
from fence.targets.images import RedisSession
from fence.targets.protocol import (
    CapacityExhausted, IllegalMove, ModelTime, Move, Reservation, ReservationState, TargetLedger, TargetStorage,
    refused_unless,
)


# -- the library under test -----------------------------------------------------------------
class IdempotencyRecords:
    """One record per key: ``idem:KEY`` -> {attempt, status (running, held, done, done-existing), deadline}."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def record(self, key: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.client.hgetall(f"idem:{key}").items()}

    def start(self, key: str, attempt: str, deadline: float) -> bool:
        """Begin a call: create the key's record unless one exists."""
        if not self.client.hsetnx(f"idem:{key}", "attempt", attempt):
            return False
        self.client.hset(f"idem:{key}", mapping={"status": "running", "deadline": deadline})
        return True

    def succeed(self, key: str, attempt: str, status: str = "done") -> bool:
        """The call returned: store its result on the attempt's own record."""
        if self.record(key).get("attempt") != attempt:
            return False
        self.client.hset(f"idem:{key}", "status", status)
        return True

    def on_exception(self, key: str, attempt: str, *, owner_checked: bool = False) -> bool:
        """The call raised: delete the key's record so the call can be made again.

        As written, whoever's record it is (the bug); ``owner_checked``, only the failing attempt's own.
        """
        if owner_checked and self.record(key).get("attempt") != attempt:
            return False
        return bool(self.client.delete(f"idem:{key}"))


# -- the fence target ---------------------------------------------------------------------------
TIME = ModelTime(tick_seconds=60.0)
S = ReservationState
STATES = {"running": S.RESERVED, "held": S.OUTCOME_UNKNOWN, "done": S.CONFIRMED, "done-existing": S.CONFIRMED_EXISTING}


@dataclass(frozen=True)
class Call:
    reservation_id: str
    key: str
    owner: str
    deadline: float


class RecordsLedger(TargetLedger):
    """A reserve is ``start``, a confirm ``succeed``, a failure ``on_exception``; the janitor holds and settles records."""

    def __init__(self, session: Session, capacity: int, *, guarded: bool) -> None:
        super().__init__(session, capacity, guarded=guarded, time=TIME)
        self._calls: dict[str, Call] = {}
        self._restoring(session.restorer)

    def snapshot(self) -> tuple:
        return (tuple(self._calls.values()), self._session.database.snapshot(self.image(), self._now),
                tuple(sorted(self._count_by_key.items())), self._lease)

    def _records(self) -> dict[str, Call]:
        return self._calls

    def _own(self, call: Call) -> dict[str, str]:
        """The key's record if it is this call's, else {} (deleted, or another attempt's)."""
        self._reading()
        record = self._session.records.record(call.key)
        return record if record.get("attempt") == call.owner else {}

    def _state(self, call: Call) -> ReservationState:
        return STATES.get(self._own(call).get("status"), S.UNUSED)

    def _past_lease(self, call: Call) -> bool:
        record = self._own(call)
        return record.get("status") == "running" and float(record["deadline"]) <= self._now

    def _move_clock(self, ticks: float) -> None:
        """Nothing stored moves: a record keeps its lease's end as a model tick."""

    def _confirm(self, call: Call, move: Move) -> Call:
        self._writing()
        done = "done-existing" if move is Move.CONFIRM_EXISTING else "done"
        refused_unless(self._session.records.succeed(call.key, call.owner, done),
                       f"{move.value} by {call.owner}: the record of {call.key!r} is not its own")
        return call

    def _fail(self, call: Call) -> Call:
        self._writing()
        deleted = self._session.records.on_exception(call.key, call.owner, owner_checked=self._session.owner_checked)
        refused_unless(deleted, f"{call.key!r} has no record of {call.owner!r} to delete")
        return call

    def reserve(self, key: str, owner: str, now: float | None, lease: float) -> Reservation:
        self._judged_by(lease)
        self._move_time(now)
        if self.held >= self.capacity:
            raise CapacityExhausted(f"reserve {key!r} for {owner!r}: {self.capacity} unit(s), all held")
        self._writing()
        deadline = (now or 0) + lease
        if not self._session.records.start(key, owner, deadline):
            raise IllegalMove(f"reserve {key!r} for {owner!r}: a record of that key exists")
        call = Call(self._next_id(key), key, owner, deadline)
        self._taken(key)
        self._calls[call.reservation_id] = call
        return self._reservation(call)

    def apply(self, reservation_id: str, move: Move) -> Reservation:
        call = self._calls[reservation_id]
        status = self._own(call).get("status")
        records, name = self._session.records, f"idem:{call.key}"
        if move is Move.EXPIRE_AND_HOLD and self._past_lease(call):
            self._writing()
            records.client.hset(name, "status", "held")
        elif move is Move.EXPIRE_AND_RELEASE and self._past_lease(call) or move is Move.SETTLE_UNUSED and status == "held":
            self._writing()
            records.client.delete(name)
        elif move is Move.SETTLE_EXISTING and status == "held":
            self._writing()
            records.client.hset(name, "status", "done-existing")
        else:
            raise IllegalMove(f"{move.value} on {reservation_id}: its record is {status or 'gone'}")
        return self._reservation(call)


class Session(RedisSession):
    def __init__(self, url: str, owner_checked: bool) -> None:
        super().__init__(url, TIME)
        self.records = IdempotencyRecords(self.client)
        self.owner_checked = owner_checked


class RecordsStorage(TargetStorage):
    LEDGER = RecordsLedger
    WHAT = "the idempotency records test target"

    def __init__(self, url: str, *, guarded: bool = True, owner_checked: bool = False) -> None:
        super().__init__("memory:")  # the call's effect goes to fence's in-memory destination
        self.guarded = guarded
        self._open_session(lambda: Session(url, owner_checked))


ROW = Target(
    row="idempotency-records", system="redis", policy=POLICIES["abandon-fenced"], server="redis",
    recovery="fence.guard: a record past its lease is held, its attempt abandoned unless it committed, then "
    "completed or deleted for the retry; a call that raises deletes the key's record (whoever's it is)",
    time="a record keeps its lease's end as a model tick: nothing moves", storage=f"{__file__}:RecordsStorage",
    explorable=True,
)

OWNER_CHECKED = Target(
    row="idempotency-records-owner-checked", system="redis", policy=POLICIES["abandon-fenced"], server="redis",
    recovery="as idempotency-records, with a delete-on-exception that deletes only the failing attempt's own record",
    time="a record keeps its lease's end as a model tick: nothing moves", storage=f"{__file__}:RecordsStorage",
    options={"owner_checked": True}, explorable=True,
)
"""The control: the same decorator with the handler fixed; no stale failure report is accepted."""
