"""The Ledger protocol's contract, on every implementation: the transition table, capacity, ownership.

Each test that takes ``open_implementation`` runs on the in-memory Ledger, SQLite and
PostgreSQL (conftest.py); the constructor checks and the diagram are the in-memory one's own.
"""

from __future__ import annotations

import math

import pytest

from fence.base.errors import CapacityExhausted, IllegalMove, StaleAttempt
from fence.model.ledger import (
    TRANSITIONS,
    Ledger,
    Move,
    Reservation,
    ReservationState,
    transitions_mermaid,
)

S = ReservationState

# The table written out by hand, so a silent change to TRANSITIONS fails a test.
EXPECTED_TRANSITIONS: dict[ReservationState, dict[Move, ReservationState]] = {
    S.RESERVED: {
        Move.CONFIRM: S.CONFIRMED,
        Move.CONFIRM_EXISTING: S.CONFIRMED_EXISTING,
        Move.EXPIRE_AND_HOLD: S.OUTCOME_UNKNOWN,
        Move.EXPIRE_AND_RELEASE: S.UNUSED,
        Move.FAIL: S.OUTCOME_UNKNOWN,
    },
    S.OUTCOME_UNKNOWN: {
        Move.CONFIRM: S.CONFIRMED,
        Move.CONFIRM_EXISTING: S.CONFIRMED_EXISTING,
        Move.SETTLE_EXISTING: S.CONFIRMED_EXISTING,
        Move.SETTLE_UNUSED: S.UNUSED,
    },
    S.CONFIRMED: {},
    S.CONFIRMED_EXISTING: {},
    S.UNUSED: {},
}

# How to bring a fresh RESERVED reservation into each state, spelled out by hand.
PATH_TO_STATE: dict[ReservationState, tuple[Move, ...]] = {
    S.RESERVED: (),
    S.CONFIRMED: (Move.CONFIRM,),
    S.CONFIRMED_EXISTING: (Move.CONFIRM_EXISTING,),
    S.OUTCOME_UNKNOWN: (Move.EXPIRE_AND_HOLD,),
    S.UNUSED: (Move.EXPIRE_AND_RELEASE,),
}

ALL_PAIRS = [(state, move) for state in ReservationState for move in Move]
LEGAL_PAIRS = [(s, m) for s, m in ALL_PAIRS if m in EXPECTED_TRANSITIONS[s]]
ILLEGAL_PAIRS = [(s, m) for s, m in ALL_PAIRS if m not in EXPECTED_TRANSITIONS[s]]


def _pair_id(pair: tuple[ReservationState, Move]) -> str:
    return f"{pair[0].value}-{pair[1].value}"


def ledger_with_reservation_in(open_implementation, state: ReservationState) -> tuple[Ledger, Reservation]:
    ledger = open_implementation(2).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    for move in PATH_TO_STATE[state]:
        reservation = ledger.apply(reservation.reservation_id, move)
    assert reservation.state is state
    return ledger, reservation


def test_transition_table_is_exactly_the_documented_one():
    """TRANSITIONS holds exactly the documented moves and targets, no more and no fewer."""
    assert TRANSITIONS == EXPECTED_TRANSITIONS


def test_every_state_has_a_row_in_the_table():
    """Every ReservationState has a row, so apply() never meets an unknown state."""
    assert set(TRANSITIONS) == set(ReservationState)


def test_parametrization_covers_every_state_move_pair():
    """The legal and illegal cases together are every (state, move) pair exactly once."""
    assert len(LEGAL_PAIRS) + len(ILLEGAL_PAIRS) == len(ReservationState) * len(Move)
    assert len(LEGAL_PAIRS) == 9  # reserved --fail--> outcome_unknown joined the table (the failure path)


@pytest.mark.parametrize(("state", "move"), LEGAL_PAIRS, ids=map(_pair_id, LEGAL_PAIRS))
def test_legal_move_reaches_the_table_target(open_implementation, state, move):
    """A legal move takes the reservation to exactly the target in the table and keeps its identity."""
    ledger, reservation = ledger_with_reservation_in(open_implementation, state)
    moved = ledger.apply(reservation.reservation_id, move)
    expected = EXPECTED_TRANSITIONS[state][move]
    assert moved.state is expected
    assert ledger.get(reservation.reservation_id) == moved
    assert (moved.reservation_id, moved.key, moved.owner, moved.deadline) == (
        reservation.reservation_id,
        reservation.key,
        reservation.owner,
        reservation.deadline,
    )


