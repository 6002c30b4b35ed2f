"""The article's three experiments, each written once and run on the engine it is given.

An engine is how a trial runs: ``THREADS`` (``fence.live.thread_trials``:
worker threads around one in-memory ledger) or ``Processes(url)``
(``fence.live.process_trials``: worker and janitor OS processes on a database,
crashes as SIGKILLs). Every engine offers the same trial calls with the same
signatures, and says what differs: its crash points, which of them counts like
the article's ``after-effect``, the extra counts that must stay 0, the prefix of
its progress lines, and which experiments it runs (contention measures waiting,
not crashes: threads only). The rows, their order, their SUMMARY lines and the
article's expectations live here, once.
"""

from __future__ import annotations

import statistics
from typing import Callable, Protocol

from fence.live.results import (
    Progress,
    TrialResult,
    VariantResult,
    close_crash_variant,
    close_delayed_variant,
    expect,
    quiet,
    spread,
)


class Engine(Protocol):
    """What an experiment needs of the engine that runs its trials."""

    crash_points: tuple[str, ...]
    """Where the crash-boundary experiment crashes a worker."""
    leaves_effect: frozenset[str]
    """The crash points that count like the article's ``after-effect``: the effect landed."""
    clean_counts: tuple[str, ...]
    """Counts of a trial, beyond the article's, that must be 0 in every row."""
    progress_prefix: str
    experiments: tuple[str, ...]
    """The experiments it runs, by name."""

    def crash_trial(self, policy_name: str, crash: str, lease: float, number: int) -> TrialResult: ...

    def delayed_trial(self, policy_name: str, lease: float, number: int) -> TrialResult: ...


# -- experiment 1: the crash boundary --------------------------------------------------
CRASH_POLICIES = ("naive", "reconcile")


def crash_boundary(engine: Engine, trials: int, lease: float, progress: Progress = quiet) -> list[VariantResult]:
    """A worker crashes at each of the engine's crash points, under naive and reconcile: one row each."""
    variants = []
    for name in CRASH_POLICIES:
        for crash in engine.crash_points:
            variant = VariantResult("crash-boundary", f"POLICY={name} CRASH={crash}", lease=lease)
            for number in range(1, trials + 1):
                progress(f"{engine.progress_prefix}crash-boundary {name} {crash} trial {number}/{trials}")
                variant.trials.append(engine.crash_trial(name, crash, lease, number))
            close_crash_variant(variant, name, crash in engine.leaves_effect, trials, clean=engine.clean_counts)
            variants.append(variant)
    return variants


# -- experiment 2: the delayed commit ----------------------------------------------------
DELAYED_POLICIES = ("naive", "reconcile", "fenced", "witness", "abandon")


def delayed_commit(engine: Engine, trials: int, lease: float, progress: Progress = quiet) -> list[VariantResult]:
    """A slow worker commits after its lease ran out, under each janitor policy: one row each."""
    variants = []
    for name in DELAYED_POLICIES:
        variant = VariantResult("delayed-commit", f"MODE={name}", lease=lease)
        for number in range(1, trials + 1):
            progress(f"{engine.progress_prefix}delayed-commit {name} trial {number}/{trials}")
            variant.trials.append(engine.delayed_trial(name, lease, number))
        close_delayed_variant(variant, name, trials, clean=engine.clean_counts)
        variants.append(variant)
    return variants


# -- experiment 3: contention --------------------------------------------------------------
CONTENTION_WORKERS = 12
CONTENTION_UNITS = 2
CONTENTION_LEASES = (0.25, 0.5, 1.0, 2.0)
"""Lease lengths, as multiples of the base lease."""
CONTENTION_POLICY = "reconcile"


def contention(engine: Engine, trials: int, lease: float, progress: Progress = quiet) -> list[VariantResult]:
    """Many workers, two slots, one crashed holder, over a sweep of leases; engines that offer
    ``contention_trial`` only (``engine.experiments`` names it)."""
    variants = []
    for multiple in CONTENTION_LEASES:
        this_lease = multiple * lease
        # Work is fixed (0.3 base leases) so only the lease changes between rows,
        # except where the lease is shorter: a job must finish inside its lease.
        work = min(0.3 * lease, 0.6 * this_lease)
        variant = VariantResult("contention", f"LEASE={this_lease:.2f}s", lease=this_lease)
        for number in range(1, trials + 1):
            progress(f"{engine.progress_prefix}contention lease {this_lease:.2f}s trial {number}/{trials}")
            variant.trials.append(engine.contention_trial(this_lease, work, number))
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
        expect(variant, "inherited", trials)
        expect(variant, "jobs_done", trials * CONTENTION_WORKERS)
        expect(variant, "duplicate_writes_total", 0)
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
    expect(variant, "tracks_lease", 1)
    return variant


EXPERIMENTS: dict[str, Callable[[Engine, int, float, Progress], list[VariantResult]]] = {
    "crash-boundary": crash_boundary,
    "delayed-commit": delayed_commit,
    "contention": contention,
}
"""The article's three experiments, in its order; an engine's ``experiments`` says which it runs."""
