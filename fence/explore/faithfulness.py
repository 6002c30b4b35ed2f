"""Whether a user's plug-ins can be walked as copied worlds: sampled copies and merges replayed from scratch."""

from __future__ import annotations

import enum
import itertools
import random
import re

from fence.model import protocol

from fence.model.destination import TicketService
from fence.model.ledger import Ledger, Move
from fence.model.policy_twins import rename
from fence.explore.state_key import PLUGIN_PARTS_FROM, answer_nobody_waits_for, canonical_renaming, generic_state_key
from fence.model.world import Action, World


class Unfaithful(Exception):
    """The explorer cannot stand behind a walk of these plug-ins (see ``FaithfulnessCheck``)."""


class FaithfulnessCheck:
    """Tests, on the run, that a user's plug-ins can be explored by copying and keying.

    The generic path deep-copies the user's parts of a world (``World._generic_clone``) and merges states by
    ``generic_state_key``, which trusts the plug-ins' ``snapshot()``. Neither is
    taken on faith. ``NEW_STATES`` transitions that reach a new state and
    ``MERGES`` that reach a state seen before are checked: the path (and, for
    a merge, the first path to that key as well) is replayed from scratch on
    fresh plug-ins, and then the same actions are taken on both worlds for a few
    steps: the sentences (which carry every answer) and the fingerprints must be
    equal. A copy that lost state, a snapshot that leaves state out (two merged
    states that answer differently later), or a plug-in that is not
    deterministic is reported with the step where the worlds parted, and the
    walk stops: ``Exploration.unfaithful`` says why, and no invariant is proved.

    Which transitions: a quarter of each budget goes to the walk's first
    transitions (a fault near the root stops the walk early); up to half goes
    to the depths after them, ``DEPTH_NEW_STATES`` and ``DEPTH_MERGES`` per
    depth, drawn uniformly among that depth's transitions and checked as soon
    as the walk has left it; the rest to a uniform sample of all the others,
    drawn as the walk goes (reservoir sampling, seeded, so a run repeats) and
    checked when it ends (``finish``). Breadth first, the first transitions
    are all shallow; a fault that shows only deep in the walk (a third
    attempt, a late clock, a second job's row) is checked at its depth while
    the walk goes on, so it stops a walk that is cut short too (a time budget:
    on a real server, a walk at 2 units x 2 jobs), which never reaches
    ``finish``. The budget is not exceeded: a walk with enough transitions
    makes exactly ``NEW_STATES + MERGES`` checks by its end.
    """

    NEW_STATES = 200
    MERGES = 400
    DEPTH_NEW_STATES = 1
    DEPTH_MERGES = 2
    STEPS = 8
    WALKS = 2

    def __init__(self, policy, config, destination_factory, ledger_factory, parents, symmetry=False) -> None:
        self.policy, self.config = policy, config
        self.symmetry = symmetry
        self.destination_factory, self.ledger_factory = destination_factory, ledger_factory
        self.parents = parents
        self.new_states = self.merges = 0
        """Transitions seen so far of each kind."""
        self.checks = 0
        self.renamings_checked = 0
        self._sampler = random.Random(1)
        self._below = _below_of(self._sampler)
        self._sampled_new: list[tuple[int, tuple[int, Action, World]]] = []
        self._sampled_merges: list[tuple[int, tuple[int, Action, int]]] = []
        # Per depth: breadth first, the depth being expanded has its nodes numbered below
        # ``_next_depth_from``, and the next depth's are numbered from there on (each after
        # this is told of the transition that found it).
        self._next_depth_from = 0
        self._depth_sampler = random.Random(2)  # its own, so that the reservoir above draws as it did
        self._depth_below = _below_of(self._depth_sampler)
        self._depth_new: list[tuple[int, tuple[int, Action, World]]] = []
        self._depth_merges: list[tuple[int, tuple[int, Action, int]]] = []
        self._depth_seen = [0, 0]
        self._depth_spent = [0, 0]
        """Checks made at their depth so far, of new states and of merges: at most half of each budget."""
        self._checked_by_depth: set[tuple[str, int]] = set()
        """The sampled transitions checked at their depth already, by kind and the walk's number for them."""

    def after_transition(self, node: int, action: Action, child: World, seen_as: int | None) -> None:
        # Called once per transition (1.4 million times at 2x2x2 h2): the two draws are
        # written out here, not as two methods, and ``randrange``'s argument checks are
        # skipped (``_below_of``): the same numbers from the same generators, in the same order.
        if node >= self._next_depth_from:  # the first transition out of the next depth
            self._check_depth()
            self._next_depth_from = len(self.parents)
        if seen_as is None:
            seen = self.new_states = self.new_states + 1
            quarter = self.NEW_STATES // 4
            if seen <= quarter:
                self._check_new(node, action, child)
                return
            # The walk never changes a world it has made (each step is taken on a
            # copy), so the child can wait here to be checked later.
            item = (node, action, child)
            reservoir, size, depth_drawn, depth_size = (
                self._sampled_new, self.NEW_STATES - quarter, self._depth_new, self.DEPTH_NEW_STATES)
            kind = 0
        else:
            seen = self.merges = self.merges + 1
            quarter = self.MERGES // 4
            if seen <= quarter:
                self._check_merge(node, action, seen_as)
                return
            item = (node, action, seen_as)
            reservoir, size, depth_drawn, depth_size = (
                self._sampled_merges, self.MERGES - quarter, self._depth_merges, self.DEPTH_MERGES)
            kind = 1
        # The reservoir: keep the item with the chance that leaves each candidate so far equally likely.
        if size > 0:
            if len(reservoir) < size:
                reservoir.append((seen, item))
            elif (slot := self._below(seen)) < size:
                reservoir[slot] = (seen, item)
        # The same for this depth, with its own random numbers.
        depth_seen = self._depth_seen
        at_depth = depth_seen[kind] = depth_seen[kind] + 1
        if len(depth_drawn) < depth_size:
            depth_drawn.append((seen, item))
        elif (slot := self._depth_below(at_depth)) < depth_size:
            depth_drawn[slot] = (seen, item)

    def _check_depth(self) -> None:
        """Check what was drawn at the depth the walk has just left (while the budget for depths lasts)."""
        new, merges = self._depth_new, self._depth_merges
        self._depth_new, self._depth_merges, self._depth_seen = [], [], [0, 0]
        new = sorted(new, key=lambda entry: entry[0])[:max(0, self.NEW_STATES // 2 - self._depth_spent[0])]
        merges = sorted(merges, key=lambda entry: entry[0])[:max(0, self.MERGES // 2 - self._depth_spent[1])]
        self._depth_spent[0] += len(new)
        self._depth_spent[1] += len(merges)
        for seen, (node, action, child) in new:
            self._checked_by_depth.add(("new", seen))
            self._check_new(node, action, child)
        for seen, (node, action, seen_as) in merges:
            self._checked_by_depth.add(("merge", seen))
            self._check_merge(node, action, seen_as)

    def finish(self) -> None:
        """Check the last depth's draw, then what the budget leaves of the sample, in the order the walk took them."""
        self._check_depth()
        spent_new, spent_merges = self._depth_spent
        new = [e for e in self._sampled_new if ("new", e[0]) not in self._checked_by_depth]
        merges = [e for e in self._sampled_merges if ("merge", e[0]) not in self._checked_by_depth]
        new = self._sampler.sample(new, min(len(new), max(0, len(self._sampled_new) - spent_new)))
        merges = self._sampler.sample(merges, min(len(merges), max(0, len(self._sampled_merges) - spent_merges)))
        for _, (node, action, child) in sorted(new, key=lambda entry: entry[0]):
            self._check_new(node, action, child)
        for _, (node, action, seen_as) in sorted(merges, key=lambda entry: entry[0]):
            self._check_merge(node, action, seen_as)
        self._sampled_new, self._sampled_merges = [], []

    def _check_new(self, node: int, action: Action, child: World) -> None:
        path = self._path_to(node) + [action]
        self._compare(child, self._fresh(path), f"a copy of the world after {_describe(path)}")

    def _check_merge(self, node: int, action: Action, seen_as: int) -> None:
        path = self._path_to(node) + [action]
        first = self._path_to(seen_as)
        merged = self._fresh(path)
        earlier = self._fresh(first)
        if self.symmetry:
            # The key merged them as renamings of each other: the first path, taken with
            # the job names renamed, must lead to a world that behaves as the merged one.
            renaming = _renaming_between(earlier, merged)
            if renaming:
                renamed_first = [rename_action(step, renaming) for step in first]
                try:
                    renamed = self._fresh(renamed_first)
                except Exception as error:  # noqa: BLE001 - the renamed path is not one the plug-ins take
                    raise Unfaithful(
                        f"two states merged as renamings of each other (after {_describe(first)} and after "
                        f"{_describe(path)}), but the first path with its jobs renamed cannot be taken "
                        f"({type(error).__name__}: {error}); " + _symmetry_fix()
                    ) from None
                # Symmetry itself: the same steps with the jobs renamed lead to the renamed
                # state, and from there the renamed steps keep them so.
                self.renamings_checked += 1
                self._compare(
                    earlier, renamed,
                    f"a state (after {_describe(first)}) and the same steps with jobs renamed {renaming}",
                    renaming=renaming, fix=_symmetry_fix(),
                )
                first, earlier = renamed_first, renamed
        self._compare(
            earlier, merged,
            f"two states with one key (after {_describe(first)} and after {_describe(path)})",
        )

    def _path_to(self, node: int) -> list[Action]:
        actions: list[Action] = []
        while self.parents[node] is not None:
            node, action = self.parents[node]
            actions.append(action)
        return actions[::-1]

    def _fresh(self, path: list[Action]) -> World:
        world = World(self.policy, self.config, self.destination_factory, self.ledger_factory)
        for action in path:
            world.apply(action)
        return world

    def _compare(
        self, one: World, other: World, what: str, renaming: dict[str, str] | None = None, fix: str | None = None,
    ) -> None:
        """Do ``one`` and ``other`` answer alike now and along a few random steps taken in both?

        With ``renaming``, ``other`` stands for ``one`` with its jobs renamed: each
        step taken in ``one`` is taken renamed in ``other``, and answers, sentences
        and keys are compared after renaming ``one``'s.
        """
        self.checks += 1
        chooser = random.Random(self.checks)
        renaming = renaming or {}
        fix = fix or _unfaithful_fix()

        def same_key(a: World, b: World) -> bool:
            if not renaming:
                return _comparable(generic_state_key(a)) == _comparable(generic_state_key(b))
            # fence's own records only: a plug-in's snapshot may list its names in its own
            # order (sorted, say), which a renaming does not keep; what it answers is compared.
            mine = canonical_renaming(_comparable(generic_state_key(a))[:PLUGIN_PARTS_FROM], renaming)
            theirs = canonical_renaming(_comparable(generic_state_key(b))[:PLUGIN_PARTS_FROM], {})
            return mine is not None and mine == theirs

        _same_answers(one, other, what, renaming, fix)
        if renaming and not same_key(one, other):
            raise Unfaithful(f"{what} part: the renamed steps lead to another state; " + fix)
        for walk in range(self.WALKS):
            a, b = one.clone(history=False), other.clone(history=False)
            for step in range(self.STEPS):
                # Steps both worlds offer: the key deliberately merges states that
                # differ only in steps that change nothing (an answer to a crashed
                # worker), so one may offer such a step the other does not.
                theirs = {repr(action) for action in b.enabled_actions()}
                enabled = [
                    action for action in a.enabled_actions() if repr(rename_action(action, renaming)) in theirs
                ] if renaming else [action for action in a.enabled_actions() if repr(action) in theirs]
                if not enabled:
                    break
                action = chooser.choice(enabled)
                # An answer reaching a worker that no longer waits for one changes
                # nothing, and the key leaves it out (both keys drop it), so the two
                # worlds may hold different such answers: only the state after it counts.
                unheard = action.kind == "deliver" and answer_nobody_waits_for(a, action.message, action.attempt)
                said_a = rename(a.apply(action).sentence, renaming)
                said_b = b.apply(rename_action(action, renaming) if renaming else action).sentence
                if renaming:
                    # A sentence lists names in name order ("leases of job1/r1, job2/r1"), which a
                    # renaming does not keep: the same words, in any order, say the same.
                    said_a, said_b = _words(said_a), _words(said_b)
                if said_a != said_b and not unheard:
                    raise Unfaithful(
                        f"{what} answer differently to {action.to_dict()}: '{said_a}' vs '{said_b}'; " + fix
                    )
                if not same_key(a, b):
                    raise Unfaithful(
                        f"{what} part after the same {step + 1} step(s) (the last {action.to_dict()}); " + fix
                    )
            if walk == 0:  # once more after some steps: a hidden counter may need them to show
                _same_answers(a, b, f"{what}, after the same steps,", renaming, fix)


def _below_of(generator: random.Random):
    """``generator.randrange`` for a positive bound: for ``n > 0``, CPython's ``randrange(n)`` is
    ``_randbelow(n)`` after its argument checks, so this draws the very same numbers, cheaper."""
    return getattr(generator, "_randbelow", generator.randrange)


def _plugin_answers(world: World) -> list[tuple]:
    """What the plug-ins answer, on copies, to every call of their protocols fence can make here.

    Reads are asked three times over (a read that counts its callers shows it);
    each write is made on a fresh copy, so the answers do not depend on each other.
    """
    destination, ledger = world.destination, world.ledger
    identities = sorted({a.identity for a in world.attempts.values()})
    keys = list(world.jobs)
    answers: list[tuple] = []
    asked = _copy_of(destination, "destination")
    for round_ in range(3):
        answers += [("lookup", key, asked.lookup(key)) for key in keys]
        answers += [("attempt_state", i, _said(asked.attempt_state(i))) for i in identities]
    for attempt in sorted(world.attempts.values(), key=lambda a: a.handle):
        for call, arguments in (
            ("register", (attempt.identity, attempt.key)),
            # Payloads of the battery's own: the key forgets an attempt's payload once it cannot matter.
            ("commit", (attempt.identity, attempt.key, f"ticket for {attempt.key}")),
            ("commit", (attempt.identity, attempt.key, "a revised ticket")),
            ("abandon_unless_committed", (attempt.identity,)),
        ):
            fresh = _copy_of(destination, "destination")
            try:
                said = _said(getattr(fresh, call)(*arguments))
            except Exception as error:  # a refusal by exception is an answer too
                said = type(error).__name__
            answers.append((call, arguments, said, len(fresh.effects())))
    # The order a ledger lists reservations in is not state: the key sorts them, and
    # nothing in the model depends on it (two paths that reserve in turn list them apart).
    read = _copy_of(ledger, "ledger")
    answers.append(("free", read.free))
    listed = sorted(read.reservations(), key=lambda r: r.reservation_id)
    answers += [("reservation", r.reservation_id, r.owner, r.state.value) for r in listed]
    answers.append(("expired", frozenset(r.reservation_id for r in read.expired(world.now))))
    for reservation in listed:
        for move in Move:
            fresh = _copy_of(ledger, "ledger")
            try:
                said = fresh.apply(reservation.reservation_id, move).state.value
            except Exception as error:
                said = type(error).__name__
            answers.append(("apply", reservation.reservation_id, move.value, said))
    return answers


def _copy_of(part, kind: str):
    """An independent copy of a ledger or destination: fence's own by its own copy, a plug-in deep-copied."""
    if type(part) is Ledger:
        return part.copy()
    if type(part) is TicketService:
        return part.clone()
    return protocol.deepcopy({kind: part})[kind]


def _said(answer) -> object:
    return answer.value if isinstance(answer, enum.Enum) else answer


def _words(sentence: str) -> list[str]:
    return sorted(re.findall(r"[\w/#'.-]+", sentence))


def _same_answers(one: World, other: World, what: str, renaming: dict[str, str] | None = None, fix=None) -> None:
    mine, theirs = _plugin_answers(one), _plugin_answers(other)
    if renaming:
        # The battery asks in name order; renamed, the same questions come in another order.
        renamed = canonical_renaming(tuple(mine), renaming)
        mine = sorted(renamed, key=repr) if renamed is not None else mine
        theirs = sorted(canonical_renaming(tuple(theirs), {}) or theirs, key=repr)
    if mine != theirs:
        first = next(
            (f"{a} vs {b}" for a, b in zip(mine, theirs) if a != b), f"{len(mine)} answers vs {len(theirs)}"
        )
        raise Unfaithful(f"{what} answer the same call differently ({first}); " + (fix or _unfaithful_fix()))


def _comparable(key: tuple) -> tuple:
    """A generic key with answers keyed by identity written as "object" only.

    Such answers are keyed by identity, so no two worlds share one; what they
    said is compared through the settle sentences instead.
    """
    held = key[5]
    written = frozenset((j, rid, token[0] if token[0] == "object" else token) for j, rid, token in held[1])
    return key[:5] + ((held[0], written),) + key[6:]


def _renaming_between(one: World, other: World) -> dict[str, str]:
    """The renaming of the jobs that takes ``one``'s generic key to ``other``'s; {} if none or none is needed."""
    theirs = canonical_renaming(generic_state_key(other), {})
    if theirs is None:
        return {}  # not renamable: such keys merge equal worlds only
    mine = generic_state_key(one)
    for order in itertools.permutations(one.jobs):
        renaming = dict(zip(one.jobs, order))
        if canonical_renaming(mine, renaming) == theirs:
            return {old: new for old, new in renaming.items() if old != new}
    return {}  # the replays part somewhere: the comparison says where


def rename_action(action: Action, renaming: dict[str, str]) -> Action:
    """``action`` with the job names in its fields renamed."""
    data = action.to_dict()
    return Action.from_dict({
        name: rename(value, renaming) if name != "action" else value for name, value in data.items()
    })


def _symmetry_fix() -> str:
    return (
        "a plug-in that treats a job's name as more than a label (numbers reservations across jobs, "
        "or decides by name) cannot be explored with --symmetry: run without it"
    )


def _unfaithful_fix() -> str:
    return (
        "a plug-in keeps state that its snapshot() or a deep copy does not carry, or does not answer "
        "the same calls alike: put every attribute that decides an answer in snapshot(), keep no state "
        "in a policy, and do not read clocks or random numbers"
    )


def _describe(path: list[Action]) -> str:
    if not path:
        return "no step"
    shown = ", ".join(f"{a.kind}({', '.join(str(v) for v in a.to_dict().values() if v not in (a.kind,))})" for a in path[-4:])
    return f"{len(path)} step(s) ending {shown}" if len(path) > 4 else shown
