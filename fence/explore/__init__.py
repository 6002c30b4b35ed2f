"""The exhaustive explorer: every interleaving of the one model within bounds, breadth first.

* ``walk``           ``explore()`` and the breadth-first walk; proofs within bounds, shortest counterexamples
* ``state_key``      what a world's future depends on, as one hashable value (and ``whole_state``, its check)
* ``transitions``    the memo of job-local steps: a step into a state seen before costs a lookup
* ``abstract``       the abstract walk: states held by their readings, a World built only on a memo miss
* ``drain_judge``    invariant 6 per state: the model's own drain, memoised by drain round
* ``visited``        fingerprints of state keys, the parents, the frontier that spills to disk
* ``partitioned``    levels shared between processes or Ray actors, each state owned by its fingerprint

``walk``'s module docstring is the theory of operation. Imports from
``fence.search``, ``fence.model`` and ``fence.base``.
"""
