"""Targets: real job systems driven through fence's protocols and judged like fence's own model.

Theory of operation
-------------------
A *target* is a job system people run (procrastinate and pgqueuer on
PostgreSQL, celery with kombu's Redis transport, dramatiq with its Redis
broker), on its real library and its real server. fence drives
it with the model's own ``World``: the target's job table and its own
recovery call are the ledger (``ledger_factory``), the task's side effect is a
write at a destination (``destination_factory``), and every run is judged by
the one observer (``fence.model.observer``) and the seven ``INVARIANTS`` on the
facts fence recorded, never on what the system says about itself. So the
Hypothesis machines, the minimiser and replay all run on the real system
unchanged.

Each target names the model policy it claims to implement. A run of the
machines also drives that policy's model in lockstep (``fence.search.lockstep``):
where the real system moves differently from its model (accepts a move the
model refuses, calls a lease expired that the model does not), the difference
is recorded with the run that shows it and reported as a finding about the
system, next to the verdicts.

Each target also says how it moves time without sleeping (procrastinate: its
workers' heartbeat timestamps are moved back in the database; pgqueuer: its
jobs' heartbeats; celery: kombu's delivery times) and which server it needs,
started through the project's own scripts (``fence/_scripts/postgres.sh``,
``fence/_scripts/redis.sh``).

Writing a target of your own needs only this package's public modules:

``fence.targets.protocol``
    the target ledger protocol with every required member, the base classes
    ``TargetLedger`` and ``TargetStorage`` (a ledger from four methods of
    yours: its records, a record's state, the system's expiry query, its
    completion call; ``Taken`` the record to subclass, ``STATE`` its own state
    for the default ``snapshot()``), ``ModelTime`` (a tick in the server's
    seconds, a lease as a timeout), the "accepted" helpers for systems that
    refuse nothing (``only_if_it_moves``, ``refused_unless``) or refuse by
    raising (``refused_by``), the rule that one janitor call
    touches one reservation, and the restore machinery the explorer copies a
    ledger by (``Restorable``, ``Restorer``, ``reads``, ``writes``);
``fence.targets.images``
    dump, load and snapshot of a Redis database (``RedisDatabase``,
    ``RedisSession``) and of PostgreSQL tables with their sequences
    (``PostgresTables``), time kept as ticks.

(Both import their parts from ``ledger``, ``storage``, ``model_time``,
``redis_image`` and ``postgres_image``: import from the two above.) The
guard's recovery for celery, pgqueuer, dramatiq, arq and DBOS, as a user runs
it beside the workers, is in ``celery_recovery``, ``pgqueuer_recovery``,
``dramatiq_recovery``, ``arq_recovery`` and ``dbos_recovery``; procrastinate's
is in its own module.

``examples/redis_job_list.py`` is such a target, outside fence, in about a
hundred lines; ``fence.testing.check_target`` runs your ``Target`` as it runs a
row of ``TARGETS``. The shipped rows are written the same way, so every one is
explorable: the explorer restores each copy's image before it reaches the
server, keys states by the ledger's ``snapshot()``, and its
``FaithfulnessCheck`` replays paths on an emptied server to catch a snapshot
that drops too much or an image that forgets something.

A target row is a ``Target``; ``TARGETS`` lists the shipped rows in the order
``fence targets`` prints them (``fence.targets.rows``, with the bounds and
profiles they are judged at). This module judges a row (``judge_target``,
``explore_target``) and starts its servers; ``fence.targets.loading`` finds a
target again from its spec or a counterexample file, and
``fence.targets.replay`` replays its counterexamples on the real system. Importing this package does not import any job system:
each target's module is imported when its storage is opened, so a missing
library is one line (``BadInput``) naming the extra to install.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from hypothesis import settings

from fence.search.lockstep import Differences, lockstep_machine, without_refusal_reasons
from fence.checking.verdicts import DEFAULT_CONFIGS, Cell, PolicyReport, Verdict, combine, survey_config, with_explorer
from fence.model.world import ModelConfig, World
from fence.backends import private_postgres, private_redis
from fence.targets.images import PostgresSession, PostgresTables, RedisDatabase, RedisImage, RedisSession, SchemaImage
from fence.targets.protocol import (
    ModelTime, TargetLedger, TargetStorage, only_if_it_moves, refused_unless,
)
from fence.targets.rows import (
    EXPLORER_BOUND, EXPLORER_DEEP_BOUND, EXPLORER_DEEP_BUDGET, SERVERS, TARGET_BOUND, TARGET_PROFILES, TARGETS, Target,
    TargetProfile, with_failures,
)


@dataclass
class TargetReport:
    """A target's verdicts (the one observer, the seven invariants) and its lockstep findings."""

    target: Target
    report: PolicyReport
    differences: dict[ModelConfig, Differences]
    """Per configuration: where the system moved differently from its model policy."""
    deeper: list = field(default_factory=list)
    """The explorer's walks beyond its first bound (``judge_target``'s ``deeper``), in order."""
    longest_run: float = 0.0
    """Real seconds of the longest Hypothesis run, from its fresh world to its teardown."""
    adapter_tick: float | None = None
    """The seconds one model tick stands for (``Target.tick_seconds``, else the ledger's ``time``); None: unstated."""

    @property
    def assumption_violated(self) -> str | None:
        """What a run longer than half the adapter's tick puts at risk, or None.

        A lease of L ticks is a timeout of (L - 1/2) ticks of the system's clock
        (``fence.targets.protocol.ModelTime.timeout``): a stamp written in a run
        ages by the real seconds the run takes too, and once they reach half a
        tick the system calls a lease expired a tick before the model does.
        """
        tick = self.adapter_tick
        if tick is None or self.longest_run <= tick / 2:
            return None
        return (f"a run took {self.longest_run:.1f} s of real time, more than half the {tick:g} s one model tick "
                f"stands for in this adapter: the system's clock may call a lease expired a tick before the model "
                f"does, so a verdict may be about time the model never saw; lengthen the adapter's tick")

    @property
    def lockstep_findings(self) -> list:
        """The shortest difference of each kind, over every configuration."""
        best: dict[str, object] = {}
        for found in self.differences.values():
            for what, difference in found.by_kind.items():
                if what not in best or difference.rule_steps < best[what].rule_steps:
                    best[what] = difference
        return list(best.values())


