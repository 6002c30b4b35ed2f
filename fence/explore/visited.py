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
does: for n distinct states and b-bit fingerprints about n^2 / 2^(b+1). The
abstract walk (``fence.explore.abstract``), whose keys are small numbers, fingerprints
them another way with the same bound: ``KeySums`` adds a random number per
piece of the key modulo a prime just below 2^64, so that a step updates its
parent's fingerprint instead of encoding and hashing a new key.

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
import os
import random
import tempfile
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


KEY_PRIME = 2**64 - 59
"""The largest prime below 2^64: ``KeySums`` adds modulo it."""


class KeySums:
    """The abstract walk's fingerprints: the sum, modulo a prime, of a random number per piece of the key.

    A key of the abstract walk (``fence.explore.abstract``) is the clock, each job's
    part by number (a multiset with symmetry, one per job's position without)
    and the abandon promises. Each clock reading, each part number (per
    position without symmetry) and each set of abandon promises is given a
    number drawn uniformly from [0, P) the first time it is met (``draw``), and
    a key's fingerprint is the sum of its pieces' numbers modulo P
    (``KEY_PRIME``, just below 2^64).

    Why the collision chance is the one reported: two distinct keys differ in
    the clock, in the promises, or in how often some part number occurs (a
    difference of at most the number of jobs, so invertible modulo P); with
    every other number fixed, the two sums are equal for exactly one value of
    that piece's number, drawn independently of the walk: a chance of 1/P,
    about 2^-64, per pair of states, so at most n^2 / 2^65 for n states, as a
    64-bit hash is reported (``collision_probability``).

    Why it is cheap: a step changes one job's part (and now and then the
    promises, a tick the clock), so the child's fingerprint is the parent's
    sum with one number swapped: no key is built, sorted, encoded or hashed.

    ``draw`` gives a piece's number from (kind, position or None, piece): by
    default a random number from a generator seeded by the system's entropy,
    once per walk; ``fence.explore.partitioned`` draws from the piece's content, so
    that every process gives a key the same fingerprint.
    """

    def __init__(self, symmetry: bool, positions: int, draw=None) -> None:
        if draw is None:
            draw = _random_draw()
        self.clock = _Drawn(draw, "clock", None)
        self.promises = _Drawn(draw, "promises", None)
        if symmetry:
            self.parts = [_Drawn(draw, "part", None)] * positions
        else:
            self.parts = [_Drawn(draw, "part", position) for position in range(positions)]
        """Per job's position, the numbers of its parts (one table for all with symmetry)."""

    def __call__(self, now: int, parts: tuple, abandoned: tuple) -> int:
        """The fingerprint of the key (now, parts in job order, abandon promises), computed afresh."""
        total = self.clock[now] + self.promises[abandoned]
        for table, part in zip(self.parts, parts):
            total += table[part]
        return total % KEY_PRIME


def _random_draw():
    pick = random.Random(os.urandom(32)).randrange
    return lambda _kind, _position, _piece: pick(KEY_PRIME)


class _Drawn(dict):
    """Piece -> its number, drawn on first sight (``KeySums``)."""

    __slots__ = ("_draw", "_kind", "_position")

    def __init__(self, draw, kind: str, position: int | None) -> None:
        super().__init__()
        self._draw, self._kind, self._position = draw, kind, position

    def __missing__(self, piece) -> int:
        number = self[piece] = self._draw(self._kind, self._position, piece)
        return number


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


_IDENTITIES_KEPT = 1 << 12
"""At most this many action objects remembered by identity (``Parents.add``)."""


