"""Showing a lockstep difference again on fresh worlds, the difference found before any step included.

The lockstep machine compares the world under test with the model before its
first step, so a world under test that starts wrong is reported with an empty
run. Its replay must compare the fresh worlds too: a replay that only compared
after steps reported such a finding as "DID NOT REPLAY" (and ``fence targets``
exited 1 for it).
"""

from __future__ import annotations

from fence import Ledger
from fence.search.lockstep import replay_in_lockstep
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig, Reserve, World

ONE = ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2)


class StartsOneUnitShort(Ledger):
    """A user's ledger that reports a unit held before anything was reserved (a row left over from setup)."""

    @property
    def free(self):
        return super().free - 1


def test_a_world_that_starts_wrong_is_shown_again_with_no_step():
    policy = POLICIES["naive"]
    found = replay_in_lockstep([], World(policy, ONE, ledger_factory=StartsOneUnitShort), World(policy, ONE))
    assert found is not None and found.trace == ()
    assert found.what == "enabled actions"  # no unit free: the world under test cannot reserve
    assert "units held and free: the model has (0, 1), the world under test (0, 0)" in found.detail


def test_worlds_that_start_alike_and_step_alike_show_nothing():
    policy = POLICIES["naive"]
    assert replay_in_lockstep([Reserve("job1")], World(policy, ONE, ledger_factory=Ledger), World(policy, ONE)) is None
