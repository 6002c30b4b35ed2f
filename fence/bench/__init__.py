"""Benchmarks: commands that write their figures into evidence/, never timed tests.

* ``detection``             how reliably Hypothesis finds each expected violation, over many seeds
* ``counterexample_times``  time to a first, a minimised and a proved-shortest counterexample
* ``explorer_cost``         the explorer's states per second, wall time, memory, and the state space's growth
* ``suite_time``            the test suite's wall time
* ``guard_cost``            what ``fence.guard`` costs per job on each shipped queue's own worker: runs, counts, report
* ``guard_queues``          those queues as a table (``RUNNERS``); the worker process
* ``guard_postgres_queues`` procrastinate, pgqueuer and DBOS: enqueue and work through each library
* ``guard_redis_queues``    celery, dramatiq and arq, the same
* ``guard_effect``          what each task writes, unguarded or guarded, and the record of each job
* ``figures``               what they share: a spread of runs printed, the figures written to evidence/
* ``pictures``              timelines and plots of the above (the optional ``plots`` extra)

The process fleet under SIGKILLs (``fence bench fleet``) is ``fence.live.fleet_bench``.
"""
