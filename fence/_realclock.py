"""Real clocks and real threads: the one module of fence that sleeps.

Theory of operation
-------------------
The core (ledger, janitor, policies, destination, world) takes ``now`` as an
argument and never starts a thread. This module is the thin shell around it
that the article's experiments need: worker threads that really sleep through
their work, a janitor loop that really watches lease deadlines on the monotonic
clock, and the destination guarded by a lock. It owns no policy logic: the
janitor loop is ``fence.Janitor.run_once`` with a policy from ``fence.POLICIES``,
the units are a ``fence.Ledger`` and the ticket service is ``fence.TicketService``.

Two engines live here:

* ``Fleet`` runs attempts (reserve, register if the policy keeps a witness,
  work, commit, confirm -- or crash at a chosen point) against one ledger, one
  destination and one janitor loop, and records every event with its real time.
  ``crash_boundary``, ``delayed_commit`` and ``contention`` are the article's
  three experiments built on it.
* ``replay_real`` plays a saved counterexample through the model ``World`` from
  real threads, one per actor, sequenced in trace order, with every tick a real
  sleep, and checks the same named invariant after each step.

Timings are given as multiples of one base lease (1.0 s by default), so a quick
run is the same experiment on a shorter clock.
"""

from __future__ import annotations

import collections
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from fence import _counterexample
from fence._destination import AttemptState, CommitResult, Guards, TicketService
from fence._errors import BadInput, IllegalMove, StaleAttempt
from fence._invariants import BY_NAME
from fence._janitor import Janitor, Settlement
from fence._ledger import Ledger, Reservation, ReservationState
from fence._live import LiveRun
from fence._observer import ReleaseJudgement
from fence._worker import CONFIRM_MOVES
from fence._policies import POLICIES, Decision, JanitorPolicy
from fence._world import Action, InapplicableAction, Tick, World

POLL_SECONDS = 0.002
"""How often the janitor loop looks at the deadlines."""


# -- recording ---------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    t: float
    """Seconds since the trial started, on the monotonic clock."""
    lane: str
    """Who acted: ``worker <attempt>``, ``janitor`` or ``destination``."""
    kind: str
    label: str


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


# -- the fleet -----------------------------------------------------------------------
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


