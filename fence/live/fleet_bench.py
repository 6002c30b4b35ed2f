"""The fleet benchmark: many worker and janitor processes on one database, random SIGKILLs, one restart.

``fleet`` runs every job of a quota through worker processes while the parent
SIGKILLs a busy worker now and then and may restart the database server once;
the janitors settle what the dead left behind. Every child's report becomes a
fact (``fence.live.causal``), and the audit judges the run from those facts:
no lost job, no leaked unit, nothing stuck, and no duplicate under a safe policy.
``fence bench fleet`` writes its ``FleetResult`` lines to evidence/.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from fence.base.errors import BackendError
from fence.model.ledger import ReservationState
from fence.live.causal import Audit, CausalFacts, audit
from fence.live.children import DATABASE_ERRORS, Reconnecting, janitor_main, worker_main
from fence.live.facts import SETTLED, LiveRun
from fence.live.hands import Child, Hands
from fence.live.messages import (
    AbandonAnswered,
    Adopted,
    Done,
    Exited,
    Expiry,
    Hold,
    Killed,
    Ready,
    Report,
    Reserved,
    RunAttempt,
    Settle,
    Stop,
)
from fence.live.results import Progress, quiet, when

FLEET_JANITOR_POLL = 0.02
FLEET_WORK = (0.002, 0.010)
"""Seconds of work per job, drawn uniformly: short, so the database is what is measured."""


@dataclass
class FleetResult:
    policy: str
    url: str
    workers: int
    janitors: int
    jobs: int
    lease: float
    kill_every: float | None
    kill_every_attempts: int | None = None
    elapsed: float = 0.0
    finished: bool = False
    kills: int = 0
    unexpected_exits: int = 0
    attempts: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    janitor_events: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    restart_began: float | None = None
    restart_up: float | None = None
    first_confirm_after_up: float | None = None
    restart_error: str | None = None
    audit: Audit | None = None

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.elapsed if self.elapsed else 0.0

    @property
    def recovery(self) -> float | None:
        """Seconds from the restart's start to the first job confirmed after the server was back."""
        if self.restart_began is None or self.first_confirm_after_up is None:
            return None
        return self.first_confirm_after_up - self.restart_began

    def lines(self) -> list[str]:
        found = self.audit
        restart = "no"
        if self.restart_error:
            restart = f"FAILED ({self.restart_error})"
        elif self.restart_began is not None:
            down = None if self.restart_up is None else self.restart_up - self.restart_began
            after = (None if self.first_confirm_after_up is None or self.restart_up is None
                     else self.first_confirm_after_up - self.restart_up)
            restart = (f"yes: server down for {when(down)}, first job confirmed {when(after)} after it was back, "
                       f"recovery={when(self.recovery)} from the restart's start")
        outcomes = " ".join(f"{name.replace(' ', '_')}={n}" for name, n in sorted(self.outcomes.items()))
        janitor = " ".join(f"{name}={n}" for name, n in sorted(self.janitor_events.items()))
        return [
            f"FLEET policy={self.policy} workers={self.workers} janitors={self.janitors} jobs={self.jobs} "
            f"capacity={self.jobs} lease={self.lease:g}s kill_every="
            + (f"{self.kill_every_attempts}_attempts" if self.kill_every_attempts
               else "none" if not self.kill_every else f"{self.kill_every:g}s"),
            f"  elapsed={self.elapsed:.2f}s jobs_per_s={self.jobs_per_second:.1f} finished={'yes' if self.finished else 'NO'}",
            f"  reservation latency (one reserve call) p50={_ms(self.latencies, 50)} p99={_ms(self.latencies, 99)}; "
            f"wait for a unit p50={_ms(self.waits, 50)} p99={_ms(self.waits, 99)}",
            f"  attempts={self.attempts} kills={self.kills} unexpected_exits={self.unexpected_exits} {outcomes}",
            f"  janitors: {janitor or 'nothing expired'}",
            f"  database restart: {restart}",
            f"SUMMARY policy={self.policy} duplicates={found.duplicates} lost={len(found.lost)} "
            f"leaked={found.leaked} stuck={len(found.stuck)} jobs_per_s={self.jobs_per_second:.1f} "
            f"reserve_p50={_ms(self.latencies, 50)} reserve_p99={_ms(self.latencies, 99)} "
            f"recovery={when(self.recovery) if self.restart_began is not None else 'n/a'}",
            *(f"  PROBLEM: {p}" for p in found.problems),
        ]


