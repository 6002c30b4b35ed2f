"""Run the Hypothesis machines over policies and turn their results into verdicts.

For one policy and one model configuration, ``judge`` makes one surveying
Hypothesis run: every invariant is checked after every step, and each one that
breaks is recorded with the shortest trace seen for it while the run goes on.
Each recorded trace is then minimised on the same world (``fence.search.minimise``),
so one run decides every cell and no cell waits for another's shrink. With
``hypothesis_shrink`` (the thorough profile), each violated cell also gets a
raising run of its own that Hypothesis shrinks, and the shorter of the two
minimised traces is kept; both lengths are reported.

A cell that no run broke is ``holds`` only if the runs also reached every
dangerous interleaving the policy must face (``DANGERS``); otherwise it is
``undetermined``. A policy is judged on several configurations (one unit and
one job; two units and two jobs); a cell is violated if any of them violates it.

The committed matrix the verdicts are compared with is ``fence.checking.expected``.
"""

from __future__ import annotations

import enum
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, TextIO

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.stateful import get_state_machine_test

from fence.search.counterexample import Counterexample
from fence.model.destination import Destination, Guards
from fence.search.draws import source_independent_draws
from fence.base.errors import BadInput
from fence.model.invariants import INVARIANTS, Invariant, required_dangers
from fence.model.ledger import Ledger
from fence.search.minimise import minimise
from fence.model.policies import JanitorPolicy
from fence.model.world import ModelConfig
from fence.search.machines import InvariantViolation, Survey, machine_for


DEFAULT_CONFIGS: tuple[ModelConfig, ...] = (
    ModelConfig(capacity=1, jobs=1),
    ModelConfig(capacity=2, jobs=2),
)


class Verdict(enum.Enum):
    """What a cell says, and nothing stronger than what backs it."""

    VIOLATED = "violated"
    """A counterexample was found; it replays (from either engine)."""
    PROVED = "proved"
    """The explorer exhausted its bound and nothing broke (and every danger was reached);
    Hypothesis found nothing at its larger configurations either."""
    NOT_FOUND = "not-found"
    """Hypothesis found no counterexample in N examples and reached every danger; nothing is proved."""
    UNDETERMINED = "undetermined"
    """Nothing found, and not every danger was reached (or a budget ran out): no evidence either way."""
    DISAGREE = "disagree"
    """The explorer proved what Hypothesis broke within the explorer's bound: a bug in fence."""
    ERROR = "error"
    """The policy, destination or ledger raised; see the detail."""


EXPLORER_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=3)
"""The bound every check proves within: 1 unit x 1 job x 3 attempts, lease 2, horizon 3
(seconds per built-in policy; its state space is exhausted for each)."""
CHECK_BOUNDS: tuple[ModelConfig, ...] = (
    EXPLORER_BOUND,
    ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=4),
    ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2),
)
"""The bounds ``fence check``, ``fence.testing.check`` and the pytest plugin prove a user's code within,
in this order, with one time budget (jobs symmetric where there are two): ``EXPLORER_BOUND`` first,
the floor every check had; then a longer clock at one unit, where bugs of 13-19 steps live; then two
workers racing at two units. A later bound the budget does not reach is said to be unproved, cell
by cell. ``fence verdicts`` keeps ``EXPLORER_BOUND`` alone."""
EXPLORER_CHECK_BUDGET = 300.0
"""Seconds the explorer may take over all of a policy's bounds before what is left says undetermined."""
LATER_BOUNDS_BUDGET = 120.0
"""Of those, the most the bounds after the first may take together. fence's own parts and a user's
policy exhaust all of ``CHECK_BOUNDS`` in well under it; a user's destination or ledger is walked as
whole worlds (``fence.explore.state_key.generic_state_key``), much slower, and would otherwise spend the
whole budget on every check for a proof it cannot finish. A violation found before it runs out counts."""


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
    examples: int = 0
    first_found_at_example: dict[str, int] = field(default_factory=dict)
    """Per violated invariant: how many examples the first config that broke it took."""
    seconds: float = 0.0
    exploration: object = None
    """The explorer's first run (its first bound), once ``with_explorer`` added it."""
    explorations: list = field(default_factory=list)
    """Every run ``with_explorer`` added, one per bound, in order."""
    proved_within: dict[str, list[str]] = field(default_factory=dict)
    """Per cell: the bounds the explorer proved it within."""
    hypothesis_details: dict[str, str] = field(default_factory=dict)
    """Hypothesis' own detail per cell, before the explorer's was added."""
    hypothesis_verdicts: dict[str, Verdict] = field(default_factory=dict)
    """Hypothesis' own word per cell, before the explorer's was added."""

    def row(self) -> dict[str, Verdict]:
        return {name: cell.verdict for name, cell in self.cells.items()}


