"""``fence bench guard``: what fence.guard costs per job, on each shipped queue's own worker.

Per queue and mode, M jobs are enqueued through the library's own client, then
N worker processes drain them, each running the library's own worker as the
library starts it (procrastinate's worker, pgqueuer's QueueManager in drain
mode, ``celery worker``'s entry point, a ``dramatiq.Worker``, an arq ``Worker``
in burst mode, a launched DBOS runtime whose queue thread claims the workflows). Each job's task writes one small effect to PostgreSQL, the
destination of both modes (fence.guard's destination is SQL, so the Redis
queues write there too):

* **unguarded**: a plain ``INSERT`` of the key, the attempt and a payload;
* **guarded**: ``guard.attempt(key, attempt_id)`` and ``commit(payload)``
  through the recipe of ``fence.targets.<queue>`` (its attempt ids; pgqueuer's
  ``guarded_attempt``, which reads the job's picks in the registration's own
  statement, the guard's database being pgqueuer's; arq's ``guarded_task``,
  which reads the job's try first; DBOS's step names its attempt by its claim's
  token, read from DBOS's context).

``--work-ms MS``: each task of both modes first works MS milliseconds (a
sleep), recorded apart (guard-cost-work-MSms.txt); the default record is the
cheapest task, its write alone, where the guard's round trips weigh most.

Every finished task appends one line to its process's record file: key,
enqueue time (carried in the job's arguments), start and finish (wall clock,
shared by the processes). From them: jobs/s while all N processes work
(from the last process's first task start to the first process's last
finish: the processes start their libraries' workers at different moments,
and a drain of 500 jobs at 1,500 jobs/s lasts a third of a second, so the
whole drain's rate was much of it a measure of that start race; it is
reported beside), p50/p99 of enqueue-to-finish (mostly the wait behind the
backlog: every job is enqueued before the workers start) and of the task
alone (start to finish: where the guard's statements show). The counts are
checked too: every job ran exactly once, and the destination holds one effect
per key.

A stall is a worker process idle 0.5 s or more between two of its tasks
while jobs wait: each round counts its stalls, and the report names the
rounds that had any, in both modes alike (none is dropped from the medians).
pgqueuer's rounds were bimodal for that reason (unguarded about 350 or
1,100-1,300 jobs/s, guarded about 300 or 700-1,050, on an idle machine):
pgqueuer 1.6's psycopg driver waits for NOTIFYs in ``notifies(timeout=1.0,
stop_after=1)``, which holds the connection's lock while it waits, so the
QueueManager's dequeue and ``log_jobs`` on that connection wait for the next
NOTIFY. Of the drain's statements only ``log_jobs`` notifies (its DELETE;
pgqueuer's trigger skips a statement-level UPDATE, the dequeue), and every
job is enqueued before the workers start, so no enqueue notifies either:
when every worker's watcher waits with no statement in flight, all of them
stall until the 1 s timeout. One stall in a drain of 500 jobs (about 0.4 s)
is the slow mode; a shorter ``dequeue_timeout`` cannot help, since the wait
is the driver's. The worker now runs the manager on asyncpg when it imports,
as pgqueuer's own ``pgq run`` chooses (asyncpg's driver listens by callback
and holds no lock while waiting), else on psycopg, and the record says which
(``FENCE_BENCH_PGQUEUER_DRIVER`` forces one).

Runners are a table (``RUNNERS``, in ``fence.bench.guard_queues``): a queue is
a row with how to enqueue (in the bench's process) and how to work (in a
worker process, started as ``python -m fence.bench.guard_queues worker ...``).
This module is the bench's side: one run, its counts and times, the report.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from fence.base import evidence
from fence.base.errors import BadInput
from fence.bench.guard_queues import GUARD_NAMESPACE, PLAIN_TABLE, RUNNERS, QueueRunner, pgqueuer_driver

MODES = ("unguarded", "guarded")
STALL_SECONDS = 0.5
"""A worker process idle this long between two of its tasks has stalled (pgqueuer on psycopg: 1 s at a time)."""
RUN_TIME_LIMIT = 900.0
"""Seconds one run may take before its workers are stopped and the bench fails: a stuck worker, not a slow one."""


# -- one run: enqueue, drain with N processes, count and time -------------------------------------
@dataclass(frozen=True)
class Run:
    queue: str
    mode: str
    jobs: int
    runs_per_key: Counter
    """How many times each key's task finished (from the workers' records)."""
    effects_per_key: Counter
    """How many effects the destination holds per key (plain rows, or the guard's commits)."""
    seconds: float
    """Drain time: from the first task's start to the last task's finish."""
    latencies: tuple[float, ...]
    """Enqueue to finish, per job, seconds."""
    task_times: tuple[float, ...]
    """Task start to finish, per job, seconds."""
    stalls: int = 0
    """How many times a worker process sat idle ``STALL_SECONDS`` or more between two of its tasks."""
    all_busy: tuple[int, float] = (0, 0.0)
    """Jobs finished while every worker process was working, and for how long (``_all_busy``)."""

    @property
    def jobs_per_second(self) -> float:
        """The N processes' rate while all of them work; the whole drain's when that window is empty."""
        jobs, seconds = self.all_busy
        return jobs / seconds if jobs and seconds > 0 else self.drain_jobs_per_second

    @property
    def drain_jobs_per_second(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds > 0 else 0.0

    @property
    def counts_right(self) -> bool:
        """Every job ran exactly once, and the destination holds exactly one effect per key."""
        keys = set(_keys(self.jobs))
        return (set(self.runs_per_key) == keys and set(self.runs_per_key.values()) == {1}
                and set(self.effects_per_key) == keys and set(self.effects_per_key.values()) == {1})


def _keys(jobs: int) -> list[str]:
    return [f"k{number}" for number in range(1, jobs + 1)]


def _reset_destination(postgres_url: str) -> None:
    import psycopg

    from fence.guard import Guard

    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA IF NOT EXISTS fence_bench")
        connection.execute(f"DROP TABLE IF EXISTS {PLAIN_TABLE}")
        connection.execute(f"CREATE TABLE {PLAIN_TABLE} (key text NOT NULL, attempt_id text NOT NULL, payload text)")
    guard = Guard.open(postgres_url, namespace=GUARD_NAMESPACE)
    try:
        guard.destination.store.reset()
    finally:
        guard.close()


def _effects_per_key(postgres_url: str, mode: str) -> Counter:
    if mode == "guarded":
        from fence.guard import Guard

        guard = Guard.open(postgres_url, namespace=GUARD_NAMESPACE)
        try:
            return Counter(effect.key for effect in guard.destination.effects())
        finally:
            guard.close()
    import psycopg

    with psycopg.connect(postgres_url) as connection:
        return Counter(key for (key,) in connection.execute(f"SELECT key FROM {PLAIN_TABLE}"))


def run_once(runner: QueueRunner, mode: str, workers: int, jobs: int, urls: dict[str, str],
             scratch: Path, work_seconds: float = 0.0) -> Run:
    """Enqueue ``jobs``, drain them with ``workers`` processes of the library's worker, count and time them."""
    postgres_url, queue_url = urls["postgres"], urls[runner.server]
    _reset_destination(postgres_url)
    keys = _keys(jobs)
    runner.enqueue(queue_url, keys)
    records = [scratch / f"{runner.name}-{mode}-{index}.records" for index in range(workers)]
    logs = [scratch / f"{runner.name}-{mode}-{index}.log" for index in range(workers)]
    for path in records:
        path.unlink(missing_ok=True)
    processes = []
    for index in range(workers):
        with open(logs[index], "w") as log:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "fence.bench.guard_queues", "worker", runner.name, mode, queue_url, postgres_url,
                 str(records[index]), str(index), repr(work_seconds)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            ))
    deadline = time.monotonic() + RUN_TIME_LIMIT
    try:
        while time.monotonic() < deadline:
            finished = sum(_line_count(path) for path in records)
            if runner.stops_when_drained:
                if all(process.poll() is not None for process in processes):
                    break
            elif finished >= jobs or all(process.poll() is not None for process in processes):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"{runner.name} {mode}: not drained within {RUN_TIME_LIMIT:.0f}s")
    finally:
        stopped = set()
        for index, process in enumerate(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                stopped.add(index)
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    # A worker the bench stopped may die of that SIGTERM: one that got it before its library had started (the
    # others had drained the queue meanwhile) has no handler yet. That is the stop asked for, not a failure;
    # what it ran is in its records, which are counted below.
    failed = [(index, process.returncode) for index, process in enumerate(processes)
              if process.returncode != 0 and not (index in stopped and process.returncode == -signal.SIGTERM)]
    if failed:
        index, status = failed[0]
        tail = logs[index].read_text().strip().splitlines()[-15:]
        raise RuntimeError(f"{runner.name} {mode}: worker process {index} exited with {status}:\n" + "\n".join(tail))
    per_process = [[line.split() for line in path.read_text().splitlines()] for path in records if path.exists()]
    rows = [row for process_rows in per_process for row in process_rows]
    tasks_per_process = [[(float(row[2]), float(row[3])) for row in process_rows] for process_rows in per_process]
    enqueued = [float(row[1]) for row in rows]
    started = [float(row[2]) for row in rows]
    ended = [float(row[3]) for row in rows]
    return Run(
        runner.name, mode, jobs, Counter(row[0] for row in rows), _effects_per_key(postgres_url, mode),
        (max(ended) - min(started)) if rows else 0.0,
        tuple(end - enqueue for enqueue, end in zip(enqueued, ended)),
        tuple(end - start for start, end in zip(started, ended)),
        sum(_stalls(tasks) for tasks in tasks_per_process),
        _all_busy(tasks_per_process),
    )


def _all_busy(tasks_per_process: list[list[tuple[float, float]]]) -> tuple[int, float]:
    """Jobs finished from the last process's first start to the first process's last finish, and that time.

    Processes that ran no job are left out (they started after the queue drained).

    Outside it fewer than N processes work: the first one up starts alone,
    and at the end one may still run what it prefetched.
    """
    busy = [tasks for tasks in tasks_per_process if tasks]
    if not busy:
        return 0, 0.0
    opened = max(min(start for start, _ in tasks) for tasks in busy)
    closed = min(max(end for _, end in tasks) for tasks in busy)
    if closed <= opened:
        return 0, 0.0
    return sum(opened < end <= closed for tasks in busy for _, end in tasks), closed - opened


def _stalls(tasks: list[tuple[float, float]]) -> int:
    """How many of one process's tasks started ``STALL_SECONDS`` or more after every earlier one had finished."""
    count, finished = 0, None
    for start, end in sorted(tasks):
        if finished is not None and start - finished >= STALL_SECONDS:
            count += 1
        finished = end if finished is None else max(finished, end)
    return count


def _line_count(path: Path) -> int:
    try:
        with open(path, "rb") as opened:
            return opened.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (p50, p99) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


# -- versions -------------------------------------------------------------------------------------
def server_versions(urls: dict[str, str]) -> dict[str, str]:
    found = {}
    if "postgres" in urls:
        import psycopg

        with psycopg.connect(urls["postgres"]) as connection:
            found["PostgreSQL"] = connection.execute("SHOW server_version").fetchone()[0]
            # What a commit costs depends on them: the project's private cluster runs with both off.
            found["PostgreSQL settings"] = ", ".join(
                f"{name}={connection.execute(f'SHOW {name}').fetchone()[0]}" for name in ("fsync", "synchronous_commit"))
    if "redis" in urls:
        import redis

        with redis.Redis.from_url(urls["redis"]) as client:
            found["Redis"] = client.info("server")["redis_version"]
    return found


# -- the bench ------------------------------------------------------------------------------------
def chosen(names: Sequence[str]) -> tuple[list[QueueRunner], list[str]]:
    """The runners asked for (none: every row) whose library is installed, and a line per one that is not."""
    runners = [RUNNERS[name] for name in (names or RUNNERS)]
    missing = [runner.missing() for runner in runners]
    return [r for r, m in zip(runners, missing) if m is None], [m for m in missing if m]


def guard(queues: Sequence[str], workers: int, jobs: int, repeat: int, given: dict[str, str | None],
          command: str, out: Path, work_ms: float = 0.0) -> int:
    """Every chosen queue, unguarded then guarded, ``repeat`` times; the medians into ``out``."""
    from fence.targets.replay import servers

    runners, missing = chosen(queues)
    if not runners:
        raise BadInput("no queue to run: " + "; ".join(missing))
    for line in missing:
        print(f"fence: not run: {line}", file=sys.stderr)
    if any(runner.name == "pgqueuer" for runner in runners):
        pgqueuer_driver()  # a bad FENCE_BENCH_PGQUEUER_DRIVER is one line before any server starts
    needed = {"postgres"} | {runner.server for runner in runners}
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    results: dict[tuple[str, str], list[Run]] = {}
    started = time.perf_counter()
    with servers(given) as url_of, tempfile.TemporaryDirectory(prefix="fence-bench-guard-") as scratch:
        urls = {server: url_of(server)[0] for server in sorted(needed)}
        where = {server: url_of(server)[1] for server in sorted(needed)}
        versions = server_versions(urls)
        for runner in runners:
            for round_number in range(1, repeat + 1):
                for mode in MODES:
                    run = run_once(runner, mode, workers, jobs, urls, Path(scratch), work_ms / 1000)
                    results.setdefault((runner.name, mode), []).append(run)
                    print(f"[{runner.name} {mode} {round_number}/{repeat}] {run.jobs_per_second:.0f} jobs/s "
                          f"({run.all_busy[0]} jobs in {run.all_busy[1]:.2f} s with every process at work; drain "
                          f"{run.drain_jobs_per_second:.0f} jobs/s), "
                          f"{'counts right' if run.counts_right else 'COUNTS WRONG'}, {run.stalls} stall(s)",
                          file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    on_asyncpg = "pgqueuer" in {runner.name for runner in runners} and pgqueuer_driver() == "asyncpg"
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    lines = [
        *evidence.header(command, packages=("fence", "psycopg", "redis", *(r.library for r in runners),
                                            *(("asyncpg",) if on_asyncpg else ()))),
        f"# servers: {', '.join(f'{name} {version}' for name, version in versions.items())}; "
        + "; ".join(where[server] for server in sorted(where)),
        *([f"# load average (1 min) before/after: {load[0]:.1f} / {load_after[0]:.1f} on {os.cpu_count()} cpu(s): "
           "the machine was shared, so compare a queue's two modes (run back to back), not figures across machines"]
          if load and load_after else []),
        f"# each queue: {jobs} jobs enqueued, then drained by {workers} worker process(es), unguarded then guarded, "
        f"{repeat} round(s); figures are the medians of the rounds",
        "# effect: one row in PostgreSQL for both modes. unguarded: one INSERT (1 statement, 1 round trip); guarded:",
        "#   fence.guard's attempt (1 statement: the attempt's upsert) and commit (1 statement: the attempt in flight ->",
        "#   committed and the fenced INSERT; only a refused commit runs the judged transaction that reads the key's",
        "#   first payload), schema fence_bench_guard, one connection per worker thread. The recipes' own reads,",
        "#   guarded only: pgqueuer's guarded_attempt reads the job's picks from pgqueuer's log in the attempt's",
        "#   registration statement (Guard.attempt_if: the guard's database is pgqueuer's, checked once per worker),",
        "#   no statement of its own; DBOS's step names its attempt from DBOS's context (its claim's token), reading nothing",
        (f"# task work: {work_ms:g} ms before the effect in both modes (time.sleep in a sync worker, asyncio.sleep in"
         " pgqueuer's and arq's): a task that does something besides its write" if work_ms else
         "# task work: none (the cheapest task: its write alone, so the guard's round trips are the largest fraction"
         " they can be)"),
        "# jobs/s: jobs finished while every worker process worked (from the last process's first task start to the",
        "#   first process's last task finish) over that time; drain jobs/s: all jobs over first start to last finish",
        "# p50/p99 ms: enqueue to finish per job; every job is enqueued before the workers start, so this is mostly",
        "#   the workers' start-up and the wait behind the backlog, not the guard",
        "# task p50/p99 ms: the task's own start to finish, the effect included: the guard's price per job",
        "# worker processes: " + "; ".join(
            f"{runner.name}: {runner.worker}" + (f" on {pgqueuer_driver()}" if runner.name == "pgqueuer" else "")
            for runner in runners),
        *(["# pgqueuer's manager ran on psycopg's driver (asyncpg is not installed, or FENCE_BENCH_PGQUEUER_DRIVER",
            "#   chose it), whose NOTIFY watcher can stall a drain 1 s at a time: see the stalled rounds, and",
            "#   fence.bench.guard_cost"]
          if "pgqueuer" in {runner.name for runner in runners} and not on_asyncpg else []),
        *(f"# not run: {line}" for line in missing),
        f"# wall time {wall:.0f}s",
        "",
        "# jobs/s range: the slowest and fastest round (the spread the shared machine put on it); stalled: rounds in",
        f"#   which a worker process sat idle {STALL_SECONDS:g} s or more between two of its tasks (kept in the medians)",
        f"{'queue':14} {'mode':10} {'jobs/s':>8} {'range':>11} {'drain jobs/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'task p50 ms':>12} {'task p99 ms':>12} "
        f"{'guarded/unguarded':>18}  counts",
    ]
    wrong = 0
    below_goal = []
    for runner in runners:
        medians = {}
        for mode in MODES:
            runs = results[(runner.name, mode)]
            medians[mode] = statistics.median(run.jobs_per_second for run in runs)
            right = sum(run.counts_right for run in runs)
            wrong += len(runs) - right
            ratio = medians["guarded"] / medians["unguarded"] if mode == "guarded" and medians["unguarded"] else None
            if ratio is not None and ratio < 0.8:
                below_goal.append(runner.name)
            lines.append(
                f"{runner.name:14} {mode:10} {medians[mode]:>8.1f} "
                f"{min(r.jobs_per_second for r in runs):>5.0f}-{max(r.jobs_per_second for r in runs):<5.0f} "
                f"{statistics.median(r.drain_jobs_per_second for r in runs):>12.1f} "
                f"{1000 * statistics.median(_percentile(r.latencies, 0.50) for r in runs):>8.1f} "
                f"{1000 * statistics.median(_percentile(r.latencies, 0.99) for r in runs):>8.1f} "
                f"{1000 * statistics.median(_percentile(r.task_times, 0.50) for r in runs):>12.2f} "
                f"{1000 * statistics.median(_percentile(r.task_times, 0.99) for r in runs):>12.2f} "
                f"{(f'{ratio:.2f}' if ratio is not None else ''):>18}  "
                f"{right}/{len(runs)} rounds: every job once, one effect per key"
                + (f"; {stalled} round(s) stalled" if (stalled := sum(run.stalls > 0 for run in runs)) else "")
            )
    lines += [
        "",
        "Goal (issue 27): guarded throughput at least 80% of unguarded on the same server: "
        + (f"below it: {', '.join(below_goal)}" if below_goal else "met by every queue run"),
        f"SUMMARY queues={len(runners)} rounds_with_wrong_counts={wrong} below_goal={len(below_goal)}",
    ]
    text = "\n".join(lines)
    evidence.write_atomically(out, text + "\n")
    print(text)
    return 0 if wrong == 0 else 1

