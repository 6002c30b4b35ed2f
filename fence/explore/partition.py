"""One partition of the partitioned walk: the states it owns by fingerprint, expanded and judged from its own memos."""

from __future__ import annotations

import hashlib
import itertools
import marshal
import pickle
import resource
import sys
import time
from collections import Counter, OrderedDict
from operator import itemgetter

from fence.explore.abstract import AbstractWalk
from fence.explore.abstract_state import Entry, PartNumbers, translate
from fence.explore.abstract_worlds import KEPT_WORLDS
from fence.explore.drain_judge import DrainJudge
from fence.explore.transitions import DETAIL, StepMemo
from fence.explore.visited import KEY_PRIME, KeySums, of_plain
from fence.model.world import World

_by_order = itemgetter(0)


CODE_BYTES = 8
"""A path is written as one code per step: the step's fingerprint, the same in every process (``step_code``)."""


STRIDE_BITS = 16
"""Bits for a transition's place among its state's actions in an order (at most 65,536 actions a state)."""


_FINGERPRINT_BYTES = sys.getsizeof(2**63)


def step_code(step: tuple) -> bytes:
    """A step's code in a path: the fingerprint of its action's repr and what a janitor's step was meant to do."""
    action, meant = step
    return hashlib.blake2b(marshal.dumps((repr(action), meant), 2), digest_size=CODE_BYTES).digest()


def _content_number(numbers: dict[tuple, int], by_number: dict[int, tuple], value: tuple) -> int:
    """``value``'s number, its content's fingerprint (the same in every process), kept both ways."""
    number = numbers.get(value)
    if number is None:
        number = numbers[value] = of_plain(value)
        by_number[number] = value
    return number


class ContentNumbers(PartNumbers):
    """Key parts numbered by their content's fingerprint: the same number in every process."""

    def __init__(self) -> None:
        self.numbers: dict[tuple, int] = {}
        self.parts: dict[int, tuple] = {}  # type: ignore[assignment]  # indexed by number, as the list is

    def __call__(self, part: tuple) -> int:
        return _content_number(self.numbers, self.parts, part)


class ContentDetails(StepMemo):
    """The step memo with each job's detail numbered by its content's fingerprint, as ``ContentNumbers`` parts."""

    def __init__(self) -> None:
        super().__init__()
        self.by_number: dict[int, tuple] = {}  # type: ignore[assignment]

    def intern(self, detail: tuple) -> int:
        return _content_number(self.numbers, self.by_number, detail)


def _drawn_from_content(kind: str, position: int | None, piece) -> int:
    """A key piece's number for ``KeySums``: its content's fingerprint (``of_plain``), as random as BLAKE2b's."""
    return of_plain((kind, position, piece)) % KEY_PRIME


