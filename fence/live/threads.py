"""Real clocks and real threads: the harness the thread experiments run on.

Theory of operation
-------------------
The core (ledger, janitor, policies, destination, world) takes ``now`` as an
argument and never starts a thread. This module is the thin shell around it
that the article's experiments need: worker threads that really sleep through
their work, a janitor loop that really watches lease deadlines on the monotonic
clock, and the destination guarded by a lock. It owns no policy logic: the
janitor loop is ``fence.Janitor.run_once`` with a policy from ``fence.POLICIES``,
the units are a ``fence.Ledger`` and the ticket service is ``fence.TicketService``.

A ``ThreadRun`` runs attempts (reserve, register if the policy keeps a witness,
work, commit, confirm -- or crash or fail at a chosen point) against one ledger,
one destination and one janitor loop, records every event with its real time,
and writes every fact down in a ``LiveRun`` (``fence.live.facts``) for the
invariants to judge. The experiments' trials on it are ``fence.live.thread_trials``.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass
from typing import Callable

from fence.model.destination import AttemptState, CommitResult, Guards, TicketService
from fence.base.errors import IllegalMove, StaleAttempt
from fence.model.janitor import Janitor, Settlement
from fence.model.ledger import Ledger, Reservation, ReservationState
from fence.model.observer import ReleaseJudgement
from fence.model.policies import Decision, JanitorPolicy
from fence.model.worker import CONFIRM_MOVES
from fence.live.facts import LiveRun
from fence.live.results import Event

POLL_SECONDS = 0.002
"""How often the janitor loop looks at the deadlines."""


# -- recording ---------------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, lane: str, kind: str, label: str, t: float | None = None) -> float:
        with self._lock:
            t = self.now() if t is None else t
            self.events.append(Event(t, lane, kind, label))
            return t


class LockedDestination:
    """A ``TicketService`` behind one lock, with the time of every write recorded."""

    def __init__(self, guards: Guards, recorder: Recorder) -> None:
        self.guards = guards
        self._inner = TicketService(guards)
        self._lock = threading.Lock()
        self._recorder = recorder
        self.write_times: list[tuple[float, str, CommitResult]] = []

    def register(self, attempt_id: str, key: str) -> AttemptState | None:
        with self._lock:
            state = self._inner.register(attempt_id, key)
            if state is not None:
                self._recorder.log("destination", "register", f"{attempt_id} {state.value}")
            return state

    def commit(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        with self._lock:
            result = self._inner.commit(attempt_id, key, payload)
            kind = "effect" if result is CommitResult.WRITTEN else "refused"
            t = self._recorder.log("destination", kind, f"{attempt_id} {result.value}")
            self.write_times.append((t, attempt_id, result))
            return result

    def lookup(self, key: str) -> bool:
        with self._lock:
            return self._inner.lookup(key)

    def attempt_state(self, attempt_id: str) -> AttemptState | None:
        with self._lock:
            return self._inner.attempt_state(attempt_id)

    def abandon_unless_committed(self, attempt_id: str) -> AttemptState:
        with self._lock:
            result = self._inner.abandon_unless_committed(attempt_id)
            self._recorder.log("destination", "abandon", f"{attempt_id} {result.value}")
            return result

    def effects(self):
        with self._lock:
            return self._inner.effects()


# -- the run -------------------------------------------------------------------------
@dataclass
class AttemptSpec:
    key: str
    attempt_id: str
    work: float
    """Seconds of real work between reserving and committing."""
    crash: str | None = None
    """None, ``before-effect`` or ``after-effect``."""
    fail: str | None = None
    """None, ``before-effect``, ``after-effect`` or ``on-refusal``: the worker raises there and
    reports the failure to the ledger (``Ledger.fail``), where a crash says nothing."""


@dataclass
class AttemptRecord:
    spec: AttemptSpec
    asked_at: float | None = None
    reserved_at: float | None = None
    deadline: float | None = None
    """The lease deadline the ledger set, on the same clock: the tests order releases against it."""
    token: tuple | None = None
    """Where its unit came from: ("start",), ("finished", key) or ("released", key)."""
    work_start: float | None = None
    commit_at: float | None = None
    result: CommitResult | None = None
    crashed_at: float | None = None
    failed: str | None = None
    """What the ledger did with its failure report: the reservation's state, or ``refused``."""
    confirmed: str | None = None

    @property
    def waited(self) -> float | None:
        if self.asked_at is None or self.reserved_at is None:
            return None
        return self.reserved_at - self.asked_at


@dataclass(frozen=True)
class Release:
    """The janitor gave a unit back: what fence's facts said was true at that moment."""

    t: float
    reservation_id: str
    key: str
    owner: str
    effect_existed: bool
    """An effect for the key had landed that no holding reservation paid for (invariant 2)."""
    owner_could_still_write: bool
    """Its attempt had neither sent its commit nor been abandoned (invariant 3)."""


