"""``fence explore``: walk every interleaving of one policy (a built-in or a user's plug-ins) within bounds."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from fence.cli import arguments
from fence.cli.check_command import (
    EXIT_PROVED, EXIT_UNDETERMINED, EXIT_VIOLATED, FAILURES_HELP, plug_ins, requested_report,
)
from fence.search import counterexample
from fence.base import output
from fence.base.errors import BadInput
from fence.model.protocol import broken_in
from fence.model.world import ModelConfig


def explore_arguments(explore) -> None:
    """``fence explore``'s options."""
    explore.add_argument("--policy", default="abandon-fenced", help="a built-in name, MODULE:ATTR or FILE.py:ATTR")
    explore.add_argument("--destination", help="MODULE:ATTR or FILE.py:ATTR of your destination factory")
    explore.add_argument("--ledger", help="MODULE:ATTR or FILE.py:ATTR of your ledger factory")
    explore.add_argument("--capacity", type=arguments.model_size, default=1, help="units (default 1)")
    explore.add_argument("--jobs", type=arguments.model_size, help="jobs (default: --capacity)")
    explore.add_argument("--attempts", type=arguments.model_size, default=3, help="attempts per job (default 3)")
    explore.add_argument("--horizon", type=arguments.zero_or_more, help="clock horizon in ticks (default: the explorer's)")
    explore.add_argument("--failures", action="store_true", help=FAILURES_HELP)
    explore.add_argument("--lease", type=arguments.positive, default=ModelConfig.lease, help="lease in ticks")
    explore.add_argument("--max-depth", type=arguments.zero_or_more, help="at most this many chosen steps per run")
    explore.add_argument("--max-states", type=arguments.states, help="budget: stop (undetermined) after this many states")
    explore.add_argument("--time-budget", type=arguments.positive_seconds, help="budget: stop (undetermined) after SECONDS")
    explore.add_argument("--symmetry", action="store_true", help="treat jobs as interchangeable names")
    explore.add_argument(
        "--workers", type=arguments.workers, default=1,
        help="processes to share each breadth-first level where that pays: fence's own parts with the built-in "
        "invariants run in one, which is faster (the report says so); a --max-states search runs in one",
    )
    explore.add_argument(
        "--partitioned", action="store_true",
        help="each state owned by one of --workers processes (2 if not given), by its fingerprint: levels shared "
        "in batches of compact rows, the same results as one process (fence's own parts, built-in invariants)",
    )
    explore.add_argument(
        "--ray", metavar="ADDRESS",
        help="the partitioned walk on a Ray cluster: HOST:PORT of its head, 'auto', or 'local' to start one here; "
        "--workers actors (2 if not given); needs pip install 'fence[ray]' (docs/how-to/explore-on-a-cluster.md)",
    )
    explore.add_argument(
        "--share-levels", choices=["where-it-pays", "always"], default="where-it-pays",
        help="with --workers: share levels only where that pays (default), or always (to compare)",
    )
    explore.add_argument("--json", action="store_true", help="print machine-readable JSON")
    output.add_options(explore, record="counterexamples into evidence/counterexamples/explorer/", out_help="where counterexamples go")
    explore.add_argument("--report", metavar="FILE", help="also write the report, with the evidence header, to FILE")
    explore.set_defaults(handler=cmd_explore)


def _level_line(found) -> None:
    """One line per breadth-first level on stderr, with --json too (stdout holds only the report)."""
    from fence.explore.report import level_line

    print(level_line(found), file=sys.stderr, flush=True)


def cmd_explore(args) -> int:
    """Exit 0: every invariant proved; 1: one violated; 3: a budget ran out first."""
    from fence.explore import report, results, workers

    policy, destination, ledger, specs = plug_ins(args)
    horizon = args.horizon if args.horizon is not None else results.EXPLORER_HORIZON
    config = ModelConfig(
        capacity=args.capacity,
        jobs=args.jobs if args.jobs is not None else args.capacity,
        max_attempts=args.attempts,
        lease=args.lease,
        horizon=horizon,
        failures=args.failures,
    )
    problem = config.problem()
    if problem:
        raise BadInput(f"{problem}; fix --capacity/--jobs/--attempts/--lease")
    if args.ray:
        from fence.explore.transports import ray_problem

        if problem := ray_problem(args.ray):
            raise BadInput(problem)
    report_path = requested_report(args, None)
    out = output.directory(args, "explore", output.EVIDENCE / "counterexamples" / "explorer")
    walk_options = dict(
        max_depth=args.max_depth, max_states=args.max_states, time_budget=args.time_budget, symmetry=args.symmetry,
        destination_factory=destination, ledger_factory=ledger, progress=_level_line,
    )
    try:
        if args.partitioned or args.ray:
            from fence.explore import partitioned

            found = partitioned.explore_partitioned(
                policy, config, partitions=args.workers if args.workers > 1 else 2, ray_address=args.ray,
                **{name: value for name, value in walk_options.items() if value is not None and value is not False},
            )
        else:
            found = workers.explore_with_workers(
                policy, config, workers=args.workers, share_levels=args.share_levels.replace("-", "_"), **walk_options,
            )
    except BadInput:
        raise
    except Exception as crash:
        broken = broken_in(crash)
        if broken is None:  # fence's own code raised: a bug, with its traceback
            raise
        raise broken from None
    written = []
    for item in found.results.values():
        if item.counterexample:
            item.counterexample = replace(item.counterexample, plugins=specs)
            written.extend(counterexample.write(item.counterexample, out))
    if report_path is not None:
        from fence.base import evidence

        command = output.command_line("fence explore")
        text = "\n".join([*evidence.header(command), "", report.report_text(found)]) + "\n"
        evidence.write_atomically(report_path, text)
    if args.json:
        print(json.dumps(report.to_json(found), indent=2))
    else:
        print(report.report_text(found))
        for item in found.results.values():
            if item.counterexample:
                print()
                print(counterexample.steps_text(item.counterexample))
        if written:
            print(f"\ncounterexamples written to {out}/ (.txt steps, .mmd Mermaid, .json replayable)")
    if found.unfaithful:
        print(f"fence: the explorer proves nothing for these plug-ins: {found.unfaithful}", file=sys.stderr)
    outcome = found.outcome()
    return {
        results.Outcome.PROVED: EXIT_PROVED, results.Outcome.VIOLATED: EXIT_VIOLATED,
        results.Outcome.UNDETERMINED: EXIT_UNDETERMINED,
    }[outcome]
