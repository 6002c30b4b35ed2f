"""The one observer of ground truth: what fence itself saw happen, judged by the invariants.

Theory of operation
-------------------
Every engine reports facts here as it drives the system under test: a unit
reserved, an attempt registered, a commit answered (and the writes it left in the
destination's record of effects), an answer of the destination to an abandon, a
ledger move accepted or refused, a crash. The named invariants
(``fence.model.invariants``) judge these facts alone. They never ask a plug-in what
it thinks happened: a destination's ``lookup`` or ``attempt_state`` and a
ledger's reservation states are evidence for the janitor's policy, never for
the judge. (Jepsen's checkers work the same way: they judge the history the
clients recorded, never the database's own account.)

The observer keeps its own mirror of every reservation, moved by the ledger's
``TRANSITIONS`` table each time the ledger accepts a move. A ledger that
accepts a move the table does not allow (frees a unit twice, confirms a
reservation that was given back) leaves the table, and that is a fact too.

Two kinds of state live here:

* the *present*: the mirror of the reservations, the effects seen per key, the
  identities the destination promised to have abandoned. Every later judgement
  depends on it, so a copy of the observer keeps it;
* the *findings*: sentences naming what broke, per invariant. They are history:
  ``copy(findings=False)`` starts a copy without them, which is how the explorer
  judges each transition on what that transition alone added.

What counts as a write: the destination's ``effects()`` is its audit record,
the one read fence trusts (as a Jepsen checker trusts its final read). The
observer reads it after every commit and takes whatever it gained as written by
that commit, whatever the commit answered; an effects record that loses or
rewrites an entry is reported as a broken protocol, not silently accepted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fence.model.destination import AttemptState, CommitResult, Effect
from fence.model.ledger import FINISHED_STATES, HOLDING_STATES, TRANSITIONS, Move, ReservationState


@dataclass
class MirroredReservation:
    """fence's own record of one reservation: who made it, and where the table says it is."""

    reservation_id: str
    key: str
    attempt: str
    """The model's handle of the attempt that made it (job1#2), never the ledger's word."""
    deadline: float
    """When its lease runs out, on the engine's clock (the ledger was asked for this lease)."""
    state: ReservationState = ReservationState.RESERVED
    times_freed: int = 0


@dataclass
class Findings:
    """What broke, as sentences, per invariant name (see fence.model.invariants)."""

    by_invariant: dict[str, list[str]] = field(default_factory=dict)

    def add(self, invariant: str, sentence: str) -> None:
        self.by_invariant.setdefault(invariant, []).append(sentence)

    def first(self, invariant: str) -> str | None:
        found = self.by_invariant.get(invariant)
        return found[0] if found else None


@dataclass(frozen=True)
class ReleaseJudgement:
    """What was true, by fence's facts, the moment a unit went back to the pool."""

    reservation_id: str
    key: str
    owner: str
    effect_existed: bool
    """An effect for the key existed that no other holding reservation paid for (invariant 2)."""
    owner_could_still_write: bool
    """Its attempt could still make an effect land (invariant 3)."""


class ProtocolBroken(AssertionError):
    """A plug-in answered outside its protocol in a way fence cannot judge (e.g. effects() shrank)."""


