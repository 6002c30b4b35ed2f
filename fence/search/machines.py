"""Hypothesis state machines over the fence model.

``machine_for(policy, config, checked)`` builds a ``RuleBasedStateMachine`` whose
rules are the world's action kinds (reserve, retry, start, send_commit, deliver,
lose_ack, confirm, crash, tick, scan, probe, settle, and fail where the
configuration models failures). Hypothesis takes one step
by drawing a kind (uniformly among those the world has enabled) and then one
action of that kind, so no draw is wasted on a disabled rule and shrinking moves
towards the first kind and the first action of it. (One Hypothesis rule that draws the kind
costs half as much per step as one rule per kind with preconditions, because
Hypothesis no longer filters twelve rules at every step; the kinds are the same.)
The world does the work, so these machines, the explorer and a replayed
counterexample all run one model.

Every step is noted as a sentence (``note``), so a failing run reads as a
story, and the dangers a run reached are counted (``event``), so
``--hypothesis-show-statistics`` shows what was covered.

Two ways to report a broken invariant:

* raising (the default, and what ``Machine.TestCase`` does under pytest): an
  ``InvariantViolation`` carrying the world's trace; Hypothesis shrinks it and
  re-raises it from its final replay, so the trace in hand is the shrunk one;
* surveying (``collect=Survey()``): every broken invariant is recorded with the
  shortest trace seen for it and the run goes on, so one Hypothesis run judges
  all invariants at once. ``fence verdicts`` surveys, then minimises each trace
  on the same world (``fence.search.minimise``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fence.model.destination import Destination, Guards
from fence.model.invariants import INVARIANTS, Invariant
from fence.model.policies import JanitorPolicy
from fence.model.ledger import Ledger
from fence.model.world import Action, ModelConfig, Step, World, action_kinds


KIND = st.integers(min_value=0, max_value=len(action_kinds(ModelConfig())) - 1)
"""The draw of a kind without failures (a configuration with them draws over one kind more)."""
PICK = st.integers(min_value=0, max_value=15)


class InvariantViolation(AssertionError):
    """An invariant broke; carries the world's trace up to (and including) that step."""

    def __init__(self, invariant: Invariant, message: str, world: World) -> None:
        super().__init__(f"invariant {invariant.label} violated: {message}")
        self.invariant = invariant
        self.message = message
        self.trace: list[Step] = list(world.trace)
        self.world = world

    @property
    def rule_steps(self) -> int:
        return sum(1 for step in self.trace if not step.drain)


@dataclass
class Survey:
    """What a surveying run saw: the shortest violation per invariant, and when."""

    violations: dict[str, InvariantViolation] = field(default_factory=dict)
    first_found_at_example: dict[str, int] = field(default_factory=dict)
    examples: int = 0

    def record(self, violation: InvariantViolation) -> None:
        name = violation.invariant.name
        self.first_found_at_example.setdefault(name, self.examples)
        best = self.violations.get(name)
        if best is None or violation.rule_steps < best.rule_steps:
            self.violations[name] = violation


def _draw_of(data) -> Callable:
    """How ``act`` draws: straight from the test case's choices, the same choices and spans as ``data.draw``.

    ``data.draw`` (``st.data()``'s) wraps each draw in checks for a user's strategy: that it does not use
    the random module (two ``random.getstate()`` calls) and a note of the value for the final report. Those
    were about a sixth of a verdict run's CPU (cProfile of a survey: 75,000 draws), and these strategies are
    fence's own integers; the steps' sentences are noted anyway. ``conjecture_data`` is the attribute
    Hypothesis keeps as semi-stable: if a release drops it, the public ``data.draw`` is used, at its cost.
    The choices are the same either way (a survey through each path finds the same: tests/test_draws.py).
    """
    conjecture_data = getattr(data, "conjecture_data", None)
    return conjecture_data.draw if conjecture_data is not None else data.draw


class FleetMachine(RuleBasedStateMachine):
    """Base machine; ``machine_for`` makes a subclass per policy and configuration."""

    policy: JanitorPolicy
    config: ModelConfig
    checked: tuple[Invariant, ...] = INVARIANTS
    destination_factory: Callable[[Guards], Destination] | None = None
    ledger_factory: Callable[[int], Ledger] | None = None
    survey: Survey | None = None
    kinds: tuple[str, ...] = action_kinds(ModelConfig())
    """The kinds this configuration can enable: without failures, the draws are the same as before ``fail`` existed."""
    kind_draw: st.SearchStrategy[int] = KIND
    reached: Counter
    runs: int

    def __init__(self) -> None:
        super().__init__()
        self.world = World(self.policy, self.config, self.destination_factory, self.ledger_factory)
        self.broken_here: set[str] = set()  # surveying: invariants already recorded this example
        type(self).runs += 1
        if self.survey is not None:
            self.survey.examples += 1

    @rule(data=st.data())
    def act(self, data) -> None:
        """Apply one enabled action of the world: its kind first, then which one."""
        draw = _draw_of(data)
        world = self.world
        kinds = self.kinds
        enabled = [kind for kind in kinds if world.enabled(kind)]
        if not enabled:
            return  # quiescent: everything finished, clock at its horizon
        # A kind is drawn from the fixed list, so a drawn number keeps meaning the
        # same kind when the shrinker deletes earlier steps. If that kind is not
        # enabled, a second draw picks uniformly among those that are; together
        # every enabled kind is equally likely (1/12 + (12-m)/12 * 1/m = 1/m).
        kind = kinds[draw(self.kind_draw)]
        if kind not in enabled:
            kind = enabled[draw(st.integers(0, len(enabled) - 1))]
        options = world.enabled(kind)
        pick = draw(PICK) if len(options) > 1 else 0
        step = self.apply_action(options[pick % len(options)])
        # No per-step event: it costs ~10% of a run; dangers are counted at teardown.
        note(f"t={step.now}: {step.sentence}")

    def apply_action(self, action: Action) -> Step:
        """Apply the drawn action (a lockstep machine also applies it to its mirror)."""
        return self.world.apply(action)

    def _broken(self, inv: Invariant, message: str) -> None:
        violation = InvariantViolation(inv, message, self.world)
        if self.survey is None:
            raise violation
        self.broken_here.add(inv.name)
        self.survey.record(violation)

    @invariant()
    def invariants_hold(self) -> None:
        for inv in self.checked:
            if not inv.at_teardown and inv.name not in self.broken_here:
                message = inv.check(self.world)
                if message:
                    self._broken(inv, message)

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
                self._broken(inv, message)


def machine_for(
    policy: JanitorPolicy,
    config: ModelConfig = ModelConfig(),
    checked: Iterable[Invariant] = INVARIANTS,
    destination_factory: Callable[[Guards], Destination] | None = None,
    survey: Survey | None = None,
    ledger_factory: Callable[[int], Ledger] | None = None,
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
            "ledger_factory": staticmethod(ledger_factory) if ledger_factory else None,
            "survey": survey,
            "kinds": action_kinds(config),
            "kind_draw": st.integers(min_value=0, max_value=len(action_kinds(config)) - 1),
            "reached": Counter(),
            "runs": 0,
        },
    )