@pytest.mark.parametrize(("state", "move"), ILLEGAL_PAIRS, ids=map(_pair_id, ILLEGAL_PAIRS))
def test_illegal_move_raises_and_changes_nothing(open_implementation, state, move):
    """An illegal move raises IllegalMove naming the move and state, and leaves the ledger untouched."""
    ledger, reservation = ledger_with_reservation_in(open_implementation, state)
    snapshot_before = ledger.snapshot()
    freed_before = dict(ledger.units_freed)
    with pytest.raises(IllegalMove) as raised:
        ledger.apply(reservation.reservation_id, move)
    assert move.value in str(raised.value)
    assert state.value in str(raised.value)
    assert ledger.get(reservation.reservation_id) == reservation
    assert ledger.snapshot() == snapshot_before
    assert ledger.units_freed == freed_before


def test_illegal_move_is_also_a_value_error(open_implementation):
    """IllegalMove can be caught as the builtin ValueError it resembles."""
    ledger, reservation = ledger_with_reservation_in(open_implementation, S.CONFIRMED)
    with pytest.raises(ValueError):
        ledger.apply(reservation.reservation_id, Move.SETTLE_UNUSED)


@pytest.mark.parametrize("state", list(ReservationState), ids=lambda s: s.value)
def test_holds_unit_is_every_state_but_unused(open_implementation, state):
    """A reservation holds its unit in every state except UNUSED, and held/free follow."""
    ledger, reservation = ledger_with_reservation_in(open_implementation, state)
    holds = state is not S.UNUSED
    assert reservation.holds_unit is holds
    assert ledger.held == (1 if holds else 0)
    assert ledger.free == (1 if holds else 2)


def test_reserve_creates_a_reserved_reservation_with_deadline_now_plus_lease(open_implementation):
    """reserve() records key, owner, deadline now+lease and state RESERVED, and makes it current."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=5, lease=3)
    assert reservation == Reservation("job1/r1", "job1", "job1#1", 8, S.RESERVED)
    assert ledger.current("job1") == reservation
    assert ledger.reservations() == [reservation]
    assert ledger.held == 1
    assert ledger.free == 0


def test_lease_expires_exactly_at_the_deadline(open_implementation):
    """A lease is expired at now == deadline and not one tick before."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    assert ledger.expired(1) == []
    assert ledger.expired(2) == [reservation]
    assert reservation.expired(2) is True
    assert reservation.expired(1) is False


def test_expired_lists_only_reserved_reservations(open_implementation):
    """expired() ignores reservations that already left RESERVED, even past their deadline."""
    ledger = open_implementation(2).ledger
    held = ledger.reserve("job1", "job1#1", now=0, lease=1)
    ledger.apply(held.reservation_id, Move.EXPIRE_AND_HOLD)
    still_reserved = ledger.reserve("job2", "job2#1", now=0, lease=1)
    assert ledger.expired(10) == [still_reserved]


