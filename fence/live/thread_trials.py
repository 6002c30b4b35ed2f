"""The thread engine: the experiments' trials on worker threads around one in-memory ledger.

``THREADS`` is the engine ``fence.live.experiments`` runs on by default. Each
trial builds a ``ThreadRun`` (``fence.live.threads``), launches its attempts,
waits until everything settled, and reads its counts and times from the run's
records and facts, on the trial's one clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from fence.model.destination import CommitResult
from fence.model.ledger import ReservationState
from fence.model.policies import POLICIES
from fence.live.experiments import CONTENTION_POLICY, CONTENTION_UNITS, CONTENTION_WORKERS, EXPERIMENTS
from fence.live.results import TrialResult, when
from fence.live.threads import AttemptSpec, Release, ThreadRun


def _one_unit(policy_name: str, lease: float, work: float, retry_work: float,
              crash: str | None = None) -> tuple[ThreadRun, bool]:
    """One unit, one job: a first attempt (crashing at ``crash`` if given), a retry on every release;
    the run, and whether it settled in time."""

    def retry(run: ThreadRun, release: Release) -> None:
        n = sum(1 for a in run.records if a.startswith(release.key)) + 1
        run.launch(AttemptSpec(release.key, f"{release.key}#{n}", work=retry_work))

    run = ThreadRun(POLICIES[policy_name], lease, on_release=retry)
    run.start()
    run.launch(AttemptSpec("job1", "job1#1", work=work, crash=crash))
    return run, run.wait(timeout=10 * lease + 5)


@dataclass(frozen=True)
class _OneUnitReadings:
    """What both one-unit trials read from their run: the events, the expiry, the first attempt and the
    retry, the first release, and the job's effects."""

    events: list
    expiry: float | None
    first: object
    retry: object | None
    release: Release | None
    effects: int

    @classmethod
    def of(cls, run: ThreadRun) -> _OneUnitReadings:
        events = run.recorder.events
        return cls(list(events), next((e.t for e in events if e.kind == "expiry"), None), run.records["job1#1"],
                   run.records.get("job1#2"), run.releases[0] if run.releases else None, run.effects("job1"))

    def counts(self, own: str, value: bool) -> dict[str, int]:
        """The counts both trials report, with the trial's own before ``retried`` (the evidence's column order)."""
        return {
            "effects": self.effects,
            "duplicates": max(0, self.effects - 1),
            "released": int(self.release is not None),
            own: int(value),
            "retried": int(self.retry is not None),
        }


