"""Benchmarks: commands that write their figures into evidence/, never timed tests.

* ``benchmarks``  detection over seeds, time to a counterexample, the explorer's states per second,
                  the process fleet under SIGKILLs, the suite's wall time
* ``guard_cost``  what ``fence.guard`` costs per job on each shipped queue's own worker: runs, counts, the report
* ``guard_queues`` those queues (``RUNNERS``): enqueue and work through each library, and the worker process
* ``pictures``    timelines and plots of the above (the optional ``plots`` extra)
"""
