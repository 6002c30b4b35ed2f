"""The drain judge's memo in flat arrays: 64-bit fingerprint -> answer, at most two generations kept.

Why
---
``fence.explore.drain_judge.DrainJudge`` remembers what a drain concluded under
the fingerprint of each state it passed through: about one entry for every
five to ten explored states, so the memo grows with the walk. As a dict of
int -> tuple an entry cost about 90 bytes (the dict's slot and index, and the
fingerprint as a Python int of 48 bytes); at 3 units x 3 jobs x 2 attempts the
memo held 450,000 entries before 1.5 million states were visited. Here an
entry is a fingerprint in an ``array('Q')`` slot and its answer's number in an
``array('B')`` slot (the distinct answers are few: which teardown invariants
broke, and whether the drain settled), with slots between a quarter and half
full: 18 to 36 bytes an entry.

Why a bounded memo is exact
    An answer is a function of the state the fingerprint stands for (the drain
    is deterministic), and every answer was computed by a real drain; a miss
    only makes the judge drain again. So forgetting entries changes the work
    done, never a result. Past ``capacity`` entries the memo starts a new
    generation and keeps only the one before it: memory stays under two
    generations' arrays, however long the walk. An answer found in the older
    generation is copied into the newer one, so what is still asked for
    survives the next turn.

Fingerprints of any value are stored, 0 included: a slot is free when its
answer's number is 0 (answers are numbered from 1).
"""

from __future__ import annotations

from array import array

GENERATION_ENTRIES = 1 << 22
"""Entries in one generation before the next begins: 4,194,304, at most 2 x 36 bytes each (about 300 MiB in all
at the worst), against the ten or more million states of a walk that fills it."""

_FIRST_SLOTS = 1 << 10


class _Generation:
    """One open-addressing table: fingerprints and answer numbers in two arrays, linear probing."""

    __slots__ = ("keys", "values", "mask", "count")

    def __init__(self, slots: int = _FIRST_SLOTS) -> None:
        self.keys = array("Q", bytes(8 * slots))
        self.values = array("B", bytes(slots))
        self.mask = slots - 1
        self.count = 0

    def get(self, key: int) -> int:
        """The answer's number stored for ``key``, else 0."""
        keys, values, mask = self.keys, self.values, self.mask
        slot = key & mask
        while True:
            value = values[slot]
            if not value or keys[slot] == key:
                return value
            slot = (slot + 1) & mask

    def put(self, key: int, value: int) -> None:
        """Store ``value`` (> 0) for ``key``, replacing what was stored for it."""
        keys, values, mask = self.keys, self.values, self.mask
        slot = key & mask
        while True:
            stored = values[slot]
            if not stored:
                break
            if keys[slot] == key:
                values[slot] = value
                return
            slot = (slot + 1) & mask
        keys[slot] = key
        values[slot] = value
        self.count += 1
        if 2 * self.count > len(values):
            self._grow()

    def _grow(self) -> None:
        old_keys, old_values = self.keys, self.values
        slots = 2 * len(old_values)
        self.keys = array("Q", bytes(8 * slots))
        self.values = array(old_values.typecode, bytes(old_values.itemsize * slots))
        self.mask = slots - 1
        self.count = 0
        for key, value in zip(old_keys, old_values):
            if value:
                self.put(key, value)

    def widen(self) -> None:
        """Answer numbers past 255: two bytes a slot from now on."""
        self.values = array("H", self.values)

    def bytes_used(self) -> int:
        return self.keys.itemsize * len(self.keys) + self.values.itemsize * len(self.values)


class DrainMemo:
    """Fingerprint -> the drain judge's answer (any hashable value), as ``dict.get`` and item assignment.

    See the module docstring: flat arrays, the answers by number, at most two
    generations of ``capacity`` entries each.
    """

    def __init__(self, capacity: int = GENERATION_ENTRIES) -> None:
        if capacity < 1:
            raise ValueError("a generation holds at least one entry")
        self.capacity = capacity
        self.answers: list = [None]
        """Each distinct answer at its number (0: none)."""
        self._numbers: dict = {}
        self._newer = _Generation()
        self._older: _Generation | None = None
        self.generations = 1
        """Generations begun so far (one more each time the newer one filled up)."""

    def get(self, key: int, default=None):
        number = self._newer.get(key)
        if not number and self._older is not None:
            number = self._older.get(key)
            if number:
                self._put(key, number)  # still asked for: keep it past the next turn
        return self.answers[number] if number else default

    def __contains__(self, key: int) -> bool:
        return self.get(key) is not None

    def __getitem__(self, key: int):
        answer = self.get(key)
        if answer is None:
            raise KeyError(key)
        return answer

    def __setitem__(self, key: int, answer) -> None:
        if answer is None:
            raise ValueError("None stands for a miss: it cannot be an answer")
        number = self._numbers.get(answer)
        if number is None:
            number = self._numbers[answer] = len(self.answers)
            self.answers.append(answer)
            if number == 256:
                self._newer.widen()
                if self._older is not None:
                    self._older.widen()
        self._put(key, number)

    def _put(self, key: int, number: int) -> None:
        newer = self._newer
        newer.put(key, number)
        if newer.count >= self.capacity:
            self._older, self._newer = newer, _Generation()
            if len(self.answers) > 256:
                self._newer.widen()
            self.generations += 1

    def __len__(self) -> int:
        """Entries held now, in both generations (an entry copied forward counts twice)."""
        return self._newer.count + (self._older.count if self._older is not None else 0)

    def bytes_used(self) -> int:
        """What the arrays of both generations hold."""
        return self._newer.bytes_used() + (self._older.bytes_used() if self._older is not None else 0)
