"""``fence targets``: real job systems under the machines, as shipped and with fence.guard.

Prints a matrix like ``fence verdicts``, one row per target (``fence.targets.TARGETS``),
each judged on the real system by both engines, the one observer and the seven
invariants: the Hypothesis machines at the profile's configurations, then the
exhaustive explorer at ``fence.targets.EXPLORER_BOUND``, combined per cell as
``fence check`` combines them, every configuration and bound with workers that
may fail (each target's ``fail`` runs its system's own failure handler, and a
guarded row needs ``failure_after_effect`` reached like every other danger); with ``--profile deep``, then the explorer at 2
units x 2 jobs x 2 attempts (``EXPLORER_DEEP_BOUND``) for at most
``--explorer-budget`` seconds a row, whose violations join the cells. Under it, per row: the model policy it claims,
how it recovers, how time was moved; what the explorer did (states,
transitions, faithfulness checks, dangers reached) and each engine's own word;
the shortest counterexample of each violated row, replayed once more on a
fresh database; and where the system moved differently from its model (the
lockstep), replayed the same way.

Rows are the built-in ones (``--row``) and a user's own (``--target
MODULE:ATTR|FILE.py:ATTR``, a ``fence.targets.Target``); each row names its
report line and its counterexample files (``ROW__POLICY__INVARIANT``, into
``--out DIR``, else a fresh temporary directory), and each file records the
target, so that ``fence replay FILE`` replays it on the real system
(``fence.targets.replay.replay_target``): the one replay loop (``fence.search.minimise.play``) on a world
made from the target's storage, never on fence's model. A row whose longest
Hypothesis run outlasted half its adapter's tick (``Target.tick_seconds``, or
its ledger's ``time``) is told so under it: the adapter's model time no longer holds.

A *guarded* row is one that claims a policy fence's own model proves safe on
every invariant (``fence/expected_verdicts.txt``: abandon-fenced, abandon),
whatever its name: fence.guard's rows and a user's target claiming such a
policy alike, so a user's CI gate fails when their system breaks that claim.
A row claiming naive, or a user's own policy, reports without gating.

Exit status: 0 when every guarded row is proved or not-found, having reached
every danger, and every counterexample and lockstep finding replayed on a
fresh database; 1 when a guarded row is violated (or the engines disagree), or
something found did not replay; 2 for bad input (one line); 3 when a guarded
row is undetermined (a danger never reached, a budget ran out, or a walk
beyond the first bound found the plug-ins cannot be explored faithfully).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from fence.cli.arguments import positive_seconds, server_options
from fence.base.errors import BadInput
from fence.base.output import add_options, command_line, directory, in_evidence, precheck
from fence.base.evidence import header, write_atomically
from fence.model.invariants import BY_NAME, INVARIANTS, required_dangers
from fence.search.lockstep import replay_in_lockstep, without_refusal_reasons
from fence.search.minimise import replay_actions
from fence.checking.verdicts import Verdict, profile_settings
from fence.checking.expected import load_expected
from fence.model.world import ModelConfig, World

PROFILE_NAMES = ("quick", "default", "thorough", "deep")
"""``fence.targets.TARGET_PROFILES``' names, for the parser without importing fence.targets (a test holds them equal)."""
EVIDENCE = Path("evidence/targets.txt")


def arguments(parser) -> None:
    from fence.targets import TARGETS

    parser.add_argument("--row", action="append", choices=list(TARGETS),
                        help="judge this built-in row (repeatable; default: every row, unless --target is given)")
    parser.add_argument("--target", action="append", metavar="MODULE:ATTR|FILE.py:ATTR",
                        help="judge your own target, a fence.targets.Target (repeatable; alone: only these, "
                        "with --row: those rows too)")
    parser.add_argument("--profile", choices=PROFILE_NAMES, default="default",
                        help="search effort: quick (40 examples, 1 unit x 1 job), default (150 at 1x1 and 2x2), thorough; "
                        "deep: default, then the explorer at 2 units x 2 jobs x 2 attempts too")
    parser.add_argument("--explorer-budget", type=positive_seconds, metavar="SECONDS",
                        help="with --profile deep: seconds each row's walk at 2 units x 2 jobs may take "
                        "(default: fence.targets.EXPLORER_DEEP_BUDGET, 1800)")
    server_options(parser)
    add_options(parser, record=f"the report to {EVIDENCE} (from the checkout's root); counterexamples to a fresh "
                "temporary directory", out_help="where the counterexamples go (ROW__POLICY__INVARIANT.json, for "
                "fence replay), and targets.txt unless --report names another file")
    # Beside --out, as on fence explore: the counterexamples go to DIR, the report to FILE.
    parser.add_argument("--report", metavar="FILE", help="also write the report to FILE (counterexamples to --out "
                        "DIR, else to a fresh temporary directory)")


