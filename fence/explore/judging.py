"""From what a walk found to verdicts: each broken invariant's shortest path, replayed from scratch as its counterexample."""

from __future__ import annotations


from fence.explore.abstract_state import replayable
from fence.search.counterexample import Counterexample
from fence.model.invariants import Invariant
from fence.search.minimise import replay_actions
from fence.explore.visited import Parents
from fence.model.world import Action, World
from fence.explore.results import Exploration
from fence.explore.faithfulness import _describe, _unfaithful_fix
from fence.explore.results import InvariantResult, Outcome


def _judge(
    result: Exploration,
    invariants: tuple[Invariant, ...],
    found: dict[str, tuple[int, Action | None]],
    parents: Parents,
    out_of_budget: str | None,
    destination_factory,
    ledger_factory=None,
    meant: dict[int, tuple] | None = None,
) -> None:
    """A verdict per invariant, with the path to each violation replayed as a counterexample.

    ``meant`` (from the abstract walk, ``fence.explore.abstract``): invariant name -> what the
    janitor's step that broke it was meant to do; what the janitor's step into a state was
    meant to do is kept with the parents (``Parents.meant_of``). Such a step is translated to
    a janitor that can take it on the replay.
    """
    policy, config = result.policy, result.config

    def path_to(node: int, last: tuple[Action, tuple | None] | None) -> list[Action]:
        steps: list[tuple[Action, tuple | None]] = [last] if last is not None else []
        while parents[node] is not None:
            child = node
            node, action = parents[node]
            steps.append((action, parents.meant_of(child) if meant is not None else None))
        steps.reverse()
        if meant is None:
            return [action for action, _ in steps]

        return replayable(World(policy, config, destination_factory, ledger_factory), steps)

    paths = {}
    for inv in invariants:
        if inv.name in found:
            node, action = found[inv.name]
            last = (action, meant.get(inv.name) if meant else None) if action is not None else None
            paths[inv.name] = path_to(node, last)
    verdicts(result, invariants, paths, out_of_budget, destination_factory, ledger_factory)


def _counterexample(policy, config, inv, actions, destination_factory, ledger_factory=None) -> Counterexample | None:
    """The walk's path to a violation, replayed from scratch; None if the replay does not break ``inv``."""
    replayed = replay_actions(policy, config, actions, inv, destination_factory, ledger_factory)
    if replayed is None:
        return None
    return Counterexample(
        policy.name,
        config,
        inv.name,
        replayed.message,
        tuple(replayed.world.trace),
        shortest_steps=len(replayed.actions),
    )


def verdicts(
    result: Exploration, invariants: tuple[Invariant, ...], paths: dict[str, list[Action]], out_of_budget: str | None,
    destination_factory=None, ledger_factory=None,
) -> None:
    """A verdict per invariant: violated where ``paths`` holds a path to a violation that its replay confirms."""
    policy, config = result.policy, result.config
    # A violation counts only once its path, replayed from scratch on fresh
    # plug-ins, breaks the invariant again: one that does not is a copy or a merge
    # the plug-ins did not support (or a plug-in that is not deterministic), so
    # the walk stands behind nothing, that cell included.
    violations: dict[str, InvariantResult] = {}
    for inv in invariants:
        if inv.name in paths:
            actions = paths[inv.name]
            counterexample = _counterexample(policy, config, inv, actions, destination_factory, ledger_factory)
            if counterexample is None:
                result.unfaithful = result.unfaithful or (
                    f"the walk's path to a {inv.name} violation ({_describe(actions)}) does not break it "
                    "when replayed from scratch; " + _unfaithful_fix()
                )
                continue
            violations[inv.name] = InvariantResult(inv, Outcome.VIOLATED, counterexample, depth=len(actions))
    for inv in invariants:
        if inv.name in violations:
            result.results[inv.name] = violations[inv.name]
        elif out_of_budget is not None or result.unfaithful:
            result.results[inv.name] = InvariantResult(inv, Outcome.UNDETERMINED)
        else:
            result.results[inv.name] = InvariantResult(inv, Outcome.PROVED)
