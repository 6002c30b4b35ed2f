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

This module holds the parser, ``main`` and ``command``; each command's options
and handler are in its own module (``check_command``, ``explore_command``,
``bench_command``, ``db_command``, ``experiments_command``, ``targets_command``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from fence.cli import arguments, bench_command, check_command, db_command, explore_command
from fence.base.errors import BackendError, BadInput, PluginBroken


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fence", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fence {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check_command.verdicts_arguments(sub.add_parser("verdicts", help="the verdict matrix of the built-in policies"))
    check_command.check_arguments(sub.add_parser("check", help="both engines on your policy, destination and ledger"))

    probe = sub.add_parser("probe-sdk", help="check the strands-agents behaviours fence relies on")
    probe.set_defaults(handler=_cmd_probe_sdk)

    explore_command.explore_arguments(sub.add_parser("explore", help="walk every interleaving of one policy within bounds"))
    bench_command.bench_arguments(sub.add_parser("bench", help="benchmarks that write their figures into evidence/"))

    from fence.cli import experiments_command  # the real-clock commands (threads, sleeps)

    experiments = sub.add_parser("experiments", help="the article's experiments on threads and the real clock")
    experiments_command.experiments_arguments(experiments)
    arguments.seconds_not_ticks(experiments)
    experiments.set_defaults(handler=experiments_command.cmd_experiments)

    replay = sub.add_parser("replay", help="play a saved counterexample: fence's model on real threads, a target's on its real system")
    experiments_command.replay_arguments(replay)
    replay.set_defaults(handler=experiments_command.cmd_replay)

    db_command.db_arguments(sub.add_parser("db", help="a backend's fence tables: check them, or empty them"))

    from fence.cli import targets_command  # real job systems under the machines (fence.targets)

    targets = sub.add_parser("targets", help="real job systems under the machines, as shipped and with fence.guard")
    targets_command.arguments(targets)
    targets.set_defaults(handler=targets_command.cmd_targets)
    return parser


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
