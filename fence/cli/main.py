"""The ``fence`` command: verdicts for the built-in policies, or a check of yours.

Exit status, the same for ``check`` and ``explore``:

  0  every invariant proved (within the explorer's bound; ``check``: and
     Hypothesis found nothing at its larger configurations)
  1  an invariant is violated: a replayable counterexample was written
  2  bad input, or a plug-in that broke its protocol (raised, returned the
     wrong thing): one line on stderr, never a traceback
  3  undetermined: nothing violated, but something is not proved (a budget ran
     out, the plug-ins cannot be explored faithfully, or only Hypothesis
     searched: "not found in N examples" is not a proof)
  4  the two engines disagree: a bug in fence, reported as such

``verdicts`` exits 0 when every cell equals the committed expected file, 1 when
one differs, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from fence.cli import arguments

from fence.search import counterexample

from fence.base import output
from fence.checking.checking import PROFILES, check_policies, report_text, write_counterexamples
from fence.base.errors import BackendError, BadInput, PluginBroken
from fence.model.plugins import PlugInSpecs, absolute, load_destination, load_ledger, load_policy
from fence.model.policies import POLICIES, JanitorPolicy
from fence.model.protocol import broken_in
from fence.checking.verdicts import (
    CHECK_BOUNDS,
    EXPECTED_FILE,
    DEFAULT_CONFIGS,
    EXPLORER_BOUND,
    PolicyReport,
    Verdict,
    compare,
    describe_bound,
    load_expected,
)
from fence.model.world import ModelConfig

EXIT_PROVED, EXIT_VIOLATED, EXIT_BAD_INPUT, EXIT_UNDETERMINED, EXIT_DISAGREE = 0, 1, 2, 3, 4


def _configs(args) -> tuple[ModelConfig, ...]:
    if args.capacity is None and args.jobs is None and args.lease is None:
        return DEFAULT_CONFIGS
    capacity = args.capacity if args.capacity is not None else 1
    config = ModelConfig(
        capacity=capacity,
        jobs=args.jobs if args.jobs is not None else capacity,
        lease=args.lease if args.lease is not None else ModelConfig.lease,
    )
    problem = config.problem()
    if problem:
        raise BadInput(f"{problem}; fix --capacity/--jobs/--lease")
    return (config,)


def _with_failures(args, configs) -> tuple[ModelConfig, ...]:
    """``--failures``: the same configurations, with workers that may fail and report it (``ModelConfig.failures``)."""
    if not getattr(args, "failures", False):
        return tuple(configs)
    return tuple(replace(config, failures=True) for config in configs)


def _wants_shortest(args) -> bool:
    """``verdicts`` asks the explorer for shortest counterexamples unless told not to.

    The explorer's shortest search runs in memory only, so on a backend the default is off; ``check``
    has no such option and runs a user's destination, which the explorer may
    not be able to copy.
    """
    chosen = getattr(args, "shortest", None)
    if chosen is not None:
        return chosen
    return hasattr(args, "shortest") and getattr(args, "backend", None) is None


def _run(policies: list[JanitorPolicy], args, destination=None, ledger=None) -> list[PolicyReport]:
    """Both engines, as the command line asked (on a --backend too: its SQL ledger and destination restore)."""
    bounds = _with_failures(args, getattr(args, "explorer_bound", None) or (EXPLORER_BOUND,))
    return check_policies(
        policies, profile=args.profile, seed=args.seed, configs=_with_failures(args, _configs(args)), destination=destination,
        ledger=ledger, explore=True, shortest=_wants_shortest(args),
        workers=args.workers, progress=sys.stderr, explorer_bounds=bounds,
    )


def _as_json(reports: list[PolicyReport], differences=None) -> dict:
    return {
        "policies": {
            r.policy.name: {
                "summary": r.policy.summary,
                "verdicts": {name: cell.verdict.value for name, cell in r.cells.items()},
                "details": {name: cell.detail for name, cell in r.cells.items() if cell.detail},
                "counterexamples": {
                    name: counterexample.to_json(cell.counterexample)
                    for name, cell in r.cells.items()
                    if cell.counterexample
                },
                "dangers_reached": {
                    config.describe(): dict(counter) for config, counter in r.reached.items()
                },
                "engines": _engines_json(r),
                "seconds": round(r.seconds, 3),
            }
            for r in reports
        },
        "differences_from_expected": [
            {"policy": d.policy, "invariant": d.invariant,
             "expected": d.expected.value if d.expected else None, "observed": d.observed.value}
            for d in differences or []
        ],
    }


def _engines_json(report: PolicyReport) -> dict:
    """Each engine's own word per cell, so that a reader (or a test) can see which backs the verdict."""
    engines = {
        "hypothesis": {
            "verdicts": {name: v.value for name, v in (report.hypothesis_verdicts or {
                n: c.verdict for n, c in report.cells.items()}).items()},
            "examples": report.examples,
        }
    }
    for index, found in enumerate(report.explorations):
        # "explorer" is the first bound's run; "explorer_bounds" every bound's, in order.
        run = {
            "bound": describe_bound(found.config),
            "verdicts": {name: item.outcome.value for name, item in found.results.items()},
            "states": found.states,
            "exhausted": found.exhausted,
            "unfaithful": found.unfaithful,
            "faithfulness_checks": found.faithfulness_checks,
            "renamings_checked": found.renamings_checked,
            "policy_calls_checked": found.policy_calls_checked,
            "whole_worlds_because": found.whole_worlds_because,
            "dangers_reached": {name: found.reached[name] for name in sorted(found.reached)},
            "seconds": round(found.seconds, 3),
        }
        if index == 0:
            engines["explorer"] = run
        engines.setdefault("explorer_bounds", []).append(run)
    return engines


