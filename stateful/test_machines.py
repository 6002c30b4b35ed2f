"""The machines as plain Hypothesis tests, as the stateful docs expose them.

``TestAbandonFenced`` is the policy that must hold every invariant: pytest runs
its machine under the active profile and fails with a shrunk, narrated
counterexample if any invariant breaks. The verdict gate (tests/test_gate.py)
runs every policy; this file is the quickest way to poke one machine by hand:
``pytest stateful -k AbandonFenced --hypothesis-show-statistics``.
"""

from fence.model.policies import POLICIES
from fence.model.world import ModelConfig
from stateful.machines import machine_for

TestAbandonFenced = machine_for(POLICIES["abandon-fenced"], ModelConfig(capacity=1, jobs=1)).TestCase
TestAbandonFencedTwoUnits = machine_for(POLICIES["abandon-fenced"], ModelConfig(capacity=2, jobs=2)).TestCase
# Workers that may also fail and report it (``ModelConfig.failures``): the safe policy must still hold.
TestAbandonFencedWithFailures = machine_for(
    POLICIES["abandon-fenced"], ModelConfig(capacity=1, jobs=1, failures=True)
).TestCase
