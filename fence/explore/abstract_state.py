"""How the abstract walk holds a state (``Entry``), numbers key parts, and names janitors' steps.

A state of the abstract walk (``fence.explore.abstract``) is an ``Entry``: its
readings by number, with a World only if one was built. Key parts are numbered
(``PartNumbers``) so keys hash small integers. A janitor's step is recorded by
what it does (its form relative to its job), and given to a janitor that can
take it whenever a World is built or a path replayed (``translate``,
``replayable``).

Order, and counterexamples
    The actions of a state are taken kind by kind (``ACTION_KINDS``, the
    World's own order), jobs in name order within a kind, each job's in the
    order the World listed them. With one job that is the World's order
    exactly; with more it can differ from it (the World lists some kinds by
    the order attempts or messages were made), so the walk finds the same
    states and transitions and, of several shortest counterexamples, possibly
    another one. The parents record the concrete actions and, for a janitor's
    step, what it was meant to do (``meant``): ``_judge`` replays the path
    from scratch, translating each janitor's step to the first janitor that
    can take it in the replayed World.
"""

from __future__ import annotations

from fence.explore.transitions import MemoMismatch, relative_action
from fence.model.rules import ACTION_CLASSES
from fence.model.world import Action, World

JANITOR_KINDS = frozenset({"scan", "probe", "settle"})


class Entry:
    """A state of the walk by its readings, with a World only if one was built (see the module docstring)."""

    __slots__ = ("node", "details", "parts", "abandoned", "shared", "world", "parent", "action", "job", "relative",
                 "path", "readings")

    def __init__(self, details: tuple, parts: tuple, abandoned: tuple, shared: tuple, world: World | None,
                 parent: Entry | None, action: Action | None, job: str | None, relative: tuple | None) -> None:
        self.node = -1
        self.details = details
        self.parts = parts
        self.abandoned = abandoned
        """The abandon promises, sorted: the key's third part."""
        self.shared = shared
        self.world = world
        self.parent = parent
        self.action = action
        """The step from ``parent`` (a janitor's translated on use, see ``translate``)."""
        self.job = job
        self.relative = relative
        self.path = ()
        """The steps from the root as (action, what a janitor's step was meant to do): kept only by the
        partitioned walk (``fence.explore.partitioned``), whose entries travel without their parents."""
        self.readings = None
        """Each job's (live writers, messages in flight) once read (``AbstractWalk.readings_of``): asked
        for a new state's step invariants and again for its drain."""


def translate(world: World, action: Action, job: str | None, relative: tuple | None) -> Action:
    """``action`` as ``world`` can take it: a janitor's step goes to the first janitor that takes it alike.

    Janitors keep no state but their held answers, so any janitor's step with
    the same relative form leads to a state with the same key; the first one
    in the World's order is the one ``up_to_janitors`` keeps.
    """
    kind = action.kind
    if kind not in JANITOR_KINDS:
        return action
    for candidate in world.enabled(kind):
        if candidate.reservation == action.reservation and relative_action(world, candidate, job) == relative:
            return candidate
    raise MemoMismatch(f"no janitor can take {action.to_dict()} as {relative} at t={world.now}")


def concrete_action(job: str, relative: tuple, janitor: int) -> Action:
    """The action ``relative`` (``fence.explore.transitions.relative_action``) names for ``job``."""
    return ACTION_CLASSES[relative[0]].from_relative(job, relative, janitor)


class PartNumbers:
    """Key parts by number: one per distinct part, so keys hash small integers."""

    def __init__(self) -> None:
        self.numbers: dict[tuple, int] = {}
        self.parts: list[tuple] = []
        """Each distinct part seen, at its number."""

    def __call__(self, part: tuple) -> int:
        number = self.numbers.get(part)
        if number is None:
            number = self.numbers[part] = len(self.parts)
            self.parts.append(part)
        return number


def replayable(world: World, path: list[tuple[Action, tuple | None]]) -> list[Action]:
    """The walk's path as actions a fresh ``world`` takes in turn: each janitor's step translated.

    ``path`` is (action, (job, relative action) or None) per step, the second
    for a janitor's step whose janitor may differ on the replay (see the module
    docstring). A step nobody can take is left as it is: the replay then fails,
    and the walk stands behind nothing (``_judge``).
    """
    actions = []
    for action, meant in path:
        if meant is not None:
            try:
                action = translate(world, action, *meant)
            except MemoMismatch:
                return actions + [action for action, _ in path[len(actions):]]
        actions.append(action)
        if action not in world.enabled(action.kind):
            return actions + [action for action, _ in path[len(actions):]]
        world.apply(action)
    return actions