class Threads:
    """The experiments on threads: a crash is the worker thread stopping, before or after its effect."""

    crash_points = ("after-effect", "before-effect")
    leaves_effect = frozenset({"after-effect"})
    clean_counts: tuple[str, ...] = ()
    progress_prefix = ""
    experiments = tuple(EXPERIMENTS)

    def crash_trial(self, policy_name: str, crash: str, lease: float, number: int) -> TrialResult:
        """One unit, one worker that crashes at ``crash``; a release queues a retry."""
        run, settled = _one_unit(policy_name, lease, 0.2 * lease, 0.2 * lease, crash)
        read = _OneUnitReadings.of(run)
        first, release, expiry, effects = read.first, read.release, read.expiry, read.effects
        counts = read.counts("returned_with_effect", release is not None and release.effect_existed)
        times = {
            "expiry": expiry,
            "effect": first.commit_at if first.result is CommitResult.WRITTEN else None,
            "crash": first.crashed_at,
            "released": release.t if release else None,
            "retry": read.retry.commit_at if read.retry else None,
            "deadline": first.deadline,
        }
        line = (
            f"POLICY={policy_name} CRASH={crash} trial {number}: expiry@{when(expiry)} "
            f"effect@{when(times['effect'])} crash@{when(times['crash'])} released@{when(times['released'])} "
            f"retry@{when(times['retry'])} effects={effects} duplicates={counts['duplicates']}"
        )
        return TrialResult(number, line, counts, times, read.events, settled, run.facts.judge())

    def delayed_trial(self, policy_name: str, lease: float, number: int) -> TrialResult:
        """One unit; the old attempt works 2.4 leases, so its lease expires mid-work."""
        run, settled = _one_unit(policy_name, lease, 2.4 * lease, 0.4 * lease)
        read = _OneUnitReadings.of(run)
        old, release, expiry, effects, retry_record = read.first, read.release, read.expiry, read.effects, read.retry
        losers = [r for r in run.records.values() if r.result is not None and r.result.refused]
        wasted = sum(r.commit_at - r.work_start for r in losers) if losers else None
        counts = read.counts("early_release", release is not None and release.owner_could_still_write)
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
            f"MODE={policy_name} trial {number}: expiry@{when(expiry)} released@{when(times['released'])} "
            f"old_commit@{when(old.commit_at)}(ok={ok}) retry@{when(times['retry'])} "
            f"effects={effects} duplicates={counts['duplicates']} "
            f"early_release={'yes' if counts['early_release'] else 'no'} "
            f"loser_wasted={'none' if wasted is None else f'{wasted:.3f}s'}"
        )
        return TrialResult(number, line, counts, times, read.events, settled, run.facts.judge())

    def contention_trial(self, lease: float, work: float, number: int) -> TrialResult:
        """Twelve workers, two slots; worker 0 crashes holding one before its effect."""

        def retry(run: ThreadRun, release: Release) -> None:
            run.launch(AttemptSpec(release.key, f"{release.key}#2", work=work))

        run = ThreadRun(POLICIES[CONTENTION_POLICY], lease, capacity=CONTENTION_UNITS, slots=True, on_release=retry)
        run.start()
        # The other eleven threads are started first and wait at a gate, so that
        # they all ask for a unit the moment worker 0 holds its own.
        gate = threading.Event()
        for n in range(1, CONTENTION_WORKERS):
            run.launch(AttemptSpec(f"job{n}", f"job{n}#1", work=work), gate=gate)
        reserved = threading.Event()
        run.launch(AttemptSpec("job0", "job0#1", work=0.0, crash="before-effect"), reserved)
        reserved.wait(5)
        gate.set()
        settled = run.wait(timeout=CONTENTION_WORKERS * work + 10 * lease + 5)
        events = run.recorder.events
        crashed = run.records["job0#1"].crashed_at
        # The crashed holder's release and its first heir. On a busy machine a
        # healthy worker can overrun its lease too, and reconcile frees that unit
        # as well: those releases are counted apart, never taken for this one.
        release = next((r for r in run.releases if r.owner == "job0#1"), None)
        heirs = [r for r in run.records.values() if r.token == ("released", "job0")]
        heir = min(heirs, key=lambda r: r.reserved_at) if heirs else None
        done = [r for r in run.records.values() if r.confirmed == ReservationState.CONFIRMED.value]
        makespan = max(r.commit_at for r in done) if done else None
        busy = sum(r.commit_at - r.work_start for r in done)
        lost = 1 - busy / (CONTENTION_UNITS * makespan) if makespan else None
        counts = {
            "jobs_done": len({r.spec.key for r in done}),
            "inherited": int(heir is not None),
            "duplicates": sum(max(0, run.effects(f"job{n}") - 1) for n in range(CONTENTION_WORKERS)),
            "healthy_expired": sum(1 for owner in run.expired_owners if owner != "job0#1"),
            "healthy_released": sum(1 for r in run.releases if r.owner != "job0#1"),
            "settled_jobs": sum(
                1 for n in range(CONTENTION_WORKERS)
                if (current := run.ledger.current(f"job{n}")) is not None
                and current.state in (ReservationState.CONFIRMED, ReservationState.CONFIRMED_EXISTING)
            ),
        }
        times = {
            "crash": crashed,
            "released": release.t if release else None,
            "inheritor_waited": heir.waited if heir else None,
            "inherited_at": heir.reserved_at if heir else None,
            "idle_unit": (release.t - run.records["job0#1"].reserved_at) if release else None,
            "makespan": makespan,
            "capacity_lost": lost,
            "lease": lease,
            "holder_deadline": run.records["job0#1"].deadline,
        }
        line = (
            f"LEASE={lease:.2f}s work={work:.3f}s trial {number}: crash@{when(crashed)} released@{when(times['released'])} "
            f"inheritor={heir.spec.attempt_id if heir else 'none'} "
            f"waited={when(times['inheritor_waited'])} idle_unit={when(times['idle_unit'])} "
            f"makespan={when(makespan)} jobs={counts['jobs_done']}/{CONTENTION_WORKERS} "
            f"capacity_lost={'none' if lost is None else f'{100 * lost:.0f}%'}"
        )
        return TrialResult(number, line, counts, times, list(events), settled, run.facts.judge())


THREADS = Threads()
"""The thread engine (it holds nothing: every trial builds its own run)."""
