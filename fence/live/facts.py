"""A run on the real clock, recorded as facts and judged by the one set of invariants.

Theory of operation
-------------------
The model ``World`` decides every step itself. The real-clock engines do not:
worker threads (``fence.live.threads``), OS processes (``fence.live.children``)
and strands agents (``fence.agents.fleet``) act on their own, and the engine only
learns what they did. ``LiveRun`` is where an engine writes those facts down,
in the order it learned them:

    reserved -> started -> commit_sent -> commit_answered -> confirmed
                                  any of them -> crashed
                                  any of them, or a refusal -> failed (reported)
    janitor: expired (freed or held), settled (freed or kept), abandon answered

Each worker's phase moves through ``fence.model.worker.WORKER_TRANSITIONS`` (the
same table World uses), every fact goes to an ``Observer``, and ``judge()``
runs ``fence.model.invariants.INVARIANTS`` on the run exactly as on a World: a
``LiveRun`` offers the three readings they take (``observer``, ``jobs`` and
``live_writers()``). No engine keeps its own audit, and no judgement takes the
destination's or the ledger's word: whether an effect existed at a release is
the observer's count of writes it saw land, and whether the owner could still
write is its phase plus the destination's recorded abandon answers.

Callers serialise: one lock around the core (threads, agents), or one parent
process reading its children's reports in the order they were sent. A fact the
engine learns late is judged when learned: a real run has no global clock, so
the order fence records is the order it judges.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from fence.model.destination import CommitResult, Effect
from fence.model.invariants import INVARIANTS
from fence.model.ledger import Move, ReservationState
from fence.model.observer import ObservedDestination, Observer, ProtocolBroken, ReleaseJudgement
from fence.model.worker import UNSENT_PHASES, Phase, WorkerMove, can_still_write, confirm_move, hearing, next_phase

FREEING_MOVES = {Move.EXPIRE_AND_RELEASE, Move.SETTLE_UNUSED}
"""The janitor moves that hand a unit back to the pool."""

SETTLED_MOVES = {
    ReservationState.UNUSED: Move.SETTLE_UNUSED,
    ReservationState.CONFIRMED_EXISTING: Move.SETTLE_EXISTING,
}
"""The janitor's settle move, from the state the ledger reported it reached."""

SETTLED = frozenset({ReservationState.CONFIRMED, ReservationState.CONFIRMED_EXISTING})
"""Where a job's reservation ends when its effect is paid for."""
OPEN = frozenset({ReservationState.RESERVED, ReservationState.OUTCOME_UNKNOWN})
"""States a janitor must still act on."""


@dataclass
class LiveAttempt:
    """fence's record of one attempt on the real clock."""

    handle: str
    """The engine's name for it (job1#2): unique per attempt."""
    key: str
    identity: str
    """What it calls itself at the destination (the handle, or the key for shared identities)."""
    reservation_id: str
    payload: str = ""
    phase: Phase = Phase.RESERVED
    commit_in_flight: bool = False
    wrote: bool = False
    answer: CommitResult | None = None
    """The destination's answer to its commit, once the worker heard it."""