def profile_settings(
    max_examples: int = 300, step_count: int = 40, derandomize: bool = True, shrink: bool = False
) -> settings:
    """Settings for a verdict run: quiet (fence prints its own story), no deadline.

    A surveying run never fails, so Hypothesis never shrinks it; ``shrink`` only
    matters to the raising runs made for ``hypothesis_shrink``.
    """
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(
        max_examples=max_examples,
        stateful_step_count=step_count,
        derandomize=derandomize,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        phases=phases,
    )


def run_once(
    policy: JanitorPolicy,
    config: ModelConfig,
    checked: list[Invariant],
    run_settings: settings,
    seed: int | None,
    destination_factory: Callable[[Guards], Destination] | None,
    survey: Survey | None = None,
    ledger_factory: Callable[[int], Ledger] | None = None,
    wrap_machine: Callable[[type], type] | None = None,
):
    """One Hypothesis run; raising mode returns (machine, violation or None).

    ``wrap_machine`` turns the machine class into another (fence.targets adds a
    model world in lockstep, ``fence.search.lockstep``); the wrapped machine is run.
    """
    machine = machine_for(policy, config, checked, destination_factory, survey, ledger_factory)
    if wrap_machine is not None:
        machine = wrap_machine(machine)
    test = get_state_machine_test(machine, settings=run_settings)
    if seed is not None:
        test = hypothesis.seed(seed)(test)
    try:
        with source_independent_draws():
            test()
    except InvariantViolation as violation:
        return machine, violation
    return machine, None


def chosen_actions(trace) -> list:
    return [step.action for step in trace if not step.drain]


@dataclass
class ConfigResult:
    """One surveying run: one policy on one model configuration."""

    config: ModelConfig
    counterexamples: dict[str, Counterexample] = field(default_factory=dict)
    first_found_at_example: dict[str, int] = field(default_factory=dict)
    reached: Counter = field(default_factory=Counter)
    runs: int = 0
    examples: int = 0
    error: str | None = None
    seconds: float = 0.0


def survey_config(
    policy: JanitorPolicy,
    config: ModelConfig,
    *,
    run_settings: settings | None = None,
    seed: int | None = None,
    destination_factory: Callable[[Guards], Destination] | None = None,
    hypothesis_shrink: bool = False,
    explorer_shortest: bool = False,
    ledger_factory: Callable[[int], Ledger] | None = None,
    wrap_machine: Callable[[type], type] | None = None,
) -> ConfigResult:
    """One Hypothesis run of every invariant on one configuration, each violation minimised.

    ``ledger_factory`` (with a matching ``destination_factory``) puts every world
    on a real backend (fence.backends.ModelStorage); the explorer's shortest
    search (``explorer_shortest``) stays in memory.
    """
    problem = config.problem()
    if problem:
        raise BadInput(f"model configuration: {problem}")
    if explorer_shortest and ledger_factory is not None:
        raise BadInput("the explorer's shortest counterexamples run in memory only; drop --shortest or --backend")
    run_settings = run_settings or profile_settings()
    result = ConfigResult(config)
    started = time.perf_counter()
    survey = Survey()
    try:
        machine, _ = run_once(
            policy, config, list(INVARIANTS), run_settings, seed, destination_factory, survey, ledger_factory,
            wrap_machine,
        )
        result.runs += 1
        result.examples = survey.examples
        result.reached = Counter(machine.reached)
        for name, violation in survey.violations.items():
            result.counterexamples[name] = _counterexample_for(
                policy, config, violation, run_settings, seed, destination_factory, hypothesis_shrink, result,
                explorer_shortest, ledger_factory,
            )
            result.first_found_at_example[name] = survey.first_found_at_example[name]
    except Exception as crash:  # a user's policy, destination or ledger raised
        from fence.model.protocol import broken_in

        broken = broken_in(crash)
        if broken is not None:  # a protocol broken: the whole run stops with its one line
            raise broken from None
        result.error = f"{type(crash).__name__}: {crash}"
    result.seconds = time.perf_counter() - started
    return result


