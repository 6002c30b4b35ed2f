"""Make a found counterexample short: delta debugging over the world's own actions.

Hypothesis finds a violating run; its trace is then minimised here by replaying
candidate action lists through a fresh ``World`` (the same model, no copy):
drop a chunk of steps, merge two adjacent clock ticks into one, and keep any
candidate that still replays exactly (every action enabled at its turn) and
still breaks the same invariant. For a step invariant the replay stops at the
first step that breaks it, so a candidate is also cut to its violation.

The result is 1-minimal (removing any single step loses the violation), which
is what a reader wants; it is not proved shortest -- that is the explorer's job.
A replay is a few dozen world steps with no Hypothesis in the loop, so this
takes milliseconds where Hypothesis' generic shrinker takes tens of seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from fence.model.destination import Destination, Guards
from fence.model.invariants import Invariant
from fence.model.ledger import Ledger
from fence.model.policies import JanitorPolicy
from fence.model.world import Action, ModelConfig, Step, Tick, World

MAX_REPLAYS = 5000


@dataclass(frozen=True)
class Replayed:
    world: World
    message: str
    actions: tuple[Action, ...]
    """The chosen actions up to (and including) the one that broke the invariant."""


class NotEnabled(Exception):
    """An action of a replayed run was not enabled at its turn: the run is not one of this world's."""

    def __init__(self, index: int, action: Action, now: int) -> None:
        super().__init__(f"step {index + 1} ({action.to_dict()}) is not enabled at t={now}")
        self.index = index
        self.action = action


def play(world: World, actions: Sequence[Action], invariant: Invariant,
         each_step: Callable[[int, Step], None] | None = None) -> Replayed | None:
    """The one replay loop: ``actions`` on ``world`` in order, until ``invariant`` breaks.

    A step invariant is checked after every step and stops the run at the first
    that breaks it; a teardown invariant after the drain that ends the run.
    Returns the violation, or None if the run ends without one; raises
    ``NotEnabled`` at an action not enabled at its turn. ``each_step`` is told
    each step as it is taken. The minimiser, the engines' replays of what they
    found, ``fence replay`` on fence's model and on a target's real system all
    play a run through here, on whichever world they made.
    """
    for index, action in enumerate(actions):
        if action not in world.enabled(action.kind):
            raise NotEnabled(index, action, world.now)
        step = world.apply(action)
        if each_step is not None:
            each_step(index, step)
        if not invariant.at_teardown:
            message = invariant.check(world)
            if message:
                return Replayed(world, message, tuple(actions[: index + 1]))
    if invariant.at_teardown:
        world.drain()
        message = invariant.check(world)
        if message:
            return Replayed(world, message, tuple(actions))
    return None


def replay_actions(
    policy: JanitorPolicy,
    config: ModelConfig,
    actions: Sequence[Action],
    invariant: Invariant,
    destination_factory: Callable[[Guards], Destination] | None = None,
    ledger_factory: Callable[[int], Ledger] | None = None,
) -> Replayed | None:
    """Play ``actions`` on a fresh world; the violation of ``invariant``, or None.

    None also when some action is not enabled at its turn: the candidate is not
    a run of the model, so it proves nothing.
    """
    world = World(policy, config, destination_factory, ledger_factory)
    try:
        return play(world, actions, invariant)
    except NotEnabled:
        return None


def minimise(
    policy: JanitorPolicy,
    config: ModelConfig,
    actions: Sequence[Action],
    invariant: Invariant,
    destination_factory: Callable[[Guards], Destination] | None = None,
    ledger_factory: Callable[[int], Ledger] | None = None,
) -> Replayed:
    """The shortest variant of ``actions`` this search finds that still breaks ``invariant``."""

    def replay(candidate: Sequence[Action]) -> Replayed | None:
        return replay_actions(policy, config, candidate, invariant, destination_factory, ledger_factory)

    best = replay(actions)
    if best is None:
        raise ValueError(f"the trace does not break {invariant.name} when replayed")
    replays = 1

    def attempt(candidate: list[Action]) -> bool:
        nonlocal best, replays
        replays += 1
        result = replay(candidate)
        if result is not None and len(result.actions) < len(best.actions):
            best = result
            return True
        return False

    improved = True
    while improved and replays < MAX_REPLAYS:
        improved = False
        current = list(best.actions)
        # Drop chunks, largest first (ddmin's complement step).
        size = max(1, len(current) // 2)
        while size >= 1 and replays < MAX_REPLAYS:
            start = 0
            while start < len(current) and replays < MAX_REPLAYS:
                if attempt(current[:start] + current[start + size :]):
                    current = list(best.actions)
                    improved = True
                else:
                    start += size
            size //= 2
        # Merge adjacent ticks: one longer tick is one step fewer.
        index = 0
        while index < len(current) - 1 and replays < MAX_REPLAYS:
            first, second = current[index], current[index + 1]
            if isinstance(first, Tick) and isinstance(second, Tick):
                if attempt(current[:index] + [Tick(first.by + second.by)] + current[index + 2 :]):
                    current = list(best.actions)
                    improved = True
                    continue
            index += 1
    return best