class Parents:
    """Each visited state's parent and the step from it, as two flat arrays: the path to any state, rebuilt.

    State ``n`` is the n-th state the walk found (the root is 0); its entry is
    the number of the state it was found from (a signed 32-bit number, -1 for
    the root) and the number of the step taken (16 bits while fewer than 65,536
    distinct steps were taken, then 32). A step is kept once, with what a
    janitor's step was meant to do (``meant``: the abstract walk's janitors are
    numbered, see ``fence.explore.abstract.translate``), so a state costs 6 bytes here.
    That is all a shortest counterexample needs: ``path_to`` walks the numbers
    back to the root, and the path is replayed from scratch
    (``fence.explore.judging._judge``), never read from a stored state. Indexing gives
    ``(parent, action)``, or None for the root.
    """

    def __init__(self) -> None:
        self._parent = array("i", [-1])
        self._step = array("H", [0])  # the root's is never read
        self.steps: list = []
        """The distinct steps taken, by number."""
        self._meant: list = []
        self._step_numbers: dict = {}
        self._plain_by_identity: dict[int, tuple] = {}
        """id(action) -> (action, its step number) for a step added with no ``meant``: the abstract walk passes
        the same few action objects again and again, and hashing one (a dataclass's fields) was most of
        ``add``. The action is held, so its id is not reused while the entry lives."""

    def add(self, parent: int, action, meant=None) -> int:
        """Record a new state found from ``parent`` by ``action`` (meant as ``meant``); its number."""
        seen = self._plain_by_identity.get(id(action)) if meant is None else None
        if seen is not None and seen[0] is action:
            number = seen[1]
        else:
            number = self._step_numbers.get((action, meant))
            if number is None:
                number = self._step_numbers[(action, meant)] = len(self.steps)
                self.steps.append(action)
                self._meant.append(meant)
                if number > 0xFFFF and self._step.typecode == "H":
                    self._step = array("I", self._step)
            if meant is None:
                if len(self._plain_by_identity) >= _IDENTITIES_KEPT:
                    self._plain_by_identity.clear()  # objects made once (a step the model took) must not pile up
                self._plain_by_identity[id(action)] = (action, number)
        self._parent.append(parent)
        self._step.append(number)
        return len(self._parent) - 1

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, node: int):
        parent = self._parent[node]
        return None if parent < 0 else (parent, self.steps[self._step[node]])

    def meant_of(self, node: int):
        """What the step into state ``node`` was meant to do, as given to ``add`` (None for most)."""
        return None if self._parent[node] < 0 else self._meant[self._step[node]]

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


EMPTY_SLOT = _EMPTY = 0xFFFFFFFF
"""A free slot of ``VisitedTable``'s index (no state has this number: the table holds fewer). Public as
``EMPTY_SLOT`` for ``fence.explore.abstract``, whose hot loop writes ``__contains__``'s probe out again."""

_FREE_CHUNK = array("I", b"\xff" * (4 * 2**16))
"""Free slots, 256 KiB of them: what ``VisitedTable._grow`` lengthens and clears its index with."""


class VisitedTable:
    """The visited states of one walk: fingerprint -> state number, and each state's parent, in flat arrays.

    What a dict of fingerprints did (about 100-130 bytes a state: a slot, the
    fingerprint and the number as Python ints), in about 25: the fingerprints by
    state number (``array('Q')``, 8 bytes), an open-addressing index of state
    numbers (``array('I')``, 4 bytes a slot, kept between a quarter and half
    full: 8-16 bytes a state) and the parents (``Parents``, 6 bytes). A
    fingerprint's low bits pick its slot (they are a hash's already); a taken
    slot sends it on to the next (linear probing). The index doubles when half
    full, every state put in again by its fingerprint.

    The interface is what the explorer's walks ask (and what a walk shared
    between processes can reuse): ``add`` a new state with its parent and step,
    ``in`` / ``get`` by fingerprint, ``parent_of`` a state, ``fingerprint_of`` a
    state, ``len``. ``add`` trusts its caller that the fingerprint is new.
    """

    def __init__(self, root_fingerprint: int | None = None, parents: Parents | None = None,
                 slots: int = 1 << 12) -> None:
        """A table of the root alone (state 0), or of nothing until ``add_root``; ``parents`` if made already."""
        if slots & (slots - 1):
            raise ValueError("slots must be a power of two")
        self.parents = parents if parents is not None else Parents()
        self._fingerprints = array("Q")
        self._index = array("I", b"\xff" * (4 * slots))
        self._mask = slots - 1
        if root_fingerprint is not None:
            self.add_root(root_fingerprint)

    def add_root(self, fingerprint: int) -> None:
        """Record the root, state 0 (``parents`` holds it from the start)."""
        if self._fingerprints:
            raise ValueError("the table has its root already")
        self._fingerprints.append(fingerprint)
        self._index[fingerprint & self._mask] = 0

    def __len__(self) -> int:
        return len(self._fingerprints)

    def get(self, fingerprint: int, default=None):
        """The number of the state with this fingerprint, else ``default``."""
        index, fingerprints, mask = self._index, self._fingerprints, self._mask
        slot = fingerprint & mask
        while True:
            node = index[slot]
            if node == _EMPTY:
                return default
            if fingerprints[node] == fingerprint:
                return node
            slot = (slot + 1) & mask

    def __contains__(self, fingerprint: int) -> bool:
        # ``get``'s probe written out again, not called: ``in`` runs per transition (and the abstract walk's
        # ``successors`` writes it out once more: a change to the index's layout must change it there too).
        index, fingerprints, mask = self._index, self._fingerprints, self._mask
        slot = fingerprint & mask
        while True:
            node = index[slot]
            if node == _EMPTY:
                return False
            if fingerprints[node] == fingerprint:
                return True
            slot = (slot + 1) & mask

    def add(self, fingerprint: int, parent: int, action, meant=None) -> int:
        """Record the new state ``fingerprint`` (not visited yet), found from ``parent`` by ``action``; its number."""
        node = self.parents.add(parent, action, meant)
        self._fingerprints.append(fingerprint)
        if 2 * len(self._fingerprints) > len(self._index):
            self._grow()  # puts this one in too
            return node
        index, mask = self._index, self._mask
        slot = fingerprint & mask
        while index[slot] != _EMPTY:
            slot = (slot + 1) & mask
        index[slot] = node
        return node

    def parent_of(self, node: int):
        """(parent's number, step) of state ``node``, or None for the root."""
        return self.parents[node]

    def fingerprint_of(self, node: int) -> int:
        return self._fingerprints[node]

    def _grow(self) -> None:
        """Double the index in place and put every state in again.

        In place, not a new array beside the old: a new one held both at once,
        24 bytes a state on top of the 8 of the fingerprints, and that moment set
        the walk's peak memory. The array is lengthened a chunk at a time (no
        temporary as large as the index) and every slot set free again the same way.
        """
        index = self._index
        slots = 2 * len(index)
        if slots > _EMPTY:
            raise OverflowError(f"more than {_EMPTY // 2:,} visited states: the index numbers them in 32 bits")
        free = _FREE_CHUNK
        while len(index) < slots:
            index.extend(free[:slots - len(index)])
        # Every slot free again (the old half holds numbers), a chunk at a time.
        slots_view = memoryview(index)
        for start in range(0, slots, len(free)):
            end = min(start + len(free), slots)
            slots_view[start:end] = free[:end - start]
        slots_view.release()
        mask = slots - 1
        for node, fingerprint in enumerate(self._fingerprints):
            slot = fingerprint & mask
            while index[slot] != _EMPTY:
                slot = (slot + 1) & mask
            index[slot] = node
        self._index, self._mask = index, mask

    def bytes_used(self) -> int:
        """What the fingerprints, the index and the parents hold."""
        return (self._fingerprints.itemsize * len(self._fingerprints) + self._index.itemsize * len(self._index)
                + self.parents.bytes_used())


