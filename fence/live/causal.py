"""The parent's record of a process run: children's reports written down as facts, and the audit.

Each child reports what it did (``fence.live.messages``); the parent writes
every report down as a fact of the run (``fence.live.facts.LiveRun``), in an
order the database's causality allows (``CausalFacts``), with the few facts no
report can carry learned from the ledger (a reserve whose worker was killed
before it could say so). After a drain, ``audit`` counts and judges the run from
those facts alone: effects per job, units held, reservations stuck, and every
invariant broken; a drain is what the run itself does (every release is
retried, the janitor settles every expired lease) until nothing moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from fence.model.destination import CommitResult
from fence.model.ledger import ReservationState
from fence.model.observer import ReleaseJudgement
from fence.model.worker import ALIVE_PHASES
from fence.live.children import DATABASE_ERRORS, Reconnecting
from fence.live.facts import OPEN, SETTLED, LiveRun
from fence.live.messages import (
    AbandonAnswered,
    Adopted,
    Committed,
    Committing,
    Confirming,
    Done,
    Expiry,
    Killed,
    Registered,
    Report,
    Reserved,
    Settle,
)


def record_fact(run: LiveRun, handle: str | None, report: Report, ledger_and_effects) -> ReleaseJudgement | None:
    """One child's report, written down as a fact of the run (fence.live.facts); a release comes back judged.

    ``ledger_and_effects()`` gives the parent's (ledger, destination): the
    destination's effects record is read before every fact that is judged
    against the writes (a commit's answer, a janitor's move), because a child
    reports a commit only after it landed.
    """
    match report:
        case Reserved() if handle not in run.attempts:  # else already learned from the ledger (CausalFacts)
            run.reserved(handle, report.key, report.reservation, report.deadline)
        case Registered():
            run.started(handle)
        case Committing(payload=payload):
            run.commit_sent(handle, payload)
        case Committed(result=result):
            # The writes go to their attempts by the identity each carries (sync_writes);
            # the answer itself adds none, so a write is never credited to the wrong commit.
            run.sync_writes(ledger_and_effects()[1].effects())
            run.commit_answered(handle, result, list(run.observer.effects))
        case Done() if handle in run.attempts:
            _record_done(run, handle, report)
        case Killed():
            _killed(run, handle)
        case AbandonAnswered(identity=identity, answer=answer):
            run.observer.abandon_answered(identity, answer)
        case Expiry(reservation=rid, state=state):
            _before_janitor_move(run, rid, ledger_and_effects)
            return run.expired(rid, freed=state is ReservationState.UNUSED)
        case Settle(reservation=rid, state=state):
            _before_janitor_move(run, rid, ledger_and_effects)
            return run.settled(rid, state)
        case Adopted(reservation=rid):
            _before_janitor_move(run, rid, ledger_and_effects)
            if run.observer.reservations[rid].state is ReservationState.RESERVED:
                run.expired(rid, freed=False)  # adopted after a reconnect: its claim never reached us
    return None


def _before_janitor_move(run: LiveRun, rid: str, ledger_and_effects) -> None:
    """Every write the record shows, and the reservation itself, known before a janitor's move on it is judged."""
    ledger, destination = ledger_and_effects()
    run.sync_writes(destination.effects())
    if rid not in run.owner_of:
        learn_reserve(run, ledger.get(rid), dead=True)


def _record_done(run: LiveRun, handle: str, done: Done) -> None:
    outcome = done.outcome
    if outcome in {state.value for state in SETTLED}:
        attempt = run.attempts[handle]
        mirror = run.observer.reservations[attempt.reservation_id]
        # After a reconnect the worker found its reservation settled, by its own
        # confirm or by a janitor: a janitor only settles as confirmed_existing,
        # and a janitor's settle the parent heard of has already moved the mirror.
        janitors = done.reconnected and (
            mirror.state not in OPEN
            or (outcome == ReservationState.CONFIRMED_EXISTING.value and attempt.answer is CommitResult.WRITTEN)
        )
        if janitors:
            run.confirm_refused(handle)
        else:
            run.confirmed(handle)
    elif outcome == "confirm refused":
        run.confirm_refused(handle)
    elif outcome == "commit unknown":
        run.commit_unknown(handle)
    # "gave up": the refusal it heard already ended it; "reserve refused": it never held a unit