class Fleet:
    """Workers, one janitor loop, one ledger and one destination, on the real clock."""

    def __init__(
        self,
        policy: JanitorPolicy,
        lease: float,
        capacity: int = 1,
        slots: bool = False,
        on_release: Callable[[Fleet, Release], None] | None = None,
    ) -> None:
        self.policy = policy
        self.lease = lease
        self.recorder = Recorder()
        self.destination = LockedDestination(policy.guards, self.recorder)
        self.ledger = Ledger(capacity, slots=slots)
        self.run = LiveRun(capacity, jobs=[], slots=slots)
        """fence's facts of this run, judged by the invariants (fence._live)."""
        self.janitor = Janitor(self.ledger, self.run.janitor_destination(self.destination), policy)
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
            if spec.key not in self.run.jobs:
                self.run.jobs.append(spec.key)
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
            self.run.reserved(spec.attempt_id, spec.key, reservation.reservation_id, reservation.deadline)
            heir = f", inheriting {record.token[1]}'s released unit" if record.token[0] == "released" else ""
            log(lane, "reserve", f"reserves {spec.key} (lease {self.lease:g}s{heir})", t=now)
            self.lock.notify_all()
        if reserved is not None:
            reserved.set()
        with self.lock:
            self.destination.register(spec.attempt_id, spec.key)
            self.run.started(spec.attempt_id)
        record.work_start = log(lane, "work", "starts working")
        time.sleep(spec.work)
        if spec.crash == "before-effect":
            self._crash(record, lane)
            return
        if spec.fail == "before-effect":
            self._fail(record, lane)
            return
        payload = f"ticket for {spec.key}"
        with self.lock:
            self.run.commit_sent(spec.attempt_id, payload)
            record.result = self.destination.commit(spec.attempt_id, spec.key, payload)
            self.run.commit_answered(spec.attempt_id, record.result, self.destination.effects())
        record.commit_at = self.recorder.now()
        if spec.crash == "after-effect":
            self._crash(record, lane)
            return
        if spec.fail == "after-effect":
            self._fail(record, lane)
            return
        with self.lock:
            move = CONFIRM_MOVES.get(record.result)
            if move is None:  # a refusal: the worker gives up (fence._worker's answer-to-confirm rule)
                log(lane, "gives_up", f"refused ({record.result.value}): gives up")
                record.confirmed = "gave up"
                if spec.fail == "on-refusal":
                    self._fail(record, lane)
                return
            held_before = self.ledger.held
            try:
                moved = self.ledger.owner_move(spec.key, spec.attempt_id, move)
            except (StaleAttempt, IllegalMove) as refusal:
                self.run.confirm_refused(spec.attempt_id)
                record.confirmed = "refused"
                log(lane, "stale", f"{move.value} refused: {refusal}")
                return
            self.run.confirmed(spec.attempt_id, record.result)
            record.confirmed = moved.state.value
            log(lane, "confirm", f"{move.value}: {moved.reservation_id} {moved.state.value}")
            if self.ledger.held < held_before:  # slots: finished work frees its unit
                self.tokens.append(("finished", spec.key))
                self.lock.notify_all()

    def _crash(self, record: AttemptRecord, lane: str) -> None:
        with self.lock:
            self.run.crashed(record.spec.attempt_id)
            record.crashed_at = self.recorder.log(lane, "crash", f"crashes {record.spec.crash}")

    def _fail(self, record: AttemptRecord, lane: str) -> None:
        """The worker raises and reports it: the ledger's owner-checked ``fail`` (a refusal is a fact too)."""
        spec = record.spec
        with self.lock:
            try:
                moved = self.ledger.fail(spec.key, spec.attempt_id)
            except (StaleAttempt, IllegalMove) as refusal:
                self.run.failed(spec.attempt_id, accepted=False)
                record.failed = "refused"
                self.recorder.log(lane, "fail", f"fails {spec.fail}; the ledger refuses: {refusal}")
                return
            self.run.failed(spec.attempt_id, accepted=True)
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
            judgement = self.run.expired(result.reservation_id, freed=result.state is ReservationState.UNUSED)
            if judgement is not None:
                self._released(judgement)
            return
        rid = result.reservation.reservation_id
        if result.decision is Decision.HOLD:
            if rid not in self._held_logged:
                self._held_logged.add(rid)
                log("janitor", "hold", f"holds {rid} ({result.evidence.describe()})")
            return
        judgement = self.run.settled(rid, result.reservation.state)
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
        return self.run.effects(key)


# -- results -------------------------------------------------------------------------
@dataclass
class TrialResult:
    number: int
    line: str
    counts: dict[str, int]
    times: dict[str, float | None]
    events: list[Event]
    settled: bool = True
    broken: dict[str, str] = field(default_factory=dict)
    """The invariants (fence._invariants) this trial's facts broke, with how."""


@dataclass
class VariantResult:
    experiment: str
    label: str
    """e.g. ``POLICY=naive CRASH=after-effect``."""
    trials: list[TrialResult] = field(default_factory=list)
    summary: str = ""
    totals: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    lease: float = 1.0


def spread(values: list[float], unit: str = "s", digits: int = 3) -> str:
    """Median and range, as ``1.002s[1.001..1.009]``; ``none`` if there are no values."""
    values = [v for v in values if v is not None]
    if not values:
        return "none"
    med = statistics.median(values)
    return f"{med:.{digits}f}{unit}[{min(values):.{digits}f}..{max(values):.{digits}f}]"


def _at(t: float | None) -> str:
    return "never" if t is None else f"{t:.3f}s"


def _expect(variant: VariantResult, name: str, want: int) -> None:
    got = variant.totals[name]
    if got != want:
        variant.differences.append(f"{variant.experiment} {variant.label}: {name}={got}, the article has {want}")


Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# -- experiment 1: the crash boundary --------------------------------------------------
CRASH_POLICIES = ("naive", "reconcile")
CRASH_POINTS = ("after-effect", "before-effect")


