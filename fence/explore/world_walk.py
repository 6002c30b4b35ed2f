"""The walk over World objects: each action taken on a clone and the child keyed, for one job and for users' plug-ins."""

from __future__ import annotations

from collections import Counter

from fence.explore.drain_judge import DrainJudge, drain_plainly
from fence.model.invariants import StepJudge
from fence.explore.state_key import generic_key_of, generic_parts, state_key, up_to_janitors
from fence.explore.whole_state import whole_state
from fence.explore.visited import Fingerprints, Parents, of_plain
from fence.model.world import World
from fence.explore.successors import _successors


class WorldWalk:
    """The walk's moves over World objects, as ``AbstractWalk`` makes them over its entries.

    Each action is taken on a clone (``_successors``) and the child keyed by
    ``state_key`` (fence's parts job by job; a user's plug-ins by the generic
    key), or by ``whole_state`` for the reference walk that tests that key;
    invariant 6 is judged by the drain judge, or for the reference walk by the
    model's own drain with no memo (``drain_plainly``).
    """

    meant = None
    """What janitors' steps were meant to do: only the abstract walk needs it (its janitors are numbered)."""

    WORLDS_KEPT = 50_000
    """Worlds waiting in the frontier at most (two levels' worth); a state queued beyond them waits as its
    number alone, and its World is rebuilt from the root by its path when its level is expanded (``decode``)."""

    width = 1
    """Numbers per state in the frontier: its number (``encode``)."""

    def __init__(self, root: World, symmetry: bool, step_invariants, judge_drain: DrainJudge,
                 by_whole_state: bool = False, parents: Parents | None = None, plugin_memo=None) -> None:
        self.root = root
        self.parents = parents
        self.waiting: dict[int, World] = {}
        """State number -> its World, for states in the frontier while there are fewer than ``WORLDS_KEPT``."""
        self.replays = 0
        self.symmetry = symmetry
        self.step_invariants = step_invariants
        self.judge_drain = judge_drain
        self.by_whole_state = by_whole_state
        # fence's own parts are keyed by trees of tuples, strings and numbers; a user's
        # plug-ins by the generic key, whose sets and snapshot values are written out first.
        plain = by_whole_state or root.fast_copy_is_faithful()
        self.fingerprint = of_plain if plain else Fingerprints()
        self.judge_step = StepJudge(step_invariants)
        self._by_parts: dict[tuple, int] = {}
        """A user's plug-ins: generic parts -> the fingerprint of their key (``_generic_fingerprint``)."""
        self.plugin_memo = plugin_memo
        """A user's plug-ins: their step memo (``fence.explore.plugin_memo``), or None to take every step."""

    def root_key(self) -> int:
        """The root's fingerprint (``fence.explore.visited``)."""
        return self.fingerprint(whole_state(self.root) if self.by_whole_state else state_key(self.root, self.symmetry))

    def successors(self, world: World, visited, known, reached: Counter):
        """``_successors``, each child by its key's fingerprint.

        A world keyed by ``state_key`` (fence's parts, a user's policy on them) is stepped here
        rather than through ``_successors``: the same steps, with the child's key looked up in
        ``visited`` before it is judged, so that a transition into a state seen before is not asked
        again what that state's key decides (``StepJudge``).
        """
        fingerprint = self.fingerprint
        if self.by_whole_state:
            for action, child, key, broken in _successors(
                world, self.symmetry, self.step_invariants, known, reached, self.by_whole_state,
            ):
                yield action, child, fingerprint(key), broken
            return
        judge, symmetry = self.judge_step, self.symmetry
        if not world.fast_copy_is_faithful():
            # A user's plug-ins: the same steps, each child's fingerprint found from its generic
            # parts (``_generic_fingerprint``). Invariant 3's present reading (phases, commits in
            # flight, abandon promises) is fence's records, which the generic key holds too, so a
            # key seen before is judged as fence's own parts' are (``StepJudge``).
            if self.plugin_memo is not None:  # the same, a step into a state seen before answered by the memo
                yield from self.plugin_memo.successors(
                    world, visited, known, reached, self._fingerprint_of_parts, judge, self.step_invariants,
                )
                return
            for action in up_to_janitors(world, world.enabled_actions()):
                child = world.clone(history=False)
                child.apply(action)
                key = self._generic_fingerprint(child)
                yield action, child, key, judge(child, known, reached, key in visited)
            return
        for action in up_to_janitors(world, world.enabled_actions()):
            child = world.clone(history=False)
            child.apply(action)
            key = fingerprint(state_key(child, symmetry))
            yield action, child, key, judge(child, known, reached, key in visited)

    GENERIC_KEPT = 200_000
    """Generic parts remembered with their fingerprint at most (forgotten all at once: always safe)."""

    def _generic_fingerprint(self, world: World) -> int:
        """The fingerprint of ``state_key(world, symmetry)`` for a world with a user's plug-ins.

        That key, and so its fingerprint, is a function of the world's generic parts
        (``generic_key_of``; the walk's jobs and symmetry never change, nor does its
        ``Fingerprints``, whose numbers are never forgotten): most transitions lead to
        a state seen before by the same names, whose fingerprint is then looked up
        rather than its symmetric form found and written out again.
        """
        return self._fingerprint_of_parts(generic_parts(world))

    def _fingerprint_of_parts(self, raw: tuple) -> int:
        """``_generic_fingerprint`` of a world whose generic parts are ``raw``."""
        found = self._by_parts.get(raw)
        if found is None:
            if len(self._by_parts) >= self.GENERIC_KEPT:
                self._by_parts.clear()
            found = self._by_parts[raw] = self.fingerprint(generic_key_of(raw, self.root.jobs, self.symmetry))
        return found

    def judge_drain_of(self, world: World) -> tuple[tuple[str, ...], bool]:
        if self.by_whole_state:
            return drain_plainly(world, self.judge_drain.invariants)
        judge = self.judge_drain
        if world.network and judge.invariants and not world.fast_copy_is_faithful():
            # The drain's first lookup is by the state's own generic parts (the step memo's step
            # has them already): a state an earlier drain passed through is answered uncopied.
            raw = self.plugin_memo.parts_of(world) if self.plugin_memo is not None else None
            answer, missed = judge.generic_lookup(raw if raw is not None else generic_parts(world))
            return answer if answer is not None else judge(world, missed=missed)
        return judge(world)

    def adopt(self, child: World, node: int) -> None:
        pass

    def meant_finding(self, name: str) -> None:
        pass

    def meant_of(self, child: World) -> None:
        return None

    def next_level(self, expanded) -> None:
        if self.plugin_memo is not None:
            self.plugin_memo.next_level()

    def encode(self, node: int, world: World) -> tuple[int]:
        """The state as the frontier keeps it: its number; its World kept aside while there is room."""
        if node == 0 or len(self.waiting) < self.WORLDS_KEPT:
            self.waiting[node] = world
        return (node,)

    def decode(self, row) -> tuple[int, World]:
        node = row[0]
        world = self.waiting.pop(node, None)
        if world is None:
            world = self.replay(node)
        return node, world

    def replay(self, node: int) -> World:
        """The World of state ``node``, rebuilt from the root's by the walk's path to it (``parents``).

        Each step is taken on a copy without history, as the walk took it: the
        same plug-in copies (``World.clone``) the walk made, so a World rebuilt
        is one the walk could have kept (``FaithfulnessCheck`` tests that the
        plug-ins' copies and replays agree).
        """
        world = self.root
        for action in self.parents.path_to(node):
            world = world.clone(history=False)
            world.apply(action)
        self.replays += 1
        return world
