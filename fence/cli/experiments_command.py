"""``fence experiments`` and ``fence replay``: the real-clock commands.

``experiments`` runs the article's three experiments on threads (see
``fence.live.experiments`` and ``fence.live.thread_trials``), prints one line per trial and SUMMARY lines, and writes
them to ``--out`` with the command line, the date and the versions, plus a
timeline picture per experiment when matplotlib (the ``plots`` extra) is there.
Exit 0 when every count matches the article, 1 when one differs, 2 for bad input.

With ``--processes`` the crash-boundary and delayed-commit experiments run with
workers and janitor as OS processes on a SQLite or PostgreSQL backend, crashes
as SIGKILLs (``fence.live.process_trials``), and write ``processes-<backend>.txt``.

``replay`` plays a counterexample written by ``fence verdicts`` on real threads.
Exit 0 when the invariant broke for real, 1 when it did not, 2 for bad input.

``fence bench fleet`` (``cmd_fleet``) runs a fleet of worker processes under
random SIGKILLs and a database restart and writes ``evidence/fleet-<backend>.txt``.
Exit 1 when a safe policy duplicated or any run lost a job or leaked a unit.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fence.base import evidence

from fence.base import output
from fence.cli import arguments
from fence.cli.arguments import seconds
from fence.base.errors import BadInput
from fence.live import EXPERIMENTS, THREADS, replay_real
from fence.live.results import quiet

FULL_LEASE = 1.0
QUICK_LEASE = 0.2
QUICK_SWEEP_TRIALS = 2
"""A quick run keeps the article's trial count except in the lease sweep."""
QUICK_PROCESS_LEASE = 0.3
"""Processes: a little longer than the threads' quick lease, for a loaded CI machine."""
SAFE_POLICIES = ("abandon", "abandon-fenced")
"""Policies the verdict matrix says hold every invariant: a duplicate under them fails the fleet."""


def _trials(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of trials, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 trial, got {value}")
    return value


def _lease(text: str) -> float:
    value = seconds(text)  # the one parser of seconds: a number, and finite
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"a lease must be a positive number of seconds, got {text}")
    if value > 60:
        raise argparse.ArgumentTypeError(f"a lease of {value:g}s would run for hours; use at most 60")
    return value


def _tick(text: str) -> float:
    value = _lease(text)
    if value > 5:
        raise argparse.ArgumentTypeError(f"a tick of {value:g}s is too long; use at most 5")
    return value


def experiments_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trials", type=_trials, default=None, help="trials per variant (default 5, as the article)")
    parser.add_argument("--quick", action="store_true", help=f"for CI: {QUICK_LEASE:g}s base lease, fewer sweep trials")
    parser.add_argument("--only", choices=list(EXPERIMENTS), help="run one experiment")
    output.add_options(parser, record="evidence/experiments/", out_help="where the text and pictures go")
    parser.add_argument("--lease-seconds", type=_lease, help="base lease in seconds (default 1.0; --quick 0.2)")
    parser.add_argument("--no-pictures", action="store_true", help="write the text evidence only")
    parser.add_argument("--processes", action="store_true",
                        help="workers and janitor as OS processes on a database, crashes as SIGKILL")
    parser.add_argument("--backend", choices=["sqlite", "postgres"],
                        help="with --processes: sqlite (a temporary file) or postgres ($FENCE_POSTGRES_URL or a private cluster)")
    parser.add_argument("--url", help="with --processes: this backend URL instead (its fence tables are emptied)")


def replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a counterexample .json written by 'fence verdicts', 'check' or 'targets'")
    parser.add_argument("--tick", type=_tick, help="fence's model on threads: real seconds per model tick (default 0.05)")
    arguments.server_options(parser.add_argument_group(
        "a target's counterexample", "replayed on its real system: the server it was found on, given here or started"))


def _header(command: str) -> list[str]:
    return evidence.header(command, ("fence", "hypothesis", "matplotlib"))


_write_atomically = evidence.write_atomically


def _progress(stream):
    if not stream.isatty():
        return quiet

    def show(message: str) -> None:
        stream.write(f"\r\x1b[K[{message}]")
        stream.flush()

    return show