def crash_trial(policy: JanitorPolicy, crash: str, lease: float, number: int) -> TrialResult:
    """One unit, one worker that crashes at ``crash``; a release queues a retry."""

    def retry(fleet: Fleet, release: Release) -> None:
        n = sum(1 for a in fleet.records if a.startswith(release.key)) + 1
        fleet.launch(AttemptSpec(release.key, f"{release.key}#{n}", work=0.2 * lease))

    fleet = Fleet(policy, lease, on_release=retry)
    fleet.start()
    fleet.launch(AttemptSpec("job1", "job1#1", work=0.2 * lease, crash=crash))
    settled = fleet.wait(timeout=10 * lease + 5)
    events = fleet.recorder.events
    expiry = next((e.t for e in events if e.kind == "expiry"), None)
    first = fleet.records["job1#1"]
    retry_record = fleet.records.get("job1#2")
    release = fleet.releases[0] if fleet.releases else None
    effects = fleet.effects("job1")
    counts = {
        "effects": effects,
        "duplicates": max(0, effects - 1),
        "released": int(release is not None),
        "returned_with_effect": int(release is not None and release.effect_existed),
        "retried": int(retry_record is not None),
    }
    times = {
        "expiry": expiry,
        "effect": first.commit_at if first.result is CommitResult.WRITTEN else None,
        "crash": first.crashed_at,
        "released": release.t if release else None,
        "retry": retry_record.commit_at if retry_record else None,
        "deadline": first.deadline,
    }
    line = (
        f"POLICY={policy.name} CRASH={crash} trial {number}: expiry@{_at(expiry)} "
        f"effect@{_at(times['effect'])} crash@{_at(times['crash'])} released@{_at(times['released'])} "
        f"retry@{_at(times['retry'])} effects={effects} duplicates={counts['duplicates']}"
    )
    return TrialResult(number, line, counts, times, list(events), settled, fleet.run.judge())


def crash_boundary(trials: int, lease: float, progress: Progress = _quiet) -> list[VariantResult]:
    variants = []
    for name in CRASH_POLICIES:
        for crash in CRASH_POINTS:
            variant = VariantResult("crash-boundary", f"POLICY={name} CRASH={crash}", lease=lease)
            for number in range(1, trials + 1):
                progress(f"crash-boundary {name} {crash} trial {number}/{trials}")
                variant.trials.append(crash_trial(POLICIES[name], crash, lease, number))
            close_crash_variant(variant, name, crash == "after-effect", trials)
            variants.append(variant)
    return variants


def _totals(variant: VariantResult) -> dict[str, int]:
    return {k: sum(t.counts[k] for t in variant.trials) for k in variant.trials[0].counts}


def close_crash_variant(variant: VariantResult, policy: str, after: bool, trials: int,
                        clean: tuple[str, ...] = ()) -> None:
    """Totals, SUMMARY and the article's expectations for one crash-boundary row (threads or processes).

    ``after``: the crash left an effect behind. ``clean`` names extra counts
    that must be 0 (the process runs' drain problems).
    """
    total = _totals(variant)
    variant.totals = {
        "duplicate_writes_total": total["duplicates"],
        "capacity_returned_while_effect_exists": total["returned_with_effect"],
        "capacity_returned": total["released"],
        **{name: total[name] for name in clean},
    }
    variant.summary = (
        f"SUMMARY {variant.label} trials={trials} "
        f"duplicate_writes_total={total['duplicates']} "
        f"capacity_returned_while_effect_exists={total['returned_with_effect']}/{trials} "
        f"capacity_returned={total['released']}/{trials} "
        f"expiry={spread([t.times['expiry'] for t in variant.trials])}"
        + "".join(f" {name}={total[name]}" for name in clean)
    )
    if policy == "naive":
        _expect(variant, "duplicate_writes_total", trials if after else 0)
        _expect(variant, "capacity_returned_while_effect_exists", trials if after else 0)
        _expect(variant, "capacity_returned", trials)
    else:
        _expect(variant, "duplicate_writes_total", 0)
        _expect(variant, "capacity_returned_while_effect_exists", 0)
        _expect(variant, "capacity_returned", 0 if after else trials)
    for name in clean:
        _expect(variant, name, 0)


