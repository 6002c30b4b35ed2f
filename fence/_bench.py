"""Benchmarks whose figures go into evidence/, never into timed tests.

``detection``: how reliably the surveying Hypothesis run finds each violation
the expected matrix promises, over many random seeds (the CI profile is
derandomised, so CI always draws the same examples; this measures what a
different draw would have found). For every expected-violated cell: in how
many seeds it was found, the examples it took, the length of the run found and
of the minimised counterexample, and the seconds per run. For every
expected-holds cell: whether any seed broke it (that would be a real finding,
and a failed benchmark).
"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from fence import _evidence
from fence._invariants import INVARIANTS, required_dangers
from fence._policies import POLICIES
from fence._verdicts import DEFAULT_CONFIGS, Verdict, load_expected, profile_settings, survey_config


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


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:g}"
    return f"{statistics.median(values):g} [{min(values):g}-{max(values):g}]"


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
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for done, (name, seed, found, reached, took) in enumerate(pool.map(_one_seed, tasks), 1):
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
        *_evidence.header(command),
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
                    f"{_spread(cell.examples_to_first):20} {_spread(cell.found_steps):16} "
                    f"{_spread(cell.minimised_steps)}"
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
        f"seconds {_spread([round(s, 1) for s in seconds[name]])}"
        for name in names
    ]
    unreached = [name for name in names if dangers_reached[name] < seeds]
    lines += ["", "Cells expected to hold that some seed broke: " + ("; ".join(false_alarms) or "none")]
    lines.append(
        f"SUMMARY seeds={seeds} expected_violations_missed={misses} holds_broken={len(false_alarms)} "
        f"policies_with_dangers_unreached_in_some_seed={len(unreached)}"
    )
    _publish(lines, out)
    return 0 if misses == 0 and not false_alarms and not unreached else 1


def _publish(lines: list[str], out: Path) -> None:
    text = "\n".join(lines) + "\n"
    _evidence.write_atomically(out, text)
    print(text, end="")