def _ms(values: list[float], percentile: int) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(percentile / 100 * len(ordered)) - 1))
    return f"{1000 * ordered[index]:.1f}ms"


def _janitor_event(report: Report) -> str:
    """The name a janitor's report is counted under in the evidence (a settle: by the state it reached)."""
    match report:
        case Settle(state=state):
            return f"settled_{state.value}"
        case Expiry():
            return "expiry"
        case Adopted():
            return "adopted"
        case Hold():
            return "hold"
        case AbandonAnswered():
            return "abandon"
    return type(report).__name__


def fleet(url: str, policy_name: str, *, workers: int = 8, jobs: int = 2000, lease: float = 1.0,
          kill_every: float | None = 0.5, restart: Callable[[], None] | None = None, janitors: int = 2,
          seed: int = 0, time_limit: float = 300.0, progress: Progress = quiet,
          kill_every_attempts: int | None = None) -> FleetResult:
    """Workers and janitors as processes over ``jobs`` jobs, random SIGKILLs, optionally one restart.

    ``kill_every_attempts`` kills a busy worker after every that many attempts
    sent, instead of every ``kill_every`` seconds: the kills then keep pace with
    the run however slow the machine is. (A test's kill every 0.05 s outran a
    starved fleet on PostgreSQL, which never finished its 200 jobs in 60 s.)

    The quota is exactly ``jobs`` units, so a leaked unit leaves a job that can
    never be reserved: it shows as a lost job, not only as a count. A job is
    dispatched again only when the ledger released its reservation (a killed,
    refused or unsure attempt leaves it to the janitors), never on a guess.
    """
    rng = random.Random(seed)
    result = FleetResult(policy_name, url, workers, janitors, jobs, lease, kill_every, kill_every_attempts)
    parent = Reconnecting(url, jobs, policy_name, reset=True)
    hands = Hands()
    keys = [f"job{n:05d}" for n in range(jobs)]
    pending = list(reversed(keys))
    tries = dict.fromkeys(keys, 0)
    in_doubt: set[str] = set()
    done: set[str] = set()
    job_of: dict[int, str] = {}
    outcomes: dict[str, int] = {}
    run = LiveRun(jobs, keys)
    facts = CausalFacts(parent, run, sent_for=lambda key: [f"{key}#{n}" for n in range(1, tries[key] + 1)])

    def record(child: Child, report: Report) -> None:
        facts.add(child.name, child.busy if child not in team else None, report)

    try:
        team = [hands.spawn(f"janitor-{n}", janitor_main, url, jobs, policy_name, f"janitor-{n}", FLEET_JANITOR_POLL)
                for n in range(1, janitors + 1)]
        crew = [hands.spawn(f"worker-{n}", worker_main, url, jobs, policy_name) for n in range(1, workers + 1)]
        hands.ready(team + crew)
        idle = list(crew)
        t0 = time.monotonic()
        next_kill = t0 + kill_every if kill_every and not kill_every_attempts else float("inf")
        kill_due = False
        next_doubt = t0
        restarter: threading.Thread | None = None

        def do_restart() -> None:
            result.restart_began = time.monotonic()
            try:
                restart()
            except BackendError as error:
                result.restart_error = str(error)
            result.restart_up = time.monotonic()

        def replace(child: Child) -> None:
            key = job_of.pop(id(child), None)
            if key is not None:
                in_doubt.add(key)
            facts.add(child.name, child.busy, Killed())  # after whatever it reported before dying
            crew.remove(child)
            crew.append(hands.spawn(f"worker-{len(hands.children) + 1}", worker_main, url, jobs, policy_name))

        while len(done) < jobs and time.monotonic() < t0 + time_limit:
            while idle and pending:
                child, key = idle.pop(), pending.pop()
                tries[key] += 1
                child.busy, job_of[id(child)] = f"{key}#{tries[key]}", key
                result.attempts += 1
                child.send(RunAttempt(key, child.busy, lease, rng.uniform(*FLEET_WORK)))
                kill_due = kill_due or bool(kill_every_attempts and result.attempts % kill_every_attempts == 0)
            for child, report in hands.messages(0.01):
                if child in team:
                    if isinstance(report, Exited):
                        raise BackendError(f"{child.name} exited unexpectedly (exit code {report.exitcode})")
                    record(child, report)
                    name = _janitor_event(report)
                    result.janitor_events[name] = result.janitor_events.get(name, 0) + 1
                    continue
                if not isinstance(report, Exited):
                    record(child, report)
                match report:
                    case Ready(pid=pid):
                        child.pid = pid
                        idle.append(child)
                    case Reserved(latency=latency, waited=waited):
                        result.latencies.append(latency)
                        result.waits.append(waited)
                    case Done(outcome=outcome, t=t):
                        key = job_of.pop(id(child))
                        outcomes[outcome] = outcomes.get(outcome, 0) + 1
                        if outcome in {s.value for s in SETTLED}:
                            done.add(key)
                            if result.restart_up is not None and result.first_confirm_after_up is None and t > result.restart_up:
                                result.first_confirm_after_up = t
                        else:
                            in_doubt.add(key)
                        child.busy = None
                        idle.append(child)
                    case Exited():
                        result.unexpected_exits += 1
                        replace(child)
            now = time.monotonic()
            if now >= next_kill or kill_due:
                next_kill = now + kill_every if next_kill != float("inf") else next_kill
                victims = [c for c in crew if c.alive and c.busy]
                if victims:
                    kill_due = False  # a due kill waits for a busy worker
                    victim = rng.choice(victims)
                    _, last_words = hands.kill(victim)
                    for last in last_words:
                        record(victim, last)
                    result.kills += 1
                    if victim in idle:
                        idle.remove(victim)
                    replace(victim)
            if restart is not None and restarter is None and len(done) >= jobs // 2:
                restarter = threading.Thread(target=do_restart, daemon=True)
                restarter.start()
            if now >= next_doubt and in_doubt:
                next_doubt = now + 0.05
                try:
                    for key in sorted(in_doubt):
                        current = parent.backend.ledger.current(key)
                        if current is None or current.state is ReservationState.UNUSED:
                            in_doubt.discard(key)
                            pending.append(key)  # released by the ledger (or never reserved): retry
                        elif current.state in SETTLED:
                            in_doubt.discard(key)
                            done.add(key)  # settled by a janitor as confirmed_existing
                except DATABASE_ERRORS:
                    parent.reopen()
            progress(f"fleet {policy_name}: {len(done)}/{jobs} jobs, {result.kills} kills")
        result.elapsed = time.monotonic() - t0
        result.finished = len(done) == jobs
        if restarter is not None:
            restarter.join(120)
        # The drain: every attempt still running finishes, then the janitors get a last pass.
        deadline = time.monotonic() + 3 * lease + 10
        while any(c.busy for c in crew if c.alive) and time.monotonic() < deadline:
            for child, report in hands.messages(0.05):
                if not isinstance(report, Exited):
                    record(child, report)
                match report:
                    case Done(outcome=outcome):
                        job_of.pop(id(child), None)
                        outcomes[outcome] = outcomes.get(outcome, 0) + 1
                        child.busy = None
                    case Exited():
                        child.busy = None
        time.sleep(FLEET_JANITOR_POLL * 3)
        # The janitors stop, and every report they sent is read up to the end of
        # their pipes: a settle the database already shows may still be on its
        # way, and the judgement needs it. A time is no substitute on a busy machine.
        for child in team:
            with contextlib.suppress(OSError, BrokenPipeError):
                child.send(Stop())
        deadline = time.monotonic() + 30
        while any(c.alive for c in team) and time.monotonic() < deadline:
            for child, report in hands.messages(0.1):
                if not isinstance(report, Exited):
                    record(child, report)
        facts.finish()
        result.outcomes = outcomes
        result.audit = audit(run, parent.retry(lambda backend: backend.destination.effects()))
        return result
    finally:
        hands.close()
        parent.close()

