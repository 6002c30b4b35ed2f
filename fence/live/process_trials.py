"""The process engine: the experiments' trials with every worker and the janitor an OS process.

``Processes(url)`` runs the trials that ``fence.live.experiments`` asks of an
engine on the database at ``url`` (SQLite file or PostgreSQL), with crashes
that are ``os.kill(pid, SIGKILL)`` sent by the parent (``fence.live.hands``) at
the point the worker reports (``fence.live.children``).

A SIGKILL inside an open transaction is not the thread model's "message still
on the wire": the database rolls the transaction back (PostgreSQL when the dead
connection's socket closes, SQLite because an uncommitted WAL frame is never
read), so that effect never lands, and the ``in-flight`` crash point counts like
the article's ``before-effect``. What still lands late is a commit from an
attempt that is slow, not dead: the delayed-commit experiment. After every
trial the audit (``fence.live.causal``) reads fence's facts: every job has its
effect, no unit leaked, nothing stuck.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fence.model.destination import CommitResult
from fence.base.errors import BackendError
from fence.model.observer import ReleaseJudgement
from fence.model.policies import POLICIES
from fence.backends import open_backend
from fence.live.causal import Audit, audit, record_fact
from fence.live.children import janitor_main, worker_main
from fence.live.facts import LiveRun
from fence.live.hands import Child, Hands
from fence.live.messages import (
    AtCrashPoint,
    Committed,
    Committing,
    Done,
    Exited,
    Expiry,
    Hold,
    Killed,
    Reserved,
    RunAttempt,
    Settle,
)
from fence.live.results import Event, TrialResult, when

JANITOR_POLL = 0.005
"""Seconds between a janitor's claims in the experiments (the fleet polls at 0.02)."""


@dataclass
class ProcessAttempt:
    """The parent's record of one attempt, its times on the trial's clock."""

    crash: str | None
    reserved_at: float | None = None
    committing_at: float | None = None
    result: CommitResult | None = None
    commit_at: float | None = None
    crashed_at: float | None = None
    outcome: str | None = None
    over: bool = False


@dataclass
class ProcessTrial:
    """The parent's record of one trial: events, attempts and releases, on one clock."""

    t0: float = field(default_factory=time.monotonic)
    events: list[Event] = field(default_factory=list)
    attempts: dict[str, ProcessAttempt] = field(default_factory=dict)
    releases: list[tuple[float, ReleaseJudgement]] = field(default_factory=list)
    """Each release: when the parent learned of it, and what fence's facts said was true then."""
    expiry: float | None = None
    facts: LiveRun = field(default_factory=lambda: LiveRun(1, ["job1"]))

    def log(self, lane: str, kind: str, label: str, t: float) -> float:
        t -= self.t0
        self.events.append(Event(t, lane, kind, label))
        return t

    def first_release(self) -> tuple[float | None, ReleaseJudgement | None]:
        return self.releases[0] if self.releases else (None, None)

    def worker_reported(self, hands: Hands, child: Child, report, both) -> None:
        """A worker's report: a fact, and an event on its lane; at its crash point, its SIGKILL."""
        handle = child.busy
        lane = f"worker {handle}"
        attempt = self.attempts[handle]
        if isinstance(report, AtCrashPoint):
            killed_at, last_words = hands.kill(child)
            for last in last_words:
                record_fact(self.facts, handle, last, both)
            record_fact(self.facts, handle, Killed(t=killed_at), both)
            attempt.crashed_at = self.log(lane, "crash", f"SIGKILL {report.point}", killed_at)
            attempt.over = True
            return
        record_fact(self.facts, handle, report, both)
        match report:
            case Reserved():
                attempt.reserved_at = self.log(lane, "reserve", "reserves job1", report.t)
            case Committing():
                attempt.committing_at = self.log(lane, "work", "sends its commit", report.t)
            case Committed(result=result):
                attempt.result = result
                kind = "effect" if result is CommitResult.WRITTEN else "refused"
                attempt.commit_at = self.log("destination", kind, f"{handle} {result.value}", report.t)
            case Done(outcome=outcome):
                attempt.over, attempt.outcome = True, outcome
                self.log(lane, "confirm", outcome, report.t)

    def janitor_reported(self, report, both) -> ReleaseJudgement | None:
        """A janitor's report: a fact, and an event on its lane; a release comes back judged."""
        judgement = record_fact(self.facts, None, report, both)
        match report:
            case Expiry(reservation=rid, state=state):
                at = self.log("janitor", "expiry", f"{rid} -> {state.value}", report.t)
                self.expiry = at if self.expiry is None else self.expiry
            case Settle(reservation=rid, evidence=evidence):
                self.log("janitor", "settle", f"{rid} ({evidence})", report.t)
            case Hold(reservation=rid, evidence=evidence):
                self.log("janitor", "hold", f"{rid} ({evidence})", report.t)
        if judgement is not None:
            released_at = self.log("janitor", "release", f"{judgement.reservation_id}'s unit returns", report.t)
            self.releases.append((released_at, judgement))
        return judgement


