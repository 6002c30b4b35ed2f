"""How fence's parts are copied: copy on write for the explorer's fast path, and one rule for deep-copying
fence's frozen values (see ``World.clone``'s slow path)."""

from __future__ import annotations

import copy


class CopyOnWrite:
    """Copies that share their records (the dicts and lists in ``__dict__``) until either of the two changes them.

    ``_copy_on_write()`` makes the copy; every method that changes a record calls
    ``_own()`` first. Most of the explorer's copies never change the part they
    copy, so they never pay for its records. What a record holds must be
    immutable (fence's frozen values), since an owned copy still shares it.
    """

    _shared = False
    """True while this part's records may be another's too: copied before a change."""

    def _copy_on_write(self):
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        self._shared = other._shared = True
        return other

    def _own(self) -> None:
        """Copy the records this part may share with another before changing them."""
        if self._shared:
            for name, value in list(self.__dict__.items()):
                if type(value) is dict or type(value) is list:
                    self.__dict__[name] = value.copy()
            self._shared = False


def copy_frozen_value(value, memo: dict, own_type: type):
    """``value`` itself if it is exactly ``own_type`` (a frozen value of fence's, immutable all
    the way down); a subclass (a user's, which may hold more) field by field."""
    if type(value) is own_type:
        return value
    clone = object.__new__(type(value))
    memo[id(value)] = clone
    for name, field_value in vars(value).items():
        object.__setattr__(clone, name, copy.deepcopy(field_value, memo))
    return clone


def copy_with_records(part, memo: dict, records: frozenset[str], values: frozenset[type]):
    """A deep copy of fence's ledger or destination, or of a user's subclass of either.

    ``records`` are the attributes where fence keeps its state (dicts and lists);
    while they hold only ``values`` (immutable, exactly those types) they are
    copied one level, which is all a deep copy would do to them, only faster;
    an attribute that is itself such a value (or a str, number, bool, None) is shared.
    Everything else, and every attribute a subclass adds, is deep-copied. A
    class with ``__slots__`` (state outside ``__dict__``) gets the standard deep copy.
    """
    cls = type(part)
    slotted = _SLOTTED.get(cls)
    if slotted is None:
        slotted = _SLOTTED[cls] = any("__slots__" in vars(klass) for klass in cls.__mro__[:-1])
    if slotted:
        return copy._reconstruct(part, memo, *part.__reduce_ex__(4))
    other = object.__new__(cls)
    memo[id(part)] = other
    for name, value in part.__dict__.items():
        if type(value) in values or type(value) in _ATOMIC:
            other.__dict__[name] = value  # immutable: a deep copy would be itself
        elif name in records and _holds_only(value, values):
            other.__dict__[name] = value.copy()
        else:
            other.__dict__[name] = copy.deepcopy(value, memo)
    if "_shared" in part.__dict__:
        other.__dict__["_shared"] = False  # its records are its own
    return other


_ATOMIC = frozenset({str, int, float, bool, type(None)})
_SLOTTED: dict[type, bool] = {}
"""Per class: does it (or a base of it) declare ``__slots__``? A class's bases never change."""


def _holds_only(container, values: frozenset[type]) -> bool:
    # The types are gathered by ``map`` and compared as sets, in C: a copy is made per explored transition.
    kind = type(container)
    if kind is dict:
        return _STR_ONLY.issuperset(map(type, container)) and values.issuperset(map(type, container.values()))
    if kind is list:
        return values.issuperset(map(type, container))
    return False


_STR_ONLY = frozenset({str})
