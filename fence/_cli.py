"""The ``fence`` command: verdicts for the built-in policies, or a check of yours.

Exit status: 0 when the verdicts are what they should be (``verdicts``: equal to
the committed expected file; ``check``: the policy holds every invariant;
``explore``: every invariant proved within the bounds), 1 when not, 3 when
``explore`` ran out of its budget of states or time (undetermined, never a
pass), 2 for bad input -- always one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Sequence

from fence import _counterexample
from fence._errors import BackendError, BadInput
from fence._invariants import INVARIANTS
from fence._policies import POLICIES, JanitorPolicy, policy_problem
from fence._verdicts import (
    EXPECTED_FILE,
    DEFAULT_CONFIGS,
    ConfigResult,
    PolicyReport,
    Verdict,
    combine,
    compare,
    load_expected,
    profile_settings,
    survey_config,
)
from fence._world import ModelConfig

PROFILES = {
    # name: (max_examples per Hypothesis run, steps per example, Hypothesis shrinks too)
    # One run per policy and configuration; "default" finishes within a minute
    # on 2 cores (evidence/verdicts.txt: 45 s). 300 examples missed
    # no_silent_replay in 3 of 40 random seeds; at 400, 1 miss in 400 promised
    # finds (evidence/detection.txt).
    "quick": (60, 25, False),
    "default": (400, 30, False),
    "thorough": (2000, 50, True),
}


def _load_attribute(spec: str, what: str):
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise BadInput(f"{what} {spec!r}: write it as MODULE:ATTR, e.g. mypkg.policies:MyPolicy")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise BadInput(f"{what} {spec!r}: no file {path}")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            if "" not in sys.path:
                sys.path.insert(0, "")  # let a module in the current directory import
            module = importlib.import_module(module_name)
    except BadInput:
        raise
    except Exception as error:  # any import failure is the user's to fix, not a crash
        raise BadInput(
            f"{what} {spec!r}: importing {module_name} failed ({type(error).__name__}: {error}); "
            "check the module name and that it is on PYTHONPATH or in the current directory"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise BadInput(f"{what} {spec!r}: module {module_name} has no attribute {attribute!r}") from None


def load_policy(spec: str) -> JanitorPolicy:
    if spec in POLICIES:
        return POLICIES[spec]
    if ":" not in spec:
        raise BadInput(f"unknown policy {spec!r}: use one of {', '.join(POLICIES)} or MODULE:ATTR")
    candidate = _load_attribute(spec, "policy")
    if isinstance(candidate, type):
        try:
            candidate = candidate()
        except Exception as error:
            raise BadInput(f"policy {spec!r}: {candidate.__name__}() failed ({error}); it must build with no arguments") from None
    problem = policy_problem(candidate)
    if problem:
        raise BadInput(f"policy {spec!r} is not a janitor policy: {problem}")
    return candidate


def load_destination(spec: str):
    factory = _load_attribute(spec, "destination")
    if not callable(factory):
        raise BadInput(f"destination {spec!r} must be a class or function taking the policy's Guards")
    return factory


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


def _survey_one(arguments) -> ConfigResult:
    policy, config, options = arguments
    return survey_config(policy, config, **options)


def _wants_shortest(args) -> bool:
    """``verdicts`` asks the explorer for shortest counterexamples unless told not to.

    The explorer runs in memory only, so on a backend the default is off; ``check``
    has no such option and runs a user's destination, which the explorer may
    not be able to copy.
    """
    chosen = getattr(args, "shortest", None)
    if chosen is not None:
        return chosen
    return hasattr(args, "shortest") and getattr(args, "backend", None) is None


def _run(policies: list[JanitorPolicy], args, destination=None, ledger=None) -> list[PolicyReport]:
    examples, steps, shrink = PROFILES[args.profile]
    options = {
        "run_settings": profile_settings(examples, steps, derandomize=args.seed is None),
        "seed": args.seed,
        "destination_factory": destination,
        "ledger_factory": ledger,
        "hypothesis_shrink": shrink,
        "explorer_shortest": _wants_shortest(args),
    }
    configs = _configs(args)
    # One task per policy and configuration, so both cores stay busy to the end.
    tasks = [(policy, config, options) for policy in policies for config in configs]
    pending: dict[str, list[ConfigResult]] = {policy.name: [] for policy in policies}
    by_name = {policy.name: policy for policy in policies}
    reports: dict[str, PolicyReport] = {}

    def finished(policy: JanitorPolicy, result: ConfigResult) -> None:
        pending[policy.name].append(result)
        if len(pending[policy.name]) == len(configs):
            report = combine(by_name[policy.name], pending[policy.name])
            reports[policy.name] = report
            _progress_line(sys.stderr, len(reports), len(policies), report)

    # A user's destination factory may not pickle: judge it in this process. A
    # backend's ModelStorage pickles into a storage of each worker's own.
    if args.workers > 1 and len(tasks) > 1 and (destination is None or ledger is not None):
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            for (policy, _config, _options), result in zip(tasks, pool.map(_survey_one, tasks)):
                finished(policy, result)
    else:
        for task in tasks:
            finished(task[0], _survey_one(task))
    return [reports[policy.name] for policy in policies]


def _progress_line(stream, index: int, total: int, report: PolicyReport) -> None:
    violated = sum(1 for c in report.cells.values() if c.verdict is Verdict.VIOLATED)
    stream.write(
        f"[{index}/{total}] {report.policy.name}: {violated} of {len(INVARIANTS)} invariants "
        f"violated ({report.examples} Hypothesis examples, {report.seconds:.1f}s)\n"
    )
    stream.flush()


def table(reports: list[PolicyReport]) -> str:
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
        "  violated(n): a counterexample of n chosen steps (Hypothesis found it; fence cut it down on the "
        "same model; unless --no-shortest, the explorer searched for a shorter one: each counterexample "
        "below says which)"
    )
    return "\n".join(lines)


def _as_json(reports: list[PolicyReport], differences=None) -> dict:
    return {
        "policies": {
            r.policy.name: {
                "summary": r.policy.summary,
                "verdicts": {name: cell.verdict.value for name, cell in r.cells.items()},
                "details": {name: cell.detail for name, cell in r.cells.items() if cell.detail},
                "counterexamples": {
                    name: _counterexample.to_json(cell.counterexample)
                    for name, cell in r.cells.items()
                    if cell.counterexample
                },
                "dangers_reached": {
                    config.describe(): dict(counter) for config, counter in r.reached.items()
                },
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


def _report(reports: list[PolicyReport], args, differences) -> str:
    """Write the counterexamples, print the table and the steps; return what was printed."""
    written: list[Path] = []
    out = Path(args.out)
    for report in reports:
        for cell in report.cells.values():
            if cell.counterexample:
                written.extend(_counterexample.write(cell.counterexample, out))
    if args.json:
        text = json.dumps(_as_json(reports, differences), indent=2)
        print(text)
        return text
    parts = [table(reports)]
    for report in reports:
        for name, cell in report.cells.items():
            if cell.counterexample:
                parts += ["", _counterexample.steps_text(cell.counterexample)]
            elif cell.detail:
                parts.append(f"\n{report.policy.name} / {name}: {cell.verdict.value}: {cell.detail}")
    if written:
        parts.append(f"\ncounterexamples written to {out}/ (.txt steps, .mmd Mermaid, .json replayable)")
    text = "\n".join(parts)
    print(text)
    return text


def cmd_verdicts(args) -> int:
    started = time.perf_counter()
    expected_path = Path(args.expected) if args.expected else EXPECTED_FILE
    expected = load_expected(expected_path)
    names = args.policy or list(POLICIES)
    policies = [load_policy(name) for name in names]
    if args.backend:
        from fence.backends import ModelStorage

        storage = ModelStorage(args.backend)
        try:
            reports = _run(policies, args, storage.destination_factory, storage.ledger_factory)
        finally:
            storage.close()
    else:
        reports = _run(policies, args)
    differences = compare(reports, expected)
    printed = _report(reports, args, differences)
    lines = [
        f"DIFFERS: {d.policy} / {d.invariant}: expected {d.expected.value if d.expected else 'no expectation'}, "
        f"observed {d.observed.value}"
        for d in differences
    ]
    if args.report:
        from fence import _evidence

        command = "fence " + " ".join(sys.argv[1:]) if Path(sys.argv[0]).name == "fence" else "fence verdicts"
        summary = lines or [f"all {sum(len(r.cells) for r in reports)} verdicts match {expected_path.name}"]
        text = "\n".join([
            *_evidence.header(command), f"# wall time {time.perf_counter() - started:.0f}s", "", printed, "", *summary,
        ]) + "\n"
        _evidence.write_atomically(Path(args.report), text)
    if differences:
        for line in lines:
            print(line, file=sys.stderr)
        return 1
    if not args.json:
        print(f"all {sum(len(r.cells) for r in reports)} verdicts match {expected_path.name}")
    return 0


def cmd_check(args) -> int:
    policy = load_policy(args.policy)
    destination = load_destination(args.destination) if args.destination else None
    reports = _run([policy], args, destination)
    _report(reports, args, [])
    cells = reports[0].cells.values()
    if any(c.verdict is Verdict.ERROR for c in cells):
        return 1
    return 0 if all(c.verdict is Verdict.HOLDS for c in cells) else 1


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a lease cannot be negative, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, as for every bad input
        self.exit(2, f"fence: {message} (see fence {self.prog.split()[-1]} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fence", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p):
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        p.add_argument("--out", default="evidence/counterexamples", help="where counterexamples go")
        p.add_argument("--profile", choices=PROFILES, default="default", help="search effort")
        p.add_argument("--seed", type=int, help="a random seed instead of the derandomised default")
        p.add_argument("--workers", type=_positive, default=2, help="processes to judge policies in")
        p.add_argument("--capacity", type=_positive, help="units (default: 1 unit/1 job and 2 units/2 jobs)")
        p.add_argument("--jobs", type=_positive, help="jobs (at most --capacity)")
        p.add_argument("--lease", type=_non_negative, help="lease in ticks (at least 1)")

    verdicts = sub.add_parser("verdicts", help="the verdict matrix of the built-in policies")
    common(verdicts)
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

    check = sub.add_parser("check", help="run the machines on your policy: MODULE:ATTR")
    common(check)
    check.add_argument("policy", help="MODULE:ATTR (or a built-in name)")
    check.add_argument("--destination", help="MODULE:ATTR of your destination factory")
    check.set_defaults(handler=cmd_check)

    probe = sub.add_parser("probe-sdk", help="check the strands-agents behaviours fence relies on")
    probe.set_defaults(handler=_cmd_probe_sdk)

    explore = sub.add_parser("explore", help="walk every interleaving of one policy within bounds")
    explore.add_argument("--policy", default="abandon-fenced", help="a built-in name or MODULE:ATTR")
    explore.add_argument("--capacity", type=_positive, default=1, help="units (default 1)")
    explore.add_argument("--jobs", type=_positive, help="jobs (default: --capacity)")
    explore.add_argument("--attempts", type=_positive, default=3, help="attempts per job (default 3)")
    explore.add_argument("--horizon", type=_zero_or_more, help="clock horizon in ticks (default: the explorer's)")
    explore.add_argument("--lease", type=_positive, default=ModelConfig.lease, help="lease in ticks")
    explore.add_argument("--max-depth", type=_zero_or_more, help="at most this many chosen steps per run")
    explore.add_argument("--max-states", type=_positive, help="budget: stop (undetermined) after this many states")
    explore.add_argument("--time-budget", type=_positive_seconds, help="budget: stop (undetermined) after SECONDS")
    explore.add_argument("--symmetry", action="store_true", help="treat jobs as interchangeable names")
    explore.add_argument("--workers", type=_positive, default=1, help="processes to share each breadth-first level (2: both cores; a --max-states search runs in one)")
    explore.add_argument("--json", action="store_true", help="print machine-readable JSON")
    explore.add_argument("--out", default="evidence/counterexamples/explorer", help="where counterexamples go")
    explore.add_argument("--report", metavar="FILE", help="also write the report, with the evidence header, to FILE")
    explore.set_defaults(handler=cmd_explore)

    bench = sub.add_parser("bench", help="benchmarks that write their figures into evidence/")
    bench.add_argument(
        "what", choices=["detection", "counterexamples", "explorer", "fleet", "suite"],
        help="detection: each expected violation over many seeds; counterexamples: time to a first, "
        "minimised and proved-shortest counterexample per violated cell; explorer: states/s and time to "
        "exhaust each bound; fleet: worker processes on a database under SIGKILLs (and a restart); "
        "suite: the test suite's wall time",
    )
    bench.add_argument("--policy", action="append", help="only this built-in policy (repeatable)")
    bench.add_argument("--time-budget", type=_positive_seconds, default=60.0, help="explorer: seconds per bound")
    bench.add_argument("--seeds", type=_positive, default=20, help="random seeds (default 20)")
    bench.add_argument("--profile", choices=PROFILES, default="default", help="search effort per seed")
    bench.add_argument("--workers", type=_positive, help="processes (default 2; fleet: 8 workers)")
    bench.add_argument("--out", help="where the figures go (default evidence/<what>.txt; fleet: evidence/fleet-<backend>.txt)")
    fleet = bench.add_argument_group("fleet")
    fleet.add_argument("--backend", choices=["sqlite", "postgres"], help="fleet: the database (default sqlite)")
    fleet.add_argument("--url", help="fleet: this backend URL instead (its fence tables are emptied)")
    fleet.add_argument("--jobs", type=_positive, default=2000, help="fleet: jobs, and units of quota (default 2000)")
    fleet.add_argument("--kill-every", type=_non_negative_seconds, default=0.5,
                       help="fleet: SIGKILL a random busy worker every SECONDS (default 0.5; 0: never)")
    fleet.add_argument("--restart-db", action=argparse.BooleanOptionalAction, default=None,
                       help="fleet: restart PostgreSQL once half the jobs are done (default: on for postgres)")
    fleet.add_argument("--lease", type=_positive_seconds, help="fleet: lease in seconds (default 1.0)")
    fleet.add_argument("--janitors", type=_positive, default=2, help="fleet: janitor processes (default 2)")
    fleet.add_argument("--seed", type=int, default=0, help="fleet: seed for the kills and the work times")
    fleet.add_argument("--time-limit", type=_positive_seconds, default=600.0, help="fleet: give up after SECONDS per policy")
    bench.set_defaults(handler=cmd_bench)

    from fence import _experiments_cli  # the real-clock commands (threads, sleeps)

    experiments = sub.add_parser("experiments", help="the article's experiments on threads and the real clock")
    _experiments_cli.experiments_arguments(experiments)
    experiments.set_defaults(handler=_experiments_cli.cmd_experiments)

    replay = sub.add_parser("replay", help="play a saved counterexample on real threads")
    _experiments_cli.replay_arguments(replay)
    replay.set_defaults(handler=_experiments_cli.cmd_replay)

    db = sub.add_parser("db", help="a backend's fence tables: check them, or empty them")
    db.add_argument("action", choices=["check", "reset"], help="check: schema version, clock, counts; reset: empty")
    db.add_argument("url", help="memory:, sqlite:///PATH.db or postgresql://USER@HOST:PORT/DBNAME")
    db.set_defaults(handler=cmd_db)
    return parser


def cmd_db(args) -> int:
    """check: print the schema version, the database's clock and the row counts; reset: empty."""
    from fence.backends import SCHEMA_VERSION, open_store, reset_backend

    if args.action == "reset":
        reset_backend(args.url)
        print(f"{args.url}: fence's tables are empty (schema version {SCHEMA_VERSION})")
        return 0
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


