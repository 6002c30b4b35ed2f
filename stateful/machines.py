"""Hypothesis state machines over the fence model.

``machine_for(policy, config, checked)`` builds a ``RuleBasedStateMachine`` with
one rule per kind of world action (reserve, start, send_commit, deliver,
lose_ack, confirm, crash, tick, scan, probe, settle, retry). Each rule is enabled
only when the world offers at least one action of its kind, and its ``pick``
argument chooses among them, so no draw is wasted and shrinking moves towards
the first enabled action. The rule bodies are one line: the world does the work,
so these machines, the explorer and a replayed counterexample all run the same
model.

Every step is noted as a sentence (``note``) and counted (``event``), so a
failing run reads as a story and ``--hypothesis-show-statistics`` shows what was
covered. An invariant that breaks raises ``InvariantViolation`` carrying the
world's trace: Hypothesis re-raises it from its final, shrunk replay, so the
trace in hand is the shrunk counterexample.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fence._destination import Destination, Guards
from fence._invariants import INVARIANTS, Invariant
from fence._policies import JanitorPolicy
from fence._world import ACTION_KINDS, ModelConfig, Step, World

PICK = st.integers(min_value=0, max_value=15)


class InvariantViolation(AssertionError):
    """An invariant broke; carries the world's trace up to (and including) that step."""

    def __init__(self, invariant: Invariant, message: str, world: World) -> None:
        super().__init__(f"invariant {invariant.label} violated: {message}")
        self.invariant = invariant
        self.message = message
        self.trace: list[Step] = list(world.trace)
        self.world = world


class FleetMachine(RuleBasedStateMachine):
    """Base machine; ``machine_for`` makes a subclass per policy and configuration."""

    policy: JanitorPolicy
    config: ModelConfig
    checked: tuple[Invariant, ...] = INVARIANTS
    destination_factory: Callable[[Guards], Destination] | None = None
    reached: Counter
    runs: int

    def __init__(self) -> None:
        super().__init__()
        self.world = World(self.policy, self.config, self.destination_factory)
        type(self).runs += 1

    def _act(self, kind: str, pick: int) -> None:
        options = self.world.enabled(kind)
        step = self.world.apply(options[pick % len(options)])
        note(f"t={step.now}: {step.sentence}")
        event(f"rule {kind}")

    @invariant()
    def invariants_hold(self) -> None:
        for inv in self.checked:
            if not inv.at_teardown:
                message = inv.check(self.world)
                if message:
                    raise InvariantViolation(inv, message, self.world)

    def teardown(self) -> None:
        reached = Counter(self.world.reached)
        type(self).reached.update(reached)
        for name in reached:
            event(f"reached {name}")
        if not any(inv.at_teardown for inv in self.checked):
            return
        # Only the teardown invariant is judged after the drain: the drain is a
        # fault-free schedule of ordinary actions, and a counterexample for the
        # step invariants must be found by the chosen steps, not by the drain.
        settled = self.world.drain()
        for inv in self.checked:
            message = inv.at_teardown and inv.check(self.world)
            if message:
                if not settled:
                    message += " (the drain found no fixed point: it kept making new attempts)"
                raise InvariantViolation(inv, message, self.world)


def _make_rule(kind: str):
    def body(self: FleetMachine, pick: int) -> None:
        self._act(kind, pick)

    body.__name__ = kind
    body.__doc__ = f"Apply one enabled '{kind}' action of the world."
    enabled = precondition(lambda self: bool(self.world.enabled(kind)))
    return enabled(rule(pick=PICK)(body))


@precondition(lambda self: not self.world.enabled_actions())
@rule()
def idle(self: FleetMachine) -> None:
    """The world is quiescent (everything finished, clock at its horizon): wait."""
    event("rule idle")


FleetMachine.idle = idle

for _kind in ACTION_KINDS:
    setattr(FleetMachine, _kind, _make_rule(_kind))
del _kind


def machine_for(
    policy: JanitorPolicy,
    config: ModelConfig = ModelConfig(),
    checked: Iterable[Invariant] = INVARIANTS,
    destination_factory: Callable[[Guards], Destination] | None = None,
) -> type[FleetMachine]:
    """A fresh machine class for one policy, one configuration, some invariants."""
    safe_name = "".join(part.capitalize() for part in policy.name.replace("_", "-").split("-"))
    return type(
        f"{safe_name}Machine",
        (FleetMachine,),
        {
            "policy": policy,
            "config": config,
            "checked": tuple(checked),
            # staticmethod: a plain function stored on a class would bind as a method.
            "destination_factory": staticmethod(destination_factory) if destination_factory else None,
            "reached": Counter(),
            "runs": 0,
        },
    )