def judge_target(
    target: Target,
    url: str,
    *,
    configs: Iterable[ModelConfig] = DEFAULT_CONFIGS,
    run_settings: settings,
    lockstep: bool = True,
    explore: bool = True,
    explorer_bound: ModelConfig = EXPLORER_BOUND,
    faithfulness: tuple[int, int] = TARGET_PROFILES["default"].faithfulness,
    explorer_budget: float | None = None,
    deeper: Iterable[ModelConfig] = (),
    deeper_budget: float | None = EXPLORER_DEEP_BUDGET,
    failures: bool = False,
) -> TargetReport:
    """Both engines on the real system: the machines with the model of its policy in lockstep, then the explorer.

    ``failures=True`` (what ``fence targets`` and ``check_target`` pass) walks
    every configuration and bound with workers that may fail
    (``ModelConfig.failures``: the target's ``fail``, its own failure handler,
    runs), so a guarded row is proved only once ``failure_after_effect`` is
    reached too; False walks each as given.

    What ``fence.checking.verdicts.judge`` does with a ``ledger_factory`` (a surveying
    Hypothesis run per configuration, each violation minimised by replays on
    fresh databases, the row combined with its dangers), with the lockstep
    mirror added to each run's machine. Then, unless ``explore`` is False or
    the target is not ``explorable``, the exhaustive explorer walks ``explorer_bound`` on the same storage (its
    ledger and destination are restorable, ``fence.targets.protocol``: copies take turns
    on the database), with its ``FaithfulnessCheck`` replaying ``faithfulness``
    (new states, merges) on emptied tables; ``with_explorer`` combines the two
    engines' words per cell as ``fence check`` does. A budget that runs out
    (``explorer_budget`` seconds) leaves the cells Hypothesis' word. Then it
    walks each bound in ``deeper`` for at most ``deeper_budget`` seconds
    (``TargetReport.deeper``): a violation found there (replayed from scratch)
    makes its cell violated; a walk that ends proves nothing beyond what the
    first bound's did, and one that is cut short says how far it got.
    """
    if failures:
        configs, deeper = with_failures(configs), with_failures(deeper)
        explorer_bound, = with_failures((explorer_bound,))
    storage = target.open(url)
    found: dict[ModelConfig, Differences] = {}
    clock = RunClock()
    results = []
    report = None
    walks = []
    try:
        for config in configs:
            recorded = found[config] = Differences()

            def wrap(machine: type, recorded=recorded, config=config) -> type:
                return lockstep_machine(
                    machine, lambda: World(target.policy, config), record=recorded,
                    same_story=without_refusal_reasons,
                )

            results.append(survey_config(
                target.policy, config, run_settings=run_settings,
                destination_factory=storage.destination_factory, ledger_factory=clock.timed(storage.ledger_factory),
                wrap_machine=wrap if lockstep else None,
            ))
            clock.stop()
        report = combine(target.policy, results)
        if explore and target.explorable:
            exploration = explore_target(target, storage, explorer_bound, faithfulness=faithfulness,
                                         time_budget=explorer_budget)
            report = with_explorer(report, exploration, storage.destination_factory, storage.ledger_factory)
            for bound in deeper:
                walk = explore_target(target, storage, bound, faithfulness=faithfulness, time_budget=deeper_budget)
                _with_violations(report, walk)
                walks.append(walk)
    finally:
        storage.close()
    tick = target.tick_seconds if target.tick_seconds is not None else clock.tick
    return TargetReport(target, report, found, walks, clock.longest, tick)