class Observer:
    """The facts of one run, and the present state the invariants need to judge the next ones."""

    def __init__(self, capacity: int, slots: bool = False) -> None:
        self.capacity = capacity
        self.slots = slots
        """Units are concurrency slots: finished work gives its unit back (``Ledger(slots=True)``)."""
        self.reservations: dict[str, MirroredReservation] = {}
        self.current_by_key: dict[str, str] = {}
        self.effects: list[Effect] = []
        """Every write seen in the destination's record, in landing order."""
        self.effects_per_key: Counter[str] = Counter()
        self.first_payload: dict[str, str] = {}
        self.abandoned: set[str] = set()
        """Identities the destination answered ABANDONED for: it promised to refuse them."""
        self.findings = Findings()
        self.reached: Counter[str] = Counter()

    _shared = False
    """True while the present (mirror, effects, abandon answers) may be another observer's
    too (``copy``): ``_own`` copies it before a fact changes it."""

    def copy(self, findings: bool = True) -> Observer:
        """An independent observer with the same present (copied on write) and, if ``findings``, history.

        Most of the explorer's copies record no fact that changes the present,
        so the two share it until either records one (every change goes through
        a method here, which calls ``_own`` first).
        """
        other = Observer.__new__(Observer)
        other.capacity = self.capacity
        other.slots = self.slots
        other.reservations = self.reservations
        other.current_by_key = self.current_by_key
        other.effects = self.effects
        other.effects_per_key = self.effects_per_key
        other.first_payload = self.first_payload
        other.abandoned = self.abandoned
        self._shared = other._shared = True
        if findings:
            other.findings = Findings({k: list(v) for k, v in self.findings.by_invariant.items()})
            other.reached = _copy_counter(self.reached)
        else:
            other.findings = Findings()
            other.reached = _copy_counter(None)
        return other

    def _own(self) -> None:
        """Copy the present this observer may share with another (``copy``) before changing it."""
        if self._shared:
            self.reservations = {rid: _copy_mirror(m) for rid, m in self.reservations.items()}
            self.current_by_key = dict(self.current_by_key)
            self.effects = list(self.effects)
            self.effects_per_key = _copy_counter(self.effects_per_key)
            self.first_payload = dict(self.first_payload)
            self.abandoned = set(self.abandoned)
            self._shared = False

    def forget_findings(self) -> None:
        """Keep the present, drop what was found and reached so far (see ``copy(findings=False)``)."""
        self.findings = Findings()
        self.reached = Counter()

    # -- reading ---------------------------------------------------------------------
    @property
    def held(self) -> int:
        """Units out of the pool by fence's mirror (with slots, finished work holds none)."""
        if not self.slots:  # every state but unused holds (HOLDING_STATES), compared by identity
            unused = ReservationState.UNUSED
            return sum(1 for m in self.reservations.values() if m.state is not unused)
        return sum(
            1 for m in self.reservations.values()
            if m.state in HOLDING_STATES and not (self.slots and m.state in FINISHED_STATES)
        )

    def holding_for(self, key: str) -> list[MirroredReservation]:
        return [m for m in self.reservations.values() if m.key == key and m.state in HOLDING_STATES]

    def released(self, reservation_id: str) -> bool:
        mirror = self.reservations.get(reservation_id)
        return mirror is not None and mirror.state is ReservationState.UNUSED

    # -- facts -----------------------------------------------------------------------
    def reach(self, danger: str) -> None:
        """A dangerous interleaving was visited (see fence.model.invariants.DANGERS)."""
        self.reached[danger] += 1

    def reserved(self, reservation_id: str, key: str, attempt: str, deadline: float) -> None:
        """The ledger accepted a reservation for ``key``, made by ``attempt``."""
        if self.held >= self.capacity:
            self.findings.add(
                "capacity_conserved",
                f"the ledger reserved {reservation_id} for {attempt} while all {self.capacity} "
                f"unit(s) were held by fence's count",
            )
        for other in self.holding_for(key):
            self.findings.add(
                "capacity_conserved",
                f"the ledger reserved {reservation_id} for {key} while {other.reservation_id} "
                f"for the same key still held its unit",
            )
        self._own()
        self.reservations[reservation_id] = MirroredReservation(reservation_id, key, attempt, deadline)
        self.current_by_key[key] = reservation_id

    def moved(self, reservation_id: str, move: Move, by: str) -> MirroredReservation:
        """The ledger accepted ``move`` on a reservation; follow it in the mirror by the table."""
        self._own()
        mirror = self.reservations[reservation_id]
        before = mirror.state
        target = TRANSITIONS[before].get(move)
        if target is None:
            # The ledger accepted what the table forbids. If that hands a unit back
            # from a reservation that no longer held one, the unit is freed twice.
            frees = move in (Move.SETTLE_UNUSED, Move.EXPIRE_AND_RELEASE)
            what = "freed its unit again" if frees and before not in HOLDING_STATES else "left the table"
            self.findings.add(
                "capacity_conserved",
                f"{by}: the ledger accepted {move.value} on {reservation_id}, which was {before.value} "
                f"(the table allows {', '.join(m.value for m in TRANSITIONS[before]) or 'nothing'}): it {what}",
            )
            if frees:
                mirror.times_freed += 1
                mirror.state = ReservationState.UNUSED
            return mirror
        mirror.state = target
        if before in HOLDING_STATES and target not in HOLDING_STATES:
            mirror.times_freed += 1
        return mirror

    def release_judged(self, reservation_id: str, owner_could_still_write: bool, owner: str) -> ReleaseJudgement:
        """A unit went back to the pool: judge invariants 2 and 3 at this moment, from facts."""
        mirror = self.reservations[reservation_id]
        covering = sum(1 for m in self.holding_for(mirror.key) if m.reservation_id != reservation_id)
        unaccounted = self.effects_per_key[mirror.key] - covering
        if unaccounted > 0:
            self.findings.add(
                "no_release_while_effect_exists",
                f"{reservation_id}'s unit went back to the pool while an effect for "
                f"{mirror.key} existed that no other reservation paid for",
            )
        if owner_could_still_write:
            self.findings.add(
                "no_early_release",
                f"{reservation_id}'s unit went back to the pool while its attempt {owner} could still write",
            )
        return ReleaseJudgement(reservation_id, mirror.key, owner, unaccounted > 0, owner_could_still_write)

    def owner_move_accepted(self, attempt: str, own_reservation: str, key: str, move: Move) -> None:
        """The ledger accepted a worker's confirm, addressed by key: judge invariant 5, then mirror it."""
        current = self.current_by_key.get(key)
        if current is not None and current != own_reservation:
            owner = self.reservations[current].attempt
            self.findings.add(
                "stale_attempt_cannot_change_newer",
                f"{attempt}'s {move.value} changed {current}, which belongs to {owner}",
            )
        if current is not None:
            self.moved(current, move, by=attempt)

    def failure_accepted(self, attempt: str, own_reservation: str, key: str, wrote: bool) -> None:
        """The ledger accepted a worker's failure report, addressed by key (``fence.model.worker``'s fail).

        Judged as any owner's move (invariant 5: a stale attempt's report must not
        move a newer reservation), then mirrored. An accepted report from an
        attempt whose effect had landed is the failure path's danger: the janitor
        must now settle a reservation whose owner said "failed" though it wrote.
        """
        self.owner_move_accepted(attempt, own_reservation, key, Move.FAIL)
        if wrote:
            self.reach("failure_after_effect")

    def failure_refused(self, attempt: str, own_reservation: str) -> None:
        """The ledger refused a worker's failure report (not the owner, or the lease was taken back)."""
        self.reach("failure_refused")

    def abandon_answered(self, identity: str, answer: AttemptState | None) -> None:
        """The destination answered an abandon: ABANDONED is its promise to refuse that identity."""
        if answer is AttemptState.ABANDONED and identity not in self.abandoned:
            self._own()
            self.abandoned.add(identity)

    def commit_answered(
        self, attempt: str, identity: str, reservation_id: str, key: str, payload: str,
        result: CommitResult, record: list[Effect],
    ) -> list[Effect]:
        """A commit reached the destination; ``record`` is its effects() read just after.

        Returns the writes this commit made (what the record gained).
        """
        written = self._gained(record)
        for effect in written:
            self.write_landed(effect, attempt, identity, reservation_id)
        if not written and result is CommitResult.ALREADY_EXISTS:
            recorded = self.first_payload.get(key)
            if recorded is not None and recorded != payload:
                self.findings.add(
                    "no_silent_replay",
                    f"{attempt} was told its ticket exists, but {key}'s ticket says '{recorded}', not '{payload}'",
                )
        return written

    def _gained(self, record: list[Effect]) -> list[Effect]:
        """What ``record`` (a fresh effects() read) holds beyond the writes already seen."""
        if len(record) < len(self.effects) or any(
            (a.key, a.attempt_id, a.payload) != (b.key, b.attempt_id, b.payload)
            for a, b in zip(self.effects, record)
        ):
            raise ProtocolBroken(
                "the destination's effects() lost or rewrote an earlier write: it must list every "
                "write that landed, in order, and never change the past"
            )
        return record[len(self.effects):]

    def _count_write(self, effect: Effect) -> None:
        self._own()
        self.effects.append(effect)
        self.effects_per_key[effect.key] += 1
        self.first_payload.setdefault(effect.key, effect.payload)
        if self.effects_per_key[effect.key] == 2:
            self.findings.add("no_duplicate_writes", f"{effect.key} was written 2 times")

    def writes_no_worker_made(self, record: list[Effect]) -> list[Effect]:
        """Writes the record gained outside a worker's commit: a janitor's policy wrote (its probe,
        decide or second step called commit), or the destination wrote on its own. They count like
        any write (invariants 1 and 6); no attempt's lease is judged by them."""
        written = self._gained(record)
        for effect in written:
            self._count_write(effect)
        return written

    def write_landed(self, effect: Effect, attempt: str, identity: str, reservation_id: str) -> None:
        """One write seen in the destination's record, made by ``attempt``: judge invariants 1 and 3."""
        self._count_write(effect)
        if self.released(reservation_id):
            self.findings.add(
                "no_early_release",
                f"{attempt}'s effect landed after its reservation {reservation_id} was given back",
            )
        elif identity in self.abandoned:
            self.findings.add(
                "no_early_release",
                f"{attempt}'s effect landed after the destination answered 'abandoned' for {identity}",
            )

    # -- the end of a run --------------------------------------------------------------
    def unsettled(self) -> list[MirroredReservation]:
        """Reservations fence's mirror still sees open: reserved, or outcome_unknown."""
        return [
            m for m in self.reservations.values()
            if m.state in (ReservationState.RESERVED, ReservationState.OUTCOME_UNKNOWN)
        ]


