"""Benchmarks whose figures go into evidence/, never into timed tests.

``counterexamples``: per violated cell and random seed, the time Hypothesis
takes to a first counterexample, the time until it is minimised and then
proved shortest by the explorer, and the lengths found, minimised and
shortest (Hypothesis' own shrink too, for the naive double write).

``explorer``: per policy and bound, with and without symmetry: states and
transitions per second, wall time and peak memory of one exploration (each in
a process of its own), and how the state space grows with units, jobs and
attempts (a table and, with matplotlib, a plot).

``suite``: the wall time of the README's test command.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from fence.base import evidence
from fence.base.pool import run_tasks
from fence.model.invariants import INVARIANTS, required_dangers
from fence.model.policies import POLICIES
from fence.model.invariants import BY_NAME
from fence.checking.verdicts import (
    DEFAULT_CONFIGS, Verdict, chosen_actions, run_once, load_expected, profile_settings, survey_config,
)
from fence.model.world import ModelConfig


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
    evidence.write_atomically(out, text)
    print(text, end="")


# -- counterexamples: time to first, to minimised, to shortest ----------------------------
def _one_cell_seed(arguments):
    """One seed of one violated cell: find, minimise, then the explorer's shortest."""
    from fence.explore.walk import shortest
    from fence.search.minimise import minimise

    policy_name, invariant_name, seed, examples, steps, hypothesis_shrink = arguments
    policy, inv = POLICIES[policy_name], BY_NAME[invariant_name]
    started = time.perf_counter()
    for config in DEFAULT_CONFIGS:
        run = profile_settings(examples, steps, derandomize=False)
        _machine, violation = run_once(policy, config, [inv], run, seed, None)
        if violation is not None:
            break
    else:
        return policy_name, invariant_name, seed, None
    found_at = time.perf_counter()
    found = chosen_actions(violation.trace)
    minimised = minimise(policy, config, found, inv)
    minimised_at = time.perf_counter()
    best = shortest(policy, config, inv, max_depth=len(minimised.actions), max_states=None, time_budget=120)
    shortest_at = time.perf_counter()
    figures = {
        "config": config.describe(),
        "first": found_at - started,
        "minimised": minimised_at - started,
        "shortest": shortest_at - started,
        "found_steps": len(found),
        "minimised_steps": len(minimised.actions),
        "shortest_steps": best.rule_steps if best is not None else None,
    }
    if hypothesis_shrink:
        shrink_started = time.perf_counter()
        run = profile_settings(examples, steps, derandomize=False, shrink=True)
        _machine, shrunk = run_once(policy, config, [inv], run, seed, None)
        figures["hypothesis_shrink_seconds"] = time.perf_counter() - shrink_started
        figures["hypothesis_steps"] = shrunk.rule_steps if shrunk is not None else None
    return policy_name, invariant_name, seed, figures


