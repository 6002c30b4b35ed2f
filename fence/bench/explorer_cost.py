"""``fence bench explorer``: the explorer's states per second, wall time and memory, and how the state space grows.

Per policy and bound, with and without symmetry: states and transitions per
second, wall time and peak memory of one exploration (each in a process of
its own), and how the state space grows with units, jobs and attempts (a
table and, with matplotlib, a plot).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from fence.base import evidence
from fence.base.pool import run_tasks
from fence.model.world import ModelConfig
from fence.bench.figures import publish


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

    from fence.explore.workers import explore_with_workers
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
    publish(lines, out)
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
