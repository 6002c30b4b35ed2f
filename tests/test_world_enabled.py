"""``World.is_enabled`` answers one action; ``World.enabled`` lists a kind: the two must agree on every state.

``apply`` asks ``is_enabled`` (cheap for a worker's step or a delivery) before
it changes anything, so an answer that differs from the list would let an
engine apply a step no rule offers, or refuse one it does. Every state of a
small breadth-first walk is asked about every action that names an attempt it
holds (enabled or not), on a world whose list was never computed.
"""

from __future__ import annotations

from collections import deque

import pytest

from fence.model.policies import POLICIES
from fence.explore.state_key import state_key
from fence.model.world import (
    ACTION_KINDS,
    Confirm,
    Crash,
    Deliver,
    Fail,
    ModelConfig,
    SendCommit,
    Start,
    World,
)

BOUNDS = [
    ModelConfig(capacity=1, jobs=1, max_attempts=3, horizon=3, failures=True),
    ModelConfig(capacity=2, jobs=2, max_attempts=2, horizon=2),
]


def _candidates(world: World) -> list:
    """Every one-attempt action on every attempt the world knows: enabled ones and others."""
    actions = []
    for handle in world.attempts:
        actions += [Start(handle), SendCommit(handle), Confirm(handle), Crash(handle), Fail(handle)]
        actions += [Deliver(message, handle) for message in ("register", "commit", "ack")]
    return actions


@pytest.mark.parametrize("policy", ["naive", "reconcile", "abandon-fenced"])
@pytest.mark.parametrize("config", BOUNDS, ids=lambda c: f"{c.capacity}x{c.jobs}x{c.max_attempts}h{c.horizon}")
def test_one_actions_answer_equals_its_kinds_list(policy, config):
    root = World(POLICIES[policy], config)
    queue, seen, states, asked_enabled, asked_not = deque([root]), set(), 0, 0, 0
    while queue and states < 400:
        world = queue.popleft()
        states += 1
        for action in _candidates(world):
            fresh = world.clone(history=False)  # no list computed: is_enabled takes its own path
            answer = fresh.is_enabled(action)
            assert answer == (action in world.enabled(action.kind)), (action, world.trace[-3:])
            asked_enabled += answer
            asked_not += not answer
        for kind in ACTION_KINDS:
            for action in world.enabled(kind):
                child = world.clone(history=False)
                child.apply(action)
                key = state_key(child)
                if key not in seen:
                    seen.add(key)
                    queue.append(child)
    # Both answers were given many times, for worker steps and deliveries alike.
    assert states == 400 and asked_enabled > 100 and asked_not > 100, (states, asked_enabled, asked_not)
