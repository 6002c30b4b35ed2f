"""fence bench guard: each queue's own worker drains its jobs once each, unguarded and guarded (counts, never durations).

One tiny run per mode on one Redis queue (arq) and two PostgreSQL queues
(procrastinate; DBOS, whose runtime runs workflows on threads): ten jobs. The figures it times go into
evidence/guard-cost.txt; here only what it counts is checked: every job's task
finished exactly once and the destination holds exactly one effect per key
(plain rows unguarded, the guard's commits guarded).
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import replace

import pytest

from fence.bench import guard_cost
from fence.bench.guard_cost import Run, _all_busy, _stalls, chosen, run_once
from fence.bench.guard_queues import PGQUEUER_DRIVER, RUNNERS
from fence.cli.main import main

JOBS = 10
KEYS = [f"k{number}" for number in range(1, JOBS + 1)]


@pytest.mark.parametrize("queue", ["arq", "procrastinate"])
@pytest.mark.parametrize("mode", ["unguarded", "guarded"])
def test_one_worker_process_runs_every_job_once_with_one_effect_per_key(queue, mode, postgres_url, redis_url, tmp_path):
    runner = RUNNERS[queue]
    if runner.missing():
        pytest.skip(runner.missing())
    run = run_once(runner, mode, workers=1, jobs=JOBS, urls={"postgres": postgres_url, "redis": redis_url},
                   scratch=tmp_path)
    assert run.runs_per_key == Counter({key: 1 for key in KEYS})
    assert run.effects_per_key == Counter({key: 1 for key in KEYS})
    assert len(run.latencies) == len(run.task_times) == JOBS
    assert run.counts_right


@pytest.mark.parametrize("mode", [pytest.param("unguarded", marks=pytest.mark.slow), "guarded"])  # unguarded: --run-slow
def test_dboss_own_worker_runs_every_job_once_with_one_effect_per_key(mode, postgres_url, tmp_path):
    """DBOS's launched runtime (its queue thread and workflow threads, a connection per thread) drains the bench's
    workflows: each key's step finished once, one effect per key, in both modes."""
    runner = RUNNERS["dbos"]
    if runner.missing():
        pytest.skip(runner.missing())
    run = run_once(runner, mode, workers=2, jobs=JOBS, urls={"postgres": postgres_url}, scratch=tmp_path)
    assert run.runs_per_key == Counter({key: 1 for key in KEYS})
    assert run.effects_per_key == Counter({key: 1 for key in KEYS})
    assert run.counts_right


@pytest.mark.parametrize("mode", ["unguarded", "guarded"])
def test_with_work_each_task_works_before_its_effect_in_both_modes(mode, postgres_url, redis_url, tmp_path):
    """--work-ms: every task of either mode takes at least its work (start to finish), and the counts stay right."""
    runner = RUNNERS["arq"]
    if runner.missing():
        pytest.skip(runner.missing())
    run = run_once(runner, mode, workers=1, jobs=JOBS, urls={"postgres": postgres_url, "redis": redis_url},
                   scratch=tmp_path, work_seconds=0.05)
    assert run.counts_right
    assert min(run.task_times) >= 0.05  # a lower bound the task itself sets, not a timing of the machine


@pytest.mark.parametrize("driver", [
    # The fallback driver's listener stalls a drain up to 1 s per wait (fence/bench/guard_cost.py), some 10 s of
    # CI's CPU; the bench runs pgqueuer's manager on asyncpg, which the test extra installs.
    pytest.param("psycopg", marks=pytest.mark.slow),
    "asyncpg",
])
def test_pgqueuers_manager_drains_every_job_once_on_either_driver(driver, monkeypatch, postgres_url, tmp_path):
    """pgqueuer's QueueManager on psycopg's driver or asyncpg's (pgq run's first choice): guarded, two processes,
    each key's task finished once with one effect."""
    runner = RUNNERS["pgqueuer"]
    if runner.missing() or (driver == "asyncpg" and importlib.util.find_spec("asyncpg") is None):
        pytest.skip(runner.missing() or "asyncpg is not installed")
    monkeypatch.setenv(PGQUEUER_DRIVER, driver)
    run = run_once(runner, "guarded", workers=2, jobs=JOBS, urls={"postgres": postgres_url}, scratch=tmp_path)
    assert run.runs_per_key == Counter({key: 1 for key in KEYS})
    assert run.effects_per_key == Counter({key: 1 for key in KEYS})