class OwnedWalk(AbstractWalk):
    """The abstract walk of one partition: parts by content, and Worlds rebuilt from an entry's path."""

    numbering = ContentNumbers

    quiet = 0
    """Transitions into states seen here that broke nothing are counted, not yielded (``AbstractWalk.quiet``):
    they were most of a partition's yields. ``Partition._expand`` recovers each yielded transition's place
    among its state's actions from this count, which ``successors`` brings up to date before each yield."""

    def key_sums(self, symmetry: bool, positions: int) -> KeySums:
        """The one-process walk's sums, each piece's number drawn from its content: the same in every process."""
        return KeySums(symmetry, positions, draw=_drawn_from_content)

    step_codes: dict[bytes, tuple] | None = None
    """A path's step codes -> (action, meant), as ``Partition`` learns them."""

    def steps_of(self, path: bytes) -> list[tuple]:
        codes = self.step_codes
        return [codes[path[at:at + CODE_BYTES]] for at in range(0, len(path), CODE_BYTES)]

    def __init__(self, *args, **options) -> None:
        super().__init__(*args, **options)
        self.replayed_steps = 0
        """Steps applied by replays (``world_of``): what rebuilding Worlds for rows costs, in ``World.apply`` calls."""
        self.kept: OrderedDict[bytes, World] = OrderedDict()
        """Path -> a World built here for it (replayed, or the World a state of this partition's frontier had
        when it was expanded), oldest first, at most ``KEPT_WORLDS``. A replay starts from the longest prefix
        of its path kept here: a row's parent is the other partition's, but its older ancestors were often
        expanded here, so most replays take a few steps where the last two levels' parents and grandparents
        alone left most to start from the root (``tools/partition_costs.py`` counts the steps replayed)."""

    def keep(self, path: bytes, world: World) -> None:
        """Keep ``world`` as the World of ``path``, letting the oldest go past ``KEPT_WORLDS``.

        Shared, as every built World is: it is cloned before a step, never changed. Its history goes, as
        the one-process walk's kept Worlds' does (``WorldsOfEntries.keep_world``): nothing here reads it (a
        drain or a step works on a clone without history), and each step in it is about 1 KB."""
        kept = self.kept
        if path and path not in kept:
            world.trace = []
            kept[path] = world
            if len(kept) > KEPT_WORLDS:
                kept.popitem(last=False)

    def _nearest_kept(self, path: bytes) -> tuple[int, World]:
        """The longest proper prefix of the path with a World kept here (``kept``), else the root."""
        kept = self.kept
        for end in range(len(path) - CODE_BYTES, 0, -CODE_BYTES):
            world = kept.get(path[:end])
            if world is not None:
                return end, world
        return 0, self.root.world

    def judge_new(self, child: Entry | None, findings: tuple, known, readings: list | None = None) -> list[str]:
        """What a step into a state not seen here broke, but for invariant 3's present (``present_judged``).

        Nearly every state is reached in both partitions in its level (two jobs' steps commute), so
        judging the present here judged most states twice; the owner judges it once per state, on the
        least order that reached it (``Partition._judge_entered``), and reuses the readings for the drain.
        """
        if readings is not None:  # a memo check (``check_judgement``) compares the whole judgement
            return super().judge_new(child, findings, known, readings)
        if not findings:
            return []
        return [inv.name for inv in self.step_invariants if inv.name in findings and inv.name not in known]

    def world_of(self, entry: Entry) -> World:
        """An entry that came in a row has no parent here: its World is its path replayed from the root
        (or from the World kept for the longest prefix of it, ``kept``)."""
        if entry.world is None and entry.parent is None and entry.path:
            path = entry.path
            start, world = self._nearest_kept(path)
            world = world.clone(history=False)
            steps = self.steps_of(path[start:])
            self.replayed_steps += len(steps)
            last = len(steps) - 1
            for at, (action, meant) in enumerate(steps):
                if at == last and at > 0:
                    self.keep(path[:-CODE_BYTES], world.clone(history=False))  # for the siblings
                if meant is not None:
                    action = translate(world, action, *meant)
                world.apply(action)
            world.reached.clear()  # counted by the walk already
            memo = world.job_memo
            for job, part, detail in zip(self.jobs, entry.parts, entry.details):
                memo[job] = self.parts_by_number[part]
                memo[DETAIL + job] = detail
            entry.world = world
            self.keep(path, world)
            self.replays += 1
            return world
        return super().world_of(entry)