class RunClock:
    """The real seconds of the machines' runs on a target, each from its fresh world to the next one's.

    It wraps the storage's ledger factory, not the machine: Hypothesis seeds a
    derandomised run from the machine class's source, so a class of our own
    around the machine would change every target's draws. A run is timed from
    its world's ledger to the next run's (or ``stop``), the Hypothesis work
    between two runs included, so the figure errs long. A ledger that states its
    tick (its ``time.tick_seconds``, a ``ModelTime``) is heard here too.
    """

    def __init__(self) -> None:
        self.longest = 0.0
        self.tick: float | None = None
        self._started: float | None = None

    def timed(self, ledger_factory):
        def fresh_ledger(capacity: int):
            self.stop()
            self._started = time.perf_counter()
            ledger = ledger_factory(capacity)
            tick = getattr(getattr(ledger, "time", None), "tick_seconds", None)
            if isinstance(tick, (int, float)) and tick > 0:
                self.tick = tick if self.tick is None else min(self.tick, tick)
            return ledger

        return fresh_ledger

    def stop(self) -> None:
        """The run under way (if any) ends now."""
        if self._started is not None:
            self.longest = max(self.longest, time.perf_counter() - self._started)
            self._started = None


def _with_violations(report: PolicyReport, found) -> None:
    """The cells a walk beyond the first bound found violated (each replayed from scratch) say so."""
    from fence.explore.results import Outcome

    for name, result in found.results.items():
        cell = report.cells[name]
        if result.outcome is Outcome.VIOLATED and cell.verdict not in (Verdict.VIOLATED, Verdict.ERROR):
            report.cells[name] = Cell(
                Verdict.VIOLATED, result.counterexample,
                f"{result.counterexample.message} (the explorer's shortest within {found.config.describe()}, "
                f"horizon {found.config.horizon}; before: {cell.detail or cell.verdict.value})",
            )


def explore_target(target: Target, storage, config: ModelConfig = EXPLORER_BOUND, **options):
    """The exhaustive explorer on the real system: ``fence.explore.walk.explore`` with the storage's factories.

    The same world, policies, invariants and observer as every engine; the
    generic path copies the target's restorable ledger and destination, keys
    them by their ``snapshot()`` and tests both with its ``FaithfulnessCheck``.
    """
    from fence.explore.walk import explore

    return explore(target.policy, config, destination_factory=storage.destination_factory,
                   ledger_factory=storage.ledger_factory, **options)


# -- the server --------------------------------------------------------------------------
def _given_or_private(url: str | None, variable: str, start_private) -> Iterator[tuple[str, bool]]:
    """(url, False) for ``url`` or the environment's ``variable``; else (a private server's url, True) while it runs."""
    url = url or os.environ.get(variable)
    if url:
        yield url, False
        return
    with start_private() as url:
        yield url, True


@contextlib.contextmanager
def postgres(url: str | None = None) -> Iterator[tuple[str, bool]]:
    """A PostgreSQL URL: ``url``, $FENCE_POSTGRES_URL, or a private cluster started (and stopped) here.

    Yields (url, started_here). The cluster is the project's own
    (``fence/_scripts/postgres.sh``): 127.0.0.1 only, in a temporary directory.
    """
    yield from _given_or_private(url, "FENCE_POSTGRES_URL", private_postgres)


@contextlib.contextmanager
def redis(url: str | None = None) -> Iterator[tuple[str, bool]]:
    """A Redis URL: ``url``, $FENCE_REDIS_URL, or a private server started (and stopped) here.

    Yields (url, started_here). The server is the project's own
    (``fence/_scripts/redis.sh``): 127.0.0.1 only, nothing on disk.
    """
    yield from _given_or_private(url, "FENCE_REDIS_URL", private_redis)


__all__ = [
    "EXPLORER_BOUND", "EXPLORER_DEEP_BOUND", "TARGETS", "TARGET_PROFILES", "TargetProfile", "ModelTime", "PostgresSession", "PostgresTables", "RedisDatabase", "RedisImage",
    "RedisSession", "SchemaImage", "TARGET_BOUND", "Target", "TargetLedger", "TargetReport", "TargetStorage",
    "explore_target",
    "judge_target", "only_if_it_moves", "refused_unless", "with_failures", "EXPLORER_DEEP_BUDGET", "SERVERS",
]