def learn_reserve(run: LiveRun, reservation, dead: bool) -> None:
    """A reserve whose report has not arrived (and, if its worker was killed just after, never will).

    Only the ledger can say that it exists and who made it. A worker fence
    killed is recorded as crashed; a live one's own reports follow (its
    ``Reserved``, when it comes, is then not recorded twice).
    """
    run.reserved(reservation.owner, reservation.key, reservation.reservation_id, reservation.deadline)
    if dead:
        run.crashed(reservation.owner)


class CausalFacts:
    """Many children's reports, recorded in an order the database's causality allows.

    Each child's pipe keeps its own reports in order, but the parent reads the
    pipes one after another, so a retry's ``Reserved`` can be read before the
    janitor's report of the release that made it possible, and a janitor's
    expiry before the ``Reserved`` of the lease it expired (a worker killed
    between its reserve and its report never sends one). Timestamps cannot fix
    that soundly on a busy machine; causality can:

    * each child's reports stay in their order (one waits, the rest of that
      child's wait behind it);
    * a ``Reserved`` for a key waits while fence still sees the key held: the
      ledger gave the unit only after the release, whose report is on its way.
      Before that, every earlier attempt the parent sent for the key that has
      not reported its reserve is looked up in the ledger (``learn_reserve``),
      so a reserve whose report was lost still holds the key in fence's mirror;
    * a janitor's report on a reservation fence has not heard of is preceded
      by that reservation, learned from the ledger the same way.
    """

    def __init__(self, db: Reconnecting, run: LiveRun, sent_for: Callable[[str], list[str]]) -> None:
        self.db = db
        self.run = run
        self.sent_for = sent_for
        """The attempts the parent has sent for a key, oldest first."""
        self.dead: set[str] = set()
        """Attempts whose worker fence killed (or that exited)."""
        self.looked_up: set[str] = set()
        self.confirming: set[str] = set()
        """Attempts that sent their confirm and have not reported its answer."""
        self.waiting: list[tuple[str, str | None, Report]] = []

    def add(self, source: str, handle: str | None, report: Report) -> None:
        """One report from child ``source`` (about attempt ``handle``); recorded as soon as causality allows."""
        if isinstance(report, Killed) and handle is not None:
            self.dead.add(handle)
        self.waiting.append((source, handle, report))
        self._flush()

    def finish(self) -> None:
        """The end of the run, once every janitor's pipe was read to its end.

        A worker killed between sending its confirm and reporting the answer
        leaves only the ledger knowing whether the confirm landed; with every
        janitor report in, a reservation fence still sees open that the ledger
        shows settled was settled by that confirm. Whatever still waits is then
        recorded as is, and the observer judges it.
        """
        self._flush()
        for handle in sorted(self.confirming):
            attempt = self.run.attempts.get(handle)
            if attempt is None or self.run.observer.reservations[attempt.reservation_id].state not in OPEN:
                continue
            state = self._read(lambda ledger: ledger.get(attempt.reservation_id).state)
            if state in SETTLED:
                self.run.confirm_landed_unreported(handle)
        for _, handle, report in self.waiting:
            self._record(handle, report)
        self.waiting = []

    def _ready(self, handle: str | None, report: Report) -> bool:
        match report:
            case Reserved(key=key) if handle not in self.run.attempts:
                self._learn_earlier_attempts(key, handle)
                return not self.run.observer.holding_for(key)
            case Expiry(reservation=rid) | Settle(reservation=rid) | Adopted(reservation=rid) if (
                rid not in self.run.owner_of
            ):
                reservation = self._read(lambda ledger: ledger.get(rid))
                learn_reserve(self.run, reservation, dead=reservation.owner in self.dead)
        return True

    def _learn_earlier_attempts(self, key: str, handle: str) -> None:
        earlier = self.sent_for(key)
        earlier = earlier[: earlier.index(handle)] if handle in earlier else earlier
        unknown = [h for h in earlier if h not in self.run.attempts and h not in self.looked_up]
        if not unknown:
            return
        self.looked_up.update(unknown)
        for reservation in self._read(lambda ledger: ledger.reservations()):
            if reservation.owner in unknown and reservation.reservation_id not in self.run.owner_of:
                learn_reserve(self.run, reservation, dead=reservation.owner in self.dead)

    def _flush(self) -> None:
        progress = True
        while progress:
            progress = False
            blocked: set[str] = set()
            for item in list(self.waiting):
                source, handle, report = item
                if source in blocked or not self._ready(handle, report):
                    blocked.add(source)
                    continue
                self.waiting.remove(item)
                match report:
                    case Confirming():
                        self.confirming.add(handle)
                    case Done():
                        self.confirming.discard(handle)
                self._record(handle, report)
                progress = True

    def _record(self, handle: str | None, report: Report) -> ReleaseJudgement | None:
        # record_fact reads before it writes a fact down: after a dropped
        # connection the second try records it once.
        while True:
            try:
                return record_fact(self.run, handle, report, lambda: (self.db.backend.ledger, self.db.backend.destination))
            except DATABASE_ERRORS:
                self.db.reopen()

    def _read(self, call):
        return self.db.retry(lambda backend: call(backend.ledger))


