"""Run the Hypothesis machines over policies and turn their results into verdicts.

For one policy, ``judge`` runs the machine with every invariant checked. When an
invariant breaks, Hypothesis shrinks the run and fence records the shrunk trace
as that cell's counterexample; then it runs again without that invariant, until
a run finds nothing more. Each run is one Hypothesis test, so every violated cell
gets its own shrink, and the last, clean run is the evidence for the rest: a
cell is ``holds`` only if that run also reached every dangerous interleaving the
policy must face (``DANGERS``); otherwise it is ``undetermined``.

A policy is judged on several configurations (one unit and one job; two units
and two jobs); a cell is violated if any of them violates it.
"""

from __future__ import annotations

import enum
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TextIO

import hypothesis
from hypothesis import HealthCheck, Verbosity, settings
from hypothesis.stateful import get_state_machine_test

from fence._destination import Destination, Guards
from fence._errors import BadInput
from fence._invariants import INVARIANTS, Invariant, required_dangers
from fence._policies import JanitorPolicy
from fence._world import ModelConfig, Step
from stateful.machines import InvariantViolation, machine_for

EXPECTED_FILE = Path(__file__).with_name("expected_verdicts.txt")

DEFAULT_CONFIGS: tuple[ModelConfig, ...] = (
    ModelConfig(capacity=1, jobs=1),
    ModelConfig(capacity=2, jobs=2),
)


class Verdict(enum.Enum):
    VIOLATED = "violated"
    HOLDS = "holds"
    UNDETERMINED = "undetermined"
    ERROR = "error"


@dataclass(frozen=True)
class Counterexample:
    policy: str
    config: ModelConfig
    invariant: str
    message: str
    steps: tuple[Step, ...]

    @property
    def rule_steps(self) -> int:
        """Steps the machine chose (the drain that ends a run is not counted)."""
        return sum(1 for step in self.steps if not step.drain)


@dataclass
class Cell:
    verdict: Verdict
    counterexample: Counterexample | None = None
    detail: str = ""


@dataclass
class PolicyReport:
    policy: JanitorPolicy
    cells: dict[str, Cell] = field(default_factory=dict)
    reached: dict[ModelConfig, Counter] = field(default_factory=dict)
    runs: int = 0
    seconds: float = 0.0

    def row(self) -> dict[str, Verdict]:
        return {name: cell.verdict for name, cell in self.cells.items()}


def profile_settings(max_examples: int = 300, step_count: int = 40, derandomize: bool = True) -> settings:
    """Settings for a verdict run: quiet (fence prints its own story), no deadline."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=step_count,
        derandomize=derandomize,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )


def _run_once(
    policy: JanitorPolicy,
    config: ModelConfig,
    checked: list[Invariant],
    run_settings: settings,
    seed: int | None,
    destination_factory: Callable[[Guards], Destination] | None,
):
    machine = machine_for(policy, config, checked, destination_factory)
    test = get_state_machine_test(machine, settings=run_settings)
    if seed is not None:
        test = hypothesis.seed(seed)(test)
    try:
        test()
    except InvariantViolation as violation:
        return machine, violation
    return machine, None


def judge(
    policy: JanitorPolicy,
    *,
    configs: Iterable[ModelConfig] = DEFAULT_CONFIGS,
    run_settings: settings | None = None,
    seed: int | None = None,
    destination_factory: Callable[[Guards], Destination] | None = None,
) -> PolicyReport:
    run_settings = run_settings or profile_settings()
    report = PolicyReport(policy)
    started = time.perf_counter()
    remaining = list(INVARIANTS)
    for config in configs:
        problem = config.problem()
        if problem:
            raise BadInput(f"model configuration: {problem}")
        while remaining:
            try:
                machine, violation = _run_once(
                    policy, config, remaining, run_settings, seed, destination_factory
                )
            except Exception as crash:  # a user's policy or destination raised
                for inv in remaining:
                    report.cells[inv.name] = Cell(
                        Verdict.ERROR, detail=f"{type(crash).__name__}: {crash}"
                    )
                report.seconds = time.perf_counter() - started
                return report
            report.runs += 1
            if violation is None:
                report.reached[config] = Counter(machine.reached)
                break
            report.cells[violation.invariant.name] = Cell(
                Verdict.VIOLATED,
                Counterexample(
                    policy.name, config, violation.invariant.name, violation.message, tuple(violation.trace)
                ),
                violation.message,
            )
            remaining = [inv for inv in remaining if inv is not violation.invariant]
    for inv in remaining:
        missing = [
            danger.name
            for danger in required_dangers(policy)
            if any(reached[danger.name] == 0 for reached in report.reached.values())
        ]
        if missing:
            report.cells[inv.name] = Cell(
                Verdict.UNDETERMINED, detail="never reached: " + ", ".join(missing)
            )
        else:
            report.cells[inv.name] = Cell(Verdict.HOLDS)
    report.cells = {inv.name: report.cells[inv.name] for inv in INVARIANTS}
    report.seconds = time.perf_counter() - started
    return report


def judge_all(
    policies: Iterable[JanitorPolicy],
    *,
    progress: TextIO | None = sys.stderr,
    **options,
) -> list[PolicyReport]:
    reports = []
    policies = list(policies)
    for index, policy in enumerate(policies, 1):
        if progress:
            progress.write(f"[{index}/{len(policies)}] {policy.name}: running the machines...")
            progress.flush()
        report = judge(policy, **options)
        if progress:
            violated = sum(1 for c in report.cells.values() if c.verdict is Verdict.VIOLATED)
            progress.write(f" {violated} violated, {report.runs} runs, {report.seconds:.1f}s\n")
            progress.flush()
        reports.append(report)
    return reports


# -- the expected-verdicts file -------------------------------------------------------
def parse_expected(text: str, source: str = "expected verdicts") -> dict[str, dict[str, Verdict]]:
    """Read the committed matrix: a header of invariant numbers, then one row per policy."""
    rows: dict[str, dict[str, Verdict]] = {}
    columns: list[Invariant] | None = None
    by_number = {str(inv.number): inv for inv in INVARIANTS}
    for line_number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if columns is None:
            if words[0] != "policy" or any(w not in by_number for w in words[1:]):
                raise BadInput(
                    f"{source}:{line_number}: the first row must be 'policy' followed by "
                    f"invariant numbers 1-{len(INVARIANTS)}"
                )
            columns = [by_number[w] for w in words[1:]]
            continue
        if len(words) != len(columns) + 1:
            raise BadInput(f"{source}:{line_number}: expected {len(columns)} verdicts after the policy name")
        policy, *values = words
        try:
            rows[policy] = {
                inv.name: Verdict(value) for inv, value in zip(columns, values, strict=True)
            }
        except ValueError:
            raise BadInput(
                f"{source}:{line_number}: verdicts are 'violated' or 'holds', got {values}"
            ) from None
    if columns is None:
        raise BadInput(f"{source}: no header row found")
    return rows


def load_expected(path: Path = EXPECTED_FILE) -> dict[str, dict[str, Verdict]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{path}: cannot read the expected verdicts ({error}); pass --expected FILE") from None
    return parse_expected(text, str(path))


@dataclass(frozen=True)
class Difference:
    policy: str
    invariant: str
    expected: Verdict | None
    observed: Verdict


def compare(reports: list[PolicyReport], expected: dict[str, dict[str, Verdict]]) -> list[Difference]:
    differences = []
    for report in reports:
        row = expected.get(report.policy.name, {})
        for name, cell in report.cells.items():
            want = row.get(name)
            if want is not cell.verdict:
                differences.append(Difference(report.policy.name, name, want, cell.verdict))
    return differences