FRONTIER_BUDGET = 16 * 2**20
"""Bytes one level of the frontier keeps in memory before it spills the rest to a file (``Frontier``).

A level being expanded holds up to twice this (its rows kept in memory and a
chunk read back from its file) and the next level once more. Writing and
reading a spilled level back is sequential and cheap beside expanding it, so
the budget is small: 16 MiB is about 450,000 rows of 3 jobs, more than any
level at 2 units x 2 jobs x 2 attempts, horizon 3, and at 3x3x2 the frontier
then costs at most 48 MiB however wide its levels grow."""


class Frontier:
    """One breadth-first level of states to expand, as rows of numbers: in memory, then in a file.

    A walk's states wait here compactly encoded, ``width`` unsigned 32-bit
    numbers a state (the walk says what they are: the abstract walk's state
    number, context, abandon promises, and each job's detail and key part by
    number; a walk over Worlds, the state number alone), not as live objects.
    Once a level holds more than ``budget`` bytes, its rows so far are written
    to a temporary file (one per level, deleted when the level is closed) and
    read back in order, a budget's worth at a time, when the level is expanded.
    Rows come back in the order they were appended.
    """

    def __init__(self, width: int, budget: int | None = None) -> None:
        """``budget``: bytes kept in memory, ``FRONTIER_BUDGET`` unless given."""
        self.width = width
        budget = FRONTIER_BUDGET if budget is None else budget
        self._budget_numbers = max(width, budget // 4)
        self._rows = array("I")
        self._file = None
        self._spilled = 0
        """Rows written to the file."""

    def append(self, row) -> None:
        rows = self._rows
        rows.extend(row)
        if len(rows) >= self._budget_numbers:
            self._spill()

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="fence-frontier-")
        self._rows.tofile(self._file)
        self._spilled += len(self._rows) // self.width
        self._rows = array("I")

    @property
    def spilled(self) -> int:
        """How many of the level's rows went to its file."""
        return self._spilled

    def __len__(self) -> int:
        return self._spilled + len(self._rows) // self.width

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self):
        width = self.width
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            chunk_bytes = 4 * (self._budget_numbers - self._budget_numbers % width)
            while True:
                data = self._file.read(chunk_bytes)
                if not data:
                    break
                chunk = array("I")
                chunk.frombytes(data)
                for start in range(0, len(chunk), width):
                    yield chunk[start:start + width]
        rows = self._rows
        for start in range(0, len(rows), width):
            yield rows[start:start + width]

    def bytes_in_memory(self) -> int:
        return self._rows.itemsize * len(self._rows)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