class Partition:
    """One owner's share of the walk: its seen fingerprints, its frontier, its memos (see the module docstring)."""

    def __init__(self, index: int, count: int, policy, config, symmetry: bool, invariants) -> None:
        from fence.explore.successors import _Memo

        self.index, self.count = index, count
        step_invariants = [inv for inv in invariants if not inv.at_teardown]
        self.teardown = {inv.name for inv in invariants if inv.at_teardown}
        memos = _Memo(step_invariants)
        memos.steps = self.steps = ContentDetails()
        # A dict, not the flat DrainMemo: ``_news`` sends its items in insertion order, none ever dropped.
        judge = DrainJudge([inv for inv in invariants if inv.at_teardown], memos.steps, memo={})
        self.walk = OwnedWalk(memos, judge, symmetry, step_invariants, World(policy, config), parents=None)
        # What every partition learns, it tells the others (``_news``, ``_told``): every key and answer of
        # these memos is written in content numbers, so it means the same in every process, and each
        # answer was computed by the model on a real World, so a partition that is told it need not
        # build that World again (the walk's memos are functions of their keys: ``fence.explore.abstract``).
        walk = self.walk
        self.memos = [self.steps.answers, memos.ticks.parts, walk.enabled, walk.readings, judge.memo, judge.halves]
        self.marks = [0] * (len(self.memos) + 1)
        self.walk.root.path = b""
        self.codes: dict[bytes, tuple] = {}
        """Step code -> (action, meant): every step this partition made or was told of (``step_code``)."""
        self.walk.step_codes = self.codes
        self.untold: dict[bytes, tuple] = {}
        """The steps this partition made since its last batches: each batch tells its owner of them."""
        self.made: dict = {}
        """id(action) -> (action, meant, code): each step's code computed once. An action's meant is the same
        object each time it is taken (both come from one memoised list), so the lookup hashes no tuple; both
        are kept alive, so their ids are not reused."""
        root_key = self.walk.root_key()
        self.seen: set[int] = {root_key}  # every partition knows the root: it is never sent
        self.candidates: dict[int, tuple] = {}
        """Fingerprint -> (order, Entry) of the new states this partition found for itself this level."""
        if root_key % count == index:
            self.candidates[root_key] = (1, self.walk.root)

    def advance(self, incoming: list[bytes], expand: bool, known: frozenset, seconds_left: float | None):
        """One level: take in the rows sent to this partition, judge the new states, expand them.

        Returns (report, outgoing): outgoing holds a pickled batch of rows per partition (None for this one);
        the report is a dict of counts and of the first findings, each with its order and path.
        """
        started, cpu_started = time.perf_counter(), time.process_time()
        deadline = time.monotonic() + seconds_left if seconds_left is not None else None
        frontier = self._take_in(incoming)
        walk = self.walk
        entered_found = self._judge_entered(frontier, known)
        drain_found: dict[str, tuple[int, list]] = {}
        unsettled: list[int] = []  # the orders of the states whose drain found no fixed point
        drained = set(known)
        for order, entry in frontier:
            if self.teardown <= drained:
                break
            broken, settled = walk.judge_drain_of(entry)
            if not settled:
                unsettled.append(order)
            for name in broken:
                if name not in drained:
                    drain_found[name] = (order, walk.steps_of(entry.path))
                    drained.add(name)
        report = {"accepted": len(frontier), "entered_found": entered_found, "drain_found": drain_found,
                  "unsettled": unsettled,
                  "transitions": 0, "reached": Counter(), "step_found": {}, "stopped": False, "rows": 0}
        outgoing: list = [None] * self.count
        if expand and frontier:
            rows = self._expand(frontier, set(known), deadline, report)
            untold, self.untold = list(self.untold.items()), {}
            news = self._news()
            outgoing = [_packed(untold, news, batch) if batch is not None else None for batch in rows]
            report["rows"] = sum(len(batch[0]) for batch in rows if batch is not None)
        report["peak_bytes"] = peak_bytes()
        # The seen set's table and its fingerprints (each a 64-bit int object): what the visited set costs here.
        report["seen_bytes"] = sys.getsizeof(self.seen) + len(self.seen) * _FINGERPRINT_BYTES
        report["rebuilt"] = walk.replays
        report["replayed_steps"] = walk.replayed_steps
        # This round's own seconds, busy and on the CPU: a round's wall time less a partition's busy time is
        # its wait at the level's barrier, and busy less CPU the time the machine gave to others.
        report["busy_seconds"] = time.perf_counter() - started
        report["cpu_seconds"] = time.process_time() - cpu_started
        return report, outgoing

    def _judge_entered(self, frontier: list[tuple[int, Entry]], known: frozenset) -> dict[str, tuple[int, list]]:
        """Invariant 3's present on this level's new states, in order: the first that breaks it, with its path.

        The transition that entered a state at its least order is the one the one-process walk judges
        it on (``OwnedWalk.judge_new``); transitions into a state seen before judge only their findings.
        """
        walk = self.walk
        name = walk.present_judged
        if name is None or name in known:  # known: found before the level that entered these states
            return {}
        capacity = walk.capacity
        for order, entry in frontier:
            if entry.path and sum(reading[0] for reading in walk.readings_of(entry)) > capacity:
                return {name: (order, walk.steps_of(entry.path))}
        return {}

    def _news(self) -> list[list]:
        """What the memos learned here since they last told (and were told): the new items of each, and the parts."""
        numbers = self.walk.number.parts
        news = [list(itertools.islice(memo.items(), mark, None)) for memo, mark in zip(self.memos, self.marks)]
        news.append(list(itertools.islice(numbers.items(), self.marks[-1], None)))
        self.marks = [len(memo) for memo in self.memos] + [len(numbers)]
        return news

    def _told(self, told: list[list[list]]) -> None:
        """Learn what the others' memos learned; an answer known here already is kept (they are the same)."""
        content = self.walk.number
        for news in told:
            for memo, items in zip(self.memos, news):
                for key, answer in items:
                    if key not in memo:
                        memo[key] = answer
            for number, part in news[-1]:
                if number not in content.parts:
                    content.parts[number] = part
                    content.numbers[part] = number
        # Everything up to here was learned elsewhere or told already: only what follows is news.
        self.marks = [len(memo) for memo in self.memos] + [len(content.parts)]

    def _take_in(self, incoming: list[bytes]) -> list[tuple[int, Entry]]:
        """The new states this level owns, in order: its own finds and the rows sent, the least order per state."""
        candidates, self.candidates = self.candidates, {}
        seen = self.seen
        batches = [_unpacked(batch) for batch in incoming]
        for told, _news, _rows in batches:
            self.codes.update(told)
        self._told([news for _told, news, _rows in batches])
        for _told, _news, rows in batches:
            for row in rows:
                key, order = row[0], row[1]
                held = candidates.get(key)
                if held is None:
                    if key in seen:
                        continue
                    seen.add(key)
                    candidates[key] = (order, row)
                elif order < held[0]:
                    candidates[key] = (order, row)
        frontier = []
        for order, held in sorted(candidates.values(), key=_by_order):
            if not isinstance(held, Entry):
                _key, _order, details, parts, abandoned, shared, path = held[:7]
                world = held[7] if len(held) > 7 else None
                if world is not None:  # its maker built it: the memos here are likely to miss on it too
                    memo = world.job_memo
                    world.job_memo = {name: value for name, value in memo.items() if not name.startswith(DETAIL)}
                held = Entry(details, parts, abandoned, shared, world, None, None, None, None)
                held.path = path
            frontier.append((order, held))
        return frontier

    def _expand(self, frontier, known: set, deadline, report) -> list:
        walk, seen, count, me = self.walk, self.seen, self.count, self.index
        rows: list = [([], []) if number != me else None for number in range(count)]  # (rows, their Worlds)
        candidates = self.candidates
        made, codes, untold = self.made, self.codes, self.untold
        step_found = report["step_found"]
        reached = report["reached"]
        yielded = 0
        walk.quiet = 0
        for order, entry in frontier:
            if deadline is not None and time.monotonic() > deadline:
                report["stopped"] = True
                break
            base = order << STRIDE_BITS
            before = yielded + walk.quiet  # the level's transitions before this state's
            path = entry.path
            for action, child, key, broken in walk.successors(entry, seen, known, reached):
                place = yielded + walk.quiet - before  # this state's transitions before it, yielded or quiet
                yielded += 1
                if broken or child is not None:
                    meant = walk.last_meant
                    known_step = made.get(id(action))
                    if known_step is None or known_step[0] is not action or known_step[1] is not meant:
                        step = (action, meant)
                        code = step_code(step)
                        if code not in codes:
                            codes[code] = untold[code] = step
                        known_step = made[id(action)] = (action, meant, code)
                    code = known_step[2]
                    for name in broken:
                        if name not in step_found:
                            step_found[name] = (base + place, walk.steps_of(path + code))
                            known.add(name)
                if child is None:
                    continue
                seen.add(key)
                child.path = path + code
                owner = key % count
                if owner == me:
                    candidates[key] = (base + place, child)
                else:
                    plain, worlds = rows[owner]
                    if child.world is not None:
                        child.world.trace = []  # its one step would travel too (see ``OwnedWalk.keep``)
                        worlds.append((len(plain), child.world))
                    plain.append((key, base + place, child.details, child.parts, child.abandoned, child.shared,
                                  child.path))
        keep = walk.keep
        for _order, entry in frontier:
            entry.parent = None  # its children have its World if they need it; nothing older is kept
            if entry.world is not None:  # a start for replays of its descendants' rows (``OwnedWalk.kept``)
                keep(entry.path, entry.world)
        report["transitions"] = yielded + walk.quiet
        walk.quiet = 0
        return rows


def _packed(untold: list, news: list, batch: tuple[list, list]) -> bytes:
    """One owner's batch as bytes: the rows, plain numbers, bytes and strings, by ``marshal`` (about twice as
    fast as ``pickle`` on them, both ways); the steps told, the memos' news and the rows' few Worlds pickled."""
    plain, worlds = batch
    return pickle.dumps((untold, news, worlds, marshal.dumps(plain)), protocol=pickle.HIGHEST_PROTOCOL)


def _unpacked(batch: bytes) -> tuple[list, list, list]:
    """(steps told, news, rows) of a ``_packed`` batch; a row with a World has it as its eighth item."""
    untold, news, worlds, plain = pickle.loads(batch)
    rows = marshal.loads(plain)
    for position, world in worlds:
        rows[position] += (world,)
    return untold, news, rows


def peak_bytes() -> int:
    """This process's peak resident memory (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024