def run_trial(url: str, policy_name: str, lease: float, work: float, retry_work: float,
              crash: str | None, timeout: float) -> tuple[ProcessTrial, Audit, bool]:
    """One unit, one job: a first attempt (crashing at ``crash`` if given), a retry on every release."""
    policy = POLICIES[policy_name]
    backend = open_backend(url, capacity=1, guards=policy.guards, reset=True)
    hands = Hands()
    trial = ProcessTrial()
    try:
        janitor = hands.spawn("janitor", janitor_main, url, 1, policy_name, "janitor-1", JANITOR_POLL)
        standby = [hands.spawn(f"worker-{n}", worker_main, url, 1, policy_name) for n in (1, 2)]
        hands.ready([janitor, *standby])
        trial.t0 = time.monotonic()

        def launch(attempt_id: str, work: float, crash: str | None) -> None:
            if not standby:
                standby.append(hands.spawn(f"worker-{len(hands.children)}", worker_main, url, 1, policy_name))
                hands.ready(standby[-1:])
            child = standby.pop(0)
            child.busy = attempt_id
            trial.attempts[attempt_id] = ProcessAttempt(crash)
            child.send(RunAttempt("job1", attempt_id, lease, work, crash))

        launch("job1#1", work, crash)
        deadline = time.monotonic() + timeout
        settled = False

        def both():  # the parent's own reads of the ledger and the destination
            return backend.ledger, backend.destination

        while time.monotonic() < deadline:
            for child, report in hands.messages(0.02):
                if isinstance(report, Exited):
                    who = "the janitor process" if child is janitor else child.name
                    raise BackendError(f"{who} exited unexpectedly (exit code {report.exitcode})")
                if child is not janitor:
                    trial.worker_reported(hands, child, report, both)
                elif trial.janitor_reported(report, both) is not None:
                    launch(f"job1#{len(trial.attempts) + 1}", retry_work, None)
            if all(a.over for a in trial.attempts.values()) and not trial.facts.observer.unsettled():
                settled = True  # by fence's facts: every attempt over, every reservation settled or freed
                break
        return trial, audit(trial.facts, backend.destination.effects()), settled
    finally:
        hands.close()
        backend.close()


@dataclass(frozen=True)
class Processes:
    """The experiments on OS processes at ``url``: a crash is a SIGKILL at the point the worker reports."""

    url: str
    crash_points = ("after-effect", "in-flight", "before-effect")
    leaves_effect = frozenset({"after-effect"})
    """A SIGKILL inside the open commit transaction rolls it back: in-flight leaves no effect."""
    clean_counts = ("drain_problems",)
    progress_prefix = "processes "
    experiments = ("crash-boundary", "delayed-commit")
    """Contention stays on threads: it measures waiting, not crashes."""

    def crash_trial(self, policy_name: str, crash: str, lease: float, number: int) -> TrialResult:
        """One unit; the worker is SIGKILLed at ``crash`` after 0.2 leases of work; a release queues a retry."""
        trial, found, settled = run_trial(self.url, policy_name, lease, 0.2 * lease, 0.2 * lease, crash, 10 * lease + 10)
        first = trial.attempts["job1#1"]
        retry = trial.attempts.get("job1#2")
        released_at, release = trial.first_release()
        effects = found.effects["job1"]
        counts = {
            "effects": effects,
            "duplicates": found.duplicates,
            "released": int(release is not None),
            "returned_with_effect": int(release is not None and release.effect_existed),
            "retried": int(retry is not None),
            "drain_problems": len(found.problems),
        }
        times = {
            "expiry": trial.expiry,
            "effect": first.commit_at if first.result is CommitResult.WRITTEN else None,
            "crash": first.crashed_at,
            "released": released_at,
            "retry": retry.commit_at if retry else None,
        }
        line = (
            f"POLICY={policy_name} CRASH={crash} trial {number}: expiry@{when(times['expiry'])} "
            f"effect@{when(times['effect'])} kill@{when(times['crash'])} released@{when(times['released'])} "
            f"retry@{when(times['retry'])} effects={effects} duplicates={found.duplicates} {found.line()}"
            + _problems(found)
        )
        return TrialResult(number, line, counts, times, trial.events, settled, found.broken)

    def delayed_trial(self, policy_name: str, lease: float, number: int) -> TrialResult:
        """One unit; the old attempt works 2.4 leases and is not killed; the retry works 0.4 leases."""
        trial, found, settled = run_trial(self.url, policy_name, lease, 2.4 * lease, 0.4 * lease, None, 10 * lease + 10)
        old = trial.attempts["job1#1"]
        retry = trial.attempts.get("job1#2")
        released_at, release = trial.first_release()
        losers = [a for a in trial.attempts.values() if a.result not in (None, CommitResult.WRITTEN)]
        wasted = [a.commit_at - a.reserved_at for a in losers]
        early = release is not None and release.owner_could_still_write
        counts = {
            "effects": found.effects["job1"],
            "duplicates": found.duplicates,
            "released": int(release is not None),
            "early_release": int(early),
            "retried": int(retry is not None),
            "drain_problems": len(found.problems),
        }
        times = {
            "expiry": trial.expiry,
            "released": released_at,
            "old_commit": old.commit_at,
            "retry": retry.commit_at if retry else None,
            "wasted": sum(wasted) if wasted else None,
        }
        line = (
            f"MODE={policy_name} trial {number}: expiry@{when(trial.expiry)} released@{when(times['released'])} "
            f"old_commit@{when(times['old_commit'])}({old.result and old.result.value}) retry@{when(times['retry'])} "
            f"effects={counts['effects']} duplicates={found.duplicates} early_release={'yes' if early else 'no'} "
            f"loser_wasted={when(times['wasted']).replace('never', 'none')} {found.line()}"
            + _problems(found)
        )
        return TrialResult(number, line, counts, times, trial.events, settled, found.broken)


def _problems(found: Audit) -> str:
    return "".join(f" PROBLEM: {p}" for p in found.problems)
