"""``fence experiments`` and ``fence replay``: the real-clock commands.

``experiments`` runs the article's three experiments on threads (see
``fence._realclock``), prints one line per trial and SUMMARY lines, and writes
them to ``--out`` with the command line, the date and the versions, plus a
timeline picture per experiment when matplotlib (the ``plots`` extra) is there.
Exit 0 when every count matches the article, 1 when one differs, 2 for bad input.

``replay`` plays a counterexample written by ``fence verdicts`` on real threads.
Exit 0 when the invariant broke for real, 1 when it did not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from fence import _evidence, _realclock
from fence._errors import BadInput

FULL_LEASE = 1.0
QUICK_LEASE = 0.2
QUICK_SWEEP_TRIALS = 2
"""A quick run keeps the article's trial count except in the lease sweep."""


def _trials(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of trials, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 trial, got {value}")
    return value


def _lease(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
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
    parser.add_argument("--only", choices=list(_realclock.EXPERIMENTS), help="run one experiment")
    parser.add_argument("--out", default="evidence/experiments", help="where the text and pictures go")
    parser.add_argument("--lease", type=_lease, help="base lease in seconds (default 1.0; --quick 0.2)")
    parser.add_argument("--no-pictures", action="store_true", help="write the text evidence only")


def replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a counterexample .json written by 'fence verdicts'")
    parser.add_argument("--tick", type=_tick, default=0.05, help="real seconds per model tick (default 0.05)")


def _header(command: str) -> list[str]:
    return _evidence.header(command, ("fence", "hypothesis", "matplotlib"))


_write_atomically = _evidence.write_atomically


def _progress(stream):
    if not stream.isatty():
        return _realclock._quiet

    def show(message: str) -> None:
        stream.write(f"\r\x1b[K[{message}]")
        stream.flush()

    return show


def cmd_experiments(args) -> int:
    quick = args.quick
    trials = args.trials or 5
    lease = args.lease or (QUICK_LEASE if quick else FULL_LEASE)
    names = [args.only] if args.only else list(_realclock.EXPERIMENTS)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: is a file, not a directory; pass a directory")
    pictures = not args.no_pictures and _pictures_available()
    command = _command_line(args)
    suffix = ".quick" if quick else ""
    progress = _progress(sys.stderr)
    differences: list[str] = []
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        run = _realclock.EXPERIMENTS[name]
        if name == "contention" and quick:
            variants = run(min(trials, QUICK_SWEEP_TRIALS), lease, progress)
        else:
            variants = run(trials, lease, progress)
        if sys.stderr.isatty():
            sys.stderr.write("\r\x1b[K")
        lines = [f"== {name} (base lease {lease:g}s) =="]
        for variant in variants:
            lines.extend(t.line for t in variant.trials)
            lines.append(variant.summary)
            differences.extend(variant.differences)
            for trial in variant.trials:
                if not trial.settled:
                    differences.append(f"{name} {variant.label} trial {trial.number}: did not settle in time")
        print("\n".join(lines), flush=True)
        text = "\n".join(_header(command) + lines) + "\n"
        _write_atomically(out / f"{name}{suffix}.txt", text)
        if pictures:
            from fence import _pictures

            _pictures.draw(name, variants, out / f"{name}{suffix}.png", command)
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
    if args.lease:
        words += ["--lease", f"{args.lease:g}"]
    words += ["--out", args.out]
    if args.no_pictures:
        words.append("--no-pictures")
    return " ".join(shlex.quote(w) for w in words)


def _pictures_available() -> bool:
    from fence import _pictures

    return _pictures.available()


def cmd_replay(args) -> int:
    result = _realclock.replay_real(Path(args.file), tick=args.tick)
    from fence._invariants import BY_NAME

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