def _report(reports: list[PolicyReport], args, differences, out: Path, specs: PlugInSpecs | None = None) -> str:
    """Write the counterexamples (replacing each judged policy's old ones), print the table and the steps."""
    written = write_counterexamples(reports, out, specs)
    if args.json:
        text = json.dumps(_as_json(reports, differences), indent=2)
    else:
        text = report_text(reports, out if written else None)
    print(text)
    return text


def cmd_verdicts(args) -> int:
    started = time.perf_counter()
    if args.shortest and args.backend:
        raise BadInput("--shortest runs the explorer, which works in memory only; drop --shortest or --backend")
    expected_path = Path(args.expected) if args.expected else EXPECTED_FILE
    expected = load_expected(expected_path)
    names = list(dict.fromkeys(args.policy or POLICIES))  # a policy named twice is judged once
    policies = [load_policy(name) for name in names]
    _configs(args)  # bad numbers are refused before anything is made
    report_path = _report_path(args, output.EVIDENCE / _recorded_verdicts(args.backend))
    if args.backend:
        from fence.backends import ModelStorage

        storage = ModelStorage(args.backend)
        try:
            # The committed counterexamples are the in-memory ones: on a backend, --record
            # writes the report only, and the counterexamples go to a fresh directory.
            out = output.directory(args, "verdicts", None if args.backend else output.EVIDENCE / "counterexamples")
            reports = _run(policies, args, storage.destination_factory, storage.ledger_factory)
        finally:
            storage.close()
    else:
        out = output.directory(args, "verdicts", output.EVIDENCE / "counterexamples")
        reports = _run(policies, args)
    differences = compare(reports, expected)
    printed = _report(reports, args, differences, out)
    lines = [
        f"DIFFERS: {d.policy} / {d.invariant}: expected {d.expected.value if d.expected else 'no expectation'}, "
        f"observed {d.observed.value}"
        for d in differences
    ]
    if report_path is not None:
        from fence.base import evidence

        command = output.command_line("fence verdicts")
        summary = lines or [f"all {sum(len(r.cells) for r in reports)} verdicts match {expected_path.name}"]
        text = "\n".join([
            *evidence.header(command), f"# wall time {time.perf_counter() - started:.0f}s", "", printed, "", *summary,
        ]) + "\n"
        evidence.write_atomically(report_path, text)
    if differences:
        for line in lines:
            print(line, file=sys.stderr)
        return 1
    if not args.json:
        print(f"all {sum(len(r.cells) for r in reports)} verdicts match {expected_path.name}")
    return 0


