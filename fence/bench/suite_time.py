"""``fence bench suite``: the wall time of the README's test command."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

from fence.base import evidence
from fence.bench.figures import publish


def suite(command: str, out: Path, pytest_arguments: Sequence[str] = ()) -> int:
    """Run the README's test command (``pytest``) and record its wall time, closing line,
    slowest tests and, if any, the failures (pytest's ``FAILED``/``ERROR`` lines)."""
    import subprocess

    started = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15", *pytest_arguments],
        capture_output=True, text=True,
    )
    wall = time.perf_counter() - started
    output = finished.stdout.strip().splitlines()
    closing = [line for line in output if " passed" in line or " failed" in line]
    failures = [line for line in output if line.startswith(("FAILED ", "ERROR "))]
    slowest: list[str] = []
    if any("slowest" in line for line in output):
        start = next(n for n, line in enumerate(output) if "slowest" in line) + 1
        for line in output[start:]:
            if not line[:1].isdigit():
                break
            slowest.append("  " + line)
    lines = [
        *evidence.header(command, packages=("fence", "hypothesis", "pytest", "pytest-xdist", "strands-agents", "psycopg")),
        f"# pytest arguments: {' '.join(pytest_arguments) or '(none: the README command)'} (and --durations=15)",
        f"# environment: {_suite_environment()}",
        "",
        f"wall time: {wall:.0f} s",
        f"pytest exit status: {finished.returncode}",
        f"closing line: {closing[-1].strip('= ') if closing else '(none)'}",
        *(["failures:", *("  " + line for line in failures)] if failures else []),
        "slowest tests (seconds, on the xdist workers of pyproject's addopts, so they overlap):",
        *slowest,
    ]
    if finished.returncode != 0:
        print("\n".join(output[-40:]), file=sys.stderr)
    publish(lines, out)
    return finished.returncode


def _suite_environment() -> str:
    """What changes the suite's run: the Hypothesis profile, CI (PostgreSQL tests fail
    rather than skip), and whether a PostgreSQL cluster was given or started per worker."""
    import os

    profile = os.environ.get("FENCE_PROFILE") or ("ci" if os.environ.get("CI") else "dev")  # as conftest.py picks
    ci = "CI set" if os.environ.get("CI") else "CI unset"
    postgres = "shared cluster from FENCE_POSTGRES_URL" if os.environ.get("FENCE_POSTGRES_URL") else "no FENCE_POSTGRES_URL"
    return f"FENCE_PROFILE={profile}, {ci}, PostgreSQL: {postgres}"
