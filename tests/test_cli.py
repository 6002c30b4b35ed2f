"""The fence command: bad input gets one line and exit 2; check works on outside files."""

import subprocess
import sys
import textwrap

import pytest

FENCE = [sys.executable, "-m", "fence.cli.main"]


def run(*args, cwd=None):
    return subprocess.run([*FENCE, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["check", "no-such-policy"], "unknown policy"),
        (["check", "no_such_module_xyz:Policy"], "importing no_such_module_xyz failed"),
        (["check", "fence.model.policies:NotThere"], "has no attribute"),
        (["check", "fence.model.ledger:Ledger"], "failed"),
        (["check", "json:dumps"], "is not a janitor policy"),
        (["verdicts", "--capacity", "0"], "must be at least 1"),
        (["verdicts", "--lease", "-1"], "cannot be negative"),
        (["verdicts", "--capacity", "1", "--jobs", "2"], "must not exceed capacity"),
        (["verdicts", "--policy", "bogus"], "unknown policy"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    """Each bad input names the problem on one line, exits 2 and prints no traceback."""
    result = run(*args, "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_corrupt_expected_file_is_one_line_and_exit_2(tmp_path):
    """A damaged expected-verdicts file is refused before any machine runs."""
    bad = tmp_path / "expected.txt"
    bad.write_text("policy 1 2 3 4 5 6\nnaive maybe\n")
    result = run("verdicts", "--expected", str(bad), cwd=tmp_path)
    assert result.returncode == 2 and "expected 6 verdicts" in result.stderr


def test_missing_expected_file_is_one_line_and_exit_2(tmp_path):
    """Pointing --expected at a file that does not exist is refused without a traceback."""
    result = run("verdicts", "--expected", str(tmp_path / "nope.txt"), cwd=tmp_path)
    assert result.returncode == 2 and "cannot read the expected verdicts" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # 9 s; policy files from outside fence's package are checked in every run by tests/test_seeded_bugs.py
def test_check_runs_a_policy_from_a_file_outside_the_repo(tmp_path):
    """A user's policy in a new module outside the repo is judged and its row printed."""
    (tmp_path / "my_policy.py").write_text(textwrap.dedent('''
        from dataclasses import dataclass
        from fence import Decision, Evidence, Policy

        @dataclass(frozen=True)
        class TrustTheClock(Policy):
            """Free the unit as soon as the lease expires, like naive, but by the protocol."""
            name: str = "trust-the-clock"
            def decide(self, evidence: Evidence) -> Decision:
                return Decision.UNUSED
    '''))
    result = run(
        "check", "my_policy:TrustTheClock", "--capacity", "1", "--profile", "quick",
        "--out", str(tmp_path / "cx"), cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    assert "trust-the-clock" in result.stdout and "violated" in result.stdout
    assert list((tmp_path / "cx").glob("trust-the-clock__*.json")), "no counterexample written"


def test_replaying_a_corrupt_counterexample_is_refused(tmp_path):
    """A file that is not a fence counterexample gives BadInput, not a crash."""
    from fence import BadInput
    from fence.search.counterexample import load

    path = tmp_path / "broken.json"
    path.write_text('{"format": "fence-counterexample/1", "policy": "naive"}')
    with pytest.raises(BadInput, match="corrupt"):
        load(path)


def test_version_is_one_line_with_the_installed_version():
    """fence --version prints the package's version and exits 0."""
    import subprocess
    import sys
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "fence.cli.main", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"fence {version('fence')}"


def test_a_closed_pipe_is_quiet():
    """Output into a pipe whose reader has gone (`fence explore --json | head -1`) ends with no traceback."""
    import subprocess
    import sys

    # The reader exits at once, so the writer's first write meets a pipe with no reader.
    command = (
        f"{sys.executable} -m fence.cli.main explore --policy naive --horizon 2 --json --out /tmp/fence-pipe-test | true;"
        " exit ${PIPESTATUS[0]}"
    )
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141, "an unread verdict must not look like a pass (0)"


# -- progress on stderr: lines counted and ordered, never timed -----------------------------
def _in_process(argv, capsys):
    """``fence ARGV`` in this process (fast), with its exit status, stdout and stderr lines."""
    from fence.cli.main import main

    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err.splitlines()


def test_explore_json_prints_its_levels_on_stderr_and_only_json_on_stdout(tmp_path, capsys):
    """``fence explore --json``: stdout parses as JSON; stderr has one line per level, depth 1, 2, ... in order."""
    import json

    status, out, err = _in_process(["explore", "--policy", "naive", "--horizon", "2", "--json", "--out", str(tmp_path)],
                                   capsys)
    assert status == 1  # naive is violated
    found = json.loads(out)
    depths = [int(line.split()[1].rstrip(":")) for line in err if line.startswith("depth ")]
    assert depths == list(range(1, len(depths) + 1)) and len(depths) >= 2, err
    assert found["depth"] == depths[-1], (found["depth"], err)


# check's (9 s) with --run-slow: in every run the test below watches check print its levels from depth 1.
@pytest.mark.parametrize("command", [pytest.param("check", marks=pytest.mark.slow), "verdicts"])
def test_check_and_verdicts_print_the_explorers_first_level_before_its_task_line(command, tmp_path, capsys):
    """check and verdicts print ``[explorer] POLICY at BOUND: depth 1: ...`` while the explorer walks, before its task line."""
    argv = ["check", "naive"] if command == "check" else ["verdicts", "--policy", "naive", "--no-shortest"]
    status, _, err = _in_process([*argv, "--profile", "quick", "--workers", "1", "--out", str(tmp_path)], capsys)
    assert status == (1 if command == "check" else 0), err  # check: naive is violated; verdicts: as expected
    levels = [n for n, line in enumerate(err) if line.startswith("[explorer] naive at 1x1x3:3: depth ")]
    task = next(n for n, line in enumerate(err) if line.startswith("[1/") and ", explorer, " in line)
    assert levels and levels[0] < task, err
    assert err[levels[0]].startswith("[explorer] naive at 1x1x3:3: depth 1: "), err


# Zero (every level, 12 s) with --run-slow: fence explore is held to every level in order above, in every run.
@pytest.mark.parametrize("every", [1e9, pytest.param(0.0, marks=pytest.mark.slow)], ids=["longer-than-the-run", "zero"])
def test_check_prints_the_first_level_then_at_most_one_line_per_interval(every, tmp_path, capsys, monkeypatch):
    """LEVEL_LINE_EVERY longer than the run: depth 1 only, per bound; zero: every level, 1, 2, ... in order."""
    from fence.checking import checking

    monkeypatch.setattr(checking, "LEVEL_LINE_EVERY", every)
    status, _, err = _in_process(["check", "naive", "--profile", "quick", "--workers", "1", "--out", str(tmp_path)],
                                 capsys)
    assert status == 1, err
    for bound in ("1x1x3:3", "1x1x3:4", "2x2x2:2"):  # fence check's bounds, walked in this order
        printed = [line.split(": ")[1] for line in err if line.startswith(f"[explorer] naive at {bound}: ")]
        if every:
            assert printed == ["depth 1"], err
        else:
            assert printed == [f"depth {n}" for n in range(1, len(printed) + 1)] and len(printed) > 1, err
