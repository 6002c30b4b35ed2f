"""fence replay: saved counterexamples break their invariant again on real threads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fence.search import counterexample
from fence.base.errors import BadInput
from fence.model.invariants import BY_NAME
from fence.live import replay_real

# realclock marks the tests that sleep on the real clock; the bad-input ones do not.

ROOT = Path(__file__).resolve().parent.parent
PINNED = sorted((ROOT / "tests" / "pinned").glob("*.json"))
# The pinned copy, not evidence/: evidence is rewritten by every fence verdicts run.
NAIVE = ROOT / "tests" / "pinned" / "naive__no_duplicate_writes.json"
NAIVE_STEPS = len(json.loads(NAIVE.read_text())["steps"])  # the last step is the second write
FENCE = [sys.executable, "-m", "fence.cli.main"]


def run(*args, cwd=None):
    return subprocess.run([*FENCE, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.realclock
def test_naive_duplicate_breaks_for_real():
    """The naive duplicate-write counterexample writes the ticket twice on real threads."""
    result = replay_real(NAIVE, tick=0.02)
    assert result.violation == "job1 was written 2 times"
    assert result.broke_at == len(result.steps) == NAIVE_STEPS
    assert result.threads >= 4, "workers, janitor, network and clock each act from their own thread"
    # The replay compares the World's clock with the real one after every step:
    # no step ran before the real clock reached its tick, and no scan before the
    # real deadline (an ordering of two readings, which load can only widen).
    assert result.clock_problems == []
    expired = next(s for s in result.steps if s.actor == "clock" and "has expired" in s.sentence)
    scan = next(s for s in result.steps if "expired and frees" in s.sentence)
    assert expired.index < scan.index and expired.t <= scan.t, "the janitor freed the unit after the real tick that expired it"


@pytest.mark.realclock
@pytest.mark.parametrize("path", PINNED, ids=[p.stem for p in PINNED])
def test_pinned_counterexamples_break_for_real_as_in_the_model(path):
    """Every pinned counterexample breaks the same invariant with the same message as the logical replay."""
    _, logical = counterexample.replay(path)
    result = replay_real(path, tick=0.002)
    assert result.violation == logical
    assert result.clock_problems == []
    if not BY_NAME[result.invariant].at_teardown:
        assert result.broke_at == len(result.steps)


@pytest.mark.realclock
def test_cli_replay_says_broken_and_exits_0():
    """fence replay prints each step with its real time and ends with a BROKEN line, exit 0."""
    result = run("replay", str(NAIVE), "--tick", "0.01")
    assert result.returncode == 0, result.stderr
    assert f"BROKEN for real at step {NAIVE_STEPS}: no_duplicate_writes: job1 was written 2 times" in result.stdout
    assert result.stdout.count("@") >= NAIVE_STEPS


@pytest.mark.realclock
def test_cli_replay_that_does_not_break_says_so_and_exits_1(tmp_path):
    """A counterexample cut short of its last step runs on real threads and reports NOT BROKEN, exit 1."""
    data = json.loads(NAIVE.read_text())
    data["steps"] = data["steps"][:-1]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(data))
    result = run("replay", str(short), "--tick", "0.01")
    assert result.returncode == 1, result.stderr
    assert "NOT BROKEN" in result.stdout and "did not reproduce" in result.stdout


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda d: _write(d, "corrupt.json", "{ not json"), "not readable JSON"),
        (lambda d: _write(d, "foreign.json", json.dumps({"format": "other/1"})), "not a fence counterexample"),
        (lambda d: d / "missing.json", "no such file"),
        (lambda d: d, "not a fence counterexample"),
        (
            lambda d: _write(
                d, "unknown-policy.json", NAIVE.read_text().replace('"policy": "naive"', '"policy": "nope"')
            ),
            "corrupt fence counterexample",
        ),
        (
            lambda d: _write(
                d, "unknown-action.json", NAIVE.read_text().replace('"action": "scan"', '"action": "teleport"', 1)
            ),
            "corrupt fence counterexample",
        ),
    ],
    ids=["corrupt", "foreign", "missing", "directory", "unknown-policy", "unknown-action"],
)
def test_cli_replay_bad_file_is_one_line_and_exit_2(tmp_path, make, needle):
    """A corrupt, foreign or missing file is one line naming the problem, exit 2, no traceback."""
    result = run("replay", str(make(tmp_path)))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_steps_out_of_order_are_bad_input(tmp_path):
    """A file whose steps are not enabled in order is refused with BadInput naming the step."""
    data = json.loads(NAIVE.read_text())
    data["steps"] = [data["steps"][2], *data["steps"]]  # scan before the lease exists
    path = tmp_path / "shuffled.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BadInput, match="step 1"):
        replay_real(path, tick=0.001)


@pytest.mark.parametrize("tick", ["0", "-1", "nan", "x"])
def test_cli_replay_bad_tick_is_one_line_and_exit_2(tick):
    """A tick that is not a positive number of seconds is one line and exit 2."""
    result = run("replay", str(NAIVE), "--tick", tick)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