def test_lease_zero_is_allowed_and_expires_immediately(open_implementation):
    """A zero lease is legal and the reservation is expired at the moment it is made."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=4, lease=0)
    assert reservation.deadline == 4
    assert ledger.expired(4) == [reservation]


def test_capacity_exhausted_raises_and_adds_nothing(open_implementation):
    """Reserving when every unit is held raises CapacityExhausted and records no reservation."""
    ledger = open_implementation(1).ledger
    first = ledger.reserve("job1", "job1#1", now=0, lease=2)
    with pytest.raises(CapacityExhausted):
        ledger.reserve("job2", "job2#1", now=0, lease=2)
    assert ledger.reservations() == [first]
    assert ledger.current("job2") is None
    assert ledger.held == 1


def test_capacity_exhausted_is_also_a_runtime_error(open_implementation):
    """CapacityExhausted can be caught as the builtin RuntimeError it resembles."""
    ledger = open_implementation(1).ledger
    ledger.reserve("job1", "job1#1", now=0, lease=2)
    with pytest.raises(RuntimeError):
        ledger.reserve("job2", "job2#1", now=0, lease=2)


def test_confirmed_unit_stays_spent_and_blocks_capacity(open_implementation):
    """A CONFIRMED reservation keeps its unit, so the pool stays exhausted."""
    ledger = open_implementation(1).ledger
    ledger.reserve("job1", "job1#1", now=0, lease=2)
    ledger.confirm("job1", "job1#1")
    with pytest.raises(CapacityExhausted):
        ledger.reserve("job2", "job2#1", now=0, lease=2)
    assert ledger.units_freed == {}


def test_released_unit_can_be_reserved_again(open_implementation):
    """Once a reservation is UNUSED its unit returns and another key can reserve it."""
    ledger = open_implementation(1).ledger
    first = ledger.reserve("job1", "job1#1", now=0, lease=2)
    ledger.apply(first.reservation_id, Move.EXPIRE_AND_RELEASE)
    second = ledger.reserve("job2", "job2#1", now=3, lease=2)
    assert second.state is S.RESERVED
    assert ledger.held == 1


@pytest.mark.parametrize("capacity", [0, -1])
def test_capacity_below_one_raises_value_error(capacity):
    """A ledger with fewer than one unit is refused with ValueError."""
    with pytest.raises(ValueError):
        Ledger(capacity)


@pytest.mark.parametrize("capacity", [1.0, "1", None])
def test_capacity_that_is_not_a_whole_number_raises_value_error(capacity):
    """A capacity that is not an int is refused with ValueError."""
    with pytest.raises(ValueError):
        Ledger(capacity)


@pytest.mark.parametrize("lease", [-1, -0.5])
def test_negative_lease_raises_value_error_and_reserves_nothing(open_implementation, lease):
    """A negative lease is refused with ValueError and no reservation is recorded."""
    ledger = open_implementation(1).ledger
    with pytest.raises(ValueError):
        ledger.reserve("job1", "job1#1", now=0, lease=lease)
    assert ledger.reservations() == []
    assert ledger.current("job1") is None


def test_nan_lease_raises_value_error_and_reserves_nothing(open_implementation):
    """A NaN lease is not '>= 0', so it is refused rather than creating a lease that never expires."""
    ledger = open_implementation(1).ledger
    with pytest.raises(ValueError):
        ledger.reserve("job1", "job1#1", now=0, lease=math.nan)
    assert ledger.reservations() == []
    assert ledger.free == 1


def test_reserve_again_while_key_still_holds_raises_illegal_move(open_implementation):
    """A key whose current reservation still holds a unit cannot be reserved a second time."""
    ledger = open_implementation(2).ledger
    first = ledger.reserve("job1", "job1#1", now=0, lease=2)
    with pytest.raises(IllegalMove):
        ledger.reserve("job1", "job1#2", now=1, lease=2)
    assert ledger.reservations() == [first]
    assert ledger.current("job1") == first


def test_reserve_after_release_numbers_the_new_reservation_and_makes_it_current(open_implementation):
    """After UNUSED the key can be reserved again as r2, which becomes the key's current reservation."""
    ledger = open_implementation(1).ledger
    first = ledger.reserve("job1", "job1#1", now=0, lease=2)
    ledger.apply(first.reservation_id, Move.EXPIRE_AND_RELEASE)
    second = ledger.reserve("job1", "job1#2", now=3, lease=2)
    assert second.reservation_id == "job1/r2"
    assert ledger.current("job1") == second
    assert ledger.get("job1/r1").state is S.UNUSED


@pytest.mark.parametrize(
    "path",
    [(Move.EXPIRE_AND_RELEASE,), (Move.EXPIRE_AND_HOLD, Move.SETTLE_UNUSED)],
    ids=["naive-release", "hold-then-settle-unused"],
)
def test_unit_is_freed_exactly_once_and_unused_is_terminal(open_implementation, path):
    """Reaching UNUSED records one free, and every further move on it is refused."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    for move in path:
        ledger.apply(reservation.reservation_id, move)
    assert ledger.units_freed == {"job1/r1": 1}
    for move in Move:
        with pytest.raises(IllegalMove):
            ledger.apply(reservation.reservation_id, move)
    assert ledger.units_freed == {"job1/r1": 1}
    assert ledger.get("job1/r1").state is S.UNUSED


@pytest.mark.parametrize(
    "path",
    [
        (Move.CONFIRM,),
        (Move.CONFIRM_EXISTING,),
        (Move.EXPIRE_AND_HOLD,),
        (Move.EXPIRE_AND_HOLD, Move.SETTLE_EXISTING),
        (Move.EXPIRE_AND_HOLD, Move.CONFIRM),
    ],
    ids=lambda p: "+".join(m.value for m in p),
)
def test_moves_that_keep_the_unit_free_nothing(open_implementation, path):
    """Moves that end in a holding state never count a freed unit."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    for move in path:
        ledger.apply(reservation.reservation_id, move)
    assert ledger.units_freed == {}
    assert ledger.held == 1