def chosen_targets(args) -> list:
    """The rows ``--row`` and ``--target`` name (neither: every built-in row), each row name once."""
    from fence.model.plugins import absolute
    from fence.targets.loading import load_storage, load_target
    from fence.targets import TARGETS

    rows = [(TARGETS[name], None) for name in dict.fromkeys(args.row or ())]
    rows += [(load_target(spec), absolute(spec)) for spec in dict.fromkeys(args.target or ())]
    if not rows:
        rows = [(target, None) for target in TARGETS.values()]
    seen: dict[str, str] = {}
    for target, spec in rows:
        named = spec or "the built-in row"
        if target.row in seen:
            raise BadInput(f"two targets are named {target.row!r} ({seen[target.row]} and {named}): a row names its "
                           "report line and its files, so give each target a row of its own")
        seen[target.row] = named
        problem = target.server_problem()
        if problem:  # fence targets starts every row's server: it takes one URL per kind, not per row
            raise BadInput(f"target {target.row} ({named}) {problem.split(':')[0]}; fence targets starts the server "
                           "each row needs, so name one fence starts")
        load_storage(target)  # a storage that cannot be imported is one line before any server starts
    return rows


def cmd_targets(args) -> int:
    from fence.targets import EXPLORER_DEEP_BUDGET, TARGET_PROFILES, judge_target
    from fence.targets.replay import servers, versions_of, write_target_counterexamples

    # Checked before the work (fence.base.output): a file that cannot be written is one line now.
    if args.record and args.report:
        raise BadInput("--record writes the report to evidence/targets.txt and --report to FILE: give one of them")
    precheck(args)
    written = in_evidence(EVIDENCE) if args.record else Path(args.report) if args.report else None
    rows = chosen_targets(args)
    profile = TARGET_PROFILES[args.profile]
    started = time.perf_counter()
    with servers({"postgres": args.postgres, "redis": args.redis}) as url_of:
        found = []
        for index, (target, spec) in enumerate(rows, 1):
            url, _ = url_of(target.server)
            engines = "the machines, then the explorer," if target.explorable else "the machines"
            for bound in profile.bounds[1:] if target.explorable else ():
                engines += (f" then at {bound.capacity}x{bound.jobs}x{bound.max_attempts} for at most "
                            f"{args.explorer_budget or EXPLORER_DEEP_BUDGET:.0f} s,")
            print(f"[{index}/{len(rows)}] {target.row}: {engines} on the real system...", end="", file=sys.stderr,
                  flush=True)
            try:
                report = judge_target(target, url, configs=profile.configs,
                                      run_settings=profile_settings(profile.examples, profile.steps),
                                      faithfulness=profile.faithfulness, deeper=profile.bounds[1:],
                                      deeper_budget=args.explorer_budget or EXPLORER_DEEP_BUDGET, failures=True)
                replays = _replay_findings(target, url, report)
                versions = versions_of(target, url)
            except BaseException:
                print(file=sys.stderr, flush=True)  # the one-line refusal (or Ctrl-C's line) starts a line of its own
                raise
            found.append((report, replays, versions))
            print(f" {report.report.seconds:.1f}s", file=sys.stderr, flush=True)
            if report.assumption_violated:
                print(f"{target.row}: ADAPTER ASSUMPTION VIOLATED: {report.assumption_violated}", file=sys.stderr)
    seconds = time.perf_counter() - started
    out = directory(args, "targets")
    files = []
    for (report, _, _), (target, spec) in zip(found, rows):
        files += write_target_counterexamples(report.report, target, spec, out)
    text = _render(found, args, profile, seconds)
    if files:
        text += f"\n\ncounterexamples written to {out}/ (ROW__POLICY__INVARIANT: .txt steps, .mmd Mermaid, " \
                ".json for fence replay on the real system)"
    print(text)
    if args.out and written is None:
        written = out / "targets.txt"
    if written is not None:
        # The shipped systems that ran (a user's target says its own versions in the report) and their drivers.
        systems = tuple(dict.fromkeys(target.system for target, spec in rows if spec is None))
        lines = header(command_line("fence targets"), ("fence", "hypothesis", *systems, "psycopg", "kombu", "redis"))
        write_atomically(written, "\n".join(lines) + f"\n# wall time: {seconds:.0f} s\n\n" + text + "\n")
    return _status(found)