def counterexamples(
    seeds: int, examples: int, steps: int, workers: int, command: str, out: Path, policies: Sequence[str] = ()
) -> int:
    """Time to a first, a minimised and a proved-shortest counterexample, per violated cell."""
    expected = load_expected()
    names = list(policies) or list(POLICIES)
    cells = [(p, inv.name) for p in names for inv in INVARIANTS if expected[p][inv.name] is Verdict.VIOLATED]
    target = ("naive", "no_duplicate_writes")
    tasks = [(p, i, seed, examples, steps, (p, i) == target) for p, i in cells for seed in range(1, seeds + 1)]
    results: dict[tuple[str, str], list[dict]] = {cell: [] for cell in cells}
    started = time.perf_counter()
    # As finished; a Ctrl-C stops every worker (fence.base.pool)
    for done, (_, (p, i, seed, figures)) in enumerate(run_tasks(_one_cell_seed, tasks, workers), 1):
        if figures is not None:
            results[(p, i)].append(figures)
        print(f"[{done}/{len(tasks)}] {p} / {i} seed {seed}: "
              + (f"{figures['shortest']:.2f}s, {figures['minimised_steps']} -> {figures['shortest_steps']} steps"
                 if figures else "not found"), file=sys.stderr)
    wall = time.perf_counter() - started

    def secs(rows, name):
        return _spread([round(r[name], 2) for r in rows])

    lines = [
        *evidence.header(command),
        f"# worker processes: {workers}",
        f"# each (cell, seed): a raising Hypothesis run of that invariant alone ({examples} examples x {steps} steps,",
        "#   derandomize off, hypothesis.seed(N)) on the 1-unit model, else the 2-unit one; fence's minimiser on",
        "#   the found run; then the explorer's breadth-first search no deeper than the minimised run, which",
        "#   returns a shortest counterexample at that configuration (it proves no shorter one exists)",
        f"# wall time {wall:.0f}s",
        "",
        "Seconds from the start of the run, median [min-max]: to the first counterexample, to the minimised one,",
        "to the proved shortest. Lengths in chosen steps: found, minimised, shortest. 'shortest' counts the",
        "seeds whose minimised run was already a shortest one.",
        f"{'policy':22} {'invariant':34} {'found':>6}  {'first s':18} {'minimised s':18} {'shortest s':18} "
        f"{'found':14} {'minimised':12} {'shortest':10} minimised=shortest",
    ]
    for (p, i), rows in results.items():
        inv = BY_NAME[i]
        optimal = sum(1 for r in rows if r["shortest_steps"] is not None and r["minimised_steps"] == r["shortest_steps"])
        lines.append(
            f"{p:22} {inv.number} {i:32} {len(rows):>3}/{seeds:<3} {secs(rows, 'first'):18} "
            f"{secs(rows, 'minimised'):18} {secs(rows, 'shortest'):18} "
            f"{_spread([r['found_steps'] for r in rows]):14} {_spread([r['minimised_steps'] for r in rows]):12} "
            f"{_spread([r['shortest_steps'] for r in rows if r['shortest_steps'] is not None]):10} "
            f"{optimal}/{len(rows)}"
        )
    naive = results.get(target, [])
    if naive:
        reported = statistics.median(r["shortest"] for r in naive)
        at_shortest = sum(1 for r in naive if r["shortest_steps"] is not None)
        shrink_rows = [r for r in naive if r.get("hypothesis_steps") is not None]
        lines += [
            "",
            "Target (issue 5): the naive double write reported and proved shortest in under 2 s median,",
            "and the shortest trace in at least 19 of 20 seeds.",
            f"  median seconds to the proved shortest: {reported:.2f} ({'met' if reported < 2 else 'NOT met'})",
            f"  seeds ending at a proved shortest trace: {at_shortest}/{seeds} "
            f"({'met' if at_shortest >= min(19, seeds) else 'NOT met'})",
            f"  for comparison, Hypothesis' own shrink of the same runs: {secs(shrink_rows, 'hypothesis_shrink_seconds')} s, "
            f"{_spread([r['hypothesis_steps'] for r in shrink_rows])} steps",
        ]
    missed = sum(seeds - len(rows) for rows in results.values())
    lines.append(f"SUMMARY seeds={seeds} cells={len(cells)} finds_missed={missed}")
    _publish(lines, out)
    return 0 if missed == 0 else 1


# -- the explorer ------------------------------------------------------------------------
EXPLORER_BOUNDS: tuple[ModelConfig, ...] = (
    ModelConfig(capacity=1, jobs=1, max_attempts=1, horizon=3),
    ModelConfig(capacity=1, jobs=1, max_attempts=2, horizon=3),
    ModelConfig(capacity=1, jobs=1, max_attempts=3, horizon=3),
    ModelConfig(capacity=1, jobs=1, max_attempts=3, horizon=4),
    ModelConfig(capacity=2, jobs=2, max_attempts=1, horizon=2),
    ModelConfig(capacity=2, jobs=2, max_attempts=2, horizon=2),
    ModelConfig(capacity=2, jobs=2, max_attempts=2, horizon=3),
    ModelConfig(capacity=3, jobs=3, max_attempts=1, horizon=2),
)
"""Lease 2 and 2 janitors throughout; units, jobs, attempts and the horizon grow (the last two: issue 28's rows)."""


ONE_PROCESS = "one process"
ENGINES = {
    "one-process": ONE_PROCESS,
    "partitioned": "2 processes",
    "ray": "Ray, 2 actors",
}
"""``--engines`` names -> the engine column: the one-process walk, and the partitioned walk
(``fence.explore.partitioned``) on two processes or on two actors of a local Ray cluster of its own."""


