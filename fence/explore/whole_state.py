"""The whole state of a World, every field read mechanically: the reference the explorer's hand-kept key is tested against."""

from __future__ import annotations

import enum

from fence.model.world import World
from fence.explore.state_key import _PLAIN, _sorted


# ``state_key`` is written by hand, because its reductions are argued (see
# ``fence.explore.walk``). What guards it against a field it forgot is this reading
# of the same state, derived from the objects' own fields: every field of the
# world and of fence's parts is in it unless it is declared below, with the reason
# it is not state. A field added to any of them is in the whole state without a
# word (or, of a type the reading does not know, makes it raise), and the tests
# walk every policy by both keys and compare what they conclude
# (``tests/test_explore.py``): a state the hand-kept key merges wrongly shows as
# another verdict, counterexample length or danger.
NOT_STATE: dict[str, dict[str, str]] = {
    "World": {
        "policy": "the walk's policy, the same in every state (fence's policies are frozen)",
        "config": "the walk's bounds, the same in every state",
        "jobs": "the job names, the same in every state",
        "trace": "history: what happened, not what can happen next",
        "_janitors": "references to the ledger, the destination and the policy; janitors keep no state",
        "_enabled_cache": "a cache of the enabled actions, computed from the state",
        "job_memo": "a cache of key parts and memo details, computed from the state",
        "policy_twins": "the walk's checks of a user's policy (fence.model.policy_twins), the same in every state",
    },
    "Ledger": {
        "capacity": "the walk's bound, the same in every state",
        "slots": "a constant of the ledger's kind",
        "_shared": "copy-on-write bookkeeping between clones",
    },
    "TicketService": {"_shared": "copy-on-write bookkeeping between clones"},
    "Observer": {
        "capacity": "the walk's bound, the same in every state",
        "slots": "a constant of the ledger's kind",
        "findings": "history: what broke, judged per transition",
        "reached": "history: the dangers visited, counted per transition",
    },
}


def whole_state(world: World) -> tuple:
    """Every field of ``world`` and of fence's parts in it, but those ``NOT_STATE`` declares, as one value.

    For fence's own parts only. Lists keep their order, sets and dicts are
    sorted, enums are read as their values; an object of fence's is read
    field by field (by ``__slots__`` or ``vars``); anything else raises, so a
    part this reading cannot see into is never silently left out.
    """
    return _read(world)


_READERS: dict[type, object] = {}
"""A reader per type, made once (``_reader_for``)."""


def _read(value) -> object:
    if type(value) in _PLAIN:
        return value
    reader = _READERS.get(type(value))
    if reader is None:
        reader = _READERS[type(value)] = _reader_for(type(value))
    return reader(value)


def _in_order(values) -> tuple:
    return tuple([item if type(item) in _PLAIN else _read(item) for item in values])


def _reader_for(kind: type):
    """How to read a value of ``kind`` (not a ``_PLAIN`` one): made once per type (the walk reads millions)."""
    if issubclass(kind, enum.Enum):
        return lambda member: (kind.__name__, member._value_)
    if issubclass(kind, (list, tuple)):
        return _in_order
    if issubclass(kind, (set, frozenset)):
        return lambda items: ("set", _sorted([_read(item) for item in items]))
    if issubclass(kind, dict):
        return lambda mapping: ("dict", _sorted([
            (k if type(k) in _PLAIN else _read(k), v if type(v) in _PLAIN else _read(v)) for k, v in mapping.items()
        ]))
    if not kind.__module__.startswith("fence."):
        raise TypeError(f"whole_state cannot read a {kind.__qualname__} ({kind.__module__}): declare it in NOT_STATE")
    left_out = NOT_STATE.get(kind.__name__, {})
    slots = sorted({name for klass in kind.__mro__ for name in getattr(klass, "__slots__", ())} - set(left_out))
    name = kind.__name__

    def read_object(value) -> tuple:
        names = slots
        if hasattr(value, "__dict__"):  # read each time: an instance may carry a field its class does not name
            names = sorted(set(slots) | (vars(value).keys() - left_out.keys()))
        fields = [(field, getattr(value, field)) for field in names]
        return (name, tuple([(field, v if type(v) in _PLAIN else _read(v)) for field, v in fields]))

    return read_object