def test_owner_confirm_moves_the_current_reservation(open_implementation):
    """The current owner's confirm takes its reservation to CONFIRMED."""
    ledger = open_implementation(1).ledger
    ledger.reserve("job1", "job1#1", now=0, lease=2)
    moved = ledger.confirm("job1", "job1#1")
    assert moved.reservation_id == "job1/r1"
    assert moved.state is S.CONFIRMED


def test_owner_confirm_existing_moves_the_current_reservation(open_implementation):
    """The current owner's confirm_existing takes its reservation to CONFIRMED_EXISTING."""
    ledger = open_implementation(1).ledger
    ledger.reserve("job1", "job1#1", now=0, lease=2)
    moved = ledger.confirm_existing("job1", "job1#1")
    assert moved.state is S.CONFIRMED_EXISTING


def test_late_owner_confirm_beats_the_janitor_hold(open_implementation):
    """An owner's confirm on an OUTCOME_UNKNOWN reservation lands as CONFIRMED."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    ledger.apply(reservation.reservation_id, Move.EXPIRE_AND_HOLD)
    assert ledger.confirm("job1", "job1#1").state is S.CONFIRMED


def test_owner_confirm_on_released_reservation_is_illegal_and_changes_nothing(open_implementation):
    """The owner's own confirm after its reservation became UNUSED is refused and frees nothing twice."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    ledger.apply(reservation.reservation_id, Move.EXPIRE_AND_RELEASE)
    before = ledger.snapshot()
    with pytest.raises(IllegalMove):
        ledger.confirm("job1", "job1#1")
    assert ledger.snapshot() == before
    assert ledger.units_freed == {"job1/r1": 1}


@pytest.mark.parametrize(
    "move", [Move.EXPIRE_AND_HOLD, Move.EXPIRE_AND_RELEASE, Move.SETTLE_EXISTING, Move.SETTLE_UNUSED]
)
def test_owner_cannot_make_a_janitor_move(open_implementation, move):
    """owner_move refuses janitor moves with IllegalMove, even from the rightful owner."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    with pytest.raises(IllegalMove):
        ledger.owner_move("job1", "job1#1", move)
    assert ledger.get(reservation.reservation_id) == reservation


def test_confirm_for_a_key_with_no_reservation_is_stale(open_implementation):
    """Confirming a key the ledger never reserved raises StaleAttempt."""
    ledger = open_implementation(1).ledger
    with pytest.raises(StaleAttempt):
        ledger.confirm("job1", "job1#1")
    assert ledger.reservations() == []


@pytest.mark.parametrize("move", [Move.CONFIRM, Move.CONFIRM_EXISTING, Move.FAIL])
def test_stale_attempt_confirm_raises_and_changes_nothing(open_implementation, move):
    """A late confirm from an attempt that no longer owns the key is refused and both reservations stay put."""
    ledger = open_implementation(1).ledger
    first = ledger.reserve("job1", "job1#1", now=0, lease=2)
    ledger.apply(first.reservation_id, Move.EXPIRE_AND_RELEASE)
    second = ledger.reserve("job1", "job1#2", now=3, lease=2)
    before = ledger.snapshot()
    with pytest.raises(StaleAttempt) as raised:
        ledger.owner_move("job1", "job1#1", move)
    assert "job1#1" in str(raised.value)
    assert ledger.snapshot() == before
    assert ledger.get(second.reservation_id).state is S.RESERVED
    assert ledger.get(first.reservation_id).state is S.UNUSED
    assert ledger.units_freed == {"job1/r1": 1}


def test_stale_attempt_is_also_a_permission_error(open_implementation):
    """StaleAttempt can be caught as the builtin PermissionError it resembles."""
    ledger = open_implementation(1).ledger
    ledger.reserve("job1", "job1#1", now=0, lease=2)
    with pytest.raises(PermissionError):
        ledger.confirm("job1", "someone-else")


def test_shared_identity_late_confirm_lands_on_the_newer_reservation(open_implementation):
    """With one identity for every attempt, a stale attempt's late confirm moves the newer reservation."""
    ledger = open_implementation(1).ledger
    first = ledger.reserve("job1", "job1", now=0, lease=2)
    ledger.apply(first.reservation_id, Move.EXPIRE_AND_RELEASE)
    second = ledger.reserve("job1", "job1", now=3, lease=2)
    # The first attempt's confirm arrives now; the ledger cannot tell it apart.
    moved = ledger.confirm("job1", "job1")
    assert moved.reservation_id == second.reservation_id == "job1/r2"
    assert ledger.get("job1/r2").state is S.CONFIRMED
    assert ledger.get("job1/r1").state is S.UNUSED


