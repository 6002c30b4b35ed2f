"""Agent workers under fence's ledger: a shell of real threads and the real clock around the pure core.

Theory of operation
-------------------
A ``Fleet`` is the article's system with strands Agents as its workers. The
core (``Ledger``, ``Janitor``, ``TicketService``) stays pure; this shell owns
the monotonic clock, the threads and the one lock that serialises every call
into the core, as a real ledger service would.

One attempt at a job, on a worker thread:

1. reserve a unit for the job's key under a lease (wait while all are held);
2. register the attempt at the destination (a no-op unless it keeps a witness);
3. invoke a fresh Agent on a ScriptedModel with ``idempotency_token`` = the key
   and per-call ``limits``; its tool ``create_ticket`` commits through the
   destination's guards under the attempt's identity;
4. confirm (or confirm_existing) on the ledger if the commit was acknowledged.

A janitor thread runs ``Janitor.run_once(now)`` every ``tick``; whenever it
frees a unit, the job goes back on the queue for another attempt. The ledger
counts a quota, not a concurrency limit: a confirmed unit is spent for good, so
once every unit is spent and none can come back, the remaining jobs are turned
away.

Faults are injected into the tool, inside the real Agent run:

* ``crash``: the effect lands, then the worker dies. The tool raises (the SDK
  turns that into an error tool result) and the worker sends nothing more to
  the ledger, like a process that died right after its write.
* ``slow``: the tool sleeps past the lease before it commits, so the commit
  lands after the janitor has acted on the expired lease.

A fault applies to a job's first attempt only; retries are healthy. Every
reserve, commit, confirm, crash and janitor move is written down as a fact in a
``fence.live.facts.LiveRun``, and the report's verdicts are the models' own
``INVARIANTS`` judged on those facts: no audit here asks the destination or the
ledger what happened.

``FleetShell`` is the part every fleet shares (the threads, the clock, the lock,
the log, the wait for the run to settle); ``fence.agents.token_fleet`` is the
same shell around a token budget instead of the ledger's units.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from strands import Agent, tool

from fence.model.destination import CommitResult, TicketService
from fence.base.errors import CapacityExhausted, IllegalMove, StaleAttempt
from fence.model.janitor import Janitor, Settlement
from fence.model.ledger import Ledger, Reservation, ReservationState
from fence.live.facts import LiveRun
from fence.model.policies import Decision, JanitorPolicy
from fence.model.worker import ALIVE_PHASES, CONFIRM_MOVES
from fence.agents.scripted import ScriptedModel, Turn

FAULTS = ("none", "crash", "slow")
R = TypeVar("R")
_MAY_RETURN = (ReservationState.RESERVED, ReservationState.OUTCOME_UNKNOWN)


class WorkerCrashed(Exception):
    """Raised inside the tool to stand for a worker that died right after its effect."""


@dataclass(frozen=True)
class FleetEvent:
    at: float
    """Seconds since the fleet started, on the monotonic clock."""
    actor: str
    what: str

    def __str__(self) -> str:
        return f"{self.at:6.3f}s  {self.actor:<12} {self.what}"


@dataclass
class FleetReport:
    policy: str
    jobs: list[str]
    effects: dict[str, int]
    released_while_effect_exists: int
    released_while_attempt_running: int
    late_commits_refused: int
    attempts: int
    agent_runs: int
    units_freed_twice: int
    events: list[FleetEvent]
    timed_out: bool
    turned_away: list[str] = field(default_factory=list)
    """Jobs never started because the quota was spent (not a failure of the policy)."""
    broken: dict[str, str] = field(default_factory=dict)
    """The invariants the run's facts broke, with how (fence.model.invariants, judged by fence.live.facts)."""

    @property
    def duplicates(self) -> int:
        return sum(max(0, n - 1) for n in self.effects.values())

    @property
    def unsettled(self) -> list[str]:
        """Jobs that do not end with exactly one effect."""
        return [job for job in self.jobs if job not in self.turned_away and self.effects.get(job, 0) != 1]

    def violated(self) -> set[str]:
        """The models' invariants this real run broke, by name (a run that timed out did not settle)."""
        return set(self.broken) | ({"everything_settles"} if self.timed_out else set())

    def summary(self) -> str:
        return (
            f"policy={self.policy} jobs={len(self.jobs)} attempts={self.attempts} "
            f"effects={sum(self.effects.values())} duplicates={self.duplicates} "
            f"released_while_effect_exists={self.released_while_effect_exists} "
            f"early_release={self.released_while_attempt_running} "
            f"late_commits_refused={self.late_commits_refused} unsettled={len(self.unsettled)} "
            f"turned_away={len(self.turned_away)}"
        )