def close_delayed_variant(variant: VariantResult, policy: str, trials: int, clean: tuple[str, ...] = ()) -> None:
    """Totals, SUMMARY and the article's expectations for one delayed-commit row (threads or processes)."""
    total = _totals(variant)
    variant.totals = {
        "duplicate_writes_total": total["duplicates"],
        "early_capacity_release": total["early_release"],
        "capacity_released": total["released"],
        **{name: total[name] for name in clean},
    }
    variant.summary = (
        f"SUMMARY {variant.label} trials={trials} duplicate_writes_total={total['duplicates']} "
        f"early_capacity_release={total['early_release']}/{trials} "
        f"capacity_released={total['released']}/{trials} "
        f"loser_wasted={spread([t.times['wasted'] for t in variant.trials])}"
        + "".join(f" {name}={total[name]}" for name in clean)
    )
    duplicates, early = DELAYED_EXPECTED[policy]
    _expect(variant, "duplicate_writes_total", trials if duplicates else 0)
    _expect(variant, "early_capacity_release", trials if early else 0)
    for name in clean:
        _expect(variant, name, 0)


# -- experiment 2: the delayed commit ----------------------------------------------------
DELAYED_POLICIES = ("naive", "reconcile", "fenced", "witness", "abandon")
DELAYED_EXPECTED = {
    # policy: (duplicates in every trial?, early release in every trial?)
    "naive": (True, True),
    "reconcile": (True, True),
    "fenced": (False, True),
    "witness": (False, False),
    "abandon": (False, False),
}


def delayed_trial(policy: JanitorPolicy, lease: float, number: int) -> TrialResult:
    """One unit; the old attempt works 2.4 leases, so its lease expires mid-work."""

    def retry(fleet: Fleet, release: Release) -> None:
        n = sum(1 for a in fleet.records if a.startswith(release.key)) + 1
        fleet.launch(AttemptSpec(release.key, f"{release.key}#{n}", work=0.4 * lease))

    fleet = Fleet(policy, lease, on_release=retry)
    fleet.start()
    fleet.launch(AttemptSpec("job1", "job1#1", work=2.4 * lease))
    settled = fleet.wait(timeout=10 * lease + 5)
    events = fleet.recorder.events
    expiry = next((e.t for e in events if e.kind == "expiry"), None)
    old = fleet.records["job1#1"]
    retry_record = fleet.records.get("job1#2")
    release = fleet.releases[0] if fleet.releases else None
    effects = fleet.effects("job1")
    losers = [r for r in fleet.records.values() if r.result is not None and r.result.refused]
    wasted = sum(r.commit_at - r.work_start for r in losers) if losers else None
    counts = {
        "effects": effects,
        "duplicates": max(0, effects - 1),
        "released": int(release is not None),
        "early_release": int(release is not None and release.owner_could_still_write),
        "retried": int(retry_record is not None),
    }
    times = {
        "expiry": expiry,
        "released": release.t if release else None,
        "old_commit": old.commit_at,
        "retry": retry_record.commit_at if retry_record else None,
        "wasted": wasted,
        "deadline": old.deadline,
    }
    ok = old.result is CommitResult.WRITTEN
    line = (
        f"MODE={policy.name} trial {number}: expiry@{_at(expiry)} released@{_at(times['released'])} "
        f"old_commit@{_at(old.commit_at)}(ok={ok}) retry@{_at(times['retry'])} "
        f"effects={effects} duplicates={counts['duplicates']} "
        f"early_release={'yes' if counts['early_release'] else 'no'} "
        f"loser_wasted={'none' if wasted is None else f'{wasted:.3f}s'}"
    )
    return TrialResult(number, line, counts, times, list(events), settled, fleet.run.judge())


def delayed_commit(trials: int, lease: float, progress: Progress = _quiet) -> list[VariantResult]:
    variants = []
    for name in DELAYED_POLICIES:
        variant = VariantResult("delayed-commit", f"MODE={name}", lease=lease)
        for number in range(1, trials + 1):
            progress(f"delayed-commit {name} trial {number}/{trials}")
            variant.trials.append(delayed_trial(POLICIES[name], lease, number))
        close_delayed_variant(variant, name, trials)
        variants.append(variant)
    return variants


