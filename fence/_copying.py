"""One rule for deep-copying fence's frozen values (see ``World.clone``'s slow path)."""

from __future__ import annotations

import copy


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
