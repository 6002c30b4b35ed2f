"""Two worlds driven by the same actions, compared after every step: lockstep.

Theory of operation
-------------------
A run of the machines drives one ``World``. A lockstep run also applies every
action it draws to a second world, the *mirror*, and after every step compares
what the two worlds report: the story of the step (was the move accepted or
refused), what is enabled next (which leases the ledger calls expired), the
ledger's reservations, the destination's record and every invariant's answer.
At the end of a run both drain and are compared again.

Two uses, one mechanism:

* fence's SQL backends (tests/test_backends.py) are held to the in-memory core:
  any difference is a bug in fence, so it fails the test at once (``strict``);
* a target, a real job system driven through fence's protocols
  (``fence.targets``), is compared with the model of the policy it claims to
  implement: a difference is a finding about that system, so it is recorded
  with the run that shows it (``Differences``) and the mirror is dropped for
  the rest of that run, since the two worlds no longer offer the same moves.
  The verdicts are still judged on the primary world by the one observer.

The comparison reads what each world's parts answer (their snapshots, states,
effects): that is the point of a lockstep, and it judges nothing. The
invariants are judged elsewhere, on facts fence recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from hypothesis.stateful import invariant

from fence.model import protocol
from fence.model.invariants import INVARIANTS
from fence.model.world import Step, World

_REFUSAL_REASON = re.compile(r"(the ledger refuses(?: a unit)?):.*$")


def without_refusal_reasons(sentence: str) -> str:
    """A step's sentence with the words of a ledger's refusal cut off (its fact, refused, kept).

    A target refuses in its own words (procrastinate: "Job was not found or not
    in doing status"); what the lockstep compares is that it refused.
    """
    return _REFUSAL_REASON.sub(r"\1", sentence)


def reservations(ledger) -> tuple:
    """What a ledger says its reservations are, in fence.Ledger.snapshot()'s form.

    Not the ledger's own ``snapshot()``: a plug-in's snapshot holds everything that
    decides its answers (a target's rows, fetches, heartbeats), which no model has.
    """
    return tuple((r.reservation_id, r.owner, r.deadline, r.state.value) for r in ledger.reservations())


def differences(model: World, other: World, teardown: bool = False) -> list[str]:
    """Where ``other`` (the world under test) reports something ``model`` does not, one sentence each."""
    found = []

    def differ(what: str, mine, theirs) -> None:
        if mine != theirs:
            found.append(f"{what}: the model has {mine!r}, the world under test {theirs!r}")

    differ("enabled actions", [a.to_dict() for a in model.enabled_actions()],
           [a.to_dict() for a in other.enabled_actions()])
    differ("ledger", reservations(model.ledger), reservations(other.ledger))
    differ("units held and free", (model.ledger.held, model.ledger.free),
           (protocol.ledger_held(other.ledger), protocol.ledger_free(other.ledger)))
    if hasattr(other.ledger, "units_freed"):
        differ("units freed", model.ledger.units_freed, other.ledger.units_freed)
    differ("destination", model.destination.snapshot(), other.destination.snapshot())
    differ("effects", model.destination.effects(), other.destination.effects())
    for inv in INVARIANTS:
        if teardown or not inv.at_teardown:
            differ(f"invariant {inv.label}", inv.check(model), inv.check(other))
    return found


@dataclass
class Difference:
    """One way a world parted from its mirror, with the run that shows it."""

    what: str
    detail: str
    trace: tuple[Step, ...]
    """The primary world's steps up to the difference (the mirror took the same actions)."""

    @property
    def rule_steps(self) -> int:
        return sum(1 for step in self.trace if not step.drain)


@dataclass
class Differences:
    """Every kind of difference a lockstep run met, each with the shortest run that shows it."""

    by_kind: dict[str, Difference] = field(default_factory=dict)
    examples: int = 0
    """Runs that started with a mirror."""
    parted: int = 0
    """Runs in which the mirror was dropped at a difference."""

    def record(self, difference: Difference) -> None:
        known = self.by_kind.get(difference.what)
        if known is None or difference.rule_steps < known.rule_steps:
            self.by_kind[difference.what] = difference


def replay_in_lockstep(
    actions, world: World, mirror: World, *, same_story: Callable[[str], str] = lambda sentence: sentence,
) -> Difference | None:
    """Apply ``actions`` to the world under test and to the model beside it: the first difference, or None.

    How a difference a run recorded is shown again, on a fresh world: the same
    comparisons as ``lockstep_machine``, without Hypothesis, the fresh worlds
    included: the machine compares them before its first step, so a difference
    found with no step at all is shown again here too.
    """
    found = differences(mirror, world)
    if found:
        return Difference(found[0].split(":", 1)[0], "; ".join(found), tuple(world.trace))
    for action in actions:
        step, mirrored = world.apply(action), mirror.apply(action)
        if same_story(mirrored.sentence) != same_story(step.sentence):
            return Difference(f"{action.kind}: the step's story",
                              f"the model: {mirrored.sentence!r}; the world under test: {step.sentence!r}",
                              tuple(world.trace))
        found = differences(mirror, world)
        if found:
            return Difference(found[0].split(":", 1)[0], "; ".join(found), tuple(world.trace))
    return None


def lockstep_machine(
    base: type,
    make_mirror: Callable[[], World],
    *,
    record: Differences | None = None,
    same_story: Callable[[str], str] = lambda sentence: sentence,
) -> type:
    """``base`` (a machine from ``fence.search.machines.machine_for``) with a model world in lockstep.

    The base machine's world is the world under test (on a backend, or a
    target) and is the one judged; ``make_mirror`` makes the model beside it.

    ``record`` None: strict, any difference fails the run (an AssertionError).
    With ``record``: each difference is recorded there and the mirror dropped.
    ``same_story`` maps a step's sentence to what must be equal in both worlds.
    """

    class LockstepMachine(base):
        def __init__(self) -> None:
            super().__init__()
            self.mirror: World | None = make_mirror()
            if record is not None:
                record.examples += 1

        def parted(self, what: str, detail: str) -> None:
            if record is None:
                raise AssertionError(f"lockstep: {what}: {detail}")
            record.record(Difference(what, detail, tuple(self.world.trace)))
            record.parted += 1
            self.mirror = None

        def apply_action(self, action):
            step = super().apply_action(action)
            if self.mirror is not None:
                mirrored = self.mirror.apply(action)
                if same_story(mirrored.sentence) != same_story(step.sentence):
                    self.parted(
                        f"{action.kind}: the step's story",
                        f"the model: {mirrored.sentence!r}; the world under test: {step.sentence!r}",
                    )
            return step

        @invariant()
        def worlds_agree(self) -> None:
            if self.mirror is not None:
                self._compare(teardown=False)

        def _compare(self, teardown: bool) -> None:
            found = differences(self.mirror, self.world, teardown)
            if found:
                self.parted(found[0].split(":", 1)[0], "; ".join(found))

        def teardown(self) -> None:
            super().teardown()  # the base judges (and drains, if it judges the drain)
            if self.mirror is None:
                return
            if not self.world.draining:
                self.world.drain()
            self.mirror.drain()
            mine = [same_story(s.sentence) for s in self.world.trace if s.drain]
            theirs = [same_story(s.sentence) for s in self.mirror.trace if s.drain]
            if mine != theirs:
                self.parted("drain: the story", f"the model drained as {theirs}; the world under test as {mine}")
                return
            self._compare(teardown=True)

    return LockstepMachine