def _killed(run: LiveRun, handle: str | None) -> None:
    """A SIGKILL: an open commit transaction is rolled back, so nothing of it can land later."""
    attempt = run.attempts.get(handle) if handle else None
    if attempt is not None and attempt.phase in ALIVE_PHASES:
        run.crashed(handle)


@dataclass
class Audit:
    """What fence's facts say once nothing is running (judged on the run, never read from the database)."""

    effects: dict[str, int]
    duplicates: int
    lost: list[str]
    stuck: list[str]
    """Reservations still reserved or outcome_unknown."""
    leaked: int
    """Units held by no job's confirmed reservation."""
    held: int
    capacity: int
    freed_twice: list[str]
    broken: dict[str, str] = field(default_factory=dict)
    """Every invariant the run's facts broke (fence.model.invariants), with how."""

    @property
    def problems(self) -> list[str]:
        """What a drained run must never show, whatever the policy: lost jobs, stuck or leaked units."""
        found = []
        if self.lost:
            found.append(f"lost jobs (no effect): {', '.join(self.lost[:5])}")
        if self.stuck:
            found.append(f"reservations stuck: {', '.join(self.stuck[:5])}")
        if self.leaked:
            found.append(f"{self.leaked} unit(s) leaked")
        if self.freed_twice:
            found.append(f"units freed twice: {', '.join(self.freed_twice[:5])}")
        return found

    def line(self) -> str:
        broken = ",".join(self.broken) or "none"
        return (f"drain: duplicates={self.duplicates} lost={len(self.lost)} leaked={self.leaked} "
                f"stuck={len(self.stuck)} held={self.held}/{self.capacity} invariants_broken={broken}")


def audit(run: LiveRun, final_effects: list) -> Audit:
    """The end of a run: take in any write nobody reported, then count and judge from the facts."""
    run.sync_writes(final_effects, final=True)
    observer = run.observer
    effects = {job: observer.effects_per_key[job] for job in run.jobs}
    settled_jobs = {m.key for m in observer.reservations.values() if m.state in SETTLED}
    return Audit(
        effects=effects,
        duplicates=sum(max(0, n - 1) for n in effects.values()),
        lost=[job for job in run.jobs if effects[job] == 0],
        stuck=[m.reservation_id for m in observer.unsettled()],
        leaked=observer.held - len(settled_jobs),
        held=observer.held,
        capacity=observer.capacity,
        freed_twice=[m.reservation_id for m in observer.reservations.values() if m.times_freed > 1],
        broken=run.judge(),
    )

