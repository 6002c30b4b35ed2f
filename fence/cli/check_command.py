"""``fence verdicts`` and ``fence check``: both engines on the built-in policies, or on a user's plug-ins.

Also the exit status ``check`` and ``explore`` share (``exit_status``, the
``EXIT_*`` codes; listed in ``fence.cli.main``'s docstring), and what
``explore`` reuses from here: the plug-ins named on the command line
(``plug_ins``) and the ``--report``/``--record`` file (``requested_report``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from fence.cli import arguments
from fence.search import counterexample
from fence.base import output
from fence.checking.checking import PROFILES, check_policies, report_text, write_counterexamples
from fence.base.errors import BadInput
from fence.model.plugins import PlugInSpecs, absolute, load_destination, load_ledger, load_policy
from fence.model.policies import POLICIES, JanitorPolicy
from fence.checking.verdicts import CHECK_BOUNDS, DEFAULT_CONFIGS, EXPLORER_BOUND, PolicyReport, Verdict, describe_bound
from fence.checking.expected import EXPECTED_FILE, compare, load_expected
from fence.model.world import ModelConfig

EXIT_PROVED, EXIT_VIOLATED, EXIT_BAD_INPUT, EXIT_UNDETERMINED, EXIT_DISAGREE = 0, 1, 2, 3, 4

# Help text: check, verdicts and explore all take --failures.
FAILURES_HELP = (
    "workers may also fail: raise before their effect, after it or on a refused commit, and report the "
    "failure to the ledger, whose reservation the janitor then settles as an expired one"
)


def common_arguments(p, record: str | None) -> None:
    """The options ``verdicts`` and ``check`` share; ``record``: what ``--record`` writes (None: no ``--record``)."""
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    output.add_options(p, record=record, out_help="where counterexamples go")
    p.add_argument("--profile", choices=PROFILES, default="default", help="search effort")
    p.add_argument("--seed", type=int, help="a random seed instead of the derandomised default")
    p.add_argument("--workers", type=arguments.workers, default=2, help="processes to judge policies in")
    p.add_argument("--capacity", type=arguments.model_size, help="units (default: 1 unit/1 job and 2 units/2 jobs)")
    p.add_argument("--jobs", type=arguments.model_size, help="jobs (at most --capacity)")
    p.add_argument("--lease", type=arguments.non_negative, help="lease in ticks (at least 1)")
    p.add_argument("--failures", action="store_true", help=FAILURES_HELP)


def verdicts_arguments(verdicts) -> None:
    """``fence verdicts``'s options."""
    common_arguments(verdicts, "counterexamples into evidence/counterexamples/, the report into evidence/verdicts.txt "
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


def check_arguments(check) -> None:
    """``fence check``'s options."""
    common_arguments(check, None)  # a user's plug-in is never the repository's evidence
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
    report_path = requested_report(args, output.EVIDENCE / _recorded_verdicts(args.backend))
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


def requested_report(args, recorded: Path | None) -> Path | None:
    """``--report FILE`` (or, with ``--record``, the evidence file), checked writable now; None if neither."""
    if args.report:
        return output.writable_file(Path(args.report), "--report")
    if getattr(args, "record", False) and recorded is not None:
        return output.writable_file(output.in_evidence(recorded), "--record")
    return None


def plug_ins(args) -> tuple[JanitorPolicy, object, object, PlugInSpecs]:
    """The policy, destination factory and ledger factory named on the command line, and their specs."""
    policy = load_policy(args.policy)
    destination = load_destination(args.destination) if args.destination else None
    ledger = load_ledger(args.ledger) if args.ledger else None
    specs = PlugInSpecs(
        None if args.policy in POLICIES else absolute(args.policy), absolute(args.destination), absolute(args.ledger),
    )
    return policy, destination, ledger, specs


def exit_status(verdicts) -> int:
    """One exit status for check and explore (see ``fence.cli.main``'s docstring)."""
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
    policy, destination, ledger, specs = plug_ins(args)
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
