"""Both engines on policies and plug-ins: what ``fence check``, ``fence verdicts`` and ``fence.testing`` run.

One task per policy and Hypothesis configuration, plus one explorer task per
policy at each of its bounds in turn (``EXPLORER_BOUND`` for ``fence verdicts``,
``CHECK_BOUNDS`` for a user's check); the tasks run on worker processes when they
pickle (``fence.base.pool``), in this process otherwise, and each policy's row is
combined in task order, whatever order its tasks finished in. A progress line
per finished task and per finished policy goes to ``progress`` when one is
given (the command's stderr; ``fence.testing`` stays quiet), and the
explorer's own level lines while it walks (``LevelLines``): its run can take
minutes with a user's plug-ins, longer than any task line waits.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence, TextIO

from fence.search import counterexample
from fence.model.invariants import INVARIANTS
from fence.model.plugins import PlugInSpecs
from fence.model.policies import JanitorPolicy
from fence.base.pool import run_tasks
from fence.model.protocol import broken_in
from fence.checking.verdicts import (
    DEFAULT_CONFIGS,
    EXPLORER_BOUND,
    EXPLORER_CHECK_BUDGET,
    LATER_BOUNDS_BUDGET,
    describe_bound,
    Cell,
    ConfigResult,
    PolicyReport,
    Verdict,
    combine,
    profile_settings,
    survey_config,
    with_explorer,
)
from fence.model.world import ModelConfig

PROFILES = {
    # name: (max_examples per Hypothesis run, steps per example, Hypothesis shrinks too)
    # One run per policy and configuration; "default" is what `fence verdicts` runs (its time, shortest
    # counterexamples included, is in evidence/verdicts.txt). 400 examples, because 300 missed the rarest
    # promised find (no_silent_replay) in some random seeds (the misses per seed: evidence/detection.txt).
    "quick": (60, 25, False),
    "default": (400, 30, False),
    "thorough": (2000, 50, True),
}


LEVEL_LINE_EVERY = 5.0
"""Seconds between two of the explorer's level lines in check and verdicts (its first level always has one)."""


class LevelLines:
    """The explorer's progress in check and verdicts: ``[explorer] POLICY: depth N: ...`` on stderr.

    The first level's line, then at most one every ``LEVEL_LINE_EVERY`` seconds:
    a walk of many quick levels would bury the task lines around it. ``stream``
    None is the stderr of the process the walk runs in (a worker process shares
    the command's); a stream object never crosses into a worker (it may not pickle).
    """

    def __init__(self, policy: str, stream: TextIO | None = None) -> None:
        self.policy = policy
        self.stream = stream
        self._last: float | None = None

    def __call__(self, found) -> None:
        from fence.explore.report import level_line

        now = time.monotonic()
        if self._last is not None and now - self._last < LEVEL_LINE_EVERY:
            return
        self._last = now
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(f"[explorer] {self.policy}: {level_line(found)}\n")
        stream.flush()


@dataclass(frozen=True)
class _ExplorerFailed:
    """The explorer's task raised (a plug-in broke its protocol, or raised): the row is an error."""

    detail: str


def _survey_one(arguments):
    policy, config, options = arguments
    if config is None:  # the explorer's task: the whole row, at each of its bounds
        from fence.explore.walk import explore

        runs = []
        started = time.perf_counter()
        try:
            for index, bound in enumerate(options["explorer_bounds"]):
                # One budget for all the bounds: what the first leaves, the next may take,
                # up to LATER_BOUNDS_BUDGET for all after the first.
                spent = time.perf_counter() - started
                if index == 1:
                    later_started = time.perf_counter()
                left = EXPLORER_CHECK_BUDGET - spent
                if index >= 1:
                    left = min(left, LATER_BOUNDS_BUDGET - (time.perf_counter() - later_started))
                left = max(left, 0.001)
                where = f"{policy.name} at {bound.capacity}x{bound.jobs}x{bound.max_attempts}:{bound.horizon}"
                lines = LevelLines(where, options["stream"]) if options["progress"] else None
                runs.append(explore(
                    policy, bound, destination_factory=options["destination_factory"],
                    ledger_factory=options["ledger_factory"], time_budget=left, symmetry=bound.jobs > 1,
                    progress=lines,
                ))
        except Exception as crash:  # as survey_config does for Hypothesis
            broken = broken_in(crash)
            if broken is not None:  # one line and exit 2 (the command's main)
                raise broken from None
            return _ExplorerFailed(f"{type(crash).__name__}: {crash}")  # the cells say "error"
        return _Explored(runs)
    return survey_config(policy, config, **options)


