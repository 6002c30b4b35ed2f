"""Unit tests of Ledger(slots=True): finished work gives its slot back; nothing else changes."""

from __future__ import annotations

import pytest

from fence.base.errors import CapacityExhausted, IllegalMove
from fence.model.ledger import Ledger, Move, ReservationState

S = ReservationState


def test_default_is_quota_semantics():
    """Without slots a confirmed unit stays spent, so the pool does not refill."""
    ledger = Ledger(1)
    assert ledger.slots is False
    ledger.reserve("a", "a#1", now=0, lease=1)
    ledger.confirm("a", "a#1")
    assert ledger.free == 0
    with pytest.raises(CapacityExhausted):
        ledger.reserve("b", "b#1", now=0, lease=1)


@pytest.mark.parametrize("move", [Move.CONFIRM, Move.CONFIRM_EXISTING])
def test_slots_finished_reservation_returns_its_unit(move):
    """With slots a confirmed or confirmed_existing reservation frees its unit for the next job."""
    ledger = Ledger(1, slots=True)
    ledger.reserve("a", "a#1", now=0, lease=1)
    assert ledger.free == 0
    ledger.owner_move("a", "a#1", move)
    assert ledger.free == 1 and ledger.units_freed == {"a/r1": 1}
    ledger.reserve("b", "b#1", now=0, lease=1)
    assert ledger.free == 0


def test_slots_janitor_settle_existing_returns_its_unit():
    """With slots a janitor's settle_existing also finishes the work and frees the unit once."""
    ledger = Ledger(1, slots=True)
    ledger.reserve("a", "a#1", now=0, lease=1)
    ledger.apply("a/r1", Move.EXPIRE_AND_HOLD)
    assert ledger.free == 0, "outcome_unknown still holds its slot"
    ledger.apply("a/r1", Move.SETTLE_EXISTING)
    assert ledger.free == 1 and ledger.units_freed == {"a/r1": 1}


def test_slots_unused_still_frees_exactly_once():
    """With slots the unused path is unchanged: one release, and the terminal state refuses more moves."""
    ledger = Ledger(2, slots=True)
    ledger.reserve("a", "a#1", now=0, lease=1)
    ledger.apply("a/r1", Move.EXPIRE_AND_RELEASE)
    assert ledger.free == 2 and ledger.units_freed == {"a/r1": 1}
    with pytest.raises(IllegalMove):
        ledger.apply("a/r1", Move.SETTLE_UNUSED)
    assert ledger.units_freed == {"a/r1": 1}


def test_slots_keep_the_table_and_the_key_rule():
    """With slots the states and moves are the same and a finished key is still not reserved twice."""
    ledger = Ledger(2, slots=True)
    ledger.reserve("a", "a#1", now=0, lease=1)
    confirmed = ledger.confirm("a", "a#1")
    assert confirmed.state is S.CONFIRMED and confirmed.holds_unit
    with pytest.raises(IllegalMove):
        ledger.reserve("a", "a#2", now=0, lease=1)


def test_slots_never_hold_more_than_capacity():
    """With slots the pool refills only as work finishes: capacity is never exceeded."""
    ledger = Ledger(2, slots=True)
    ledger.reserve("a", "a#1", now=0, lease=1)
    ledger.reserve("b", "b#1", now=0, lease=1)
    with pytest.raises(CapacityExhausted):
        ledger.reserve("c", "c#1", now=0, lease=1)
    ledger.confirm("a", "a#1")
    ledger.reserve("c", "c#1", now=0, lease=1)
    assert ledger.held == 2