def _zero_or_more(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"cannot be negative, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def cmd_explore(args) -> int:
    """Exit 0: every invariant proved; 1: one violated; 3: a budget ran out first."""
    from fence import _explore

    policy = load_policy(args.policy)
    horizon = args.horizon if args.horizon is not None else _explore.EXPLORER_HORIZON
    config = ModelConfig(
        capacity=args.capacity,
        jobs=args.jobs if args.jobs is not None else args.capacity,
        max_attempts=args.attempts,
        lease=args.lease,
        horizon=horizon,
    )
    problem = config.problem()
    if problem:
        raise BadInput(f"{problem}; fix --capacity/--jobs/--attempts/--lease")
    found = _explore.explore_with_workers(
        policy,
        config,
        workers=args.workers,
        max_depth=args.max_depth,
        max_states=args.max_states,
        time_budget=args.time_budget,
        symmetry=args.symmetry,
    )
    out = Path(args.out)
    written = []
    for item in found.results.values():
        if item.counterexample:
            written.extend(_counterexample.write(item.counterexample, out))
    if args.report:
        from fence import _evidence

        command = "fence " + " ".join(sys.argv[1:]) if Path(sys.argv[0]).name == "fence" else "fence explore"
        text = "\n".join([*_evidence.header(command), "", _explore.report_text(found)]) + "\n"
        _evidence.write_atomically(Path(args.report), text)
    if args.json:
        print(json.dumps(_explore.to_json(found), indent=2))
    else:
        print(_explore.report_text(found))
        for item in found.results.values():
            if item.counterexample:
                print()
                print(_counterexample.steps_text(item.counterexample))
        if written:
            print(f"\ncounterexamples written to {out}/ (.txt steps, .mmd Mermaid, .json replayable)")
    outcome = found.outcome()
    return {_explore.Outcome.PROVED: 0, _explore.Outcome.VIOLATED: 1, _explore.Outcome.UNDETERMINED: 3}[outcome]


def _non_negative_seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"cannot be negative, got {text}")
    return value