@dataclass
class ExplorerRow:
    """One exploration's figures: what it found, how fast, and how much memory it held at most."""

    name: str
    config: ModelConfig
    symmetry: bool
    explorer_workers: int
    states: int
    transitions: int
    depth: int
    seconds: float
    exhausted: bool
    outcomes: str
    peak_mib: float
    """The exploring process's peak resident memory (ru_maxrss), in a process of the row's own."""
    workers_peak_mib: float | None
    """With explorer workers: the largest worker process's peak resident memory."""
    runs_seconds: tuple[float, ...] = ()
    """With ``repeat``: every run's wall time; this row's figures are its median run's."""
    visited_bytes: int = 0
    """What the visited set (fingerprints, state numbers) and the parent pointers held at the end."""
    engine: str = ONE_PROCESS
    """Which walk (``ENGINES``): one process, the partitioned walk on two processes, or on two Ray actors."""

    @property
    def total_peak_mib(self) -> float:
        """The coordinator's peak, plus the partitions' peaks summed for a partitioned walk (all of them live at once)."""
        partitioned = self.engine != ONE_PROCESS and self.workers_peak_mib is not None
        return self.peak_mib + (self.workers_peak_mib if partitioned else 0.0)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0

    @property
    def bytes_per_state(self) -> float:
        """The exploring processes' peak resident memory over the distinct states: everything a state costs."""
        return self.total_peak_mib * 2**20 / self.states if self.states else 0.0

    @property
    def visited_bytes_per_state(self) -> float:
        return self.visited_bytes / self.states if self.states else 0.0

    @property
    def transitions_per_second(self) -> float:
        return self.transitions / self.seconds if self.seconds else 0.0


def _explore_one(arguments) -> ExplorerRow:
    """One row, explored in a fresh process of its own, so that its peak memory is its own.

    ``ru_maxrss`` is a process's peak over its whole life: measured in a
    process that explored nothing else, it is this exploration's.
    """
    import multiprocessing

    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    here, there = context.Pipe(duplex=False)
    child = context.Process(target=_explore_in_child, args=(there, arguments))
    child.start()
    there.close()
    try:
        reply = here.recv()
    except EOFError:
        reply = f"the exploring process died (exit status {child.exitcode})"
    finally:
        child.join()
    if isinstance(reply, str):
        raise RuntimeError(f"bench explorer, {arguments[0]} {arguments[1].describe()}: {reply}")
    return reply


def _explore_in_child(pipe, arguments) -> None:
    import resource
    import traceback

    from fence.explore.walk import explore_with_workers
    from fence.model.plugins import load_destination, load_ledger, load_policy

    spec, config, symmetry, budget, explorer_workers, (destination, ledger), engine = arguments
    try:
        policy = load_policy(spec)  # a built-in's name, or a user's MODULE:ATTR or FILE.py:ATTR
        plug_ins = dict(
            destination_factory=load_destination(destination) if destination else None,
            ledger_factory=load_ledger(ledger) if ledger else None,
        )
        if engine == ONE_PROCESS:
            found = explore_with_workers(
                policy, config, workers=explorer_workers, symmetry=symmetry, time_budget=budget,
                share_levels="always",  # measured as asked, so the two ways can be compared
                **plug_ins,
            )
        else:
            from fence.explore.partitioned import explore_partitioned

            found = explore_partitioned(
                policy, config, partitions=2, ray_address="local" if engine == ENGINES["ray"] else None,
                symmetry=symmetry, time_budget=budget,
                **{name: value for name, value in plug_ins.items() if value is not None},
            )
        # A row with a user's destination or ledger is named by it: it is walked another way.
        name = policy.name + "".join(f" + {Path(p).name}" for p in (destination, ledger) if p)
        outcomes = "".join(item.outcome.value[0].upper() for item in found.results.values())
        kib = 1024 if sys.platform != "darwin" else 1024 * 1024  # ru_maxrss: KiB on Linux, bytes on macOS
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib
        workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib if explorer_workers > 1 else None
        if engine != ONE_PROCESS:
            workers = found.peak_bytes / 2**20 if found.partitioned_on else None  # each partition's own, summed
        pipe.send(ExplorerRow(
            name, config, symmetry, explorer_workers, found.states, found.transitions, found.depth,
            found.seconds, found.exhausted, outcomes, own, workers, visited_bytes=found.visited_bytes, engine=engine,
        ))
    except BaseException:
        pipe.send(traceback.format_exc())
    finally:
        pipe.close()