@dataclass
class _Attempt:
    job: str
    number: int
    owner: str
    """Its identity at the ledger and the destination (the job itself for shared identities)."""
    fault: str
    commit: CommitResult | None = None
    crashed: bool = False

    @property
    def handle(self) -> str:
        """Its own name in the run's facts: unique per attempt even when identities are shared."""
        return f"{self.job}#a{self.number}"


class FleetShell:
    """What every fleet is: worker threads and a janitor thread around a pure quota.

    The shell owns the monotonic clock, the threads, the one lock that serialises
    every call into the quota and the run's log of events. A fleet says what one
    pass of its janitor does (``_janitor_pass``), what one attempt at a job is
    (``_attempt``) and when a run is over (``_settled``); the first and the last
    are called with the lock held.
    """

    join_for = 5.0
    """How long a stopping thread may take to return, in seconds."""

    def __init__(
        self, *, workers: int, lease: float, tick: float, timeout: float, log: Callable[[FleetEvent], None] | None
    ) -> None:
        self.workers = workers
        self.lease = lease
        self.tick = tick
        self.timeout = timeout
        self._log = log
        self._lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._queue: queue.Queue[str] = queue.Queue()
        self._stop = threading.Event()
        self._start = 0.0
        self._events: list[FleetEvent] = []
        self._turned_away: list[str] = []
        """Jobs never started because the quota was spent (not a failure of the policy)."""

    def now(self) -> float:
        return time.monotonic() - self._start

    def _note(self, actor: str, what: str) -> None:
        # Its own lock: callers may or may not hold the fleet lock.
        with self._log_lock:
            event = FleetEvent(round(self.now(), 3), actor, what)
            self._events.append(event)
            if self._log is not None:
                self._log(event)

    def _run_threads(self, jobs: list[str]) -> bool:
        """Queue the jobs and run the threads until the run settles or times out; True if it timed out."""
        self._start = time.monotonic()
        for job in jobs:
            self._queue.put(job)
        threads = [threading.Thread(target=self._janitor_loop, name="janitor", daemon=True)]
        threads += [
            threading.Thread(target=self._worker_loop, args=(f"worker-{i}",), name=f"worker-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + self.timeout
        timed_out = True
        while time.monotonic() < deadline:
            with self._lock:
                if self._settled():
                    timed_out = False
                    break
            time.sleep(self.tick)
        self._stop.set()
        for thread in threads:
            thread.join(self.join_for)
        return timed_out

    def _janitor_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self._janitor_pass()
            time.sleep(self.tick)

    def _worker_loop(self, name: str) -> None:
        while not self._stop.is_set():
            try:
                job = self._queue.get(timeout=self.tick)
            except queue.Empty:
                continue
            self._attempt(name, job)

    def _wait_for_quota(self, name: str, job: str, take: Callable[[], R]) -> R | None:
        """``take()`` under the lock, again every tick while it raises ``CapacityExhausted``.

        None when the run stops first, or when the quota is spent for good
        (``_spent_for_good``): the job is then turned away.
        """
        while not self._stop.is_set():
            with self._lock:
                try:
                    return take()
                except CapacityExhausted:
                    spent = self._spent_for_good()
                    if spent is not None:
                        self._turn_away(name, job, spent)
                        return None
            time.sleep(self.tick)
        return None

    def _turn_away(self, name: str, job: str, spent: str) -> None:
        # Called with the lock held.
        self._turned_away.append(job)
        self._note(name, f"{job} turned away: {spent}")

    def _spent_for_good(self) -> str | None:
        """With the lock held and the quota full: how it is spent, if none of it can come back; else None."""
        raise NotImplementedError

    def _settled(self) -> bool:
        raise NotImplementedError

    def _janitor_pass(self) -> None:
        raise NotImplementedError

    def _attempt(self, name: str, job: str) -> None:
        raise NotImplementedError


class Fleet(FleetShell):
    """Worker threads running Agents, a janitor thread, one ledger and one destination."""

    def __init__(
        self,
        policy: JanitorPolicy,
        *,
        capacity: int = 2,
        workers: int = 3,
        lease: float = 0.2,
        slow_for: float = 0.6,
        tick: float = 0.01,
        max_attempts: int = 3,
        timeout: float = 10.0,
        log: Callable[[FleetEvent], None] | None = None,
    ) -> None:
        if slow_for <= lease:
            raise ValueError(f"slow_for ({slow_for}s) must exceed the lease ({lease}s) for the slow fault")
        super().__init__(workers=workers, lease=lease, tick=tick, timeout=timeout, log=log)
        self.policy = policy
        self.ledger = Ledger(capacity)
        self.destination = TicketService(policy.guards)
        self.run_facts = LiveRun(capacity, jobs=[])
        """What fence saw happen, judged by the invariants (calls under self._lock)."""
        self.janitor = Janitor(self.ledger, self.run_facts.janitor_destination(self.destination), policy)
        self.slow_for = slow_for
        self.join_for = slow_for + 5  # a slow tool sleeps for slow_for before its worker can stop
        self.max_attempts = max_attempts
        self._attempt_counts: Counter[str] = Counter()
        self._running: set[str] = set()
        """Owners of attempts whose worker has not returned yet."""
        self._given_up: set[str] = set()
        self._late_refused = 0
        self._agent_runs = 0
        self.errors: list[str] = []
        """Agent runs that raised, as 'owner: error' (a healthy run leaves this empty)."""

    # -- running -------------------------------------------------------------------
    def run(self, jobs: list[str], faults: dict[str, str] | None = None) -> FleetReport:
        faults = dict(faults or {})
        unknown = {f for f in faults.values() if f not in FAULTS}
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}: use one of {', '.join(FAULTS)}")
        self._faults = faults
        self._jobs = list(jobs)
        timed_out = self._run_threads(jobs)
        with self._lock:
            facts = self.run_facts
            # A job turned away for want of quota owes no effect; every other one owes exactly one.
            facts.jobs = [job for job in jobs if job not in self._turned_away]
            judgements = facts.judgements
            freed_twice = [m for m in facts.observer.reservations.values() if m.times_freed > 1]
            return FleetReport(
                policy=self.policy.name,
                jobs=list(jobs),
                effects={job: facts.effects(job) for job in jobs},
                released_while_effect_exists=sum(1 for j in judgements if j.effect_existed),
                released_while_attempt_running=sum(1 for j in judgements if j.owner_could_still_write),
                late_commits_refused=self._late_refused,
                attempts=sum(self._attempt_counts.values()),
                agent_runs=self._agent_runs,
                units_freed_twice=len(freed_twice),
                events=list(self._events),
                timed_out=timed_out,
                turned_away=list(self._turned_away),
                broken=facts.judge(),
            )

    def _settled(self) -> bool:
        # Called with the lock held.
        if self._running or not self._queue.empty():
            return False
        for job in self._jobs:
            if job in self._given_up or job in self._turned_away:
                continue
            current = self.ledger.current(job)
            if current is None or current.state not in (
                ReservationState.CONFIRMED,
                ReservationState.CONFIRMED_EXISTING,
            ):
                return False
        return True

    # -- the janitor thread --------------------------------------------------------
    def _janitor_pass(self) -> None:
        # Called with the lock held.
        for result in self.janitor.run_once(self.now()):
            self._after_janitor_step(result)

    def _after_janitor_step(self, result: Settlement | Reservation) -> None:
        # Called with the lock held.
        if isinstance(result, Settlement):
            if result.decision is Decision.HOLD:
                return
            reservation = result.reservation
            what = f"{reservation.reservation_id}: {result.evidence.describe()} -> {reservation.state.value}"
        else:
            reservation = result
            what = f"{reservation.reservation_id}: lease expired -> {reservation.state.value}"
        self._note("janitor", what)
        if isinstance(result, Settlement):
            judgement = self.run_facts.settled(reservation.reservation_id, reservation.state)
        else:
            judgement = self.run_facts.expired(
                reservation.reservation_id, freed=reservation.state is ReservationState.UNUSED
            )
        if judgement is None:
            return
        job = reservation.key
        if self._attempt_counts[job] >= self.max_attempts:
            self._given_up.add(job)
            self._note("janitor", f"{job}: {self.max_attempts} attempts made, giving up")
        else:
            self._queue.put(job)
            self._note("janitor", f"{job}: unit freed, job queued for retry")

    # -- the worker threads --------------------------------------------------------
    def _attempt(self, name: str, job: str) -> None:
        attempt = self._reserve(name, job)
        if attempt is None:
            return
        try:
            self._run_agent(name, attempt)
            self._report(name, attempt)
        except Exception as error:  # an Agent that fails is a silent worker; the janitor deals with it
            self.errors.append(f"{attempt.owner}: {type(error).__name__}: {error}")
            self._note(name, f"{attempt.owner} agent run failed: {type(error).__name__}: {error}")
        finally:
            with self._lock:
                self._running.discard(attempt.owner)
                if self.run_facts.attempts[attempt.handle].phase in ALIVE_PHASES:
                    # The worker stopped without finishing (its agent failed): it reports and writes
                    # nothing more, which is a crash as far as anyone outside can tell.
                    self.run_facts.crashed(attempt.handle)

    def _spent_for_good(self) -> str | None:
        if any(r.state in _MAY_RETURN for r in self.ledger.reservations()):
            return None
        return f"all {self.ledger.capacity} units are spent"

    def _reserve(self, name: str, job: str) -> _Attempt | None:
        def take() -> _Attempt:
            number = self._attempt_counts[job] + 1
            owner = job if self.policy.shared_identity else f"{job}#a{number}"
            reservation = self.ledger.reserve(job, owner, self.now(), self.lease)
            self._attempt_counts[job] = number
            self._running.add(owner)
            fault = self._faults.get(job, "none") if number == 1 else "none"
            attempt = _Attempt(job, number, owner, fault)
            self.run_facts.reserved(attempt.handle, job, reservation.reservation_id, reservation.deadline, identity=owner)
            self.destination.register(owner, job)
            self.run_facts.started(attempt.handle)
            self._note(name, f"{reservation.reservation_id} reserved by {owner}"
                       + (f" (fault: {fault})" if fault != "none" else ""))
            return attempt

        return self._wait_for_quota(name, job, take)

    def _run_agent(self, name: str, attempt: _Attempt) -> None:
        fleet = self

        @tool
        def create_ticket(key: str) -> str:
            """Create the support ticket for the job's idempotency key."""
            if attempt.fault == "slow":
                time.sleep(fleet.slow_for)
            payload = f"ticket for {key}"
            with fleet._lock:
                fleet.run_facts.commit_sent(attempt.handle, payload)
                attempt.commit = fleet.destination.commit(attempt.owner, key, payload)
                fleet.run_facts.commit_answered(attempt.handle, attempt.commit, fleet.destination.effects())
                if attempt.commit.refused:
                    fleet._late_refused += 1
                fleet._note(name, f"{attempt.owner} commit {key}: {attempt.commit.value}")
                if attempt.fault == "crash":
                    attempt.crashed = True
                    fleet.run_facts.crashed(attempt.handle)
            if attempt.crashed:
                raise WorkerCrashed(f"{attempt.owner} died after its effect landed")
            return f"ticket {key}: {attempt.commit.value}"

        model = ScriptedModel(
            [
                Turn.call("create_ticket", {"key": attempt.job}, input_tokens=120, output_tokens=30),
                Turn.say(f"ticket for {attempt.job} handled", input_tokens=180, output_tokens=20),
            ]
        )
        agent = Agent(model=model, tools=[create_ticket], callback_handler=None)
        with self._lock:
            self._agent_runs += 1
        agent(f"open a ticket for {attempt.job}", idempotency_token=attempt.job, limits={"turns": 3})

    def _report(self, name: str, attempt: _Attempt) -> None:
        if attempt.crashed:
            self._note(name, f"{attempt.owner} crashed before confirming")
            return
        move = CONFIRM_MOVES.get(attempt.commit)
        if move is None:
            return  # refused by a guard (or never sent): the janitor owns that reservation now
        with self._lock:
            try:
                moved = self.ledger.owner_move(attempt.job, attempt.owner, move)
            except (StaleAttempt, IllegalMove) as error:
                self.run_facts.confirm_refused(attempt.handle)
                self._note(name, f"{attempt.owner} confirm refused: {error}")
                return
            self.run_facts.confirmed(attempt.handle, attempt.commit)
            self._note(name, f"{moved.reservation_id} {moved.state.value} by {attempt.owner}")
