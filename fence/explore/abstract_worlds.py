"""The Worlds of the abstract walk: built only on a memo's miss, kept two levels, replayed when dropped.

An entry (``fence.explore.abstract_state.Entry``) holds a World only if one was
built for it. ``WorldsOfEntries`` builds one from its parent's (cloned, the
step applied), or, for an entry read back from the frontier, from the World
built for its parent in this level or the last, else by replaying the walk's
path from the root. The frontier keeps entries as rows of numbers (``encode``,
``decode``). A mixin of ``fence.explore.abstract.AbstractWalk``.

Why the Worlds kept are capped (``KEPT_WORLDS``)
    A World is several kilobytes, and a level keeps one for every new state a
    memo missed on (most of them for its drain): at 3 units x 3 jobs x 2
    attempts, horizon 2, 32,344 of them at depth 19 (about 200 MiB, more than
    the visited set of the 1.9 million states before them). Past the cap the
    oldest go first: the frontier is expanded in state order, so the oldest of
    the level before are the states expanded already. A World let go is built
    again when asked for (from its parent's, else replayed from the root), the
    same World, so no count changes; only ``replays`` grows.
"""

from __future__ import annotations

from collections import OrderedDict

from fence.explore.abstract_state import Entry, translate
from fence.explore.transitions import DETAIL
from fence.model.world import World


KEPT_WORLDS = 16_384
"""At most this many Worlds kept by state number, over the level being expanded and the one before
(see the module docstring): about 77 MiB at 3x3x2 (4.7 KB a World without its trace, measured by hand at 1 million
states)."""


class WorldsOfEntries:
    """The abstract walk's Worlds and frontier rows (see the module docstring)."""

    kept_worlds = KEPT_WORLDS

    def keep_world(self, node: int, world: World) -> None:
        """Keep the World built for state ``node``, letting the oldest go past ``kept_worlds``."""
        built, before = self.built, self.built_before
        # Its history goes: a kept World is only cloned without history or read for its present (every drain,
        # step and check works on such a clone), and the steps it was made by cost about 1 KB each (a replayed
        # World's whole path): a fifth of a World built by one step.
        world.trace = []
        built[node] = world
        if len(built) + len(before) > self.kept_worlds:
            (before if before else built).popitem(last=False)

    def world_of(self, entry: Entry) -> World:
        """The entry's World, built from its parent's (itself built the same way if it was dropped).

        An entry read back from the frontier (``decode``) holds no parent: its
        parent's World is looked up by number among those built in this level
        and the last, and if it was not built, the path to it from the root is
        replayed (``replay``) and kept for its siblings.
        """
        if entry.world is not None:
            return entry.world
        if entry.parent is not None:
            before = self.world_of(entry.parent)
            action, meant = entry.action, (entry.job, entry.relative)
        else:
            parent, action = self.parents[entry.node]
            meant = self.parents.meant_of(entry.node) or (None, None)
            before = self.world_by_node(parent)
            if before is None:
                before = self.replay(parent)
                self.keep_world(parent, before)
        world = before.clone(history=False)
        world.apply(translate(before, action, *meant))
        world.reached.clear()  # counted by the walk already, from the memo's answer
        memo = world.job_memo
        parts_by_number = self.parts_by_number
        for job, part, detail in zip(self.jobs, entry.parts, entry.details):
            memo[job] = parts_by_number[part]
            memo[DETAIL + job] = detail
        entry.world = world
        if entry.node >= 0:
            self.keep_world(entry.node, world)
        return world

    def world_by_node(self, node: int) -> World | None:
        """The World built for state ``node`` in this level or the last, else None (the root's is always kept)."""
        if node == 0:
            return self.root.world
        world = self.built.get(node)
        return world if world is not None else self.built_before.get(node)

    def replay(self, node: int) -> World:
        """The World of state ``node``: the walk's path to it (``parents``), taken from the root's World."""
        parents = self.parents
        world = self.root.world.clone(history=False)
        for node in parents.lineage(node):
            action = parents[node][1]
            meant = parents.meant_of(node)
            if meant is not None:
                action = translate(world, action, *meant)
            world.apply(action)
        world.reached.clear()
        self.replays += 1
        return world

    def next_level(self, expanded) -> None:
        """Drop the Worlds built before the last level began.

        They can be had again (``world_of``, ``replay``): the walk holds the
        Worlds of about two levels' misses, and every other state as a row of
        numbers in the frontier (``encode``).
        """
        self.built_before, self.built = self.built, OrderedDict()

    def encode(self, node: int, entry: Entry) -> tuple:
        """The entry as the frontier keeps it: its number, context and abandon promises by number, then
        each job's detail and key part (numbers already); ``decode`` reads it back."""
        return (node, self.contexts(entry.shared), self.promises(entry.abandoned)) + entry.details + entry.parts

    def decode(self, row) -> tuple[int, Entry]:
        node = row[0]
        jobs = len(self.jobs)
        if node == 0:
            return 0, self.root
        entry = Entry(tuple(row[3:3 + jobs]), tuple(row[3 + jobs:]), self.promises.parts[row[2]],
                      self.contexts.parts[row[1]], self.world_by_node(node), None, None, None, None)
        entry.node = node
        return node, entry


    def adopt(self, entry: Entry, node: int) -> None:
        """``entry`` is the new state ``node`` (its parent and step are in ``parents`` now)."""
        entry.node = node
        if entry.world is not None:
            self.keep_world(node, entry.world)


    def fresh(self, entry: Entry) -> World:
        """The entry's World made again with nothing memoised on it: what a check compares with."""
        world = self.world_of(entry).clone(history=False)
        world.job_memo = {}
        world._enabled_cache = None
        return world