# -- experiment 3: contention --------------------------------------------------------------
CONTENTION_WORKERS = 12
CONTENTION_UNITS = 2
CONTENTION_LEASES = (0.25, 0.5, 1.0, 2.0)
"""Lease lengths, as multiples of the base lease."""
CONTENTION_POLICY = "reconcile"


def contention_trial(lease: float, work: float, number: int) -> TrialResult:
    """Twelve workers, two slots; worker 0 crashes holding one before its effect."""

    def retry(fleet: Fleet, release: Release) -> None:
        fleet.launch(AttemptSpec(release.key, f"{release.key}#2", work=work))

    fleet = Fleet(
        POLICIES[CONTENTION_POLICY], lease, capacity=CONTENTION_UNITS, slots=True, on_release=retry
    )
    fleet.start()
    # The other eleven threads are started first and wait at a gate, so that
    # they all ask for a unit the moment worker 0 holds its own.
    gate = threading.Event()
    for n in range(1, CONTENTION_WORKERS):
        fleet.launch(AttemptSpec(f"job{n}", f"job{n}#1", work=work), gate=gate)
    reserved = threading.Event()
    fleet.launch(AttemptSpec("job0", "job0#1", work=0.0, crash="before-effect"), reserved)
    reserved.wait(5)
    gate.set()
    settled = fleet.wait(timeout=CONTENTION_WORKERS * work + 10 * lease + 5)
    events = fleet.recorder.events
    crashed = fleet.records["job0#1"].crashed_at
    # The crashed holder's release and its first heir. On a busy machine a
    # healthy worker can overrun its lease too, and reconcile frees that unit
    # as well: those releases are counted apart, never taken for this one.
    release = next((r for r in fleet.releases if r.owner == "job0#1"), None)
    heirs = [r for r in fleet.records.values() if r.token == ("released", "job0")]
    heir = min(heirs, key=lambda r: r.reserved_at) if heirs else None
    done = [r for r in fleet.records.values() if r.confirmed == ReservationState.CONFIRMED.value]
    makespan = max(r.commit_at for r in done) if done else None
    busy = sum(r.commit_at - r.work_start for r in done)
    lost = 1 - busy / (CONTENTION_UNITS * makespan) if makespan else None
    counts = {
        "jobs_done": len({r.spec.key for r in done}),
        "inherited": int(heir is not None),
        "duplicates": sum(max(0, fleet.effects(f"job{n}") - 1) for n in range(CONTENTION_WORKERS)),
        "healthy_expired": sum(1 for owner in fleet.expired_owners if owner != "job0#1"),
        "healthy_released": sum(1 for r in fleet.releases if r.owner != "job0#1"),
        "settled_jobs": sum(
            1 for n in range(CONTENTION_WORKERS)
            if (current := fleet.ledger.current(f"job{n}")) is not None
            and current.state in (ReservationState.CONFIRMED, ReservationState.CONFIRMED_EXISTING)
        ),
    }
    times = {
        "crash": crashed,
        "released": release.t if release else None,
        "inheritor_waited": heir.waited if heir else None,
        "inherited_at": heir.reserved_at if heir else None,
        "idle_unit": (release.t - fleet.records["job0#1"].reserved_at) if release else None,
        "makespan": makespan,
        "capacity_lost": lost,
        "lease": lease,
        "holder_deadline": fleet.records["job0#1"].deadline,
    }
    line = (
        f"LEASE={lease:.2f}s work={work:.3f}s trial {number}: crash@{_at(crashed)} released@{_at(times['released'])} "
        f"inheritor={heir.spec.attempt_id if heir else 'none'} "
        f"waited={_at(times['inheritor_waited'])} idle_unit={_at(times['idle_unit'])} "
        f"makespan={_at(makespan)} jobs={counts['jobs_done']}/{CONTENTION_WORKERS} "
        f"capacity_lost={'none' if lost is None else f'{100 * lost:.0f}%'}"
    )
    return TrialResult(number, line, counts, times, list(events), settled, fleet.run.judge())