def _recorded_verdicts(backend: str | None) -> str:
    """The evidence file ``verdicts --record`` writes: one per kind of backend."""
    if not backend:
        return "verdicts.txt"
    return "verdicts-postgres.txt" if backend.startswith("postgres") else "verdicts-sqlite.txt"


def _report_path(args, recorded: Path | None) -> Path | None:
    """``--report FILE`` (or, with ``--record``, the evidence file), checked writable now; None if neither."""
    if args.report:
        return output.writable_file(Path(args.report), "--report")
    if getattr(args, "record", False) and recorded is not None:
        return output.writable_file(output.in_evidence(recorded), "--record")
    return None


def _plug_ins(args) -> tuple[JanitorPolicy, object, object, PlugInSpecs]:
    """The policy, destination factory and ledger factory named on the command line, and their specs."""
    policy = load_policy(args.policy)
    destination = load_destination(args.destination) if args.destination else None
    ledger = load_ledger(args.ledger) if args.ledger else None
    specs = PlugInSpecs(
        None if args.policy in POLICIES else absolute(args.policy), absolute(args.destination), absolute(args.ledger),
    )
    return policy, destination, ledger, specs


def exit_status(verdicts) -> int:
    """One exit status for check and explore (see the module docstring)."""
    verdicts = set(verdicts)
    if Verdict.DISAGREE in verdicts:
        return EXIT_DISAGREE
    if Verdict.ERROR in verdicts:
        return EXIT_BAD_INPUT
    if Verdict.VIOLATED in verdicts:
        return EXIT_VIOLATED
    if verdicts == {Verdict.PROVED}:
        return EXIT_PROVED
    return EXIT_UNDETERMINED


def cmd_check(args) -> int:
    args.explorer_bound = args.explorer_bound or CHECK_BOUNDS
    policy, destination, ledger, specs = _plug_ins(args)
    _configs(args)  # bad numbers are refused before anything is made
    out = output.directory(args, "check")
    reports = _run([policy], args, destination, ledger)
    _report(reports, args, [], out, specs)
    cells = reports[0].cells
    for name, cell in cells.items():
        if cell.verdict is Verdict.ERROR:
            print(f"fence: checking {reports[0].policy.name}: {cell.detail}", file=sys.stderr)
            break
    for name, cell in cells.items():
        if cell.verdict is Verdict.DISAGREE:
            print(f"fence: BUG IN FENCE: {name}: {cell.detail}; please report it with the counterexample", file=sys.stderr)
    return exit_status(cell.verdict for cell in cells.values())


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # No abbreviations: '--lease' must not quietly mean '--lease-seconds' (one meaning per name).
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def _print_message(self, message, file=None):
        # argparse swallows a failed write; a closed pipe must reach main (exit 141), as for any output.
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str):  # one line and exit 2, as for every bad input
        self.exit(2, f"fence: {message} (see {self.prog} --help)\n")


