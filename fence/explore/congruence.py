"""The explorer's hand-kept key held against every field of the state: states one key merges must step, find and drain alike."""

from __future__ import annotations

from typing import Callable

from fence.explore.drain_judge import drain_plainly
from fence.model.invariants import INVARIANTS, Invariant
from fence.model.policies import JanitorPolicy
from fence.explore.state_key import state_key
from fence.explore.whole_state import whole_state
from fence.model.world import ModelConfig, World


def key_congruence(
    policy: JanitorPolicy, config: ModelConfig, *, symmetry: bool = False, invariants: tuple[Invariant, ...] = INVARIANTS,
    key: Callable[[World, bool], tuple] | None = None, most: int = 10,
) -> tuple[int, list[str]]:
    """Whether the hand-kept key only merges states with the same future, at these bounds: (states, differences).

    Walks every reachable state by ``whole_state`` (every field, every enabled
    action) and groups the states by ``state_key``. Merging a group is sound
    when its states are alike to every judge: the same keys one step away, each
    step breaking the same step invariants, and the same drain (invariant 6 and
    whether it settles). A step that leads back to the same key is left out
    unless it breaks an invariant the state did not already break: it changes
    nothing the key holds (a settle refused on an answer gone stale is one, and
    a registration delivered to a destination that keeps no witness). Each group's first state is compared with
    every other; the walk stops at the ``most``-th difference. ``key`` replaces
    ``state_key`` (a test breaks it to see this fail).
    """
    key = key or state_key
    step_invariants = [inv for inv in invariants if not inv.at_teardown]
    teardown_invariants = [inv for inv in invariants if inv.at_teardown]
    root = World(policy, config)
    if not root.fast_copy_is_faithful():
        raise ValueError("key_congruence reads fence's own parts only; a user's plug-ins take the generic path")
    seen = {whole_state(root)}
    frontier = [root]
    first_of: dict[tuple, tuple] = {}
    differences: list[str] = []
    states = 0
    while frontier:
        following = []
        for world in frontier:
            states += 1
            own_key = key(world, symmetry)
            present = world.clone(history=False)  # no findings: only a present-state invariant can fire
            broken_already = {inv.name for inv in step_invariants if inv.check(present)}
            steps = set()
            for action in world.enabled_actions():
                child = world.clone(history=False)
                child.apply(action)
                broken = tuple(inv.name for inv in step_invariants if inv.check(child))
                child_key = key(child, symmetry)
                if child_key != own_key:
                    steps.add((child_key, broken))
                elif set(broken) - broken_already:  # a step that changes nothing the key holds, but records a finding
                    steps.add((child_key, broken))
                whole = whole_state(child)
                if whole not in seen:
                    seen.add(whole)
                    following.append(child)
            drain = drain_plainly(world, teardown_invariants)
            first = first_of.setdefault(own_key, (frozenset(steps), drain))
            if (first[0], first[1]) != (frozenset(steps), drain):
                only_first, only_this = len(first[0] - steps), len(steps - first[0])
                differences.append(
                    f"one key merges states that differ: {only_first} step(s) only from the first, {only_this} only "
                    f"from another, drains {first[1]} and {drain} (key {own_key!r})"
                )
                if len(differences) >= most:
                    return states, differences
        frontier = following
    return states, differences