def cmd_bench(args) -> int:
    from fence import _bench

    if args.what == "fleet":
        from fence._experiments_cli import cmd_fleet

        return cmd_fleet(args)
    if args.backend or args.url:
        raise BadInput(f"--backend and --url are for 'fence bench fleet', not {args.what}")
    args.workers = args.workers or 2

    examples, steps, _shrink = PROFILES[args.profile]
    out = Path(args.out or f"evidence/{args.what}.txt")
    command = "fence " + " ".join(sys.argv[1:]) if Path(sys.argv[0]).name == "fence" else f"fence bench {args.what}"
    names = args.policy or list(POLICIES)
    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        raise BadInput(f"unknown policy {unknown[0]!r}: use one of {', '.join(POLICIES)}")
    if args.what == "explorer":
        return _bench.explorer(names, args.time_budget, args.workers, command, out)
    if args.what == "counterexamples":
        return _bench.counterexamples(args.seeds, examples, steps, args.workers, command, out, args.policy or ())
    if args.what == "suite":
        return _bench.suite(command, out)
    return _bench.detection(args.seeds, examples, steps, args.workers, command, out, args.policy or ())


def _cmd_probe_sdk(args) -> int:
    try:
        from fence.agents.cli import cmd_probe_sdk
    except ImportError:  # strands-agents is an extra: one line and exit 2, as for bad input
        print("fence: probe-sdk needs strands-agents: pip install -e '.[agents]'", file=sys.stderr)
        return 2
    return cmd_probe_sdk(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (BadInput, BackendError) as error:
        print(f"fence: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
