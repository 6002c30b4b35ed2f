"""The types of the command line's options: each turns a typo into one clear line, never a run.

argparse calls each with the option's text; an ``ArgumentTypeError`` becomes
``fence <command>: error: argument --name: <its message>`` and exit 2.
"""

from __future__ import annotations

import argparse
import math

from fence.model.world import ModelConfig


MOST = 1_000_000
"""The largest count any option takes: past it, a typo, never a run that would finish."""
MOST_IN_A_MODEL = 100
"""Units, jobs and attempts in a model world: the explorer's state space explodes long before."""
MOST_WORKERS = 64


def whole(text: str, most: int = MOST) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value > most:
        raise argparse.ArgumentTypeError(f"must be at most {most:,}, got {value:,}")
    return value


def _number_of(unit: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of {unit}, got {text!r}") from None


def seconds(text: str) -> float:
    value = _number_of("seconds", text)
    if math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text}")
    return value


def positive(text: str, most: int = MOST) -> int:
    value = whole(text, most)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def model_size(text: str) -> int:
    """Units, jobs or attempts of a model world."""
    return positive(text, MOST_IN_A_MODEL)


def states(text: str) -> int:
    return positive(text, 1_000_000_000)


def workers(text: str) -> int:
    return positive(text, MOST_WORKERS)


def repeats(text: str) -> int:
    """How many times a benchmark repeats each measurement: a median needs a few, a hundred is a typo."""
    return positive(text, 100)


def explorer_bound(text: str) -> ModelConfig:
    """``UxJxA:H`` (units x jobs x attempts : horizon) as the bench's model, lease 2, 2 janitors."""
    sizes, _, horizon = text.partition(":")
    parts = sizes.split("x")
    if len(parts) != 3 or not horizon:
        raise argparse.ArgumentTypeError(f"must be units x jobs x attempts : horizon, like 2x2x2:2, got {text!r}")
    capacity, jobs, attempts = (model_size(part) for part in parts)
    config = ModelConfig(capacity=capacity, jobs=jobs, max_attempts=attempts, horizon=zero_or_more(horizon))
    problem = config.problem()
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return config


def non_negative(text: str) -> int:
    value = whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a lease cannot be negative, got {value}")
    return value


def zero_or_more(text: str) -> int:
    value = whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"cannot be negative, got {value}")
    return value


def positive_milliseconds(text: str) -> float:
    value = _number_of("milliseconds", text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 milliseconds, got {text}")
    return value


def positive_seconds(text: str) -> float:
    value = seconds(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def non_negative_seconds(text: str) -> float:
    value = seconds(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"cannot be negative, got {text}")
    return value


def engines(text: str) -> str:
    """``fence bench explorer --engines``: a comma-separated list of one-process, partitioned and ray."""
    known = ("one-process", "partitioned", "ray")
    names = text.split(",")
    wrong = [name for name in names if name not in known]
    if wrong or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of {', '.join(known)}, each once, got {text!r}")
    return text


class _LeaseInTicks(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(
            "--lease is in model ticks (check, verdicts, explore); here the lease is on the real clock: "
            "use --lease-seconds S"
        )


def seconds_not_ticks(parser) -> None:
    """``--lease`` means ticks everywhere; where the lease is real seconds, say so instead of guessing."""
    parser.add_argument("--lease", action=_LeaseInTicks, help=argparse.SUPPRESS)


_SERVERS = (
    ("postgres", "PostgreSQL", "FENCE_POSTGRES_URL", "a private cluster", "postgres.sh"),
    ("redis", "Redis", "FENCE_REDIS_URL", "a private server", "redis.sh"),
)


def server_options(parser, *, prefix: str = "", uses: dict[str, str] | None = None,
                   afterwards: dict[str, str] | None = None) -> None:
    """``--postgres URL`` and ``--redis URL``, each defaulting to its environment variable, else to a
    private server the project's script starts and stops (``fence.live.databases.backend_url``).

    ``uses`` says what each server is for (default: "to run on"), ``afterwards`` what the run does to it.
    """
    for option, server, variable, private, script in _SERVERS:
        use = (uses or {}).get(option, "to run on")
        after = (afterwards or {}).get(option, "")
        parser.add_argument(f"--{option}", metavar="URL",
                            help=f"{prefix}{server} {use} (default: ${variable}, else {private} "
                            f"started and stopped with the project's scripts/{script}){after}")