def _copy_counter(counts: Counter | None) -> Counter:
    """A copy of a Counter (or a new empty one) without ``Counter.__init__``'s generic update,
    which costs more than the rest of an observer's copy: the counts are plain ints."""
    other = Counter.__new__(Counter)
    if counts:
        dict.update(other, counts)
    return other


def _copy_mirror(mirror: MirroredReservation) -> MirroredReservation:
    other = MirroredReservation.__new__(MirroredReservation)
    other.__dict__.update(mirror.__dict__)
    return other


class ObservedDestination:
    """The destination as a janitor's policy sees it: itself, with each abandon's answer observed.

    ``abandon_unless_committed`` answering ABANDONED is the destination's promise
    to refuse that attempt from now on; the observer records the promise, and an
    effect of that attempt landing later is a finding. A ``commit`` the policy
    makes is read back like a worker's, so its write is counted where it
    happened, not credited to the next worker who commits. Every other
    attribute is the destination's own.
    """

    def __init__(self, destination, observer: Observer) -> None:
        self._destination = destination
        self._observer = observer

    def abandon_unless_committed(self, attempt_id: str) -> AttemptState:
        answer = self._destination.abandon_unless_committed(attempt_id)
        self._observer.abandon_answered(attempt_id, answer)
        return answer

    def commit(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        """A policy that writes (from its probe, decide or second step): the write is a fact too."""
        result = self._destination.commit(attempt_id, key, payload)
        self._observer.writes_no_worker_made(self._destination.effects())
        return result

    def __getattr__(self, name: str):
        if name in ("_destination", "_observer") or name.startswith("__"):
            raise AttributeError(name)  # copy and pickle look these up before __init__ ran
        return getattr(self._destination, name)