def test_a_stall_is_a_process_idle_half_a_second_between_its_tasks():
    """A task that starts 0.5 s or more after all of its process's earlier tasks finished is a stall; a task that
    starts while another thread of the process is still busy is not (DBOS runs two)."""
    assert _stalls([]) == 0
    assert _stalls([(0.0, 0.1), (0.1, 0.2), (0.3, 0.4)]) == 0
    assert _stalls([(0.0, 0.1), (0.6, 0.7), (0.7, 0.8), (1.8, 1.9)]) == 2
    assert _stalls([(0.0, 1.0), (0.2, 0.3), (0.9, 1.1), (1.5, 1.6)]) == 0
    assert _stalls([(1.5, 1.6), (0.0, 0.1)]) == 1


def test_the_rate_counts_only_the_jobs_finished_while_every_process_works():
    """The window opens at the last process's first start and closes at the first process's last finish: a process
    that starts late or runs on alone at the end does not set the rate; one process: its whole drain."""
    early = [(0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.4), (0.4, 0.5)]
    late = [(0.2, 0.25), (0.25, 0.35), (0.35, 0.6), (0.6, 0.9)]
    jobs, seconds = _all_busy([early, late])
    assert jobs == 5  # finished at 0.25, 0.3, 0.35, 0.4, 0.5: in (0.2, 0.5]; the one at 0.2 is before it
    assert seconds == pytest.approx(0.3)
    assert _all_busy([early]) == (5, pytest.approx(0.5))
    assert _all_busy([[(0.0, 0.1)], [(0.2, 0.3)]]) == (0, 0.0)  # never both at work: the drain's rate is reported
    assert _all_busy([[], []]) == (0, 0.0)
    once = Counter({key: 1 for key in KEYS})
    never_together = Run("arq", "guarded", JOBS, once, once, 2.0, (0.1,) * JOBS, (0.01,) * JOBS)
    assert never_together.jobs_per_second == never_together.drain_jobs_per_second == JOBS / 2.0
    assert replace(never_together, all_busy=(4, 0.5)).jobs_per_second == 8.0


def test_counts_are_wrong_when_a_job_ran_twice_or_an_effect_is_missing():
    """What the bench calls wrong: a key run twice, a key never run, an effect written twice or not at all."""
    once = Counter({key: 1 for key in KEYS})
    right = Run("arq", "guarded", JOBS, once, once, 1.0, (0.1,) * JOBS, (0.01,) * JOBS)
    assert right.counts_right
    assert not replace(right, runs_per_key=once + Counter(["k3"])).counts_right
    assert not replace(right, runs_per_key=once - Counter(["k3"])).counts_right
    assert not replace(right, effects_per_key=once + Counter(["k3"])).counts_right
    assert not replace(right, effects_per_key=once - Counter(["k3"])).counts_right


def test_a_queue_whose_library_is_missing_is_one_line_naming_its_extra(monkeypatch):
    absent = replace(RUNNERS["dramatiq"], modules=("fence_no_such_library",))
    monkeypatch.setitem(RUNNERS, "dramatiq", absent)
    runners, missing = chosen(["dramatiq", "arq"])
    assert [runner.name for runner in runners] == (["arq"] if RUNNERS["arq"].missing() is None else [])
    assert missing == ["dramatiq: fence_no_such_library is not installed: pip install -e '.[dramatiq]' "
                       "(or '.[test]' for every queue)"]


def test_with_no_queue_installed_the_bench_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    for name, runner in list(RUNNERS.items()):
        monkeypatch.setitem(RUNNERS, name, replace(runner, modules=(f"fence_no_{name}",)))
    monkeypatch.setattr(guard_cost, "run_once", lambda *args, **kwargs: pytest.fail("no queue may run"))
    status = main(["bench", "guard", "--out", str(tmp_path), "--queue", "celery", "--queue", "arq"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == ["fence: no queue to run: celery: fence_no_celery is not installed: pip install -e '.[celery]' "
                   "(or '.[test]' for every queue); arq: fence_no_arq is not installed: pip install -e '.[arq]' "
                   "(or '.[test]' for every queue)"]
    assert list(tmp_path.iterdir()) == []


def test_a_driver_name_the_bench_does_not_know_is_one_line_before_any_server_starts(monkeypatch, capsys, tmp_path):
    """A typo in FENCE_BENCH_PGQUEUER_DRIVER once ran psycopg's driver quietly: now it is refused, nothing written."""
    monkeypatch.setenv(PGQUEUER_DRIVER, "asyncpq")
    monkeypatch.setattr(guard_cost, "run_once", lambda *args, **kwargs: pytest.fail("no queue may run"))
    status = main(["bench", "guard", "--out", str(tmp_path), "--queue", "pgqueuer"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err == ["fence: FENCE_BENCH_PGQUEUER_DRIVER='asyncpq': name asyncpg or psycopg, or unset it"]
    assert list(tmp_path.iterdir()) == []