def _clear_progress() -> None:
    """Wipe the progress line ``_progress`` drew, before the results are printed."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")


def _experiment_lines(name: str, heading: str, variants, differences: list[str]) -> list[str]:
    """What one experiment prints and saves: ``heading``, every trial's line and every variant's summary.

    Adds to ``differences`` each variant's differences from the article and
    every trial that did not settle in time.
    """
    _clear_progress()
    lines = [heading]
    for variant in variants:
        lines.extend(t.line for t in variant.trials)
        lines.append(variant.summary)
        differences.extend(variant.differences)
        differences.extend(
            f"{name} {variant.label} trial {t.number}: did not settle in time" for t in variant.trials if not t.settled
        )
    return lines


def cmd_experiments(args) -> int:
    if args.processes:
        return cmd_process_experiments(args)
    if args.backend or args.url:
        raise BadInput("--backend and --url need --processes (the thread experiments run in memory)")
    quick = args.quick
    trials = args.trials or 5
    lease = args.lease_seconds or (QUICK_LEASE if quick else FULL_LEASE)
    names = [args.only] if args.only else list(THREADS.experiments)
    out = output.directory(args, "experiments", output.EVIDENCE / "experiments")
    pictures = not args.no_pictures and _pictures_available()
    command = _command_line(args)
    suffix = ".quick" if quick else ""
    progress = _progress(sys.stderr)
    differences: list[str] = []
    for name in names:
        run = EXPERIMENTS[name]
        if name == "contention" and quick:
            variants = run(THREADS, min(trials, QUICK_SWEEP_TRIALS), lease, progress)
        else:
            variants = run(THREADS, trials, lease, progress)
        lines = _experiment_lines(name, f"== {name} (base lease {lease:g}s) ==", variants, differences)
        print("\n".join(lines), flush=True)
        text = "\n".join(_header(command) + lines) + "\n"
        _write_atomically(out / f"{name}{suffix}.txt", text)
        if pictures:
            from fence.bench import pictures

            pictures.draw(name, variants, out / f"{name}{suffix}.png", command)
    if not pictures and not args.no_pictures:
        print("fence: pictures skipped: matplotlib is not installed (pip install 'fence[plots]')", file=sys.stderr)
    written = ", ".join(f"{n}{suffix}.txt" + ("/.png" if pictures else "") for n in names)
    print(f"evidence written to {out}/: {written}")
    for difference in differences:
        print(f"DIFFERS: {difference}", file=sys.stderr)
    return 1 if differences else 0


def _command_line(args) -> str:
    """The command that reproduces this run, rebuilt from its parsed arguments."""
    words = ["fence", "experiments"]
    if args.quick:
        words.append("--quick")
    if args.trials:
        words += ["--trials", str(args.trials)]
    if args.only:
        words += ["--only", args.only]
    if args.lease_seconds:
        words += ["--lease-seconds", f"{args.lease_seconds:g}"]
    if getattr(args, "processes", False):
        words += ["--backend", args.backend or "sqlite", "--processes"]
        if args.url:
            words += ["--url", args.url]
    if args.record:
        words.append("--record")
    elif args.out:
        words += ["--out", args.out]
    if args.no_pictures:
        words.append("--no-pictures")
    return " ".join(shlex.quote(w) for w in words)


def _pictures_available() -> bool:
    from fence.bench import pictures

    return pictures.available()


def cmd_replay(args) -> int:
    from fence.search import counterexample

    if counterexample.is_target(Path(args.file)):  # the real system's, never fence's model
        from fence.cli.targets_command import cmd_replay_target

        return cmd_replay_target(args)
    if args.postgres or args.redis:
        raise BadInput(f"--postgres and --redis are for a target's counterexample; {args.file} was found on fence's "
                       "model, which replays in memory on threads: drop them")
    result = replay_real(Path(args.file), tick=args.tick if args.tick is not None else 0.05)
    from fence.model.invariants import BY_NAME

    inv = BY_NAME[result.invariant]
    print(
        f"replay {args.file}: policy {result.policy}, invariant {inv.label}, "
        f"{len(result.steps)} step(s) on {result.threads} thread(s), tick {result.tick:g}s"
    )
    for step in result.steps:
        print(f"  {step.index:2}. @{step.t:.3f}s t={step.now} [{step.actor}] {step.sentence}")
    for problem in result.clock_problems:
        print(f"  clock: {problem}")
    if result.violation:
        print(f"BROKEN for real at step {result.broke_at}: {inv.name}: {result.violation}")
        return 0
    print(f"NOT BROKEN: all steps ran on real threads and {inv.name} held; the counterexample did not reproduce")
    return 1


# -- processes: the experiments and the fleet ---------------------------------------------
def _backend_line(url: str) -> str:
    """What the backend is, for the evidence header."""
    from fence.live.databases import describe_backend

    return f"# backend: {describe_backend(url)}"


def cmd_process_experiments(args) -> int:
    from fence.live.databases import backend_url
    from fence.live.process_trials import Processes

    if args.only and args.only not in Processes.experiments:
        raise BadInput(f"--only {args.only} does not run on processes; use {' or '.join(Processes.experiments)}")
    kind = args.backend or "sqlite"
    trials = args.trials or 5
    lease = args.lease_seconds or (QUICK_PROCESS_LEASE if args.quick else FULL_LEASE)
    names = [args.only] if args.only else list(Processes.experiments)
    output.precheck(args)
    command = _command_line(args)
    progress = _progress(sys.stderr)
    differences: list[str] = []
    lines: list[str] = []
    with backend_url(kind, args.url) as (url, _restartable):
        # Made (and named) once the backend answered: a bad URL is one line, with nothing made.
        out = output.directory(args, "experiments", output.EVIDENCE / "experiments")
        backend_line = _backend_line(url)
        for name in names:
            variants = EXPERIMENTS[name](Processes(url), trials, lease, progress)
            heading = f"== {name} on processes, {kind} (base lease {lease:g}s) =="
            block = _experiment_lines(name, heading, variants, differences)
            print("\n".join(block), flush=True)
            lines.extend(block)
    path = out / f"processes-{kind}{'.quick' if args.quick else ''}.txt"
    _write_atomically(path, "\n".join(evidence.header(command, ("fence", "hypothesis", "psycopg")) + [backend_line, *lines]) + "\n")
    print(f"evidence written to {path}")
    for difference in differences:
        print(f"DIFFERS: {difference}", file=sys.stderr)
    return 1 if differences else 0


def cmd_fleet(args) -> int:
    """``fence bench fleet``: exit 0 when every run is clean, 1 when not, 2 for bad input."""
    from fence.model.policies import POLICIES
    from fence.live.databases import backend_url, restart_postgres
    from fence.live.fleet_bench import fleet

    kind = args.backend or "sqlite"
    policies = args.policy or ["abandon-fenced", "naive"]
    unknown = [name for name in policies if name not in POLICIES]
    if unknown:
        raise BadInput(f"unknown policy {unknown[0]!r}: use one of {', '.join(POLICIES)}")
    if kind == "sqlite" and args.restart_db:
        raise BadInput("--restart-db: SQLite has no server to restart; a SIGKILLed writer is its crash")
    output.precheck(args)
    command = output.command_line(f"fence bench fleet --backend {kind}")
    progress = _progress(sys.stderr)
    results = []
    with backend_url(kind, args.url) as (url, restartable):
        wants_restart = args.restart_db if args.restart_db is not None else kind == "postgres"
        if wants_restart and not restartable:
            if args.restart_db:
                raise BadInput(f"--restart-db: {url} is not a cluster scripts/postgres.sh started, so it cannot be restarted here")
            note = f"not restarted: {url} is not a cluster scripts/postgres.sh started"
        elif kind == "sqlite":
            note = "not applicable: SQLite has no server to restart (each SIGKILLed writer is a crash of the database's user)"
        else:
            note = "scripts/postgres.sh restart (pg_ctl restart -m fast) once half the jobs are confirmed" if wants_restart else "not asked"
        restart = (lambda: restart_postgres(url)) if wants_restart and restartable else None
        out = output.report_file(args, "bench fleet", f"fleet-{kind}.txt")  # once the backend answered
        backend_line = _backend_line(url)
        for name in policies:
            result = fleet(
                url, name, workers=args.workers or 8, jobs=args.jobs or 2000, lease=args.lease_seconds or 1.0,
                kill_every=args.kill_every or None, restart=restart, janitors=args.janitors,
                seed=args.seed, time_limit=args.time_limit, progress=progress,
            )
            _clear_progress()
            print("\n".join(result.lines()), flush=True)
            results.append(result)
    failures = []
    for result in results:
        found = result.audit
        failures += [f"{result.policy}: {p}" for p in found.problems]
        if not result.finished:
            failures.append(f"{result.policy}: not every job finished within {args.time_limit:g}s")
        if result.policy in SAFE_POLICIES and found.duplicates:
            failures.append(f"{result.policy}: {found.duplicates} duplicate write(s) under a safe policy")
        if result.policy in SAFE_POLICIES and found.broken:
            failures += [f"{result.policy}: invariant {name} broken: {how}" for name, how in found.broken.items()]
        if result.restart_error:
            failures.append(f"{result.policy}: {result.restart_error}")
    lines = [
        *evidence.header(command, ("fence", "psycopg")),
        backend_line,
        f"# database restart: {note}",
        f"# kills: SIGKILL to a random busy worker every {args.kill_every:g}s; janitors are never killed" if args.kill_every
        else "# kills: none",
    ]
    for result in results:
        lines += result.lines()
    lines += [f"FAILED: {f}" for f in failures] or ["every run: no lost job, no leaked unit, no stuck reservation; "
                                                     "no duplicate under a safe policy"]
    _write_atomically(out, "\n".join(lines) + "\n")
    print(f"evidence written to {out}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0