# -- fence replay FILE, for a counterexample found on a target ----------------------------------
def cmd_replay_target(args) -> int:
    """``fence replay FILE`` for a target's counterexample: 0 when it broke again on the real system, else 1."""
    if args.tick is not None:
        raise BadInput(f"--tick plays fence's model on threads; {args.file} was found on a target and replays on "
                       "its real system only: drop --tick")
    from fence.targets.replay import replay_target

    result = replay_target(Path(args.file), args.postgres, args.redis)
    inv = BY_NAME[result.invariant]
    print(f"replay {args.file}: target {result.row}, invariant {inv.label}, on the real system: {result.system}")
    for number, step in enumerate(result.steps, 1):
        print(f"  {number:2}. t={step.now}: {'[drain] ' if step.drain else ''}{step.sentence}")
    if result.violation:
        print(f"BROKEN on the real system ({result.system}) at step {result.broke_at}: {inv.name}: {result.violation}")
        return 0
    why = result.not_enabled or f"all steps ran and {inv.name} held"
    print(f"NOT BROKEN on the real system ({result.system}): {why}; the counterexample did not reproduce")
    return 1


def _replay_findings(target, url: str, found) -> dict[str, str]:
    """Each counterexample and each lockstep finding, replayed on a fresh database: what it showed again."""
    storage = target.open(url)
    replays = {}
    try:
        for name, cell in found.report.cells.items():
            example = cell.counterexample
            if example is None:
                continue
            chosen = [step.action for step in example.steps if not step.drain]
            again = replay_actions(target.policy, example.config, chosen, BY_NAME[name],
                                   storage.destination_factory, storage.ledger_factory)
            replays[name] = f"replayed on a fresh database: {again.message}" if again else "DID NOT REPLAY"
        for difference in found.lockstep_findings:
            config = _config_of(found, difference)
            chosen = [step.action for step in difference.trace if not step.drain]
            world = World(target.policy, config, storage.destination_factory, storage.ledger_factory)
            again = replay_in_lockstep(chosen, world, World(target.policy, config), same_story=without_refusal_reasons)
            if difference.trace and difference.trace[-1].drain:
                replays[difference.what] = "found in the drain that ends a run; not replayed step by step"
            else:
                replays[difference.what] = ("replayed on a fresh database" if again and again.what == difference.what
                                            else "DID NOT REPLAY")
    finally:
        storage.close()
    return replays


def _config_of(found, difference) -> ModelConfig:
    for config, differences in found.differences.items():
        if difference in differences.by_kind.values():
            return config
    raise AssertionError("a lockstep finding from no configuration")


