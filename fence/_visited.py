"""Fingerprints of state keys: what the explorer's visited set holds, and the chance they merged two states.

Theory of operation
-------------------
The explorer used to keep every visited state's key (a tuple of a few hundred
bytes) in its visited set. It now keeps a fixed-size fingerprint of the key:
a 64-bit hash (BLAKE2b, ``FINGERPRINT_BITS``) of a canonical byte encoding of
the key, as TLC keeps 8-byte fingerprints. Equal keys always give equal
fingerprints, so nothing the key tells apart is merged by the encoding; two
distinct keys share a fingerprint only by a hash collision, and the walk
reports the chance that one happened (``collision_probability``) the way TLC
does: for n distinct states and b-bit fingerprints about n^2 / 2^(b+1).

The canonical encoding
    A key of fence's own parts (``state_key``, the abstract walk's keys,
    ``whole_state``) is a tree of tuples, strings, integers, booleans, floats
    and None: ``marshal`` at version 2 writes such a tree the same way for
    equal values (no back-references, every string as UTF-8), so its bytes are
    the encoding. A key of a user's plug-ins (``generic_state_key``) holds
    frozensets and whatever the plug-ins' snapshots return; ``Fingerprints``
    writes it as the same kind of tree first (``_plain``): a set or dict as
    its items sorted by their bytes, and any other value (an enum member, a
    dataclass, an object of the user's) by a number given to it on first
    sight and kept for the walk, so two such values share a number exactly
    when they are equal, as they were equal or not as parts of the old keys.
    The encoding may tell apart values Python calls equal (``1`` and ``True``,
    ``0`` and ``0.0``); that splits states, never merges them.
"""

from __future__ import annotations

import hashlib
import marshal
from array import array

FINGERPRINT_BITS = 64
"""The size of a fingerprint: 8 bytes, as TLC's."""

_DIGEST_BYTES = FINGERPRINT_BITS // 8
_MARSHAL_VERSION = 2  # the last version without back-references or interned-string codes: canonical
_TAG = StopIteration
"""Marks a value ``_plain`` wrote for a set, a dict or a numbered value: no snapshot holds this class."""


def collision_probability(states: int, bits: int = FINGERPRINT_BITS) -> float:
    """The chance that two of ``states`` distinct states got one fingerprint: about n^2 / 2^(b+1) (TLC's estimate)."""
    return min(1.0, states * states / 2.0 ** (bits + 1))


def describe_collisions(states: int, bits: int = FINGERPRINT_BITS) -> str:
    """The summary line's words for it."""
    return (
        f"visited states kept as {bits}-bit fingerprints: the chance that two distinct states shared one "
        f"(and were merged) is about {collision_probability(states, bits):.1e} (n^2/2^{bits + 1}, as TLC estimates it)"
    )


def of_plain(key, _dumps=marshal.dumps, _hash=hashlib.blake2b, _number=int.from_bytes) -> int:
    """The fingerprint of a key that is a tree of tuples, strings, numbers, booleans and None.

    Called once per transition: the names are bound as defaults, not looked up each time.
    """
    return _number(_hash(_dumps(key, _MARSHAL_VERSION), digest_size=_DIGEST_BYTES).digest(), "little")


class Fingerprints:
    """One walk's fingerprints of keys of any kind: the generic key's sets and a plug-in's values too.

    The numbers given to values that are not plain (``_plain``) are the walk's
    own, so an instance lives as long as one walk. Each top-level part of a key
    is written once and remembered (most parts recur in many states); the
    memory is bounded by forgetting them all now and then, which is always safe.
    """

    PARTS_KEPT = 200_000

    def __init__(self) -> None:
        self._numbered: dict = {}
        self._parts: dict = {}

    def __call__(self, key: tuple) -> int:
        parts = self._parts
        if len(parts) > self.PARTS_KEPT:
            parts.clear()
        written = []
        for part in key:
            data = parts.get(part)
            if data is None:
                data = parts[part] = marshal.dumps(self._plain(part), _MARSHAL_VERSION)
            written.append(data)
        # Each part's bytes are self-delimiting (marshal), so their concatenation is too.
        digest = hashlib.blake2b(b"".join(written), digest_size=_DIGEST_BYTES).digest()
        return int.from_bytes(digest, "little")

    def _plain(self, value):
        kind = type(value)
        if kind is str or kind is int or kind is bool or kind is float or value is None or kind is bytes:
            return value
        if kind is tuple or kind is list:
            return kind(self._plain(item) for item in value)
        if kind is frozenset or kind is set:
            return (_TAG, "set", self._sorted(self._plain(item) for item in value))
        if kind is dict:
            return (_TAG, "dict", self._sorted((self._plain(k), self._plain(v)) for k, v in value.items()))
        # Anything else by a number: equal values share one, as they shared a key before.
        number = self._numbered.get(value)
        if number is None:
            number = self._numbered[value] = len(self._numbered)
        return (_TAG, "value", number)

    @staticmethod
    def _sorted(items) -> tuple:
        return tuple(sorted(items, key=lambda item: marshal.dumps(item, _MARSHAL_VERSION)))


class Parents:
    """Each visited state's parent and the step from it, as two arrays: the path to any state, rebuilt.

    State ``n`` is the n-th state the walk found (the root is 0); its entry is
    the number of the state it was found from and the number of the step taken
    (steps are kept once each, ``steps``). That is all a shortest counterexample
    needs: ``path_to`` walks the numbers back to the root, and the path is
    replayed from scratch (``fence._explore._judge``), never read from a stored
    state. Indexing gives ``(parent, action)``, or None for the root, as the
    list of pairs it replaces did.
    """

    def __init__(self) -> None:
        self._parent = array("q", [-1])
        self._step = array("l", [-1])
        self.steps: list = []
        self._step_numbers: dict = {}

    def add(self, parent: int, action) -> int:
        """Record a new state found from ``parent`` by ``action``; its number."""
        number = self._step_numbers.get(action)
        if number is None:
            number = self._step_numbers[action] = len(self.steps)
            self.steps.append(action)
        self._parent.append(parent)
        self._step.append(number)
        return len(self._parent) - 1

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, node: int):
        parent = self._parent[node]
        return None if parent < 0 else (parent, self.steps[self._step[node]])

    def lineage(self, node: int) -> list[int]:
        """The states on the path from the root to state ``node``, in order: the root left out, ``node`` last."""
        nodes = []
        parent = self._parent
        while parent[node] >= 0:
            nodes.append(node)
            node = parent[node]
        return nodes[::-1]

    def path_to(self, node: int) -> list:
        """The steps from the root to state ``node``, in order."""
        step, steps = self._step, self.steps
        return [steps[step[each]] for each in self.lineage(node)]

    def bytes_used(self) -> int:
        """What the two arrays hold (the steps themselves are a few hundred objects)."""
        return self._parent.itemsize * len(self._parent) + self._step.itemsize * len(self._step)
