"""Record, and compare, everything the explorer concludes: the check that a speed-up changed nothing.

Why: the explorer decides which policies are safe, so a change made for speed
must leave every figure it reports exactly as it was. This walks a fixed set of
rows (every built-in policy at the CI bound and at two larger bounds, a row on
two workers, and the seeded bugs of tests/seeded/ on the generic path) and
writes, per row: distinct states, transitions, depth, whether the space was
exhausted, each invariant's outcome and shortest-counterexample length, the
dangers reached, unsettled drains, and each counterexample's every step (the
action, the sentence it printed, and whether the drain took it).

    python tools/explorer_results.py record FILE [--rows quick|full|big|all] [--processes 2]
    python tools/explorer_results.py compare FILE [--rows ...]   # exit 1 on any difference

``quick`` is the CI bound only (seconds); ``full`` adds horizon 4 and
2x2x1 with symmetry and the seeded bugs (a few minutes); ``big`` is
abandon-fenced at 2x2x2, horizon 2, jobs symmetric, one process and two, and naive there in one,
and both partitioned between two processes (``explore_partitioned``); ``all`` is ``full`` and ``big``.
A partitioned row must equal, figure for figure and step for step, the one-process row of
its bound (``compare`` checks that too, besides the recorded figures): the partitioned walk
promises the same results as one process, shortest counterexamples included.
tests/test_explore.py pins the CI-bound rows against tools/explorer-results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fence.explore.partitioned import explore_partitioned
from fence.explore.workers import explore_with_workers
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig

CI_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=3)
HORIZON_4 = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=4)
TWO_JOBS_ONE_ATTEMPT = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2)
TWO_BY_TWO = ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2)

PARTITIONED = " partitions=2"
"""A partitioned row's name is its one-process row's name and this."""

SEEDED = Path(__file__).resolve().parent.parent / "tests" / "seeded"
# (policy, destination spec, ledger spec): the plug-ins of tests/test_seeded_bugs.py, explored
# at the CI bound on the generic path (deep copies, generic key, faithfulness checks).
SEEDED_ROWS = (
    ("decide_writes.py:LookupThenAbandon", None, None),
    ("probe_writes.py:PlaceholderThenFree", None, None),
    ("free_then_abandon.py:FreeThenAbandon", None, None),
    ("fenced", "lookup_skips_fence.py:LookupSkipsFence", None),
    ("fenced", "fence_after_append.py:FenceAfterAppend", None),
    ("abandon-fenced", "lagging_reads.py:LaggingGuards", None),
    ("ignored_fingerprint.py:FencedWithFingerprint", "ignored_fingerprint.py:IgnoresFingerprint", None),
    ("abandon-fenced", "deadline_witness.py:DeadlineWitness", None),
    ("abandon-fenced", "lagging_reads.py:LaggingReads", None),
    ("abandon-fenced", None, "ledger_frees_twice.py:LedgerFreesTwice"),
    ("naive", None, "confirm_without_owner.py:ConfirmWithoutOwner"),
)


def rows(which: str) -> list[dict]:
    """The rows to walk, each a dict of what ``walk`` takes (and its name)."""
    chosen = []
    if which != "big":
        chosen += [dict(policy=name, config=CI_BOUND, symmetry=False, workers=1) for name in POLICIES]
    if which in ("full", "all"):
        chosen += [dict(policy=name, config=HORIZON_4, symmetry=False, workers=1) for name in POLICIES]
        chosen += [dict(policy=name, config=TWO_JOBS_ONE_ATTEMPT, symmetry=True, workers=1) for name in POLICIES]
        chosen += [dict(policy=name, config=CI_BOUND, symmetry=False, workers=2) for name in ("witness", "abandon-fenced")]
        chosen += [dict(policy=p, config=CI_BOUND, symmetry=False, workers=1, destination=d, ledger=l)
                   for p, d, l in SEEDED_ROWS]
    if which in ("big", "all"):
        chosen += [dict(policy="abandon-fenced", config=TWO_BY_TWO, symmetry=True, workers=w) for w in (1, 2)]
        chosen.append(dict(policy="naive", config=TWO_BY_TWO, symmetry=True, workers=1))
        # Partitioned: a safe policy (every state, proved) and naive (four counterexamples, compared step by step).
        chosen += [dict(policy=name, config=TWO_BY_TWO, symmetry=True, workers=1, partitions=2)
                   for name in ("abandon-fenced", "naive")]
    for row in chosen:
        c = row["config"]
        plugins = "".join(f" {k}={row[k]}" for k in ("destination", "ledger") if row.get(k))
        row["name"] = (f"{row['policy']}{plugins} {c.capacity}x{c.jobs}x{c.max_attempts} h{c.horizon}"
                       f"{' sym' if row['symmetry'] else ''}{' workers=2' if row['workers'] > 1 else ''}"
                       f"{PARTITIONED if row.get('partitions') else ''}")
    return chosen


def walk(row: dict) -> tuple[str, dict]:
    """Explore one row and return its name and every figure the explorer concluded."""
    from fence.model import plugins
    from fence.model.invariants import required_dangers

    def spec(text):
        return str(SEEDED / text) if text and ".py:" in text else text

    policy = POLICIES[row["policy"]] if row["policy"] in POLICIES else plugins.load_policy(spec(row["policy"]))
    destination = plugins.load_destination(spec(row["destination"])) if row.get("destination") else None
    ledger = plugins.load_ledger(spec(row["ledger"])) if row.get("ledger") else None
    if row.get("partitions"):
        found = explore_partitioned(policy, row["config"], partitions=row["partitions"], symmetry=row["symmetry"])
        if found.one_process_because is not None:  # a row that fell back to one process checks nothing
            raise RuntimeError(f"{row['name']} was not partitioned: {found.one_process_because}")
    else:
        found = explore_with_workers(
            policy, row["config"], workers=row["workers"], share_levels="always", symmetry=row["symmetry"],
            destination_factory=destination, ledger_factory=ledger,
        )
    figures = {
        "states": found.states,
        "transitions": found.transitions,
        "depth": found.depth,
        "exhausted": found.exhausted,
        "stopped_by": found.stopped_by,
        "unfaithful": found.unfaithful,
        "drains_unsettled": found.drains_unsettled,
        "dangers_reached": {d.name: found.reached[d.name] for d in required_dangers(found.policy)},
        "reached": dict(sorted(found.reached.items())),
        "invariants": {
            name: {
                "outcome": item.outcome.value,
                "depth": item.depth,
                "counterexample": None if item.counterexample is None else [
                    [step.action.to_dict(), step.sentence, step.drain] for step in item.counterexample.steps
                ],
            }
            for name, item in found.results.items()
        },
    }
    if row["workers"] > 1:
        # Two workers may find another counterexample of the same length (the docstring
        # of explore_with_workers says so): its length is compared, not its steps.
        for item in figures["invariants"].values():
            item["counterexample"] = None if item["counterexample"] is None else len(item["counterexample"])
    return row["name"], figures


def run_all(which: str, processes: int) -> dict[str, dict]:
    chosen = rows(which)
    results: dict[str, dict] = {}
    if processes > 1:
        import multiprocessing

        # Rows that start worker processes of their own run here, one at a time.
        alone = [r for r in chosen if r["workers"] > 1 or r.get("partitions")]
        shared = [r for r in chosen if r not in alone]
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            for name, figures in pool.imap_unordered(walk, shared):
                results[name] = figures
                print(f"  {name}: {figures['states']} states", file=sys.stderr)
        for row in alone:
            name, figures = walk(row)
            results[name] = figures
            print(f"  {name}: {figures['states']} states", file=sys.stderr)
    else:
        for row in chosen:
            name, figures = walk(row)
            results[name] = figures
            print(f"  {name}: {figures['states']} states", file=sys.stderr)
    return {row["name"]: results[row["name"]] for row in chosen}


def differences(recorded: dict[str, dict], now: dict[str, dict]) -> list[str]:
    """Every row and figure that differs, as sentences (rows recorded but not walked now are skipped)."""
    found = []
    for name, figures in now.items():
        if name not in recorded:
            found.append(f"{name}: not in the recorded results")
            continue
        before = recorded[name]
        for field in sorted(set(before) | set(figures)):
            if field == "invariants":
                continue
            if before.get(field) != figures.get(field):
                found.append(f"{name}: {field} was {before.get(field)!r}, now {figures.get(field)!r}")
        for invariant in sorted(set(before["invariants"]) | set(figures["invariants"])):
            a, b = before["invariants"].get(invariant), figures["invariants"].get(invariant)
            if a != b:
                found.append(f"{name}: {invariant} was {_short(a)}, now {_short(b)}")
    return found


def partitioned_differences(recorded: dict[str, dict], now: dict[str, dict]) -> list[str]:
    """Every figure of a partitioned row walked now that differs from its bound's one-process row
    (walked now, or else as recorded): the partitioned walk must conclude exactly what one process does."""
    found = []
    for name, figures in now.items():
        if not name.endswith(PARTITIONED):
            continue
        alone = name.removesuffix(PARTITIONED)
        reference = now.get(alone, recorded.get(alone))
        if reference is None:
            found.append(f"{name}: no one-process row {alone!r} to compare it with")
            continue
        found += [f"{name} against one process: {line.removeprefix(alone + ': ')}"
                  for line in differences({alone: reference}, {alone: figures})]
    return found


def _short(item: dict | None) -> str:
    if item is None:
        return "missing"
    steps = item["counterexample"]
    shown = steps if isinstance(steps, int) or steps is None else f"{len(steps)} steps"
    return f"{item['outcome']} depth {item['depth']} counterexample {shown}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["record", "compare"])
    parser.add_argument("file", type=Path)
    parser.add_argument("--rows", choices=["quick", "full", "big", "all"], default="full")
    parser.add_argument("--processes", type=int, default=2, help="rows walked side by side (default 2)")
    args = parser.parse_args(argv)
    now = run_all(args.rows, args.processes)
    if args.what == "record":
        recorded = json.loads(args.file.read_text()) if args.file.exists() else {}
        recorded.update(now)
        args.file.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(now)} row(s) into {args.file}")
        return 0
    recorded = json.loads(args.file.read_text())
    problems = differences(recorded, now) + partitioned_differences(recorded, now)
    for line in problems:
        print(line)
    print(f"{len(now)} row(s) compared: " + ("identical" if not problems else f"{len(problems)} difference(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