def _render(found, args, profile, seconds: float) -> str:
    from fence.checking.checking import table

    from fence.targets import EXPLORER_DEEP_BUDGET, TARGET_BOUND

    configs = profile.configs

    reports = [replace(f.report, policy=replace(f.target.policy, name=f.target.row)) for f, _, _ in found]
    versions = {name: value for _, _, v in found for name, value in v.items()}
    lines = [table(reports, bound=TARGET_BOUND), ""]
    lines.append(
        f"Profile {args.profile}: {profile.examples} Hypothesis examples per configuration "
        f"({'; '.join(c.describe() for c in configs)}), derandomised; then the explorer at "
        f"{TARGET_BOUND.describe()}, horizon {TARGET_BOUND.horizon}, on the same database"
        + "".join(f"; then at {replace(bound, failures=True).describe()}, horizon {bound.horizon}, for at most "
                  f"{args.explorer_budget or EXPLORER_DEEP_BUDGET:.0f} s a row"
                  for bound in profile.bounds[1:])
        + f"; {seconds:.0f} s. "
        + ", ".join(f"{name} {value}" for name, value in versions.items())
    )
    for report, replays, _ in found:
        target = report.target
        lines += ["", f"== {target.row}: claims the model policy '{target.policy.name}'"]
        lines += [f"   {what}: {said}" for what, said in (("recovery", target.recovery), ("time", target.time)) if said]
        if report.assumption_violated:
            lines.append(f"   ADAPTER ASSUMPTION VIOLATED: {report.assumption_violated}")
        elif report.adapter_tick is not None:
            lines.append(f"   model time: one tick is {report.adapter_tick:g} s of the system's clock; the longest run "
                         f"took {report.longest_run:.1f} s of real time, within half a tick")
        explored = report.report.exploration
        if explored is not None:
            lines.append(f"   explorer: {_explorer_line(explored)}")
            hypothesis = report.report.hypothesis_verdicts
            lines.append("   Hypothesis alone: " + " ".join(hypothesis[inv.name].value for inv in INVARIANTS)
                         + "; the explorer alone: " + " ".join(explored.results[inv.name].outcome.value
                                                                for inv in INVARIANTS))
        for walk in report.deeper:
            bound = walk.config
            lines.append(f"   explorer at {bound.capacity}x{bound.jobs}x{bound.max_attempts}: {_explorer_line(walk)}")
        reached = {}
        for counts in report.report.reached.values():
            for name, n in counts.items():
                reached[name] = reached.get(name, 0) + n
        # Each configuration's own dangers (the failure path's where its workers may fail).
        needed = list(dict.fromkeys(danger.name for config in (report.report.reached or configs)
                                    for danger in required_dangers(target.policy, config)))
        lines.append("   dangers reached: " + ", ".join(f"{name} {reached.get(name, 0)}" for name in needed))
        violated = [inv for inv in INVARIANTS if report.report.cells[inv.name].verdict is Verdict.VIOLATED]
        for inv in violated:
            cell = report.report.cells[inv.name]
            lines.append(f"   {inv.label}: {cell.counterexample.message} ({replays.get(inv.name)})")
        shortest = min((report.report.cells[inv.name].counterexample for inv in violated),
                       key=lambda example: example.rule_steps, default=None)
        duplicate = report.report.cells["no_duplicate_writes"].counterexample
        for example in [e for e in (duplicate, shortest) if e is not None][:1]:
            lines.append(f"   counterexample for {example.invariant} ({example.rule_steps} steps, "
                         f"{example.config.describe()}):")
            lines += [f"     t={step.now}: {step.sentence}" for step in example.steps if not step.drain]
        findings = report.lockstep_findings
        parted = sum(d.parted for d in report.differences.values())
        runs = sum(d.examples for d in report.differences.values())
        if not findings:
            lines.append(f"   lockstep: {target.system} moved as the model policy in all {runs} runs")
        else:
            lines.append(f"   lockstep: the system parted from its model in {parted} of {runs} runs:")
            for difference in findings:
                lines.append(f"   - {difference.what} ({difference.rule_steps} steps; "
                             f"{replays.get(difference.what)}): {difference.detail}")
                lines += [f"       t={step.now}: {step.sentence}" for step in difference.trace]
    return "\n".join(lines)


def _explorer_line(found) -> str:
    """What the explorer did on the real system, with its warrant (fence.explore.report.report_text's words)."""
    from fence.explore.report import describe_bounds

    if found.exhausted:
        scope = "exhausted"
    elif found.unfaithful:
        scope = f"STOPPED, the plug-ins cannot be explored faithfully: {found.unfaithful}"
    else:
        scope = f"NOT exhausted ({found.stopped_by or 'a depth bound'}; every depth to {found.depth} finished)"
    dangers = ", ".join(f"{d.name} {found.reached[d.name]}" for d in required_dangers(found.policy, found.config))
    return (f"{found.outcome().value} within {describe_bounds(found)}: {found.states} states, "
            f"{found.transitions} transitions, {found.seconds:.0f} s, {scope}; "
            f"{found.faithfulness_checks} faithfulness checks{'' if found.unfaithful else ' passed'}; "
            f"dangers reached: {dangers}")


def _claims_safety(target) -> bool:
    """Does the row claim a built-in policy that fence's model proves on every invariant (see the docstring)?"""
    expected = load_expected().get(target.policy.name)
    return bool(expected) and all(verdict is Verdict.PROVED for verdict in expected.values())


def _status(found) -> int:
    status = 0
    for report, replays, _ in found:
        if any(text == "DID NOT REPLAY" for text in replays.values()):
            status = 1
        if _claims_safety(report.target):
            verdicts = {cell.verdict for cell in report.report.cells.values()}
            if verdicts & {Verdict.VIOLATED, Verdict.ERROR, Verdict.DISAGREE} or report.lockstep_findings:
                status = 1
            elif (not verdicts <= {Verdict.PROVED, Verdict.NOT_FOUND}
                  or any(walk.unfaithful for walk in report.deeper)) and status == 0:
                status = 3
    return status
