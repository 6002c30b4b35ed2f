"""``fence targets``: real job systems under the machines, as shipped and with fence.guard.

Prints a matrix like ``fence verdicts``, one row per target (``fence.targets.TARGETS``),
each judged on the real system by both engines, the one observer and the seven
invariants: the Hypothesis machines at the profile's configurations, then the
exhaustive explorer at ``fence.targets.EXPLORER_BOUND``, combined per cell as
``fence check`` combines them; with ``--profile deep``, then the explorer at 2
units x 2 jobs x 2 attempts (``EXPLORER_DEEP_BOUND``) for at most
``--explorer-budget`` seconds a row, whose violations join the cells. Under it, per row: the model policy it claims,
how it recovers, how time was moved; what the explorer did (states,
transitions, faithfulness checks, dangers reached) and each engine's own word;
the shortest counterexample of each violated row, replayed once more on a
fresh database; and where the system moved differently from its model (the
lockstep), replayed the same way.

Exit status: 0 when every guarded row is proved or not-found, having reached
every danger, and every counterexample and lockstep finding replayed on a
fresh database; 1 when a guarded row is violated (or the engines disagree), or
something found did not replay; 2 for bad input (one line); 3 when a guarded
row is undetermined (a danger never reached, a budget ran out, or a walk
beyond the first bound found the plug-ins cannot be explored faithfully).
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import replace
from pathlib import Path

from fence._arguments import positive_seconds
from fence._output import command_line, in_evidence, writable_file
from fence._evidence import header, write_atomically
from fence._invariants import BY_NAME, INVARIANTS, required_dangers
from fence._lockstep import replay_in_lockstep, without_refusal_reasons
from fence._minimise import replay_actions
from fence._verdicts import DEFAULT_CONFIGS, Verdict, profile_settings
from fence._world import ModelConfig, World

PROFILES = {
    # name: (Hypothesis examples per configuration, steps per example, configurations)
    # The explorer runs at fence.targets.EXPLORER_BOUND in every profile, and "deep" walks
    # EXPLORER_DEEP_BOUND after it (EXPLORER_BOUNDS); the profile sets how many of its states
    # and merges the FaithfulnessCheck replays (EXPLORER_FAITHFULNESS).
    "quick": (40, 30, (ModelConfig(capacity=1, jobs=1),)),
    "default": (150, 30, DEFAULT_CONFIGS),
    "thorough": (600, 40, DEFAULT_CONFIGS),
    "deep": (150, 30, DEFAULT_CONFIGS),
}
EVIDENCE = Path("evidence/targets.txt")


def arguments(parser) -> None:
    from fence.targets import TARGETS

    parser.add_argument("--row", action="append", choices=list(TARGETS),
                        help="judge only this row (repeatable; default: every row)")
    parser.add_argument("--profile", choices=PROFILES, default="default",
                        help="search effort: quick (40 examples, 1 unit x 1 job), default (150 at 1x1 and 2x2), thorough; "
                        "deep: default, then the explorer at 2 units x 2 jobs x 2 attempts too")
    parser.add_argument("--explorer-budget", type=positive_seconds, metavar="SECONDS",
                        help="with --profile deep: seconds each row's walk at 2 units x 2 jobs may take "
                        "(default: fence.targets.EXPLORER_DEEP_BUDGET, 1800)")
    parser.add_argument("--postgres", metavar="URL",
                        help="PostgreSQL to run on (default: $FENCE_POSTGRES_URL, else a private cluster "
                        "started and stopped with the project's scripts/postgres.sh)")
    parser.add_argument("--redis", metavar="URL",
                        help="Redis to run the celery rows on (default: $FENCE_REDIS_URL, else a private server "
                        "started and stopped with the project's scripts/redis.sh)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--record", action="store_true",
                       help=f"also write the report to the repository's {EVIDENCE} (from the checkout's root)")
    group.add_argument("--report", metavar="FILE", type=Path, help="also write the report to this file")


def cmd_targets(args) -> int:
    from fence.targets import (EXPLORER_BOUNDS, EXPLORER_DEEP_BUDGET, EXPLORER_FAITHFULNESS, TARGETS, judge_target,
                               postgres, redis)

    # Checked before the work (fence._output): a report that cannot be written is one line now.
    written = in_evidence(EVIDENCE) if args.record else args.report
    if written is not None:
        writable_file(written, "--record" if args.record else "--report")
    examples, steps, configs = PROFILES[args.profile]
    rows = [TARGETS[name] for name in (args.row or TARGETS)]
    started = time.perf_counter()
    servers = {  # only the servers the chosen rows need are started
        "postgres": (postgres, args.postgres, "PostgreSQL", "a private cluster started by scripts/postgres.sh"),
        "redis": (redis, args.redis, "Redis", "a private server started by scripts/redis.sh"),
    }
    with contextlib.ExitStack() as stack:
        urls = {}
        found = []
        for index, target in enumerate(rows, 1):
            if target.server not in urls:  # started when the first row that needs it comes
                start, given, name, private = servers[target.server]
                urls[target.server], ours = stack.enter_context(start(given))
                print(f"{name}: {private if ours else urls[target.server]}", file=sys.stderr)
            url = urls[target.server]
            engines = "the machines, then the explorer," if target.explorable else "the machines"
            for bound in EXPLORER_BOUNDS[args.profile][1:] if target.explorable else ():
                engines += (f" then at {bound.capacity}x{bound.jobs}x{bound.max_attempts} for at most "
                            f"{args.explorer_budget or EXPLORER_DEEP_BUDGET:.0f} s,")
            print(f"[{index}/{len(rows)}] {target.row}: {engines} on the real system...", end="", file=sys.stderr,
                  flush=True)
            try:
                report = judge_target(target, url, configs=configs, run_settings=profile_settings(examples, steps),
                                      faithfulness=EXPLORER_FAITHFULNESS[args.profile],
                                      deeper=EXPLORER_BOUNDS[args.profile][1:],
                                      deeper_budget=args.explorer_budget or EXPLORER_DEEP_BUDGET)
                replays = _replay_findings(target, url, report)
                versions = _versions(target, url)
            except BaseException:
                print(file=sys.stderr, flush=True)  # the one-line refusal (or Ctrl-C's line) starts a line of its own
                raise
            found.append((report, replays, versions))
            print(f" {report.report.seconds:.1f}s", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    text = _render(found, args, examples, configs, seconds)
    print(text)
    if written is not None:
        lines = header(command_line("fence targets"),
                       ("fence", "hypothesis", "procrastinate", "pgqueuer", "psycopg", "celery", "kombu", "redis"))
        write_atomically(written, "\n".join(lines) + f"\n# wall time: {seconds:.0f} s\n\n" + text + "\n")
    return _status(found)


def _versions(target, url: str) -> dict[str, str]:
    storage = target.open(url)
    try:
        return storage.versions()
    finally:
        storage.close()


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


def _render(found, args, examples: int, configs, seconds: float) -> str:
    from fence._checking import table

    from fence.targets import EXPLORER_BOUND, EXPLORER_BOUNDS, EXPLORER_DEEP_BUDGET

    reports = [replace(f.report, policy=replace(f.target.policy, name=f.target.row)) for f, _, _ in found]
    versions = {name: value for _, _, v in found for name, value in v.items()}
    lines = [table(reports, bound=EXPLORER_BOUND), ""]
    lines.append(
        f"Profile {args.profile}: {examples} Hypothesis examples per configuration "
        f"({'; '.join(c.describe() for c in configs)}), derandomised; then the explorer at "
        f"{EXPLORER_BOUND.describe()}, horizon {EXPLORER_BOUND.horizon}, on the same database"
        + "".join(f"; then at {bound.describe()}, horizon {bound.horizon}, for at most "
                  f"{args.explorer_budget or EXPLORER_DEEP_BUDGET:.0f} s a row"
                  for bound in EXPLORER_BOUNDS[args.profile][1:])
        + f"; {seconds:.0f} s. "
        + ", ".join(f"{name} {value}" for name, value in versions.items())
    )
    for report, replays, _ in found:
        target = report.target
        lines += ["", f"== {target.row}: claims the model policy '{target.policy.name}'",
                  f"   recovery: {target.recovery}", f"   time: {target.time}"]
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
        needed = [danger.name for danger in required_dangers(target.policy)]
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
    """What the explorer did on the real system, with its warrant (fence._explore.report_text's words)."""
    from fence._explore import describe_bounds

    if found.exhausted:
        scope = "exhausted"
    elif found.unfaithful:
        scope = f"STOPPED, the plug-ins cannot be explored faithfully: {found.unfaithful}"
    else:
        scope = f"NOT exhausted ({found.stopped_by or 'a depth bound'}; every depth to {found.depth} finished)"
    dangers = ", ".join(f"{d.name} {found.reached[d.name]}" for d in required_dangers(found.policy))
    return (f"{found.outcome().value} within {describe_bounds(found)}: {found.states} states, "
            f"{found.transitions} transitions, {found.seconds:.0f} s, {scope}; "
            f"{found.faithfulness_checks} faithfulness checks{'' if found.unfaithful else ' passed'}; "
            f"dangers reached: {dangers}")


def _status(found) -> int:
    status = 0
    for report, replays, _ in found:
        if any(text == "DID NOT REPLAY" for text in replays.values()):
            status = 1
        if report.target.row.endswith("+guard"):
            verdicts = {cell.verdict for cell in report.report.cells.values()}
            if verdicts & {Verdict.VIOLATED, Verdict.ERROR, Verdict.DISAGREE} or report.lockstep_findings:
                status = 1
            elif (not verdicts <= {Verdict.PROVED, Verdict.NOT_FOUND}
                  or any(walk.unfaithful for walk in report.deeper)) and status == 0:
                status = 3
    return status
