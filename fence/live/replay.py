"""A saved counterexample played through the model ``World`` on real threads and the real clock.

One thread per actor (each worker attempt, each janitor, the network, the
clock) takes its turn in trace order, every tick is a real sleep, and the same
named invariant is checked after each step: the model's counterexample shown to
break on real threads, not only in the search that found it.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

from fence.search import counterexample
from fence.base.errors import BadInput, IllegalMove, StaleAttempt
from fence.model.invariants import BY_NAME
from fence.model.policies import POLICIES, JanitorPolicy
from fence.model.world import InapplicableAction, Tick, World


@dataclass
class ReplayStep:
    index: int
    t: float
    actor: str
    now: int
    sentence: str
    broken: str | None = None


@dataclass
class ReplayResult:
    policy: str
    invariant: str
    tick: float
    steps: list[ReplayStep]
    violation: str | None
    broke_at: int | None
    clock_problems: list[str]
    threads: int


def replay_real(path, tick: float = 0.05, policies: dict[str, JanitorPolicy] = POLICIES) -> ReplayResult:
    """Play a saved counterexample on real threads and the real clock.

    One thread per actor (each worker attempt, each janitor, the network, the
    clock) takes its turn in trace order; a tick is a real sleep of ``tick``
    seconds per tick, and the World's clock is checked against the monotonic
    clock scaled to ticks. The named invariant is checked after every step.
    """
    policy, config, invariant, actions, drains = counterexample.load(path, policies)
    inv = BY_NAME[invariant]
    world = World(policy, config, *counterexample.load_plugins(path))
    handles: collections.Counter = collections.Counter()
    actors = [a.actor(handles) for a in actions]
    turn = threading.Condition()
    state = {"next": 0, "stop": False, "error": None, "broke_at": None, "violation": None}
    steps: list[ReplayStep] = []
    clock_problems: list[str] = []
    t0 = time.monotonic()

    def real_ticks() -> float:
        return (time.monotonic() - t0) / tick

    def play(name: str, indices: list[int]) -> None:
        for index in indices:
            with turn:
                while state["next"] != index and not state["stop"]:
                    turn.wait(0.5)
                if state["stop"]:
                    return
            action = actions[index]
            if isinstance(action, Tick):
                # Sleep until the real clock reaches the tick the World will show.
                target = (world.now + action.by) * tick
                time.sleep(max(0.0, target - (time.monotonic() - t0)))
            with turn:
                try:
                    if drains[index] and not world.draining:
                        world.start_draining()  # what World.drain() does before its steps
                    if isinstance(action, Tick) and action not in world.enabled("tick"):
                        step = world.apply_unbounded_tick(action.by)
                    else:
                        step = world.apply(action)
                except (InapplicableAction, IllegalMove, StaleAttempt) as error:
                    state["error"] = f"step {index + 1} ({action.to_dict()}) does not replay: {error}"
                    state["stop"] = True
                    turn.notify_all()
                    return
                if real_ticks() + 1e-9 < world.now:
                    clock_problems.append(f"step {index + 1}: world at t={world.now}, real clock at {real_ticks():.2f} ticks")
                if action.kind == "scan":
                    deadline = world.ledger.get(action.reservation).deadline
                    if real_ticks() + 1e-9 < deadline:
                        clock_problems.append(f"step {index + 1}: scanned before the real deadline")
                broken = None if inv.at_teardown else inv.check(world)
                steps.append(ReplayStep(index + 1, time.monotonic() - t0, name, world.now, step.sentence, broken))
                if broken:
                    state["violation"], state["broke_at"], state["stop"] = broken, index + 1, True
                state["next"] += 1
                turn.notify_all()

    by_actor: dict[str, list[int]] = {}
    for index, name in enumerate(actors):
        by_actor.setdefault(name, []).append(index)
    threads = [threading.Thread(target=play, args=(n, ix), daemon=True) for n, ix in by_actor.items()]
    for thread in threads:
        thread.start()
    budget = sum(a.by for a in actions if isinstance(a, Tick)) * tick + 30
    for thread in threads:
        thread.join(max(0.1, budget - (time.monotonic() - t0)))
    if any(t.is_alive() for t in threads):
        with turn:
            state["stop"] = True
            turn.notify_all()
        raise BadInput(f"{path}: the real replay did not finish within {budget:.0f}s; the steps may be out of order")
    if state["error"]:
        raise BadInput(f"{path}: {state['error']}")
    if inv.at_teardown and state["violation"] is None:
        if not any(drains):
            world.drain()  # an old file without its drain steps: the World drains logically
        broken = inv.check(world)
        if broken:
            state["violation"], state["broke_at"] = broken, len(actions)
    return ReplayResult(
        policy.name, invariant, tick, steps, state["violation"], state["broke_at"], clock_problems, len(threads)
    )
