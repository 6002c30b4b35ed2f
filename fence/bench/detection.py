"""``fence bench detection``: how reliably the surveying Hypothesis run finds each expected violation, over many seeds.

The CI profile is derandomised, so CI always draws the same examples; this
measures what a different draw would have found. For every expected-violated
cell: in how many seeds it was found, the examples it took, the length of the
run found and of the minimised counterexample, and the seconds per run. For
every expected-holds cell: whether any seed broke it (that would be a real
finding, and a failed benchmark).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from fence.base import evidence
from fence.base.pool import run_tasks
from fence.model.invariants import INVARIANTS, required_dangers
from fence.model.policies import POLICIES
from fence.checking.verdicts import DEFAULT_CONFIGS, Verdict, profile_settings, survey_config
from fence.checking.expected import load_expected
from fence.bench.figures import publish, spread


@dataclass
class CellFigures:
    found_in: int = 0
    examples_to_first: list[int] = field(default_factory=list)
    found_steps: list[int] = field(default_factory=list)
    minimised_steps: list[int] = field(default_factory=list)


def _one_seed(arguments):
    policy_name, seed, examples, steps = arguments
    policy = POLICIES[policy_name]
    started = time.perf_counter()
    found: dict[str, tuple[int, int, int]] = {}
    all_dangers_reached = True
    for config in DEFAULT_CONFIGS:
        result = survey_config(
            policy, config, run_settings=profile_settings(examples, steps, derandomize=False), seed=seed
        )
        if result.error:
            raise RuntimeError(f"{policy_name} seed {seed}: {result.error}")
        all_dangers_reached &= all(result.reached[d.name] > 0 for d in required_dangers(policy))
        for name, example in result.counterexamples.items():
            figures = (result.first_found_at_example[name], example.found_steps, example.rule_steps)
            if name not in found or figures[2] < found[name][2]:
                found[name] = figures
    return policy_name, seed, found, all_dangers_reached, time.perf_counter() - started


def detection(
    seeds: int, examples: int, steps: int, workers: int, command: str, out: Path, policies: Sequence[str] = ()
) -> int:
    expected = load_expected()
    names = list(policies) or list(POLICIES)
    tasks = [(name, seed, examples, steps) for name in names for seed in range(1, seeds + 1)]
    figures = {(p, inv.name): CellFigures() for p in names for inv in INVARIANTS}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    dangers_reached: dict[str, int] = {name: 0 for name in names}
    started = time.perf_counter()
    # One worker process per task, as finished; a Ctrl-C stops them all (fence.base.pool)
    for done, (_, (name, seed, found, reached, took)) in enumerate(run_tasks(_one_seed, tasks, workers), 1):
        seconds[name].append(took)
        dangers_reached[name] += reached
        for invariant, (first, found_steps, minimised_steps) in found.items():
            cell = figures[(name, invariant)]
            cell.found_in += 1
            cell.examples_to_first.append(first)
            cell.found_steps.append(found_steps)
            cell.minimised_steps.append(minimised_steps)
        print(f"[{done}/{len(tasks)}] {name} seed {seed}: {len(found)} violated, {took:.1f}s", file=sys.stderr)
    wall = time.perf_counter() - started

    lines = [
        *evidence.header(command),
        f"# worker processes: {workers}",
        f"# each seed: one surveying run per configuration ({', '.join(c.describe() for c in DEFAULT_CONFIGS)}), "
        f"{examples} examples x {steps} steps, derandomize off, hypothesis.seed(N) for N = 1..{seeds}",
        f"# wall time {wall:.0f}s",
        "",
        "Expected violations: found in how many seeds; examples to the first find, run length found,",
        "minimised length (median [min-max]).",
        f"{'policy':22} {'invariant':34} {'found':>7}  {'examples to first':20} {'found steps':16} minimised",
    ]
    misses = 0
    false_alarms = []
    for name in names:
        for inv in INVARIANTS:
            cell = figures[(name, inv.name)]
            if expected[name][inv.name] is Verdict.VIOLATED:
                misses += seeds - cell.found_in
                lines.append(
                    f"{name:22} {inv.number} {inv.name:32} {cell.found_in:>3}/{seeds:<3}  "
                    f"{spread(cell.examples_to_first):20} {spread(cell.found_steps):16} "
                    f"{spread(cell.minimised_steps)}"
                )
            elif cell.found_in:
                false_alarms.append(f"{name} / {inv.label}: broken in {cell.found_in} seed(s)")
    lines += [
        "",
        "Per policy: seeds in which every required danger was reached (else its holds cells would",
        "be undetermined), and seconds per seed for both configurations, median [min-max]",
    ]
    lines += [
        f"  {name:22} dangers reached {dangers_reached[name]:>3}/{seeds:<3} "
        f"seconds {spread([round(s, 1) for s in seconds[name]])}"
        for name in names
    ]
    unreached = [name for name in names if dangers_reached[name] < seeds]
    lines += ["", "Cells expected to hold that some seed broke: " + ("; ".join(false_alarms) or "none")]
    lines.append(
        f"SUMMARY seeds={seeds} expected_violations_missed={misses} holds_broken={len(false_alarms)} "
        f"policies_with_dangers_unreached_in_some_seed={len(unreached)}"
    )
    publish(lines, out)
    return 0 if misses == 0 and not false_alarms and not unreached else 1
