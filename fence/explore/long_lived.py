"""The cyclic garbage collector during one walk: off for fence's own parts, rarer and level-frozen for plug-ins."""

from __future__ import annotations

import gc


class LongLived:
    """Keeps Python's cyclic garbage collector out of one ``explore`` of fence's own parts.

    The walk allocates a few small objects per transition and keeps every key,
    parent pointer, memo answer and the frontier's worlds until it ends, and the
    collector's passes scan all that is not yet collected again and again:
    about four tenths of a walk's time at 2x2x2 even with the survivors of each
    level frozen (``gc.freeze``). None of it forms reference cycles (the
    worlds hold none; ``tests/test_explore.py`` checks that a walk leaves no
    cyclic garbage), so everything the walk drops is freed by its reference
    count, and the collector is switched off for the walk and on again at its
    end. A user's plug-ins may hold cycles, so for them the collector stays on
    but runs its youngest pass after ``PLUGIN_THRESHOLD`` allocations rather
    than 700 (cycles are still freed, a few hundred thousand objects late):
    about a fifth of a generic walk's time at 2x2x2 went to those passes.
    Nothing is done if the collector is off already.

    A plug-in walk also freezes what survived each level (``next_level``), so
    the older passes scan one level's survivors, not the whole walk's, for as
    long as no pass has found cyclic garbage: a frozen object is never
    collected (only its reference count frees it) until the walk's end
    unfreezes it, so a plug-in that leaves cycles behind must not have its
    Worlds frozen, and from the first pass that frees one nothing more is
    (what was frozen is let go at once). Not when the caller froze objects
    itself: the walk's unfreeze would let go of them too.
    """

    PLUGIN_THRESHOLD = (100_000, 10, 10)
    """The older passes keep their ratios: a plug-in's World in a cycle that lived through a level is
    freed within some ten million allocations, as within 70,000 by default."""

    def __init__(self, fence_parts_only: bool) -> None:
        self.active = gc.isenabled()
        self.thresholds = gc.get_threshold()
        self.freezes = False
        if not self.active:
            return
        if fence_parts_only:
            gc.disable()
        else:
            gc.set_threshold(*self.PLUGIN_THRESHOLD)
            self.freezes = gc.get_freeze_count() == 0
            self.collected = _collected()

    def next_level(self) -> None:
        """A level ended: freeze its survivors, while the plug-ins have left no cyclic garbage (see the class)."""
        if not self.freezes:
            return
        if _collected() != self.collected:
            self.freezes = False
            gc.unfreeze()
            return
        gc.freeze()

    def close(self) -> None:
        if self.active:
            if self.freezes:
                gc.unfreeze()
            gc.set_threshold(*self.thresholds)
            gc.enable()


def _collected() -> int:
    """Objects the collector has found unreachable in this process so far, over its generations."""
    return sum(generation["collected"] for generation in gc.get_stats())