class LiveRun:
    """The facts of one real-clock run, judged by ``INVARIANTS``."""

    def __init__(self, capacity: int, jobs: list[str], slots: bool = False) -> None:
        self.observer = Observer(capacity, slots=slots)
        self.jobs = list(jobs)
        self.attempts: dict[str, LiveAttempt] = {}
        self.owner_of: dict[str, str] = {}
        """Reservation id -> the handle of the attempt that made it."""
        self.released_keys: set[str] = set()
        self.judgements: list[ReleaseJudgement] = []
        """Every release, with what was true at that moment, in order."""

    # -- what the invariants read (the same as World's) ---------------------------
    def live_writers(self) -> list[str]:
        return [a.handle for a in self.attempts.values() if self._could_write(a)]

    def _could_write(self, attempt: LiveAttempt) -> bool:
        return can_still_write(attempt.phase, attempt.commit_in_flight, attempt.identity in self.observer.abandoned)

    def judge(self, teardown: bool = True) -> dict[str, str]:
        """Every invariant this run broke, with the sentence saying how (teardown ones only if asked)."""
        broken = {}
        for invariant in INVARIANTS:
            if invariant.at_teardown and not teardown:
                continue
            sentence = invariant.check(self)
            if sentence:
                broken[invariant.name] = sentence
        return broken

    def effects(self, key: str) -> int:
        """Writes for ``key`` fence saw land."""
        return self.observer.effects_per_key[key]

    def janitor_destination(self, destination) -> ObservedDestination:
        """The destination as the janitor must be given it, so its abandon answers are facts."""
        return ObservedDestination(destination, self.observer)

    # -- the worker's facts ----------------------------------------------------------
    def reserved(self, handle: str, key: str, reservation_id: str, deadline: float, identity: str | None = None) -> None:
        if key in self.released_keys:
            self.observer.reach("retry_after_release")
        self.observer.reserved(reservation_id, key, handle, deadline)
        self.attempts[handle] = LiveAttempt(handle, key, identity or handle, reservation_id)
        self.owner_of[reservation_id] = handle

    def started(self, handle: str) -> None:
        attempt = self.attempts[handle]
        attempt.phase = next_phase(attempt.phase, WorkerMove.START)

    def commit_sent(self, handle: str, payload: str) -> None:
        attempt = self.attempts[handle]
        attempt.phase = next_phase(attempt.phase, WorkerMove.SEND_COMMIT)
        attempt.payload = payload
        attempt.commit_in_flight = True
        mirror = self.observer.reservations[attempt.reservation_id]
        if mirror.state is not ReservationState.RESERVED:
            self.observer.reach("commit_after_expiry")

    def commit_answered(self, handle: str, result: CommitResult, record: list[Effect]) -> list[Effect]:
        """The destination answered; ``record`` is its effects() read with the commit, under the same lock.

        The writes the record gained are this commit's. An engine that cannot
        read the record atomically with the commit (processes) calls
        ``sync_writes`` first, which hands each write to the attempt it names.
        """
        attempt = self.attempts[handle]
        attempt.commit_in_flight = False
        attempt.answer = result
        written = self.observer.commit_answered(
            handle, attempt.identity, attempt.reservation_id, attempt.key, attempt.payload, result, record
        )
        attempt.wrote = attempt.wrote or bool(written)
        attempt.phase = next_phase(attempt.phase, hearing(result))
        return written

    def sync_writes(self, record: list[Effect], final: bool = False) -> None:
        """Take in writes the destination's record shows and fence has not seen, each as its own attempt's.

        For engines that learn of a commit only after the fact (a child process
        reports it): each new write goes to the latest attempt with the identity
        the write carries, so a write whose report is late, or never comes (its
        worker was killed just after the commit), is counted before the next
        janitor fact is judged. Writes are matched, not counted by position: on
        PostgreSQL two concurrent commits can become visible out of their
        sequence order. A write by an attempt whose reserve has not been
        reported yet waits for the next look (its worker's reports are on their
        way); at the ``final`` look it is a broken protocol.
        """
        # Matched by what was written, as a multiset: a record's numbering is
        # its reading order, which a late-visible commit shifts.
        seen = Counter((e.key, e.attempt_id, e.payload) for e in self.observer.effects)
        for effect in record:
            write = (effect.key, effect.attempt_id, effect.payload)
            if seen[write] > 0:
                seen[write] -= 1
                continue
            attempt = self._writer_of(effect, final)
            if attempt is None:
                continue
            self.observer.write_landed(effect, attempt.handle, attempt.identity, attempt.reservation_id)
            attempt.wrote = True

    def _writer_of(self, effect: Effect, final: bool) -> LiveAttempt | None:
        named = [a for a in self.attempts.values() if a.identity == effect.attempt_id and a.key == effect.key]
        if not named and not final:
            return None
        if not named:
            raise ProtocolBroken(
                f"the destination recorded a write for {effect.key} by {effect.attempt_id}, "
                "which no attempt of this run is"
            )
        return named[-1]

    def commit_unknown(self, handle: str) -> None:
        """The commit's answer never came back (a dropped connection): the worker stops there."""
        attempt = self.attempts[handle]
        attempt.commit_in_flight = False  # landed or not, nothing more of it can land later
        attempt.phase = next_phase(attempt.phase, WorkerMove.CRASH)

    def confirmed(self, handle: str, result: CommitResult | None = None) -> None:
        """The ledger accepted the worker's confirm for ``result`` (default: the answer it heard)."""
        attempt = self.attempts[handle]
        attempt.phase = next_phase(attempt.phase, WorkerMove.CONFIRM)
        move = confirm_move(result or attempt.answer)
        self.observer.owner_move_accepted(handle, attempt.reservation_id, attempt.key, move)

    def confirm_landed_unreported(self, handle: str) -> None:
        """The worker sent its confirm and was killed before it could say the ledger accepted it;
        the engine knows it did (no janitor moved the reservation, and the ledger shows it settled).
        The mirror follows the confirm; the worker stays crashed."""
        attempt = self.attempts[handle]
        self.observer.owner_move_accepted(handle, attempt.reservation_id, attempt.key, confirm_move(attempt.answer))

    def confirm_refused(self, handle: str) -> None:
        attempt = self.attempts[handle]
        attempt.phase = next_phase(attempt.phase, WorkerMove.CONFIRM)

    def crashed(self, handle: str, commit_can_still_land: bool = False) -> None:
        """The worker died. On the real clock a commit it was sending either landed or never will,
        unless the engine says otherwise."""
        attempt = self.attempts[handle]
        if attempt.wrote and attempt.phase not in UNSENT_PHASES:
            self.observer.reach("crash_after_effect")
        attempt.commit_in_flight = attempt.commit_in_flight and commit_can_still_land
        attempt.phase = next_phase(attempt.phase, WorkerMove.CRASH)

    def failed(self, handle: str, accepted: bool, commit_can_still_land: bool = False) -> None:
        """The worker raised and reported the failure to the ledger (``Ledger.fail``); ``accepted`` is
        the ledger's answer. As with a crash, a commit it was sending either landed or never will,
        unless the engine says otherwise."""
        attempt = self.attempts[handle]
        if attempt.commit_in_flight:
            self.observer.reach("failure_while_commit_in_flight")
        attempt.commit_in_flight = attempt.commit_in_flight and commit_can_still_land
        attempt.phase = next_phase(attempt.phase, WorkerMove.FAIL)
        if accepted:
            self.observer.failure_accepted(handle, attempt.reservation_id, attempt.key, attempt.wrote)
        else:
            self.observer.failure_refused(handle, attempt.reservation_id)

    # -- the janitor's facts -------------------------------------------------------------
    def expired(self, reservation_id: str, freed: bool, by: str = "janitor") -> ReleaseJudgement | None:
        """The janitor took an expired lease: freed its unit (naive) or held it as outcome_unknown."""
        move = Move.EXPIRE_AND_RELEASE if freed else Move.EXPIRE_AND_HOLD
        return self._janitor_move(reservation_id, move, by)

    def settled(self, reservation_id: str, state: ReservationState, by: str = "janitor") -> ReleaseJudgement | None:
        """The janitor settled a held reservation; ``state`` is where the ledger says it went."""
        return self._janitor_move(reservation_id, SETTLED_MOVES[state], by)

    def _janitor_move(self, reservation_id: str, move: Move, by: str) -> ReleaseJudgement | None:
        mirror = self.observer.moved(reservation_id, move, by=by)
        if move not in FREEING_MOVES or mirror.state is not ReservationState.UNUSED:
            return None
        owner = self.attempts[self.owner_of[reservation_id]]
        judgement = self.observer.release_judged(reservation_id, self._could_write(owner), owner.handle)
        self.released_keys.add(owner.key)
        self.judgements.append(judgement)
        return judgement
