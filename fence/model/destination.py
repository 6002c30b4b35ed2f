"""The destination: the external ticket service where side effects land.

Theory of operation
-------------------
The destination records effects by idempotency key. Everything it knows, it
knows at the moment a message reaches it; it never sees the ledger. Its guards
are switchable so that the models can show what each one buys:

* ``fence``: put-if-absent on the key. The second write for a key is refused,
  whichever attempt it came from. It does not order attempts: an old write that
  arrives first wins.
* ``fingerprint``: a payload fingerprint per key. A second write with a different
  payload is refused as a conflict, never acknowledged as if it were the first.
* ``witness``: a record of each attempt's state (in_flight, committed, refused,
  abandoned), and the atomic ``abandon_unless_committed``: after it, that
  attempt's late registration or commit is refused. Abandoning an attempt the
  destination has never heard of leaves a tombstone, so a registration still on
  its way cannot resurrect it.

The ``Destination`` protocol is what a team implements to check its own adapter
with ``fence check --destination``. ``effects()`` is the ground truth the
invariants are judged on, so it must report every write that really happened.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from fence.base.copying import CopyOnWrite, copy_frozen_value, copy_with_records
from fence.base.errors import WitnessRequired


class AttemptState(enum.Enum):
    IN_FLIGHT = "in_flight"
    COMMITTED = "committed"
    REFUSED = "refused"
    ABANDONED = "abandoned"


class CommitResult(enum.Enum):
    WRITTEN = "written"
    """The effect landed now."""
    ALREADY_EXISTS = "already_exists"
    """Refused by the fence: this key already has an effect (same payload, or unchecked)."""
    CONFLICT = "conflict"
    """Refused by the fingerprint: this key already has an effect with another payload."""
    ABANDONED = "abandoned"
    """Refused by the witness: this attempt was abandoned before its commit arrived."""

    @property
    def refused(self) -> bool:
        return self is not CommitResult.WRITTEN


@dataclass(frozen=True)
class Guards:
    fence: bool = False
    fingerprint: bool = False
    witness: bool = False

    def union(self, other: Guards) -> Guards:
        return Guards(
            self.fence or other.fence,
            self.fingerprint or other.fingerprint,
            self.witness or other.witness,
        )

    def describe(self) -> str:
        names = [name for name in ("fence", "fingerprint", "witness") if getattr(self, name)]
        return "+".join(names) or "none"


NO_GUARDS = Guards()


@dataclass(frozen=True)
class Effect:
    """One write that really happened at the destination."""

    key: str
    attempt_id: str
    payload: str
    sequence: int
    """Order in which effects landed (1, 2, ...), for reports."""

    def __deepcopy__(self, memo):
        # A world with a user's plug-ins is deep-copied; fence's own value is its own copy.
        return copy_frozen_value(self, memo, Effect)


@runtime_checkable
class Destination(Protocol):
    """What fence needs from a ticket service to drive and judge it."""

    guards: Guards

    def register(self, attempt_id: str, key: str) -> AttemptState | None:
        """An attempt announces itself before working; ``None`` if no witness is kept."""

    def commit(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        """The side effect: write the ticket for ``key`` unless a guard refuses."""

    def lookup(self, key: str) -> bool:
        """Does an effect for ``key`` exist right now?"""

    def attempt_state(self, attempt_id: str) -> AttemptState | None:
        """What the witness knows of an attempt; ``None`` if it never heard of it."""

    def abandon_unless_committed(self, attempt_id: str) -> AttemptState:
        """Atomically: COMMITTED if the attempt committed, else mark it ABANDONED."""

    def effects(self) -> list[Effect]:
        """Every write that landed, in order."""


def payloads_by_key(effects) -> frozenset:
    """A record of writes as what decides anything about it: each key's payloads, in the order they landed.

    Which attempt wrote a ticket, and how writes to different keys interleaved,
    decide no later answer of fence's destination (it answers by a key's first
    payload and by its witness of attempts), and the observer judges writes per
    key (their number, the first payload) as they land. ``effects`` are
    ``Effect`` records or (key, attempt_id, payload) rows.
    """
    by_key: dict[str, tuple[str, ...]] = {}
    for effect in effects:
        if type(effect) is Effect or isinstance(effect, Effect):
            key, payload = effect.key, effect.payload
        else:
            key, payload = effect[0], effect[2]
        by_key[key] = by_key.get(key, ()) + (payload,)
    return frozenset(by_key.items())


def judge_commit(
    guards: Guards, known: AttemptState | None, first_payload: str | None, payload: str
) -> tuple[CommitResult, AttemptState | None]:
    """What a commit gets, and what the witness then records (None: nothing new).

    ``known`` is what the witness knew of the attempt, ``first_payload`` the
    payload of the key's first effect (None: the key has none). Pure, so fence's
    TicketService and the SQL destinations of fence.backends decide alike.
    """
    witness = guards.witness
    if witness and known is AttemptState.ABANDONED:
        return CommitResult.ABANDONED, None
    if witness and known is AttemptState.COMMITTED:
        # The same attempt asking twice: replay, do not write again.
        return CommitResult.ALREADY_EXISTS, None
    if first_payload is not None:
        refusal = None
        if guards.fingerprint and first_payload != payload:
            refusal = CommitResult.CONFLICT
        elif guards.fence:
            refusal = CommitResult.ALREADY_EXISTS
        if refusal is not None:
            return refusal, (AttemptState.REFUSED if witness else None)
    return CommitResult.WRITTEN, (AttemptState.COMMITTED if witness else None)


class TicketService(CopyOnWrite):
    """fence's own in-memory destination, with the guards switched by ``Guards``."""

    SNAPSHOT_IS_COMPLETE = True
    """Its ``snapshot()`` holds everything that decides its next answers (``fence.model.drain.snapshot_is_complete``)."""

    def __init__(self, guards: Guards = NO_GUARDS) -> None:
        self.guards = guards
        self._effects: list[Effect] = []
        self._first_payload: dict[str, str] = {}
        self._attempts: dict[str, AttemptState] = {}

    # -- the protocol ------------------------------------------------------------
    def register(self, attempt_id: str, key: str) -> AttemptState | None:
        if not self.guards.witness:
            return None
        known = self._attempts.get(attempt_id)
        if known is not None:
            return known
        self._own()
        self._attempts[attempt_id] = AttemptState.IN_FLIGHT
        return AttemptState.IN_FLIGHT

    def commit(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        result, witnessed = judge_commit(
            self.guards, self._attempts.get(attempt_id), self._first_payload.get(key), payload
        )
        if result is CommitResult.WRITTEN or witnessed is not None:
            self._own()
        if result is CommitResult.WRITTEN:
            self._effects.append(Effect(key, attempt_id, payload, len(self._effects) + 1))
            self._first_payload.setdefault(key, payload)
        if witnessed is not None:
            self._attempts[attempt_id] = witnessed
        return result

    def lookup(self, key: str) -> bool:
        return key in self._first_payload

    def attempt_state(self, attempt_id: str) -> AttemptState | None:
        if not self.guards.witness:
            return None
        return self._attempts.get(attempt_id)

    def abandon_unless_committed(self, attempt_id: str) -> AttemptState:
        if not self.guards.witness:
            raise WitnessRequired(
                "abandon_unless_committed needs a destination with the witness guard on"
            )
        if self._attempts.get(attempt_id) is AttemptState.COMMITTED:
            return AttemptState.COMMITTED
        self._own()
        self._attempts[attempt_id] = AttemptState.ABANDONED
        return AttemptState.ABANDONED

    def effects(self) -> list[Effect]:
        return list(self._effects)

    # -- helpers -----------------------------------------------------------------
    def __deepcopy__(self, memo: dict) -> TicketService:
        # The explorer deep-copies a user's subclass (never through an inherited
        # clone(), which knows only these records): the records, which hold only
        # immutable values, are copied one level; whatever the subclass adds is deep-copied.
        return copy_with_records(self, memo, _RECORDS, _RECORD_VALUES)

    def clone(self) -> TicketService:
        """An independent copy in the same state, copied on write.

        The copy shares this service's records until either of the two writes
        (``_own`` copies them first): most of the explorer's copies take a step
        that never reaches the destination. Effects are frozen, so shared.
        """
        return self._copy_on_write()

    def snapshot(self) -> tuple:
        """Everything that decides this service's next answers, hashable: the explorer's key for it.

        Each key's payloads in the order they landed (``payloads_by_key``) and the
        witness's state of each attempt. Not which attempt wrote a ticket, nor how
        writes to different keys interleaved: no answer depends on them, and a
        walk that kept them would tell apart states that differ in nothing else
        (two jobs writing in either order). ``effects()`` lists them all. A
        subclass that answers by more (the last keys written, say) adds it here.
        """
        return (
            payloads_by_key(self._effects),
            frozenset([(a, s._value_) for a, s in self._attempts.items()]),
        )


_RECORDS = frozenset({"_effects", "_first_payload", "_attempts"})
_RECORD_VALUES = frozenset({str, Effect, AttemptState, Guards})