@dataclass(frozen=True)
class _Explored:
    """The explorer's runs for one policy, one per bound, in order."""

    runs: list


def _picklable(tasks) -> bool:
    import pickle

    try:
        pickle.dumps(tasks)
    except Exception:
        return False
    return True


def check_policies(
    policies: Sequence[JanitorPolicy],
    *,
    profile: str = "default",
    seed: int | None = None,
    configs: Sequence[ModelConfig] = DEFAULT_CONFIGS,
    destination=None,
    ledger=None,
    explore: bool = True,
    shortest: bool = False,
    workers: int = 1,
    progress: TextIO | None = None,
    explorer_bounds: Sequence[ModelConfig] = (EXPLORER_BOUND,),
) -> list[PolicyReport]:
    """Each policy's row: Hypothesis at ``configs`` and (``explore``) the explorer at each of ``explorer_bounds``.

    ``profile`` names the Hypothesis effort (``PROFILES``); without a ``seed``
    the runs are derandomised, so the same code gets the same verdicts.
    ``destination`` and ``ledger`` are factories (None: fence's own).
    ``shortest`` asks the explorer for each violated cell's shortest
    counterexample. On a ledger on a server the explorer restores the
    server for every copy it takes up (``fence.model.restore``): it runs, slower;
    pass ``explore=False`` to leave it out.
    """
    examples, steps, shrink = PROFILES[profile]
    options = {
        "run_settings": profile_settings(examples, steps, derandomize=seed is None),
        "seed": seed,
        "destination_factory": destination,
        "ledger_factory": ledger,
        "hypothesis_shrink": shrink,
        "explorer_shortest": shortest,
    }
    # One task per policy and configuration (and one per policy for the explorer),
    # so both cores stay busy to the end.
    tasks = [(policy, config, options) for policy in policies for config in configs]
    explorer_options = {
        "destination_factory": destination, "ledger_factory": ledger, "progress": progress is not None, "stream": None,
        "explorer_bounds": tuple(explorer_bounds),
    }
    if explore:
        tasks = [(policy, None, explorer_options) for policy in policies] + tasks
    per_policy = len(configs) + (1 if explore else 0)
    results: dict[int, object] = {}
    done_per_policy: Counter = Counter()
    reports: dict[str, PolicyReport] = {}

    def row(policy: JanitorPolicy) -> PolicyReport:
        """Combine a policy's results in task order, whatever order they finished in."""
        mine = [results[i] for i, task in enumerate(tasks) if task[0].name == policy.name]
        report = combine(policy, [r for r in mine if isinstance(r, ConfigResult)])
        failed = [r for r in mine if isinstance(r, _ExplorerFailed)]
        explored = [r for r in mine if isinstance(r, _Explored)]
        if failed:
            if not any(cell.verdict is Verdict.ERROR for cell in report.cells.values()):
                report.cells = {inv.name: Cell(Verdict.ERROR, detail=failed[0].detail) for inv in INVARIANTS}
        elif explored:
            for found in explored[0].runs:
                report = with_explorer(report, found, destination, ledger)
        return report

    # A backend's ModelStorage pickles into a storage of each worker's own; a
    # user's plug-ins pickle by reference (fence.model.plugins registers their module).
    if workers > 1 and not _picklable(tasks):
        workers = 1
    if workers < 2:  # the walks run here: their level lines go where the task lines go
        explorer_options["stream"] = progress
    for index, result in run_tasks(_survey_one, tasks, workers):
        results[index] = result
        policy = tasks[index][0]
        if progress is not None:
            _task_line(progress, len(results), len(tasks), policy, tasks[index][1], result)
        done_per_policy[policy.name] += 1
        if done_per_policy[policy.name] == per_policy:
            reports[policy.name] = row(policy)
            if progress is not None:
                _progress_line(progress, len(reports), len(policies), reports[policy.name])
    return [reports[policy.name] for policy in policies]


def _task_line(stream, done: int, total: int, policy: JanitorPolicy, config: ModelConfig | None, result) -> None:
    """One line per finished task (a policy at one configuration, or its explorer run)."""
    if isinstance(result, _ExplorerFailed):
        said = f"error: {result.detail}"
        where = "explorer"
    elif isinstance(result, ConfigResult):
        where = f"Hypothesis, {_bound(config)}"
        said = f"error: {result.error}" if result.error else (
            f"{len(result.counterexamples)} violated in {result.examples} examples, {result.seconds:.1f}s"
        )
    else:
        where = f"explorer, {len(result.runs)} bound(s)"
        said = "; ".join(
            f"{_bound(run.config)} x {run.config.max_attempts} attempt(s), horizon {run.config.horizon}: "
            + ", ".join(f"{n} {word}" for word, n in Counter(i.outcome.value for i in run.results.values()).items())
            + f" ({run.states:,} states, {run.seconds:.1f}s)"
            for run in result.runs
        )
    stream.write(f"[{done}/{total}] {policy.name}, {where}: {said}\n")
    stream.flush()


