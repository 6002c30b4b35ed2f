"""Verdicts: both engines on a policy (fence's or a user's) and turned into one matrix.

* ``verdicts``  Hypothesis runs per policy and configuration turned into a verdict per invariant,
                a run's Hypothesis settings, and the bounds the explorer proves within
* ``expected``  the expected matrix (``fence/expected_verdicts.txt``), and a run's differences from it
* ``checking``  both engines, the machines and the explorer, on policies and plug-ins, as
                ``fence check``, ``fence verdicts`` and ``fence.testing`` run them

Imports from ``fence.explore`` and the floors below it.
"""