def contention(trials: int, lease: float, progress: Progress = _quiet) -> list[VariantResult]:
    variants = []
    for multiple in CONTENTION_LEASES:
        this_lease = multiple * lease
        # Work is fixed (0.3 base leases) so only the lease changes between rows,
        # except where the lease is shorter: a job must finish inside its lease.
        work = min(0.3 * lease, 0.6 * this_lease)
        variant = VariantResult("contention", f"LEASE={this_lease:.2f}s", lease=this_lease)
        for number in range(1, trials + 1):
            progress(f"contention lease {this_lease:.2f}s trial {number}/{trials}")
            variant.trials.append(contention_trial(this_lease, work, number))
        waits = [t.times["inheritor_waited"] for t in variant.trials]
        ratios = [w / this_lease for w in waits if w is not None]
        variant.totals = {
            "inherited": sum(t.counts["inherited"] for t in variant.trials),
            "jobs_done": sum(t.counts["jobs_done"] for t in variant.trials),
            "duplicate_writes_total": sum(t.counts["duplicates"] for t in variant.trials),
        }
        lost = [t.times["capacity_lost"] for t in variant.trials if t.times["capacity_lost"] is not None]
        variant.summary = (
            f"SUMMARY {variant.label} workers={CONTENTION_WORKERS} units={CONTENTION_UNITS} "
            f"trials={trials} inherited={variant.totals['inherited']}/{trials} "
            f"inheritor_waited={spread(waits)} waited/lease={spread(ratios, unit='', digits=2)} "
            f"idle_unit={spread([t.times['idle_unit'] for t in variant.trials])} "
            f"capacity_lost={spread([100 * x for x in lost], unit='%', digits=0)} "
            f"jobs_done={variant.totals['jobs_done']}/{trials * CONTENTION_WORKERS}"
        )
        _expect(variant, "inherited", trials)
        _expect(variant, "jobs_done", trials * CONTENTION_WORKERS)
        _expect(variant, "duplicate_writes_total", 0)
        variants.append(variant)
    variants.append(_sweep(variants, lease))
    return variants


def _sweep(rows: list[VariantResult], lease: float) -> VariantResult:
    """The wait tracks the lease: medians grow with it, and each is about one lease."""
    medians = [statistics.median([t.times["inheritor_waited"] for t in r.trials if t.times["inheritor_waited"] is not None] or [0]) for r in rows]
    leases = [r.lease for r in rows]
    increasing = all(a < b for a, b in zip(medians, medians[1:]))
    near = all(0.9 * l <= m <= 1.5 * l for l, m in zip(leases, medians))
    tracks = increasing and near
    variant = VariantResult("contention", "SWEEP", lease=lease)
    variant.totals = {"tracks_lease": int(tracks)}
    variant.summary = (
        f"SUMMARY SWEEP leases={','.join(f'{l:.2f}' for l in leases)}s "
        f"inheritor_waited={','.join(f'{m:.3f}' for m in medians)}s "
        f"tracks_lease={'yes' if tracks else 'no'}"
    )
    _expect(variant, "tracks_lease", 1)
    return variant


EXPERIMENTS: dict[str, Callable[[int, float, Progress], list[VariantResult]]] = {
    "crash-boundary": crash_boundary,
    "delayed-commit": delayed_commit,
    "contention": contention,
}
"""The article's three experiments, in its order."""


# -- replay of a counterexample on real threads -----------------------------------------
@dataclass
class ReplayStep:
    index: int
    t: float
    actor: str
    now: int
    sentence: str
    broken: str | None = None


@dataclass
class ReplayResult:
    policy: str
    invariant: str
    tick: float
    steps: list[ReplayStep]
    violation: str | None
    broke_at: int | None
    clock_problems: list[str]
    threads: int


def _actor(action: Action, handles: collections.Counter) -> str:
    if action.kind in ("reserve", "retry"):
        handles[action.job] += 1
        return f"worker:{action.job}#{handles[action.job]}"
    if action.kind in ("deliver", "lose_ack"):
        return "network"
    if action.kind == "tick":
        return "clock"
    if action.kind in ("scan", "probe", "settle"):
        return f"janitor:{action.janitor}"
    return f"worker:{action.attempt}"