def combine(policy: JanitorPolicy, results: Iterable[ConfigResult]) -> PolicyReport:
    """The policy's row: violated if any configuration broke it, else holds or undetermined."""
    report = PolicyReport(policy)
    results = list(results)
    for result in results:
        report.runs += result.runs
        report.examples += result.examples
        report.seconds += result.seconds
        report.reached[result.config] = result.reached
        if result.error:
            report.cells = {inv.name: Cell(Verdict.ERROR, detail=result.error) for inv in INVARIANTS}
            return report
        for name, example in result.counterexamples.items():
            known = report.cells.get(name)
            if known is None or example.rule_steps < known.counterexample.rule_steps:
                report.cells[name] = Cell(Verdict.VIOLATED, example, example.message)
            report.first_found_at_example.setdefault(name, result.first_found_at_example[name])
    # Each configuration must reach the dangers it can (failures only where workers may fail).
    required = {config: required_dangers(policy, config) for config in report.reached}
    every = dict.fromkeys(danger for dangers in required.values() for danger in dangers)
    missing = [
        danger.name
        for danger in every
        if any(reached[danger.name] == 0 for config, reached in report.reached.items() if danger in required[config])
    ]
    searched = f"not found in {report.examples} Hypothesis examples at " + "; ".join(
        r.config.describe() for r in results
    )
    for inv in INVARIANTS:
        if inv.name in report.cells:
            continue
        if missing:
            report.cells[inv.name] = Cell(Verdict.UNDETERMINED, detail=f"{searched}; never reached: " + ", ".join(missing))
        else:
            report.cells[inv.name] = Cell(Verdict.NOT_FOUND, detail=searched)
    report.cells = {inv.name: report.cells[inv.name] for inv in INVARIANTS}
    return report


def with_explorer(report: PolicyReport, found, destination_factory=None, ledger_factory=None) -> PolicyReport:
    """Both engines' word on each cell, never stronger than the evidence (see ``Verdict``).

    ``found`` is one of the explorer's runs (``Exploration``); called once per
    bound, in order. A cell is violated if any bound breaks it (the first
    found is kept: the smallest bound's shortest), proved if some bound proved
    it and none broke it, and says within which bounds. A cell the explorer
    proved while Hypothesis broke it is a disagreement only if Hypothesis'
    counterexample replays within the explorer's bound (then the explorer
    missed a reachable state: a fence bug, reported as such); a counterexample
    that needs more units, jobs, attempts or time is beyond it.
    """
    from fence.explore.results import Outcome

    if report.exploration is None:
        report.exploration = found
        report.hypothesis_verdicts = {name: cell.verdict for name, cell in report.cells.items()}
        report.hypothesis_details = {name: cell.detail for name, cell in report.cells.items()}
    report.explorations.append(found)
    bound = f"within {describe_bound(found.config)}"
    missing = found.missing_dangers()
    for inv in INVARIANTS:
        cell = report.cells[inv.name]
        if cell.verdict is Verdict.ERROR:
            continue
        explored = found.results[inv.name]
        if explored.outcome is Outcome.VIOLATED:
            if cell.verdict is not Verdict.VIOLATED:
                report.cells[inv.name] = Cell(
                    Verdict.VIOLATED, explored.counterexample,
                    f"{explored.counterexample.message} (the explorer's shortest {bound}; Hypothesis: "
                    f"{report.hypothesis_details.get(inv.name) or 'none'})",
                )
            continue
        if explored.outcome is Outcome.PROVED:
            if cell.verdict is Verdict.VIOLATED:
                if _replays_within(cell.counterexample, found.config, inv, report.policy, destination_factory, ledger_factory):
                    report.cells[inv.name] = Cell(
                        Verdict.DISAGREE, cell.counterexample,
                        f"fence bug: the explorer proved this {bound}, but this counterexample replays there",
                    )
                elif "(beyond the explorer's bound" not in cell.detail:
                    cell.detail = f"{cell.detail} (beyond the explorer's bound, where it is proved)"
                continue
            if cell.verdict is Verdict.DISAGREE:
                continue
            if missing:
                cell.detail = f"{cell.detail}; the explorer's proof {bound} never reached: {', '.join(missing)}"
                continue
            proved = report.proved_within.setdefault(inv.name, [])
            proved.append(bound)
            report.cells[inv.name] = Cell(
                Verdict.PROVED, detail=f"proved {' and '.join(proved)}{_not_within(report, inv.name)}; "
                f"{report.hypothesis_details.get(inv.name, '')}",
            )
            continue
        reason = found.unfaithful or f"the {found.stopped_by or 'budget'} ran out"
        report.proved_within.setdefault(inv.name, [])
        if cell.verdict is Verdict.PROVED:
            cell.detail = (f"proved {' and '.join(report.proved_within[inv.name])}{_not_within(report, inv.name)}; "
                           f"{report.hypothesis_details.get(inv.name, '')}")
        else:
            cell.detail = f"{cell.detail}; {bound} the explorer proved nothing: {reason}"
    return report


def describe_bound(config: ModelConfig) -> str:
    """A bound as reports name it: units, jobs, attempts and horizon (jobs symmetric where there are two or more)."""
    symmetric = ", jobs symmetric" if config.jobs > 1 else ""
    return f"{config.describe()}, horizon {config.horizon}{symmetric}"


