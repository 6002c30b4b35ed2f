"""The exhaustive explorer: every interleaving of the one model within bounds, breadth first.

* ``walk``          ``explore()`` and the breadth-first walk; its docstring is the theory of operation
* ``results``       what a walk concludes (``Exploration``, ``Outcome``, a verdict per invariant)
* ``judging``       each broken invariant's shortest path, replayed from scratch as its counterexample
* ``report``        an exploration in words, one progress line per level, and its JSON
* ``state_key``     what a world's future depends on, as one hashable value (and ``whole_state``, its check)
* ``whole_state``   every field of a World read mechanically: the reference the key is tested against
* ``congruence``    the hand-kept key held against the whole state
* ``transitions``   the memo of job-local steps: a step into a state seen before costs a lookup
* ``successors``    a state's successors, each judged, by clone and step or from the step memo
* ``world_walk``    the walk over World objects (one job; a user's plug-ins)
* ``plugin_memo``   the generic path's step memo: a job's step with plug-ins answered from what it did before
* ``abstract``      the abstract walk: states held by their readings, a World built only on a memo miss
* ``faithfulness``  whether a user's plug-ins can be walked as copies: sampled copies and merges replayed
* ``drain_judge``   invariant 6 per state: the model's own drain, memoised by drain round
* ``drain_memo``    the drain judge's memo in flat arrays, at most two generations
* ``visited``       fingerprints of state keys, the parents, the frontier that spills to disk
* ``workers``       levels shared between worker processes
* ``partitioned``   levels partitioned by fingerprint between processes or Ray actors: the coordinator
* ``partition``     one partition: the states it owns, expanded and judged from its own memos
* ``transports``    how partitions run and talk: processes over pipes, or Ray actors

Imports from ``fence.search``, ``fence.model`` and ``fence.base``.
"""