def _bound(config: ModelConfig) -> str:
    return f"{config.capacity} unit(s) x {config.jobs} job(s)"


def _progress_line(stream, index: int, total: int, report: PolicyReport) -> None:
    counts = Counter(c.verdict.value for c in report.cells.values())
    said = ", ".join(f"{n} {word}" for word, n in counts.items())
    explored = report.explorations
    states = f", explorer {sum(run.states for run in explored)} states" if explored else ""
    stream.write(
        f"[policy {index}/{total}] {report.policy.name}: {said} ({report.examples} Hypothesis examples{states}, "
        f"{report.seconds:.1f}s)\n"
    )
    stream.flush()


# -- what a check leaves: counterexample files and the report ---------------------------
def write_counterexamples(reports: Sequence[PolicyReport], out: Path, specs: PlugInSpecs | None = None) -> list[Path]:
    """Each violated cell's counterexample into ``out`` (replacing each judged policy's old ones).

    ``specs`` names the user's plug-ins, so that ``fence replay`` loads them again.
    """
    written: list[Path] = []
    for report in reports:
        mine: list[Path] = []
        for name, cell in report.cells.items():
            if cell.counterexample:
                if specs is not None:
                    cell.counterexample = replace(cell.counterexample, plugins=specs)
                mine.extend(counterexample.write(cell.counterexample, out))
        counterexample.remove_stale(out, report.policy.name, mine)
        written.extend(mine)
    return written


def report_text(reports: Sequence[PolicyReport], written_to: Path | None = None,
                bound: ModelConfig | None = None) -> str:
    """The verdict table, then each counterexample's steps and each other cell's detail.

    ``bound``: the explorer's bound the legend names (a target's), if not the runs' own.
    """
    parts = [table(reports, bound=bound)]
    for report in reports:
        for name, cell in report.cells.items():
            if cell.counterexample:
                parts += ["", counterexample.steps_text(cell.counterexample)]
            elif cell.detail and (cell.verdict is not Verdict.PROVED or ", not within" in cell.detail):
                # The legend says what proved means; a proof within fewer bounds says which.
                parts.append(f"\n{report.policy.name} / {name}: {cell.verdict.value}: {cell.detail}")
    if written_to is not None:
        parts.append(f"\ncounterexamples written to {written_to}/ (.txt steps, .mmd Mermaid, .json replayable)")
    return "\n".join(parts)


def table(reports: list[PolicyReport], bound: ModelConfig | None = None) -> str:
    """The verdict table and its legend; ``proved`` names the bounds the explorer ran at (``bound`` if given)."""
    width = max(len("policy"), *(len(r.policy.name) for r in reports))
    header = "policy".ljust(width) + "  " + "  ".join(f"{inv.number}".ljust(12) for inv in INVARIANTS)
    lines = [header]
    for report in reports:
        cells = []
        for inv in INVARIANTS:
            cell = report.cells[inv.name]
            text = cell.verdict.value
            if cell.counterexample:
                text += f"({cell.counterexample.rule_steps})"
            cells.append(text.ljust(12))
        lines.append(report.policy.name.ljust(width) + "  " + "  ".join(cells).rstrip())
    lines.append("")
    lines.extend(f"  {inv.number} = {inv.name}: {inv.statement}" for inv in INVARIANTS)
    lines.append(
        "  violated(n): a counterexample of n chosen steps (Hypothesis or the explorer found it; unless "
        "--no-shortest, the explorer's shortest: each counterexample below says which)"
    )
    explored = next((r.explorations for r in reports if r.explorations), [])
    bounds = [bound] if bound is not None else [run.config for run in explored] or [EXPLORER_BOUND]
    lines.append(
        f"  proved: the explorer exhausted {' and '.join(describe_bound(b) for b in bounds)}, "
        "reaching every danger, and Hypothesis found nothing at its configurations"
        + (" (a cell proved within fewer says so below)" if len(bounds) > 1 else "")
    )
    lines.append(
        "  not-found: Hypothesis found nothing in its examples and reached every danger; nothing proved. "
        "undetermined: not even that. disagree: the engines contradict each other (a fence bug)"
    )
    return "\n".join(lines)