class ThreadRun:
    """Worker threads, one janitor loop, one ledger and one destination, on the real clock."""

    def __init__(
        self,
        policy: JanitorPolicy,
        lease: float,
        capacity: int = 1,
        slots: bool = False,
        on_release: Callable[[ThreadRun, Release], None] | None = None,
    ) -> None:
        self.policy = policy
        self.lease = lease
        self.recorder = Recorder()
        self.destination = LockedDestination(policy.guards, self.recorder)
        self.ledger = Ledger(capacity, slots=slots)
        self.facts = LiveRun(capacity, jobs=[], slots=slots)
        """fence's facts of this run, judged by the invariants (fence.live.facts)."""
        self.janitor = Janitor(self.ledger, self.facts.janitor_destination(self.destination), policy)
        self.lock = threading.Condition()
        """Guards the ledger, the destination's writes, the run's facts and the records below:
        the order facts are recorded in is the order they happened."""
        self.on_release = on_release
        self.records: dict[str, AttemptRecord] = {}
        self.releases: list[Release] = []
        self.expired_owners: list[str] = []
        """Whose lease the janitor found expired, in order: the tests tell planned expiries from starved ones."""
        self.tokens: collections.deque[tuple] = collections.deque(("start",) for _ in range(capacity))
        self._queue: list[str] = []
        self._unfinished = 0
        """Attempts launched and not yet over (counted before their thread starts)."""
        self._stop = threading.Event()
        self._held_logged: set[str] = set()
        self.errors: list[BaseException] = []

    # -- workers ---------------------------------------------------------------------
    def launch(
        self, spec: AttemptSpec, reserved: threading.Event | None = None, gate: threading.Event | None = None
    ) -> None:
        """Start one attempt on its own thread (safe to call from the janitor's callback).

        ``reserved`` is set once it holds its unit; with ``gate`` it asks for a
        unit only once the gate opens, so that many workers can ask at once.
        """
        record = AttemptRecord(spec)
        with self.lock:
            self.records[spec.attempt_id] = record
            if spec.key not in self.facts.jobs:
                self.facts.jobs.append(spec.key)
            self._unfinished += 1
        threading.Thread(target=self._guarded, args=(record, reserved, gate), daemon=True).start()

    def _guarded(self, record: AttemptRecord, reserved: threading.Event | None, gate: threading.Event | None) -> None:
        try:
            if gate is not None:
                gate.wait()
            self._attempt(record, reserved)
        except BaseException as error:  # surfaced by wait(), never lost in a thread
            self.errors.append(error)
        finally:
            with self.lock:
                self._unfinished -= 1

    def _attempt(self, record: AttemptRecord, reserved: threading.Event | None) -> None:
        spec = record.spec
        lane = f"worker {spec.attempt_id}"
        log = self.recorder.log
        with self.lock:
            record.asked_at = log(lane, "ask", f"asks for a unit for {spec.key}")
            self._queue.append(spec.attempt_id)
            while not (self._queue[0] == spec.attempt_id and self.ledger.free >= 1):
                self.lock.wait(0.05)
            self._queue.pop(0)
            now = self.recorder.now()
            reservation = self.ledger.reserve(spec.key, spec.attempt_id, now, self.lease)
            record.deadline = reservation.deadline
            record.reserved_at = now
            record.token = self.tokens.popleft()
            self.facts.reserved(spec.attempt_id, spec.key, reservation.reservation_id, reservation.deadline)
            heir = f", inheriting {record.token[1]}'s released unit" if record.token[0] == "released" else ""
            log(lane, "reserve", f"reserves {spec.key} (lease {self.lease:g}s{heir})", t=now)
            self.lock.notify_all()
        if reserved is not None:
            reserved.set()
        with self.lock:
            self.destination.register(spec.attempt_id, spec.key)
            self.facts.started(spec.attempt_id)
        record.work_start = log(lane, "work", "starts working")
        time.sleep(spec.work)
        if self._stopped_at("before-effect", record, lane):
            return
        payload = f"ticket for {spec.key}"
        with self.lock:
            self.facts.commit_sent(spec.attempt_id, payload)
            record.result = self.destination.commit(spec.attempt_id, spec.key, payload)
            self.facts.commit_answered(spec.attempt_id, record.result, self.destination.effects())
        record.commit_at = self.recorder.now()
        if self._stopped_at("after-effect", record, lane):
            return
        with self.lock:
            move = CONFIRM_MOVES.get(record.result)
            if move is None:  # a refusal: the worker gives up (fence.model.worker's answer-to-confirm rule)
                log(lane, "gives_up", f"refused ({record.result.value}): gives up")
                record.confirmed = "gave up"
                if spec.fail == "on-refusal":
                    self._fail(record, lane)
                return
            held_before = self.ledger.held
            try:
                moved = self.ledger.owner_move(spec.key, spec.attempt_id, move)
            except (StaleAttempt, IllegalMove) as refusal:
                self.facts.confirm_refused(spec.attempt_id)
                record.confirmed = "refused"
                log(lane, "stale", f"{move.value} refused: {refusal}")
                return
            self.facts.confirmed(spec.attempt_id, record.result)
            record.confirmed = moved.state.value
            log(lane, "confirm", f"{move.value}: {moved.reservation_id} {moved.state.value}")
            if self.ledger.held < held_before:  # slots: finished work frees its unit
                self.tokens.append(("finished", spec.key))
                self.lock.notify_all()

    def _stopped_at(self, point: str, record: AttemptRecord, lane: str) -> bool:
        """Does the attempt crash or fail at ``point`` (its spec says so)? Then it has, and it stops there."""
        if record.spec.crash == point:
            self._crash(record, lane)
            return True
        if record.spec.fail == point:
            self._fail(record, lane)
            return True
        return False

    def _crash(self, record: AttemptRecord, lane: str) -> None:
        with self.lock:
            self.facts.crashed(record.spec.attempt_id)
            record.crashed_at = self.recorder.log(lane, "crash", f"crashes {record.spec.crash}")

    def _fail(self, record: AttemptRecord, lane: str) -> None:
        """The worker raises and reports it: the ledger's owner-checked ``fail`` (a refusal is a fact too)."""
        spec = record.spec
        with self.lock:
            try:
                moved = self.ledger.fail(spec.key, spec.attempt_id)
            except (StaleAttempt, IllegalMove) as refusal:
                self.facts.failed(spec.attempt_id, accepted=False)
                record.failed = "refused"
                self.recorder.log(lane, "fail", f"fails {spec.fail}; the ledger refuses: {refusal}")
                return
            self.facts.failed(spec.attempt_id, accepted=True)
            record.failed = moved.state.value
            self.recorder.log(lane, "fail", f"fails {spec.fail}: {moved.reservation_id} {moved.state.value}")

    # -- the janitor loop ----------------------------------------------------------------
    def _janitor_loop(self) -> None:
        try:
            while not self._stop.is_set():
                with self.lock:
                    now = self.recorder.now()
                    for result in self.janitor.run_once(now):
                        self._note(result)
                time.sleep(POLL_SECONDS)
        except BaseException as error:
            self.errors.append(error)

    def _note(self, result: Settlement | Reservation) -> None:
        log = self.recorder.log
        if isinstance(result, Reservation):
            self.expired_owners.append(result.owner)
            log("janitor", "expiry", f"{result.reservation_id} lease expired -> {result.state.value}")
            judgement = self.facts.expired(result.reservation_id, freed=result.state is ReservationState.UNUSED)
            if judgement is not None:
                self._released(judgement)
            return
        rid = result.reservation.reservation_id
        if result.decision is Decision.HOLD:
            if rid not in self._held_logged:
                self._held_logged.add(rid)
                log("janitor", "hold", f"holds {rid} ({result.evidence.describe()})")
            return
        judgement = self.facts.settled(rid, result.reservation.state)
        if judgement is not None:
            log("janitor", "settle", f"{rid} unused ({result.evidence.describe()})")
            self._released(judgement)
        else:
            log("janitor", "settle", f"{rid} {result.reservation.state.value} ({result.evidence.describe()})")
            if self.ledger.slots:
                self.tokens.append(("finished", result.reservation.key))
                self.lock.notify_all()

    def _released(self, judgement: ReleaseJudgement) -> None:
        release = Release(
            self.recorder.now(),
            judgement.reservation_id,
            judgement.key,
            judgement.owner,
            judgement.effect_existed,
            judgement.owner_could_still_write,
        )
        self.releases.append(release)
        self.recorder.log("janitor", "release", f"{judgement.reservation_id}'s unit returns", t=release.t)
        self.tokens.append(("released", judgement.key))
        self.lock.notify_all()
        if self.on_release is not None:
            self.on_release(self, release)

    # -- running -------------------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._janitor_loop, daemon=True).start()

    def wait(self, timeout: float) -> bool:
        """Until every attempt finished and nothing is left to settle; False on timeout."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and not self.errors:
                with self.lock:
                    busy = self._unfinished > 0 or any(
                        r.state in (ReservationState.RESERVED, ReservationState.OUTCOME_UNKNOWN)
                        for r in self.ledger.reservations()
                    )
                if not busy:
                    return True
                time.sleep(POLL_SECONDS)
            return False
        finally:
            self._stop.set()
            if self.errors:
                raise self.errors[0]

    def effects(self, key: str) -> int:
        """Writes for ``key`` fence saw land (the run's facts, not a fresh read)."""
        return self.facts.effects(key)