def explorer(
    policies: Sequence[str], budget: float, workers: int, command: str, out: Path,
    bounds: Sequence[ModelConfig] = EXPLORER_BOUNDS, symmetry: str = "both", explorer_workers: int = 1,
    repeat: int = 1, plugins: tuple[str | None, str | None] = (None, None), engines: Sequence[str] = (ONE_PROCESS,),
) -> int:
    """Per policy and bound: states/s, transitions/s, wall time and peak memory of one exploration.

    ``plugins``: the specs of a user's destination and ledger every row runs with (None: fence's own).
    ``symmetry``: "both" (with and without, for bounds of more than one job),
    "on" or "off". With ``explorer_workers`` > 1 each exploration shares its
    levels between that many processes (``explore_with_workers``, even where
    one process is faster: this measures it) and the rows run one after
    another, so that they do not compete for the cores. With ``repeat`` n > 1
    each row is explored n times, each in a fresh process, and reported by its
    median run (by wall time) with the range of the n: one run on a noisy
    machine is not a figure to quote. ``engines`` (``ENGINES``' values): a row
    per engine, one after another (a partitioned walk takes both cores).
    """
    choices = {"both": (False, True), "on": (True,), "off": (False,)}[symmetry]
    tasks = [
        (name, config, with_symmetry, budget, explorer_workers, plugins, engine)
        for config in bounds
        for name in policies
        for with_symmetry in (choices if config.jobs > 1 else (False,))
        for engine in engines
    ]
    several_engines = tuple(engines) != (ONE_PROCESS,)
    side_by_side = workers if explorer_workers < 2 and not several_engines else 1
    load_before = _load()
    started = time.perf_counter()
    runs: dict[int, list[ExplorerRow]] = {}
    repeated = [task for task in tasks for _ in range(repeat)]
    # As finished, kept in task order for the table; a Ctrl-C stops every worker (fence.base.pool)
    for done, (index, row) in enumerate(run_tasks(_explore_one, repeated, side_by_side), 1):
        runs.setdefault(index // repeat, []).append(row)
        print(f"[{done}/{len(repeated)}] {row.name} {row.config.describe()} symmetry={row.symmetry} {row.engine}: "
              f"{row.states} states, "
              f"{row.seconds:.1f}s, peak {row.peak_mib:.0f} MiB", file=sys.stderr)
    rows = [_median_run(runs[index]) for index in sorted(runs)]
    wall = time.perf_counter() - started
    if several_engines:
        how = ("# engine: one process (fence explore), or the partitioned walk (each state owned by one partition, by\n"
               "#   its fingerprint: fence explore --partitioned / --ray local) on 2 processes or on 2 actors of a local\n"
               "#   Ray cluster started for the row (2 CPUs; its start-up is counted in the wall time); rows one at a time\n"
               "# peak MiB for a partitioned row: the coordinator's + the partitions' peaks summed; B/state counts both\n"
               f"# load average (1, 5, 15 min; the machine is shared): {load_before} at the start, {_load()} at the end"
               + (f"\n# ray: {_version_of('ray')}" if ENGINES["ray"] in engines else ""))
    elif explorer_workers > 1:
        how = f"# each row: one exploration on {explorer_workers} processes sharing each level; rows one at a time"
    else:
        how = f"# worker processes: {side_by_side} (each row is one single-process exploration, in a process of its own)"
    if repeat > 1:
        how += (f"\n# each row explored {repeat} times, each in a fresh process: its figures are the median run's "
                "(by wall time), 'runs s' the fastest and slowest, peak MiB the largest")
    width = max([22] + [len(row.name) for row in rows])
    lines = [
        *evidence.header(command),
        how,
        *([f"# every row with {' and '.join(p for p in plugins if p)} (a user's plug-ins: the generic path)"]
          if any(plugins) else []),
        f"# each row: one breadth-first exploration, time budget {budget:g}s; lease 2, 2 janitors",
        "# peak MiB: the exploring process's peak resident memory (getrusage ru_maxrss); with several",
        "#   explorer processes, '+ N' is the largest worker's peak (the coordinator's is the first figure)",
        "# B/state: peak resident memory over distinct states (the whole process: Python, memos, frontier);",
        "#   visited B/state: the visited set (64-bit fingerprints, state numbers) and parent pointers alone",
        f"# wall time {wall:.0f}s",
        "",
        "verdicts: one letter per invariant 1-7 (P proved, V violated, U undetermined: budget ran out)",
        f"{'policy':{width}} {'bound (units x jobs x attempts, horizon)':42} {'sym':4} "
        + (f"{'engine':14} " if several_engines else "")
        + f"{'states':>8} {'transitions':>11} "
        f"{'depth':>5} {'wall s':>8} {'states/s':>8} {'trans/s':>8} {'peak MiB':>13} {'B/state':>8} {'visited B/state':>15} "
        "exhausted verdicts"
        + ("  runs s" if repeat > 1 else ""),
    ]
    for row in rows:
        config = row.config
        bound = f"{config.capacity}x{config.jobs}x{config.max_attempts}, horizon {config.horizon}"
        peak = f"{row.peak_mib:.0f}" + (f" + {row.workers_peak_mib:.0f}" if row.workers_peak_mib is not None else "")
        lines.append(
            f"{row.name:{width}} {bound:42} {'yes' if row.symmetry else 'no':4} "
            + (f"{row.engine:14} " if several_engines else "")
            + f"{row.states:>8} {row.transitions:>11} "
            f"{row.depth:>5} {row.seconds:>8.1f} {row.states_per_second:>8.0f} {row.transitions_per_second:>8.0f} "
            f"{peak:>13} {row.bytes_per_state:>8.0f} {row.visited_bytes_per_state:>15.0f} "
            f"{'yes' if row.exhausted else 'NO':9} {row.outcomes}"
            + (f"   {min(row.runs_seconds):.1f}-{max(row.runs_seconds):.1f}" if repeat > 1 else "")
        )
    lines += _copies_against_builtins(rows)
    picture = out.with_suffix(".png")
    if _explorer_plot(rows, picture, bounds):
        lines += ["", f"plot: {picture.name} (distinct states and seconds per bound, one line per policy)"]
    else:
        lines += ["", "plot: not drawn (matplotlib is not installed: pip install -e '.[plots]')"]
    _publish(lines, out)
    return 0


def _version_of(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _load() -> str:
    """The machine's load averages, as uptime prints them."""
    import os

    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


def _copies_against_builtins(rows: list[ExplorerRow]) -> list[str]:
    """A user's copy of a built-in (a policy named '<built-in> copy') beside that built-in, row by row.

    What a user brings must get fence's own engine: the same states in about
    the same time (issue 24 asks at most 1.5 times the built-in's).
    """
    builtin = {(row.name, row.config, row.symmetry): row for row in rows}
    lines = []
    for row in rows:
        if not row.name.endswith(" copy"):
            continue
        original = builtin.get((row.name[: -len(" copy")], row.config, row.symmetry))
        if original is None:
            continue
        config = row.config
        bound = f"{config.capacity}x{config.jobs}x{config.max_attempts}, horizon {config.horizon}"
        same = "same states" if (row.states, row.transitions, row.outcomes) == (
            original.states, original.transitions, original.outcomes) else "STATES DIFFER"
        lines.append(f"{row.name:30} {bound:24} {'sym' if row.symmetry else '   '} {same:13} "
                     f"{row.seconds / original.seconds if original.seconds else 0:5.2f}x the built-in's time")
    if lines:
        lines = ["", "a user's copy of a built-in against the built-in (the same bound, the same process kind):",
                 *lines]
    return lines


def _median_run(runs: list[ExplorerRow]) -> ExplorerRow:
    """The run of median wall time (the lower middle of an even number), with every run's time and the largest peak."""
    ordered = sorted(runs, key=lambda row: row.seconds)
    middle = ordered[(len(ordered) - 1) // 2]
    return replace(
        middle,
        runs_seconds=tuple(row.seconds for row in ordered),
        peak_mib=max(row.peak_mib for row in runs),
        workers_peak_mib=None if middle.workers_peak_mib is None else max(row.workers_peak_mib for row in runs),
    )


def _explorer_plot(rows: list[ExplorerRow], picture: Path, bounds: Sequence[ModelConfig] = EXPLORER_BOUNDS) -> bool:
    """States and seconds against the bound, one line per policy and symmetry; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f"{c.capacity}x{c.jobs}x{c.max_attempts}\nh{c.horizon}" for c in bounds]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict[tuple[str, bool], dict[int, tuple[int, float, bool]]] = {}
    for row in rows:
        series.setdefault((row.name, row.symmetry), {})[list(bounds).index(row.config)] = (
            row.states, row.seconds, row.exhausted)
    for (name, symmetry), points in sorted(series.items()):
        xs = sorted(points)
        label = name + (" (jobs symmetric)" if symmetry else "")
        style = "--" if symmetry else "-"
        left.plot(xs, [points[x][0] for x in xs], style, marker="o", label=label)
        right.plot(xs, [points[x][1] for x in xs], style, marker="o", label=label)
        for x in xs:
            if not points[x][2]:  # not exhausted: the figure is a lower bound
                left.annotate("budget", (x, points[x][0]), fontsize=7)
    for axis, title in ((left, "distinct states"), (right, "seconds to exhaust (one process)")):
        axis.set_yscale("log")
        axis.set_xticks(range(len(labels)), labels, fontsize=8)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    right.legend(fontsize=7)
    figure.suptitle("fence explore: growth with units x jobs x attempts and horizon (lease 2, 2 janitors)")
    figure.tight_layout()
    with evidence.atomic_target(picture) as temporary:
        figure.savefig(temporary, format="png", dpi=110)
    plt.close(figure)
    return True


# -- the suite ---------------------------------------------------------------------------
def suite(command: str, out: Path, pytest_arguments: Sequence[str] = ()) -> int:
    """Run the README's test command (``pytest``) and record its wall time, closing line,
    slowest tests and, if any, the failures (pytest's ``FAILED``/``ERROR`` lines)."""
    import subprocess

    started = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15", *pytest_arguments],
        capture_output=True, text=True,
    )
    wall = time.perf_counter() - started
    output = finished.stdout.strip().splitlines()
    closing = [line for line in output if " passed" in line or " failed" in line]
    failures = [line for line in output if line.startswith(("FAILED ", "ERROR "))]
    slowest: list[str] = []
    if any("slowest" in line for line in output):
        start = next(n for n, line in enumerate(output) if "slowest" in line) + 1
        for line in output[start:]:
            if not line[:1].isdigit():
                break
            slowest.append("  " + line)
    lines = [
        *evidence.header(command, packages=("fence", "hypothesis", "pytest", "pytest-xdist", "strands-agents", "psycopg")),
        f"# pytest arguments: {' '.join(pytest_arguments) or '(none: the README command)'} (and --durations=15)",
        f"# environment: {_suite_environment()}",
        "",
        f"wall time: {wall:.0f} s",
        f"pytest exit status: {finished.returncode}",
        f"closing line: {closing[-1].strip('= ') if closing else '(none)'}",
        *(["failures:", *("  " + line for line in failures)] if failures else []),
        "slowest tests (seconds, on two xdist workers, so they overlap):",
        *slowest,
    ]
    if finished.returncode != 0:
        print("\n".join(output[-40:]), file=sys.stderr)
    _publish(lines, out)
    return finished.returncode


def _suite_environment() -> str:
    """What changes the suite's run: the Hypothesis profile, CI (PostgreSQL tests fail
    rather than skip), and whether a PostgreSQL cluster was given or started per worker."""
    import os

    profile = os.environ.get("FENCE_PROFILE") or ("ci" if os.environ.get("CI") else "dev")  # as conftest.py picks
    ci = "CI set" if os.environ.get("CI") else "CI unset"
    postgres = "shared cluster from FENCE_POSTGRES_URL" if os.environ.get("FENCE_POSTGRES_URL") else "no FENCE_POSTGRES_URL"
    return f"FENCE_PROFILE={profile}, {ci}, PostgreSQL: {postgres}"
