"""The reservation ledger: a pool of capacity units handed out under leases.

Theory of operation
-------------------
A job that wants to spend one unit of the fleet's shared quota reserves it. The
reservation names the job's idempotency key, the attempt that owns it and a lease
deadline. The owner confirms once its effect has landed; if it falls silent, a
janitor notices the expired lease and decides, by its policy, whether the unit was
spent or may return to the pool.

Rules of this module:

* Time is a value passed in (``now``). Nothing here reads a clock, sleeps or
  starts a thread, so the same ledger runs under the models' logical clock and
  under the real monotonic clock of the experiments.
* Every legal move is one row of ``TRANSITIONS``. A move that is not in the table
  raises ``IllegalMove`` naming the move and the state, and changes nothing.
* A unit is held by every reservation that is not ``UNUSED``. ``UNUSED`` is the
  only way back to the pool and it is terminal, so no unit is freed twice.
  That is quota semantics, the default. ``Ledger(capacity, slots=True)`` is the
  one exception, for fleets whose units are concurrency slots rather than a
  quota: there a ``confirmed`` or ``confirmed_existing`` reservation also stops
  holding its unit, because its work is finished. Both are terminal, so even
  then no unit is freed twice.
* Workers address the ledger by idempotency key and attempt identity, as a
  real ledger keyed by job would. The ledger checks that the caller owns the
  key's *current* reservation, so a late confirm from a stale attempt cannot
  touch a newer one -- unless attempts share one identity, which is exactly
  the ambiguity the shared-identity option exists to show.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from fence.base.copying import CopyOnWrite, copy_frozen_value, copy_with_records
from fence.base.errors import CapacityExhausted, IllegalMove, StaleAttempt


class ReservationState(enum.Enum):
    RESERVED = "reserved"
    """Held under a live or expired lease; nobody has decided anything yet."""
    CONFIRMED = "confirmed"
    """The owner reported its effect landed: the unit is spent."""
    OUTCOME_UNKNOWN = "outcome_unknown"
    """The lease expired and the janitor holds the unit until there is evidence."""
    CONFIRMED_EXISTING = "confirmed_existing"
    """Evidence from the destination shows the effect exists: the unit is spent."""
    UNUSED = "unused"
    """Evidence (or a naive policy) says no effect happened: the unit is back."""


class Move(enum.Enum):
    """The moves a reservation can make, named for who makes them and why."""

    CONFIRM = "confirm"  # owner: my write landed
    CONFIRM_EXISTING = "confirm_existing"  # owner: the destination says the key exists
    EXPIRE_AND_HOLD = "expire_and_hold"  # janitor: lease expired, wait for evidence
    EXPIRE_AND_RELEASE = "expire_and_release"  # janitor (naive): lease expired, free it
    SETTLE_EXISTING = "settle_existing"  # janitor: evidence of the effect
    SETTLE_UNUSED = "settle_unused"  # janitor: evidence of no effect
    FAIL = "fail"  # owner: my attempt raised; treat the reservation as an expired one


S = ReservationState
TRANSITIONS: dict[ReservationState, dict[Move, ReservationState]] = {
    S.RESERVED: {
        Move.CONFIRM: S.CONFIRMED,
        Move.CONFIRM_EXISTING: S.CONFIRMED_EXISTING,
        Move.EXPIRE_AND_HOLD: S.OUTCOME_UNKNOWN,
        Move.EXPIRE_AND_RELEASE: S.UNUSED,
        # The owner's failure report: it knows no more than the janitor about whether its
        # effect happened (it may have raised after sending), so the janitor's policy
        # decides, exactly as for an expired lease that it holds. Refused once the
        # janitor took the lease back (only a reserved reservation may fail).
        Move.FAIL: S.OUTCOME_UNKNOWN,
    },
    S.OUTCOME_UNKNOWN: {
        # The owner's own report is evidence too: a late ack beats the janitor.
        Move.CONFIRM: S.CONFIRMED,
        Move.CONFIRM_EXISTING: S.CONFIRMED_EXISTING,
        Move.SETTLE_EXISTING: S.CONFIRMED_EXISTING,
        Move.SETTLE_UNUSED: S.UNUSED,
    },
    S.CONFIRMED: {},
    S.CONFIRMED_EXISTING: {},
    S.UNUSED: {},
}
del S

HOLDING_STATES = frozenset(s for s in ReservationState if s is not ReservationState.UNUSED)
FINISHED_STATES = frozenset({ReservationState.CONFIRMED, ReservationState.CONFIRMED_EXISTING})
"""States whose work is done: with ``Ledger(slots=True)`` they give their unit back."""
OWNER_MOVES = frozenset({Move.CONFIRM, Move.CONFIRM_EXISTING, Move.FAIL})


@dataclass(frozen=True)
class Reservation:
    reservation_id: str
    key: str
    owner: str
    """The identity of the attempt that holds it (per attempt, or shared)."""
    deadline: float
    state: ReservationState = ReservationState.RESERVED

    @property
    def holds_unit(self) -> bool:
        return self.state in HOLDING_STATES

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def __deepcopy__(self, memo):
        # A world with a user's plug-ins is deep-copied; fence's own value is its own copy.
        return copy_frozen_value(self, memo, Reservation)


def table_mermaid(table: dict, first: enum.Enum) -> str:
    """A state diagram drawn from a table of {state: {move: state}}, entered by a reserve."""
    lines = ["stateDiagram-v2", f"    [*] --> {first.value}: reserve"]
    for source, moves in table.items():
        for move, target in moves.items():
            lines.append(f"    {source.value} --> {target.value}: {move.value}")
    return "\n".join(lines)


def transitions_mermaid() -> str:
    """The state diagram, drawn from ``TRANSITIONS`` so it can never drift from it."""
    return table_mermaid(TRANSITIONS, ReservationState.RESERVED)


# -- the decisions, as pure functions ---------------------------------------------
# Ledger below and the SQL ledgers of fence.backends make every decision through
# these, so a refusal is the same exception with the same words on every backend.
def next_state(reservation: Reservation, move: Move) -> ReservationState:
    """The state ``move`` takes ``reservation`` to, or IllegalMove naming what it allows."""
    target = TRANSITIONS[reservation.state].get(move)
    if target is None:
        allowed = ", ".join(m.value for m in TRANSITIONS[reservation.state]) or "none"
        raise IllegalMove(
            f"{move.value} on {reservation.reservation_id}: it is {reservation.state.value}, "
            f"which allows: {allowed}"
        )
    return target


def check_reserve(
    key: str, owner: str, lease: float, capacity: int, free: int, current: Reservation | None
) -> None:
    """Refuse a reservation the ledger cannot make (no unit free, key still held)."""
    if not lease >= 0:  # also refuses NaN, which would never expire
        raise ValueError(f"lease must be >= 0 seconds (or ticks), got {lease!r}")
    if free < 1:
        raise CapacityExhausted(
            f"reserve {key!r} for {owner!r}: all {capacity} units are held; "
            "wait for a confirm or for the janitor to settle an expired lease"
        )
    if current is not None and current.holds_unit:
        raise IllegalMove(
            f"reserve {key!r} for {owner!r}: reservation {current.reservation_id} "
            f"for that key is still {current.state.value}; settle it first"
        )


def check_owner(key: str, owner: str, move: Move, current: Reservation | None) -> None:
    """Refuse an owner's move by anyone but the owner of the key's current reservation."""
    if move not in OWNER_MOVES:
        raise IllegalMove(f"{move.value} is the janitor's move, not an owner's")
    if current is None:
        raise StaleAttempt(f"{move.value} {key!r} by {owner!r}: the key has no reservation")
    if current.owner != owner:
        raise StaleAttempt(
            f"{move.value} {key!r} by {owner!r}: the current reservation "
            f"{current.reservation_id} belongs to {current.owner!r}; a stale "
            "attempt may not change it"
        )


class Ledger(CopyOnWrite):
    """N capacity units, and every reservation ever made against them."""

    SNAPSHOT_IS_COMPLETE = True
    """Its ``snapshot()`` holds everything that decides its next answers (``fence.model.drain.snapshot_is_complete``)."""

    def __init__(self, capacity: int, *, slots: bool = False) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a whole number of units >= 1, got {capacity!r}")
        self.capacity = capacity
        self.slots = slots
        """True: a finished (confirmed) reservation gives its unit back; False: quota."""
        self._reservations: dict[str, Reservation] = {}
        self._current_by_key: dict[str, str] = {}
        self._count_by_key: dict[str, int] = {}
        self.units_freed: dict[str, int] = {}
        """How many times each reservation returned its unit (must stay <= 1)."""

    def __deepcopy__(self, memo: dict) -> Ledger:
        # The explorer deep-copies a user's subclass (never through copy(), which
        # knows only these records): the records, which hold only immutable
        # values, are copied one level; whatever the subclass adds is deep-copied.
        return copy_with_records(self, memo, _RECORDS, _RECORD_VALUES)

    def copy(self) -> Ledger:
        """An independent ledger in the same state, copied on write.

        The copy shares this ledger's dicts until either of the two makes a move
        (``reserve`` and ``apply`` copy them first, ``_own``): most of the
        explorer's copies never move the ledger. Reservations are frozen, so
        even an owned copy shares them.
        """
        return self._copy_on_write()

    # -- reading ---------------------------------------------------------------
    def get(self, reservation_id: str) -> Reservation:
        return self._reservations[reservation_id]

    def reservations(self) -> list[Reservation]:
        return list(self._reservations.values())

    def current(self, key: str) -> Reservation | None:
        reservation_id = self._current_by_key.get(key)
        return None if reservation_id is None else self._reservations[reservation_id]

    def holds(self, reservation: Reservation) -> bool:
        """Does this reservation take a unit out of the pool (see ``slots``)?"""
        if self.slots and reservation.state in FINISHED_STATES:
            return False
        return reservation.holds_unit

    @property
    def held(self) -> int:
        if not self.slots:  # quota: every state but unused holds (HOLDING_STATES), compared by identity
            unused = ReservationState.UNUSED
            return sum(1 for r in self._reservations.values() if r.state is not unused)
        return sum(1 for r in self._reservations.values() if self.holds(r))

    @property
    def free(self) -> int:
        return self.capacity - self.held

    def expired(self, now: float) -> list[Reservation]:
        """Reservations whose lease has run out and that nobody has looked at yet."""
        return [
            r
            for r in self._reservations.values()
            if r.state is ReservationState.RESERVED and r.expired(now)
        ]

    # -- moving ----------------------------------------------------------------
    def reserve(self, key: str, owner: str, now: float, lease: float) -> Reservation:
        check_reserve(key, owner, lease, self.capacity, self.free, self.current(key))
        self._own()
        count = self._count_by_key.get(key, 0) + 1
        self._count_by_key[key] = count
        reservation = Reservation(f"{key}/r{count}", key, owner, now + lease)
        self._reservations[reservation.reservation_id] = reservation
        self._current_by_key[key] = reservation.reservation_id
        return reservation

    def apply(self, reservation_id: str, move: Move) -> Reservation:
        """Make one move from the table on one reservation, or raise and change nothing."""
        reservation = self._reservations[reservation_id]
        moved = replace(reservation, state=next_state(reservation, move))
        self._own()
        self._reservations[reservation_id] = moved
        if self.holds(reservation) and not self.holds(moved):
            self.units_freed[reservation_id] = self.units_freed.get(reservation_id, 0) + 1
        return moved

    def owner_move(self, key: str, owner: str, move: Move) -> Reservation:
        """A worker's move, addressed by key: only the current owner may make it."""
        current = self.current(key)
        check_owner(key, owner, move, current)
        return self.apply(current.reservation_id, move)

    def confirm(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM)

    def confirm_existing(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM_EXISTING)

    def fail(self, key: str, owner: str) -> Reservation:
        """The owner raised: its reservation becomes outcome_unknown, for the janitor's policy to settle.

        The one method a ledger implements for the worker's failure path
        (``ModelConfig.failures``): refuse with ``StaleAttempt`` if ``owner`` does
        not own the key's current reservation, with ``IllegalMove`` if that
        reservation is no longer reserved (the janitor took it back first).
        """
        return self.owner_move(key, owner, Move.FAIL)

    # -- model checking --------------------------------------------------------
    def snapshot(self) -> frozenset:
        """Everything that decides this ledger's next answers, hashable: the explorer's key for it.

        ``reservations_picture`` of its reservations.
        """
        return reservations_picture(self._reservations.values())


def reservations_picture(reservations) -> frozenset:
    """Each reservation's id, owner, state and (while it is reserved) deadline, as a set.

    The order a ledger lists them in decides nothing (two jobs reserving in
    either order hold the same), and a set lets a renaming of the jobs order
    them again. A deadline decides only whether a reserved lease has expired:
    once the reservation moved on, which deadline it had decides nothing.
    """
    reserved = ReservationState.RESERVED
    return frozenset(
        (r.reservation_id, r.owner, r.deadline if r.state is reserved else None, r.state.value)
        for r in reservations
    )


_RECORDS = frozenset({"_reservations", "_current_by_key", "_count_by_key", "units_freed"})
_RECORD_VALUES = frozenset({str, int, Reservation})
