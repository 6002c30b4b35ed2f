"""What ``fence check`` proves a user's code within by default: three bounds, one budget, each cell says which.

``CHECK_BOUNDS`` is 1 unit x 1 job x 3 attempts to horizon 3 (the floor every
check had), then to horizon 4, then 2 units x 2 jobs x 2 attempts to horizon
2 with jobs symmetric. A user's policy file is walked on the keyed engine and
exhausts all three; a bound the budget does not reach leaves a cell proved
only within the others, and the cell says so.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fence.checking import checking
from fence.checking.checking import report_text
from fence.checking.verdicts import CHECK_BOUNDS, Verdict
from fence.model.world import ModelConfig
from fence.testing import check

TESTS = Path(__file__).resolve().parent
FENCE = [sys.executable, "-m", "fence.cli.main"]
TWO_BY_TWO = "2 unit(s), 2 job(s), 2 attempt(s) per job, lease 2 ticks, 2 janitor(s), horizon 2, jobs symmetric"


# 40 s on this machine, with --run-slow; in every run tests/test_seeded_two_jobs.py walks a plug-in at
# 2 units x 2 jobs. The budget is lifted: the test is about the bounds reached, not about the machine's speed
# (under a load of 7 the 120 s for the later bounds once ran out), which evidence/ records.
@pytest.mark.slow
def test_a_users_policy_file_is_proved_within_every_default_bound(monkeypatch, tmp_path):
    monkeypatch.setattr(checking, "EXPLORER_CHECK_BUDGET", 1e9)
    monkeypatch.setattr(checking, "LATER_BOUNDS_BUDGET", 1e9)
    checked = check(f"{TESTS / 'user_policies' / 'builtin_copies.py'}:AbandonFenced", profile="quick", out=tmp_path)
    runs = checked.report.explorations
    assert [run.config for run in runs] == list(CHECK_BOUNDS)
    assert [run.symmetry for run in runs] == [False, False, True]
    for run in runs:
        assert run.exhausted and run.unfaithful is None and not run.missing_dangers()
        assert run.policy_calls_checked > 0  # keyed like fence's own, every call made twice
    checked.assert_proved()
    for cell in checked.report.cells.values():
        assert TWO_BY_TWO in cell.detail and "not within" not in cell.detail


# The seeded policies (tests/seeded/) the keyed engine takes, each at the default bounds:
# violated on the invariant it breaks at every bound, every bound exhausted, nothing
# refused as unfaithful. Left out: decide_writes.py's LookupThenAbandon, whose decide()
# writes, so it is walked as whole worlds, which does not exhaust 2 units x 2 jobs in
# the budget (issue 24: the whole-world walk is the one fence's parts do not take).
SEEDED_POLICIES = {
    "probe_writes.py:PlaceholderThenFree": "no_silent_replay",
    "free_then_abandon.py:FreeThenAbandon": "no_early_release",
}


@pytest.mark.slow  # 20-40 s each
@pytest.mark.parametrize("spec", list(SEEDED_POLICIES))
def test_a_seeded_policy_is_explored_at_every_default_bound(spec, tmp_path):
    done = subprocess.run(
        [*FENCE, "check", str(TESTS / "seeded" / spec), "--profile", "quick", "--json", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    (row,) = json.loads(done.stdout)["policies"].values()
    assert row["verdicts"][SEEDED_POLICIES[spec]] == "violated"
    runs = row["engines"]["explorer_bounds"]
    assert [run["bound"].split(", lease")[0] for run in runs] == [
        "1 unit(s), 1 job(s), 3 attempt(s) per job", "1 unit(s), 1 job(s), 3 attempt(s) per job",
        "2 unit(s), 2 job(s), 2 attempt(s) per job",
    ]
    for run in runs:
        assert run["exhausted"] and run["unfaithful"] is None, run["unfaithful"]
        assert run["verdicts"][SEEDED_POLICIES[spec]] == "violated"


def test_a_bound_the_budget_does_not_reach_leaves_the_cell_proved_only_within_the_others(monkeypatch, tmp_path):
    # The first bound may take as long as it needs and the later ones have a millisecond: which bound the
    # budget does not reach is then decided by the budget alone, not by how busy the machine is (an 8 s budget
    # for both once ran out on the small bound with four processes on two cores).
    monkeypatch.setattr(checking, "EXPLORER_CHECK_BUDGET", 1e9)
    monkeypatch.setattr(checking, "LATER_BOUNDS_BUDGET", 0.001)
    small = ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2)  # every danger reached
    checked = check(
        "abandon-fenced", destination=f"{TESTS / 'user_plugins' / 'plain.py'}:PlainSubclass", profile="quick",
        out=tmp_path, explorer_bounds=(small, CHECK_BOUNDS[-1]),
    )
    first, second = checked.report.explorations
    assert first.exhausted and not second.exhausted and second.stopped_by == "time_budget"
    cell = checked.report.cells["no_duplicate_writes"]
    assert cell.verdict is Verdict.PROVED
    assert "proved within 1 unit(s), 1 job(s), 2 attempt(s)" in cell.detail
    assert f"not within {TWO_BY_TWO} (the time_budget ran out after" in cell.detail
    assert f"no_duplicate_writes: proved: {cell.detail}" in report_text([checked.report])
