"""Tasks on worker processes, reported as each finishes, and stopped at once and quietly.

A Ctrl-C at a terminal sends SIGINT to every process of the foreground group:
with a plain ``ProcessPoolExecutor`` each worker raised KeyboardInterrupt and
printed a traceback of its own (up to 73 lines for one Ctrl-C), and the
parent's ``with`` block then waited for the work already started. Here the
workers ignore SIGINT, so only this process hears it; on any exception here
(KeyboardInterrupt included) the workers are terminated before it propagates,
so nothing is left running and nothing more is printed.
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator, Sequence


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_tasks(function: Callable[[Any], Any], tasks: Sequence[Any], workers: int) -> Iterator[tuple[int, Any]]:
    """``(index, function(task))`` for each task as it finishes; in this process if ``workers < 2``.

    ``function`` and the tasks must pickle (by reference: the workers are
    forked where the platform allows, so a user's plug-in module registered in
    ``sys.modules`` is found there). An exception in a task is raised here.
    """
    if workers < 2 or len(tasks) < 2:
        for index, task in enumerate(tasks):
            yield index, function(task)
        return
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context, initializer=_ignore_sigint)
    try:
        pending = {pool.submit(function, task): index for index, task in enumerate(tasks)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=pending.__getitem__):
                yield pending.pop(future), future.result()
    except BaseException:  # Ctrl-C, a task's error, or the caller gave up on us (GeneratorExit)
        _terminate(pool)
        raise
    pool.shutdown(wait=True)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop every worker now, whatever it is doing, and forget the queued tasks."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=5)