def replay_real(path, tick: float = 0.05, policies: dict[str, JanitorPolicy] = POLICIES) -> ReplayResult:
    """Play a saved counterexample on real threads and the real clock.

    One thread per actor (each worker attempt, each janitor, the network, the
    clock) takes its turn in trace order; a tick is a real sleep of ``tick``
    seconds per tick, and the World's clock is checked against the monotonic
    clock scaled to ticks. The named invariant is checked after every step.
    """
    policy, config, invariant, actions, drains = _counterexample.load(path, policies)
    inv = BY_NAME[invariant]
    world = World(policy, config, *_counterexample.load_plugins(path))
    handles: collections.Counter = collections.Counter()
    actors = [_actor(a, handles) for a in actions]
    turn = threading.Condition()
    state = {"next": 0, "stop": False, "error": None, "broke_at": None, "violation": None}
    steps: list[ReplayStep] = []
    clock_problems: list[str] = []
    t0 = time.monotonic()

    def real_ticks() -> float:
        return (time.monotonic() - t0) / tick

    def play(name: str, indices: list[int]) -> None:
        for index in indices:
            with turn:
                while state["next"] != index and not state["stop"]:
                    turn.wait(0.5)
                if state["stop"]:
                    return
            action = actions[index]
            if isinstance(action, Tick):
                # Sleep until the real clock reaches the tick the World will show.
                target = (world.now + action.by) * tick
                time.sleep(max(0.0, target - (time.monotonic() - t0)))
            with turn:
                try:
                    if drains[index] and not world.draining:
                        world.start_draining()  # what World.drain() does before its steps
                    if isinstance(action, Tick) and action not in world.enabled("tick"):
                        step = world.apply_unbounded_tick(action.by)
                    else:
                        step = world.apply(action)
                except (InapplicableAction, IllegalMove, StaleAttempt) as error:
                    state["error"] = f"step {index + 1} ({action.to_dict()}) does not replay: {error}"
                    state["stop"] = True
                    turn.notify_all()
                    return
                if real_ticks() + 1e-9 < world.now:
                    clock_problems.append(f"step {index + 1}: world at t={world.now}, real clock at {real_ticks():.2f} ticks")
                if action.kind == "scan":
                    deadline = world.ledger.get(action.reservation).deadline
                    if real_ticks() + 1e-9 < deadline:
                        clock_problems.append(f"step {index + 1}: scanned before the real deadline")
                broken = None if inv.at_teardown else inv.check(world)
                steps.append(ReplayStep(index + 1, time.monotonic() - t0, name, world.now, step.sentence, broken))
                if broken:
                    state["violation"], state["broke_at"], state["stop"] = broken, index + 1, True
                state["next"] += 1
                turn.notify_all()

    by_actor: dict[str, list[int]] = {}
    for index, name in enumerate(actors):
        by_actor.setdefault(name, []).append(index)
    threads = [threading.Thread(target=play, args=(n, ix), daemon=True) for n, ix in by_actor.items()]
    for thread in threads:
        thread.start()
    budget = sum(a.by for a in actions if isinstance(a, Tick)) * tick + 30
    for thread in threads:
        thread.join(max(0.1, budget - (time.monotonic() - t0)))
    if any(t.is_alive() for t in threads):
        with turn:
            state["stop"] = True
            turn.notify_all()
        raise BadInput(f"{path}: the real replay did not finish within {budget:.0f}s; the steps may be out of order")
    if state["error"]:
        raise BadInput(f"{path}: {state['error']}")
    if inv.at_teardown and state["violation"] is None:
        if not any(drains):
            world.drain()  # an old file without its drain steps: the World drains logically
        broken = inv.check(world)
        if broken:
            state["violation"], state["broke_at"] = broken, len(actions)
    return ReplayResult(
        policy.name, invariant, tick, steps, state["violation"], state["broke_at"], clock_problems, len(threads)
    )