def _not_within(report: PolicyReport, name: str) -> str:
    """What a proved cell's proof leaves out: each bound the explorer ran without proving it, and why."""
    from fence.explore.results import Outcome

    gaps = []
    for found in report.explorations:
        if found.results[name].outcome is Outcome.PROVED:
            continue
        reason = found.unfaithful or f"the {found.stopped_by or 'budget'} ran out after {found.states:,} states"
        gaps.append(f"not within {describe_bound(found.config)} ({reason})")
    return f", {', '.join(gaps)}" if gaps else ""


def _replays_within(example, config, inv, policy, destination_factory, ledger_factory) -> bool:
    from fence.search.minimise import replay_actions

    if example is None or example.config.capacity != config.capacity or example.config.jobs != config.jobs:
        return False
    try:
        replayed = replay_actions(policy, config, chosen_actions(example.steps), inv, destination_factory, ledger_factory)
    except Exception:
        return False
    return replayed is not None


def judge(
    policy: JanitorPolicy,
    *,
    configs: Iterable[ModelConfig] = DEFAULT_CONFIGS,
    explore: bool | None = None,
    **options,
) -> PolicyReport:
    """Both engines on one policy, one after the other, in this process.

    Hypothesis at every configuration, then the explorer at ``EXPLORER_BOUND``
    (``with_explorer``). With a ``ledger_factory`` the explorer runs only if
    ``explore`` says so: it copies worlds, so every copy of a world on a server
    is restored before each call (fence.backends' SQL plug-ins and the targets'
    ledgers are restorable, ``fence.model.restore``), which costs far more than in
    memory.
    """
    report = combine(policy, [survey_config(policy, config, **options) for config in configs])
    if explore is None:
        explore = options.get("ledger_factory") is None
    if explore:
        from fence.explore.walk import explore as walk

        destination, ledger = options.get("destination_factory"), options.get("ledger_factory")
        found = walk(policy, EXPLORER_BOUND, destination_factory=destination, ledger_factory=ledger,
                     time_budget=EXPLORER_CHECK_BUDGET)
        report = with_explorer(report, found, destination, ledger)
    return report


EXPLORER_BUDGET_SECONDS = 20.0
"""How long ``explorer_shortest`` may search for one cell's shortest counterexample."""


def _counterexample_for(
    policy, config, violation, run_settings, seed, destination_factory, hypothesis_shrink, result,
    explorer_shortest=False, ledger_factory=None,
) -> Counterexample:
    """Minimise a surveyed violation (and, if asked, Hypothesis' own shrink of it).

    With ``explorer_shortest``, the explorer then searches breadth first, at the
    same configuration and no deeper than the minimised trace, for a shortest
    trace breaking the same invariant; if it finds one within
    ``EXPLORER_BUDGET_SECONDS`` it replaces the minimised one (both lengths kept).
    """
    inv = violation.invariant
    found = chosen_actions(violation.trace)
    try:
        best = minimise(policy, config, found, inv, destination_factory, ledger_factory)
        message, steps = best.message, tuple(best.world.trace)
    except ValueError:  # the run does not replay (a destination with a mind of its own)
        best, message, steps = None, violation.message, tuple(violation.trace)
    hypothesis_steps = None
    if hypothesis_shrink:
        shrinking = settings(run_settings, phases=list(run_settings.phases) + [Phase.shrink])
        _machine, shrunk = run_once(policy, config, [inv], shrinking, seed, destination_factory, None, ledger_factory)
        result.runs += 1
        if shrunk is not None:
            hypothesis_steps = shrunk.rule_steps
            try:
                other = minimise(policy, config, chosen_actions(shrunk.trace), inv, destination_factory, ledger_factory)
            except ValueError:
                other = None
            if other is not None and (best is None or len(other.actions) < len(best.actions)):
                best, message, steps = other, other.message, tuple(other.world.trace)
    example = Counterexample(
        policy.name,
        config,
        inv.name,
        message,
        steps,
        found_steps=len(found),
        hypothesis_steps=hypothesis_steps,
    )
    if explorer_shortest:
        from fence.explore.walk import shortest

        bound = example.rule_steps
        found_shortest = shortest(
            policy, config, inv, max_depth=bound, max_states=None,
            time_budget=EXPLORER_BUDGET_SECONDS, destination_factory=destination_factory,
        )
        if found_shortest is not None and found_shortest.rule_steps <= bound:
            example = replace(
                example, message=found_shortest.message, steps=found_shortest.steps,
                shortest_steps=found_shortest.rule_steps,
            )
    return example


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
            progress.write(f" {violated} violated, {report.examples} examples, {report.seconds:.1f}s\n")
            progress.flush()
        reports.append(report)
    return reports
