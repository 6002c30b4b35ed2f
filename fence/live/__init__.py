"""Live runs: fence's core on the real clock, with real threads and real OS processes.

What the models decide step by step, a live run lets happen, and writes down as
facts that the same invariants judge. The modules, bottom up:

* ``facts``          ``LiveRun``: a real-clock run's facts, judged by ``INVARIANTS``
* ``results``        ``TrialResult``, ``VariantResult``, the evidence line helpers, and the
                     close of a row against the article's counts
* ``threads``        ``ThreadRun``: worker threads, one janitor loop, one ledger and one
                     destination on the real clock (the only harness that sleeps in-process)
* ``experiments``    the article's three experiments, once each, run on the engine they are given
* ``thread_trials``  ``THREADS``, the engine whose trials run on a ``ThreadRun``
* ``messages``       the child's reports and the parent's orders, as typed records
* ``children``       the child side: a worker or a janitor as an OS process on the database
* ``hands``          the parent's side: children spawned, listened to, SIGKILLed, reaped
* ``causal``         children's reports written down as facts in causal order; the audit
* ``process_trials`` ``Processes(url)``, the engine whose trials run on OS processes
* ``databases``      which database a process run uses, its restart, its evidence name
* ``fleet_bench``    ``fleet``: many processes, random SIGKILLs, a restart (``fence bench fleet``)
* ``replay``         ``replay_real``: a saved counterexample played on real threads

Exported here: the names of the in-memory side below. The process side imports
the database drivers, so it is imported from its own modules when it is used.
"""

from fence.live.experiments import EXPERIMENTS, contention, crash_boundary, delayed_commit
from fence.live.facts import LiveRun
from fence.live.replay import replay_real
from fence.live.results import TrialResult, VariantResult
from fence.live.thread_trials import THREADS
from fence.live.threads import AttemptSpec, ThreadRun

__all__ = [
    "EXPERIMENTS",
    "THREADS",
    "AttemptSpec",
    "LiveRun",
    "ThreadRun",
    "TrialResult",
    "VariantResult",
    "contention",
    "crash_boundary",
    "delayed_commit",
    "replay_real",
]