class _LeaseInTicks(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(
            "--lease is in model ticks (check, verdicts, explore); here the lease is on the real clock: "
            "use --lease-seconds S"
        )


def _seconds_not_ticks(parser) -> None:
    """``--lease`` means ticks everywhere; where the lease is real seconds, say so instead of guessing."""
    parser.add_argument("--lease", action=_LeaseInTicks, help=argparse.SUPPRESS)


FAILURES_HELP = (
    "workers may also fail: raise before their effect, after it or on a refused commit, and report the "
    "failure to the ledger, whose reservation the janitor then settles as an expired one"
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fence", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fence {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p, record: str | None):
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        output.add_options(p, record=record, out_help="where counterexamples go")
        p.add_argument("--profile", choices=PROFILES, default="default", help="search effort")
        p.add_argument("--seed", type=int, help="a random seed instead of the derandomised default")
        p.add_argument("--workers", type=arguments.workers, default=2, help="processes to judge policies in")
        p.add_argument("--capacity", type=arguments.model_size, help="units (default: 1 unit/1 job and 2 units/2 jobs)")
        p.add_argument("--jobs", type=arguments.model_size, help="jobs (at most --capacity)")
        p.add_argument("--lease", type=arguments.non_negative, help="lease in ticks (at least 1)")
        p.add_argument("--failures", action="store_true", help=FAILURES_HELP)

    verdicts = sub.add_parser("verdicts", help="the verdict matrix of the built-in policies")
    common(verdicts, "counterexamples into evidence/counterexamples/, the report into evidence/verdicts.txt "
                     "(on a backend: the report only, evidence/verdicts-sqlite.txt or -postgres.txt)")
    verdicts.add_argument("--policy", action="append", help="only this policy (repeatable)")
    verdicts.add_argument("--expected", help="expected-verdicts file (default: the committed one)")
    verdicts.add_argument(
        "--shortest", action=argparse.BooleanOptionalAction, default=None,
        help="replace each minimised counterexample by the explorer's shortest, a breadth-first search no "
        "deeper than it (the default in memory; --no-shortest keeps fence's minimised one and is faster)",
    )
    verdicts.add_argument("--report", metavar="FILE", help="also write the output, with the evidence header, to FILE")
    verdicts.add_argument(
        "--backend", metavar="URL",
        help="run every model world on this backend (sqlite:///PATH.db, postgresql://...; its fence tables are emptied)",
    )
    verdicts.set_defaults(handler=cmd_verdicts)

    check = sub.add_parser("check", help="both engines on your policy, destination and ledger")
    common(check, None)  # a user's plug-in is never the repository's evidence
    check.add_argument("policy", help="a built-in name, MODULE:ATTR or FILE.py:ATTR")
    check.add_argument("--destination", help="MODULE:ATTR or FILE.py:ATTR of your destination factory (called with the Guards)")
    check.add_argument("--ledger", help="MODULE:ATTR or FILE.py:ATTR of your ledger factory (called with the capacity)")
    check.add_argument(
        "--explorer-bound", action="append", type=arguments.explorer_bound, metavar="UxJxA:H",
        help="prove within this bound, units x jobs x attempts : horizon (repeatable; default: "
        + " and ".join(f"{b.capacity}x{b.jobs}x{b.max_attempts}:{b.horizon}" for b in CHECK_BOUNDS)
        + ", jobs symmetric where there are two)",
    )
    check.set_defaults(handler=cmd_check, explorer_bound=None)

    probe = sub.add_parser("probe-sdk", help="check the strands-agents behaviours fence relies on")
    probe.set_defaults(handler=_cmd_probe_sdk)

    explore = sub.add_parser("explore", help="walk every interleaving of one policy within bounds")
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

    bench = sub.add_parser("bench", help="benchmarks that write their figures into evidence/")
    bench.add_argument(
        "what", choices=["detection", "counterexamples", "explorer", "fleet", "suite", "guard"],
        help="detection: each expected violation over many seeds; counterexamples: time to a first, "
        "minimised and proved-shortest counterexample per violated cell; explorer: states/s and time to "
        "exhaust each bound; fleet: worker processes on a database under SIGKILLs (and a restart); "
        "suite: the test suite's wall time; guard: what fence.guard costs per job on each shipped queue's "
        "own worker (evidence/guard-cost.txt)",
    )
    bench.add_argument("--policy", action="append",
                       help="only this policy (repeatable); explorer: also a user's MODULE:ATTR or FILE.py:ATTR, "
                       "and one named '<built-in> copy' is set beside that built-in")
    bench.add_argument("--destination", help="explorer: every row with this destination of yours (MODULE:ATTR or FILE.py:ATTR)")
    bench.add_argument("--ledger", help="explorer: every row with this ledger of yours (MODULE:ATTR or FILE.py:ATTR)")
    bench.add_argument("--time-budget", type=arguments.positive_seconds, default=60.0, help="explorer: seconds per bound")
    bench.add_argument("--seeds", type=arguments.positive, default=20, help="random seeds (default 20)")
    bench.add_argument("--profile", choices=PROFILES, default="default", help="search effort per seed")
    bench.add_argument("--workers", type=arguments.workers,
                       help="processes (default 2; fleet: 8 workers; guard: the library's worker processes)")
    output.add_options(
        bench, record="evidence/<what>.txt (fleet: evidence/fleet-<backend>.txt)",
        out_help="where <what>.txt goes (fleet: fleet-<backend>.txt; explorer: and its .png)",
        report="write the figures to FILE instead (explorer: and its plot beside it, as .png)",
    )
    explorer = bench.add_argument_group("explorer")
    explorer.add_argument(
        "--bound", action="append", type=arguments.explorer_bound, metavar="UxJxA:H",
        help="explorer: only this bound, units x jobs x attempts : horizon (e.g. 2x2x2:2; repeatable; "
        "default: the growing bounds of evidence/explorer.txt)",
    )
    explorer.add_argument("--symmetry", choices=["both", "on", "off"], default="both",
                          help="explorer: rows with jobs symmetric, without, or both (default; one job: without)")
    explorer.add_argument("--repeat", type=arguments.repeats, metavar="N",
                          help="explorer: explore each row N times, each in a fresh process, and report the median "
                          "run with the range (default 1); guard: rounds per queue, medians reported (default 3)")
    explorer.add_argument(
        "--engines", type=arguments.engines, metavar="ENGINE,...",
        help="explorer: a row per engine, of one-process, partitioned (2 processes owning states by fingerprint) "
        "and ray (2 actors of a local Ray cluster; needs fence[ray]); default one-process",
    )
    explorer.add_argument("--explorer-workers", type=arguments.workers, default=1,
                          help="explorer: processes sharing each exploration's levels, even where one is faster "
                          "(rows then run one at a time)")
    fleet = bench.add_argument_group("fleet")
    fleet.add_argument("--backend", choices=["sqlite", "postgres"], help="fleet: the database (default sqlite)")
    fleet.add_argument("--url", help="fleet: this backend URL instead (its fence tables are emptied)")
    fleet.add_argument("--jobs", type=arguments.positive,
                       help="fleet: jobs, and units of quota (default 2000); guard: jobs per run (default 500)")
    fleet.add_argument("--kill-every", type=arguments.non_negative_seconds, default=0.5,
                       help="fleet: SIGKILL a random busy worker every SECONDS (default 0.5; 0: never)")
    fleet.add_argument("--restart-db", action=argparse.BooleanOptionalAction, default=None,
                       help="fleet: restart PostgreSQL once half the jobs are done (default: on for postgres)")
    fleet.add_argument("--lease-seconds", type=arguments.positive_seconds, help="fleet: lease in seconds (default 1.0)")
    _seconds_not_ticks(bench)
    fleet.add_argument("--janitors", type=arguments.workers, default=2, help="fleet: janitor processes (default 2)")
    fleet.add_argument("--seed", type=int, default=0, help="fleet: seed for the kills and the work times")
    fleet.add_argument("--time-limit", type=arguments.positive_seconds, default=600.0, help="fleet: give up after SECONDS per policy")
    from fence.bench.guard_cost import RUNNERS

    guard = bench.add_argument_group("guard")
    guard.add_argument("--queue", action="append", choices=list(RUNNERS),
                       help="guard: only this queue (repeatable; default every shipped queue)")
    guard.add_argument("--work-ms", type=arguments.positive_milliseconds, metavar="MS",
                       help="guard: each task first works MS milliseconds (a sleep), in both modes; the record goes to "
                       "guard-cost-work-<MS>ms.txt (default: no work, guard-cost.txt: the cheapest task)")
    guard.add_argument("--postgres", metavar="URL",
                       help="guard: PostgreSQL for the PostgreSQL queues and every effect (default: $FENCE_POSTGRES_URL, "
                       "else a private cluster started and stopped with scripts/postgres.sh); its bench tables are emptied")
    guard.add_argument("--redis", metavar="URL",
                       help="guard: Redis for the Redis queues (default: $FENCE_REDIS_URL, else a private server started "
                       "and stopped with scripts/redis.sh); its database is emptied (FLUSHDB)")
    bench.set_defaults(handler=cmd_bench)

    from fence.cli import experiments_command  # the real-clock commands (threads, sleeps)

    experiments = sub.add_parser("experiments", help="the article's experiments on threads and the real clock")
    experiments_command.experiments_arguments(experiments)
    _seconds_not_ticks(experiments)
    experiments.set_defaults(handler=experiments_command.cmd_experiments)

    replay = sub.add_parser("replay", help="play a saved counterexample: fence's model on real threads, a target's on its real system")
    experiments_command.replay_arguments(replay)
    replay.set_defaults(handler=experiments_command.cmd_replay)

    db = sub.add_parser("db", help="a backend's fence tables: check them, or empty them")
    db.add_argument("action", choices=["check", "reset"], help="check: schema version, clock, counts; reset: empty")
    db.add_argument("url", help="memory:, sqlite:///PATH.db or postgresql://USER@HOST:PORT/DBNAME")
    db.set_defaults(handler=cmd_db)

    from fence.cli import targets_command  # real job systems under the machines (fence.targets)

    targets = sub.add_parser("targets", help="real job systems under the machines, as shipped and with fence.guard")
    targets_command.arguments(targets)
    targets.set_defaults(handler=targets_command.cmd_targets)
    return parser


def cmd_db(args) -> int:
    """check: print the schema version, the database's clock and the row counts; reset: empty."""
    from fence.backends import SCHEMA_VERSION, open_store, reset_backend

    if args.action == "reset":
        reset_backend(args.url)
        print(f"{args.url}: fence's tables are empty (schema version {SCHEMA_VERSION})")
        return 0
    if args.url.startswith("sqlite://"):
        from fence.backends import sqlite_path

        path = sqlite_path(args.url)
        if not path.is_file():  # opening it would create it: check is not the command that makes one
            what = "is not a file" if path.exists() else "does not exist"
            raise BadInput(f"{args.url}: the database file {path} {what}; 'fence db reset {args.url}' creates one")
    store = open_store(args.url)
    if store is None:
        print("memory: nothing is stored; the ledger lives and dies with its process")
        return 0
    try:
        counts = ", ".join(f"{table.removeprefix('fence_')} {n}" for table, n in store.counts().items())
        print(f"{args.url}: schema version {SCHEMA_VERSION}, database clock {store.clock():.3f}, {counts}")
    finally:
        store.close()
    return 0


def _level_line(found) -> None:
    """One line per breadth-first level on stderr, with --json too (stdout holds only the report)."""
    from fence.explore.walk import level_line

    print(level_line(found), file=sys.stderr, flush=True)


def cmd_explore(args) -> int:
    """Exit 0: every invariant proved; 1: one violated; 3: a budget ran out first."""
    from fence.explore import walk

    policy, destination, ledger, specs = _plug_ins(args)
    horizon = args.horizon if args.horizon is not None else walk.EXPLORER_HORIZON
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
        from fence.explore.partitioned import ray_problem

        if problem := ray_problem(args.ray):
            raise BadInput(problem)
    report_path = _report_path(args, None)
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
            found = walk.explore_with_workers(
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
        text = "\n".join([*evidence.header(command), "", walk.report_text(found)]) + "\n"
        evidence.write_atomically(report_path, text)
    if args.json:
        print(json.dumps(walk.to_json(found), indent=2))
    else:
        print(walk.report_text(found))
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
        walk.Outcome.PROVED: EXIT_PROVED, walk.Outcome.VIOLATED: EXIT_VIOLATED,
        walk.Outcome.UNDETERMINED: EXIT_UNDETERMINED,
    }[outcome]


def cmd_bench(args) -> int:
    from fence.bench import benchmarks

    if args.what != "guard" and (args.queue or args.postgres or args.redis or args.work_ms):
        raise BadInput(f"--queue, --work-ms, --postgres and --redis are for 'fence bench guard', not {args.what}")
    if args.what == "guard":
        from fence.bench import guard_cost

        if args.backend or args.url or args.policy:
            raise BadInput("--backend, --url and --policy are not for 'fence bench guard': it runs every shipped "
                           "queue on its own server (choose with --queue)")
        work_ms = args.work_ms or 0.0
        out = output.report_file(args, "bench guard", f"guard-cost-work-{work_ms:g}ms.txt" if work_ms else "guard-cost.txt")
        return guard_cost.guard(
            args.queue or (), args.workers or 2, args.jobs or 500, args.repeat or 3,
            {"postgres": args.postgres, "redis": args.redis}, output.command_line("fence bench guard"), out, work_ms,
        )
    if args.what == "fleet":
        from fence.cli.experiments_command import cmd_fleet

        return cmd_fleet(args)
    if args.backend or args.url:
        raise BadInput(f"--backend and --url are for 'fence bench fleet', not {args.what}")
    args.workers = args.workers or 2

    examples, steps, _shrink = PROFILES[args.profile]
    command = output.command_line(f"fence bench {args.what}")
    names = args.policy or list(POLICIES)
    if args.what == "explorer" and args.engines and "ray" in args.engines.split(","):
        from fence.explore.partitioned import ray_problem

        if problem := ray_problem("local"):
            raise BadInput(problem)
    if args.what != "explorer" and args.engines:
        raise BadInput(f"--engines is for 'fence bench explorer', not {args.what}")
    if args.what == "explorer":
        # A user's policy is benchmarked like a built-in: loaded here once to refuse a bad spec
        # in one line, then again in each row's own process (by an absolute path).
        names = [name if name in POLICIES else absolute(name) for name in names]
        for name in names:
            load_policy(name)
        if args.destination:
            load_destination(args.destination)
        if args.ledger:
            load_ledger(args.ledger)
    elif args.destination or args.ledger:
        raise BadInput(f"--destination and --ledger are for 'fence bench explorer', not {args.what}")
    unknown = [name for name in names if name not in POLICIES and args.what != "explorer"]
    if unknown:
        raise BadInput(f"unknown policy {unknown[0]!r}: use one of {', '.join(POLICIES)}")
    out = output.report_file(args, f"bench {args.what}", f"{args.what}.txt")
    if args.what == "explorer":
        return benchmarks.explorer(
            names, args.time_budget, args.workers, command, out, bounds=args.bound or benchmarks.EXPLORER_BOUNDS,
            symmetry=args.symmetry, explorer_workers=args.explorer_workers, repeat=args.repeat or 1,
            plugins=(absolute(args.destination), absolute(args.ledger)),
            engines=[benchmarks.ENGINES[name] for name in args.engines.split(",")] if args.engines else (benchmarks.ONE_PROCESS,),
        )
    if args.what == "counterexamples":
        return benchmarks.counterexamples(args.seeds, examples, steps, args.workers, command, out, args.policy or ())
    if args.what == "suite":
        return benchmarks.suite(command, out)
    return benchmarks.detection(args.seeds, examples, steps, args.workers, command, out, args.policy or ())


def _cmd_probe_sdk(args) -> int:
    try:
        from fence.agents.cli import cmd_probe_sdk
    except ImportError:  # strands-agents is an extra: one line and exit 2, as for bad input
        print("fence: probe-sdk needs strands-agents: pip install -e '.[agents]'", file=sys.stderr)
        return 2
    return cmd_probe_sdk(args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fence")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit:  # --help, --version, a usage error: what argparse printed must reach a reader
            sys.stdout.flush()
            raise
        status = args.handler(args)
        sys.stdout.flush()  # a reader that went away is found here, not in the interpreter's last flush
        return status
    except (BadInput, BackendError, PluginBroken) as error:
        print(f"fence: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Workers ignore SIGINT and were stopped on the way out (fence.base.pool); every
        # file is written whole or not at all (fence.base.evidence.write_atomically).
        print("fence: interrupted; no file was left half-written", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`fence verdicts --json | head -1`): nothing more to say to it.
        # Point stdout at nothing so that the interpreter's final flush is quiet too.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a tool killed by SIGPIPE: never 0, which would hide a verdict that went unread


def command() -> int:
    """The ``fence`` command (and ``python -m fence``): ``main()``, then an exit that waits on nothing after Ctrl-C.

    After Ctrl-C the workers are stopped and every file is whole, so there is
    nothing left to wait for; but the interpreter's own exit joins the process
    pool's manager thread, and in one CI run that join outlived the 30 s the
    Ctrl-C test allows, after the "interrupted" line was printed. Leaving at
    once keeps a Ctrl-C a Ctrl-C. ``main()`` itself returns, for callers in a
    process of their own (tests, the pytest plugin).
    """
    status = main()
    if status == 130:
        import os

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a reader that went away: nothing more to tell it
                pass
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(command())