def test_snapshot_is_hashable_and_reflects_state(open_implementation):
    """snapshot() is hashable and changes when a reservation moves."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    before = ledger.snapshot()
    hash(before)
    assert before == {("job1/r1", "job1#1", 2, "reserved")}
    ledger.apply(reservation.reservation_id, Move.CONFIRM)
    # Once it moved on, its deadline decides nothing and is not in the picture.
    assert ledger.snapshot() == {("job1/r1", "job1#1", None, "confirmed")}
    assert ledger.snapshot() != before


def test_snapshot_does_not_depend_on_the_order_of_reserves_nor_a_settled_deadline(open_implementation):
    """Two jobs reserving in either order, and confirmed leases reserved at other times, are one state."""
    pictures = []
    for order, job2_at in (("job1", "job2"), 1), (("job2", "job1"), 0):
        ledger = open_implementation(2).ledger  # one pair at a time: the next call empties it
        for job in order:
            ledger.reserve(job, f"{job}#1", now=job2_at if job == "job2" else 0, lease=2)
        reserved = ledger.snapshot()
        ledger.confirm("job2", "job2#1")
        pictures.append((reserved, ledger.snapshot()))
    (one_reserved, one_confirmed), (other_reserved, other_confirmed) = pictures
    assert one_reserved != other_reserved  # job2's lease ends at 3 in one, at 2 in the other
    assert one_confirmed == other_confirmed


def test_mermaid_mentions_every_transition():
    """transitions_mermaid() draws one edge per table row and the initial reserve edge."""
    diagram = transitions_mermaid()
    lines = diagram.splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert "    [*] --> reserved: reserve" in lines
    for source, moves in EXPECTED_TRANSITIONS.items():
        for move, target in moves.items():
            assert f"    {source.value} --> {target.value}: {move.value}" in lines
    assert len(lines) == 2 + sum(len(moves) for moves in EXPECTED_TRANSITIONS.values())


def test_owner_failure_report_holds_the_reservation_as_outcome_unknown(open_implementation):
    """fail(key, owner) takes the owner's reserved reservation to OUTCOME_UNKNOWN and frees nothing."""
    ledger = open_implementation(1).ledger
    ledger.reserve("job1", "job1#1", now=0, lease=2)
    moved = ledger.fail("job1", "job1#1")
    assert (moved.reservation_id, moved.state) == ("job1/r1", S.OUTCOME_UNKNOWN)
    assert ledger.units_freed == {}
    assert ledger.held == 1


@pytest.mark.parametrize("taken_back_by", [Move.EXPIRE_AND_HOLD, Move.EXPIRE_AND_RELEASE])
def test_failure_report_after_the_janitor_took_the_lease_back_is_refused(open_implementation, taken_back_by):
    """The owner's failure report on a lease the janitor already took back raises IllegalMove and changes nothing."""
    ledger = open_implementation(1).ledger
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=2)
    ledger.apply(reservation.reservation_id, taken_back_by)
    before = ledger.snapshot()
    with pytest.raises(IllegalMove):
        ledger.fail("job1", "job1#1")
    assert ledger.snapshot() == before


def test_failure_report_by_someone_else_is_stale(open_implementation):
    """fail() by an identity that does not own the key's current reservation raises StaleAttempt."""
    ledger = open_implementation(1).ledger
    ledger.reserve("job1", "job1#1", now=0, lease=2)
    with pytest.raises(StaleAttempt):
        ledger.fail("job1", "job1#2")
    assert ledger.get("job1/r1").state is S.RESERVED
