"""The whole state of a World, every field read mechanically: the reference the explorer's hand-kept key is tested against."""

from __future__ import annotations

import enum

from fence.model.state_table import NOT_STATE
from fence.model.world import World
from fence.explore.state_key import _DICT, _ENUM, _PLAIN, _SET, _sorted


# ``state_key`` is written by hand, because its reductions are argued (see
# ``fence.explore.walk``). What guards it against a field it forgot is this reading
# of the same state, derived from the objects' own fields: every field of the
# world and of fence's parts is in it unless the state table
# (``fence.model.state_table``) declares it not state, with the reason. A field
# added to any of them is in the whole state without a word (or, of a type the
# reading does not know, makes it raise), and the tests walk every policy by both
# keys and compare what they conclude (``tests/test_explore.py``): a state the
# hand-kept key merges wrongly shows as another verdict, counterexample length or danger.


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
        return lambda member: (_ENUM, kind.__name__, member._value_)
    if issubclass(kind, (list, tuple)):
        return _in_order
    if issubclass(kind, (set, frozenset)):
        return lambda items: (_SET, _sorted([_read(item) for item in items]))
    if issubclass(kind, dict):
        return lambda mapping: (_DICT, _sorted([
            (k if type(k) in _PLAIN else _read(k), v if type(v) in _PLAIN else _read(v)) for k, v in mapping.items()
        ]))
    if not kind.__module__.startswith("fence."):
        raise TypeError(
            f"whole_state cannot read a {kind.__qualname__} ({kind.__module__}): "
            "declare it in NOT_STATE (fence.model.state_table)"
        )
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
