"""Workers and janitors as OS processes on SQLite and PostgreSQL, crashes as real SIGKILLs.

The article's counts, per policy, with every worker a process that opens the
backend itself and dies by SIGKILL at the chosen point; after every trial the
audit (every job has its effect, no unit leaked, nothing stuck) must be clean.
Two trials per variant at a short lease keep this file near a minute. Only
counts and orderings are asserted, never how long anything took (a busy machine
stretches that): durations are figures for evidence/, written by fence bench.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from fence.cli.experiments_command import QUICK_PROCESS_LEASE
from fence.live import crash_boundary, delayed_commit
from fence.live.fleet_bench import fleet
from fence.live.process_trials import Processes
from tests.real_runs import BROKEN, crash_boundary_counts, delayed_commit_counts


# Its module fixtures run once: every test of this file on one xdist worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("processes")

# realclock marks the tests that sleep on the real clock; the bad-input ones do not.

TRIALS = 2
LEASE = QUICK_PROCESS_LEASE
FENCE = [sys.executable, "-m", "fence.cli.main"]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], scope="module")
def url(request, tmp_path_factory):
    """A SQLite file of this module, or the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path_factory.mktemp('processes')}/fence.db"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="module")
def crash(url):
    return {v.label: v for v in crash_boundary(Processes(url), TRIALS, LEASE)}


@pytest.fixture(scope="module")
def delayed(url):
    return {v.label: v for v in delayed_commit(Processes(url), TRIALS, LEASE)}


@pytest.mark.realclock
@pytest.mark.parametrize("label, duplicates, with_effect, returned", crash_boundary_counts(TRIALS, in_flight=True))
def test_crash_boundary_on_processes_matches_the_article(crash, label, duplicates, with_effect, returned):
    """A SIGKILL after the effect gives naive's duplicate and reconcile's confirmed_existing; one inside the open commit transaction rolls back, like a crash before the effect."""
    variant = crash[label]
    assert variant.totals == {
        "duplicate_writes_total": duplicates,
        "capacity_returned_while_effect_exists": with_effect,
        "capacity_returned": returned,
        "drain_problems": 0,
    }, [t.line for t in variant.trials]
    assert variant.differences == []
    assert all(t.settled for t in variant.trials)


@pytest.mark.realclock
def test_a_sigkill_inside_the_commit_transaction_leaves_no_effect(crash):
    """The in-flight kill lands after the commit was sent and before it was answered, and the effect never appears: only the retry's does."""
    for trial in crash["POLICY=naive CRASH=in-flight"].trials:
        kinds = [(e.lane, e.kind) for e in trial.events]
        assert ("worker job1#1", "crash") in kinds
        assert trial.times["effect"] is None and trial.times["retry"] is not None
        assert trial.counts["effects"] == 1


@pytest.mark.realclock
@pytest.mark.parametrize("mode, duplicates, early, released", delayed_commit_counts(TRIALS))
def test_delayed_commit_on_processes_matches_the_article(delayed, mode, duplicates, early, released):
    """A slow (not dead) old process commits after the janitor released: naive/reconcile duplicate, fenced only releases early, witness and abandon do neither."""
    variant = delayed[f"MODE={mode}"]
    assert variant.totals == {
        "duplicate_writes_total": duplicates,
        "early_capacity_release": early,
        "capacity_released": released,
        "drain_problems": 0,
    }, [t.line for t in variant.trials]
    assert variant.differences == []


@pytest.mark.realclock
def test_delayed_commit_fenced_retry_wins_and_the_old_process_is_refused(delayed):
    """Under the fence the retry process commits first and the old process's late commit is refused after its whole workload."""
    for trial in delayed["MODE=fenced"].trials:
        t = trial.times
        # Every time here is a CLOCK_MONOTONIC reading, which the processes share.
        [reserved] = [e.t for e in trial.events if (e.lane, e.kind) == ("worker job1#1", "reserve")]
        [sent] = [e.t for e in trial.events if (e.lane, e.kind) == ("worker job1#1", "work")]
        assert reserved < t["expiry"] <= t["released"] < t["retry"] < t["old_commit"]
        # It sends its commit only once its work is done, and that commit is the one refused...
        assert reserved < sent <= t["old_commit"]
        assert [e.label for e in trial.events if e.kind == "refused"] == ["job1#1 already_exists"]
        # ...so the waste reported is its whole run, reservation to refusal, on that clock.
        assert t["wasted"] == t["old_commit"] - reserved


BROKEN_ON_PROCESSES = BROKEN  # the same table as on threads, judged on the parent's recorded facts


@pytest.mark.realclock
@pytest.mark.parametrize("experiment, label", list(BROKEN_ON_PROCESSES))
def test_each_process_trial_breaks_exactly_the_expected_invariants(crash, delayed, experiment, label):
    """Every process trial is judged by INVARIANTS on its recorded facts, and breaks the same named ones as on threads."""
    variant = {"crash": crash, "delayed": delayed}[experiment][label]
    for trial in variant.trials:
        assert set(trial.broken) == BROKEN_ON_PROCESSES[experiment, label], (trial.line, trial.broken)


@pytest.mark.realclock
def test_a_small_fleet_under_sigkills_loses_nothing(url):
    """Four worker processes, two janitors, 200 jobs, a SIGKILL after every 5th attempt under abandon-fenced: no duplicate, no job lost, no unit leaked, nothing stuck."""
    # naive's fleet is measured by 'fence bench fleet', not here: CI time goes to the safe policy.
    # Kills follow the attempts, not the clock: a kill every 0.05 s outran the
    # fleet on a busy machine (PostgreSQL, 60 s, not finished). The time limit
    # is only a guard against a hang; the pytest timeout is 300 s.
    result = fleet(url, "abandon-fenced", workers=4, jobs=200, lease=0.5, kill_every=None,
                   kill_every_attempts=5, time_limit=240)
    assert result.finished, result.lines()
    assert result.kills >= 3, "the run must really kill workers"
    assert result.audit.problems == [], result.lines()
    assert len(result.audit.lost) == result.audit.leaked == len(result.audit.stuck) == result.audit.duplicates == 0
    # Judged by INVARIANTS on the facts the parent recorded from every child's reports.
    assert result.audit.broken == {}, result.lines()
    assert result.janitor_events.get("expiry", 0) >= 1, "killed leases must really expire and be settled"


def test_bad_backend_input_is_one_line_and_exit_2(tmp_path):
    """An unknown backend, an unreachable database and a SQLite restart are one line on stderr and exit 2, no traceback."""
    cases = [
        ["experiments", "--backend", "oracle", "--processes"],
        ["experiments", "--backend", "postgres", "--processes", "--url", "postgresql://fence@127.0.0.1:1/fence"],
        ["bench", "fleet", "--backend", "sqlite", "--restart-db"],
        ["bench", "fleet", "--backend", "sqlite", "--url", f"sqlite://{tmp_path}/missing/dir/fence.db"],
    ]
    for args in cases:
        done = subprocess.run([*FENCE, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
