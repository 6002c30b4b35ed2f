"""The abstract walk's kept Worlds (issue 28): capped, without history, rebuilt on demand, results unchanged."""

from fence.explore import abstract_worlds
from fence.explore.abstract import AbstractWalk
from fence.explore.walk import explore
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig

CONFIG = ModelConfig(capacity=2, jobs=2, max_attempts=1, horizon=2)


def _concluded(found) -> tuple:
    return (found.states, found.transitions, found.depth, found.drains_unsettled,
            {name: (result.outcome, result.depth) for name, result in found.results.items()})


def test_a_walk_that_keeps_four_worlds_rebuilds_the_rest_and_concludes_the_same(monkeypatch):
    policy = POLICIES["witness-fenced"]  # violates invariant 6 and two step invariants here
    whole = explore(policy, CONFIG, symmetry=True)
    monkeypatch.setattr(AbstractWalk, "kept_worlds", 4)
    capped = explore(policy, CONFIG, symmetry=True)
    assert capped.rebuilt > whole.rebuilt + 100
    assert _concluded(capped) == _concluded(whole)


def test_kept_worlds_hold_no_trace(monkeypatch):
    """Every World kept (built for a new state, or replayed with its whole path) drops its steps' records."""
    kept = []
    keep = abstract_worlds.WorldsOfEntries.keep_world

    def keep_and_look(self, node, world):
        keep(self, node, world)
        kept.append(len(world.trace))

    monkeypatch.setattr(abstract_worlds.WorldsOfEntries, "keep_world", keep_and_look)
    monkeypatch.setattr(AbstractWalk, "kept_worlds", 16)  # replays too
    found = explore(POLICIES["abandon-fenced"], CONFIG, symmetry=True)
    assert found.rebuilt > 0 and len(kept) > 100
    assert set(kept) == {0}
