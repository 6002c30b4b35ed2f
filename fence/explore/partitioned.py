"""The explorer's levels partitioned by fingerprint: each state has one owner, which alone keeps and expands it.

Theory of operation
-------------------
The walk is ``fence.explore.walk.walk``'s, level by level, over the abstract walk's
entries (``fence.explore.abstract``): the same memos, learned from the same World, the
same successors, the same step and drain judges. What differs is who does it.
There are ``count`` partitions (processes, or Ray actors); the owner of a state
is its key's fingerprint modulo ``count``. Each partition keeps its own
memos, its own set of the fingerprints it has seen, and the frontier of the
states it owns. One level is one round (``Partition.advance``):

1. take in the states the others sent last round; keep those not seen before
   (the owner deduplicates, against its own set only), one row per state: the
   least in the one-process order (below) of the rows that reached it;
2. judge each new state's drain (invariant 6);
3. expand each new state in that order; a successor this partition has not
   seen is sent to its owner, a batch per owner (or kept, if its own).

What travels is a row per state: the fingerprint, the order, each job's
detail and key part by number, the context, the abandon promises, and the
path from the root as 8-byte step codes (``step_code``); a World only where
its sender had to build one (its memos missed on it). With the rows go the
steps behind new codes and what the sender's memos learned this round
(``Partition._news``): every memo key and answer is written in content
numbers, and each answer was computed by the model on a real World, so a
partition told of it need not build that World itself. A batch is pickled
once per owner per round. The path is all the parent bookkeeping there is: a
World that a memo miss needs is rebuilt by replaying it
(``OwnedWalk.world_of``), and a counterexample is the path to the first
violating transition, replayed from scratch as in one process.

Fingerprints the same in every process
    The one-process walk numbers key parts and details in the order it meets
    them, so its keys mean nothing to another process; here each is numbered by its
    content (``fence.explore.visited.of_plain``: marshal and blake2b, never Python's
    per-process ``hash``), and a key's fingerprint sums numbers drawn from its
    pieces' content (``OwnedWalk.key_sums``) where one process draws them at
    random, so every partition gives a state the same fingerprint and the same
    owner.

The same order, so the same counterexamples
    One process expands a level in the order its states were found: by their
    parents' order, then by the transition's place among the parent's actions.
    Here a state's order is that pair written as one integer (the parent's
    order shifted left by ``STRIDE_BITS`` plus the place; the root is 1), so
    comparing orders of one level compares them as the one-process walk would
    have met them. Each partition expands in that order and records, per
    invariant, its first breaking transition with its order; the coordinator
    takes the least of each level. That is the transition the one-process walk
    finds first, so the counterexample is the same path (the tests compare them).

What is not shared: ``max_states`` and ``stop_when_all_violated`` (the one-process
walk keeps them exactly), user plug-ins and user step invariants (their walks are
not keyed by the memos); those run in one process and the result says why.
"""

from __future__ import annotations

import gc
import hashlib
import os
import itertools
import marshal
import pickle
import resource
import sys
import time
from collections import Counter
from operator import itemgetter

from fence.explore.abstract import AbstractWalk, Entry, PartNumbers, translate
from fence.explore.drain_judge import DrainJudge
from fence.explore.transitions import DETAIL, StepMemo
from fence.explore.visited import KEY_PRIME, KeySums, of_plain
from fence.model.world import World

CODE_BYTES = 8
"""A path is written as one code per step: the step's fingerprint, the same in every process (``step_code``)."""

STRIDE_BITS = 16
"""Bits for a transition's place among its state's actions in an order (at most 65,536 actions a state)."""

_by_order = itemgetter(0)
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

    def key_sums(self, symmetry: bool, positions: int) -> KeySums:
        """The one-process walk's sums, each piece's number drawn from its content: the same in every process."""
        return KeySums(symmetry, positions, draw=_drawn_from_content)

    step_codes: dict[bytes, tuple] | None = None
    """A path's step codes -> (action, meant), as ``Partition`` learns them."""

    def steps_of(self, path: bytes) -> list[tuple]:
        codes = self.step_codes
        return [codes[path[at:at + CODE_BYTES]] for at in range(0, len(path), CODE_BYTES)]

    def world_of(self, entry: Entry) -> World:
        """An entry that came in a row has no parent here: its World is its path replayed from the root."""
        if entry.world is None and entry.parent is None and entry.path:
            world = self.root.world.clone(history=False)
            for action, meant in self.steps_of(entry.path):
                if meant is not None:
                    action = translate(world, action, *meant)
                world.apply(action)
            world.reached.clear()  # counted by the walk already
            memo = world.job_memo
            for job, part, detail in zip(self.jobs, entry.parts, entry.details):
                memo[job] = self.parts_by_number[part]
                memo[DETAIL + job] = detail
            entry.world = world
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
        judge = DrainJudge([inv for inv in invariants if inv.at_teardown], memos.steps)
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
        """(id(action), meant) -> (action, code): each step's code computed once (the action is kept alive)."""
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
        deadline = time.monotonic() + seconds_left if seconds_left is not None else None
        frontier = self._take_in(incoming)
        walk = self.walk
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
        report = {"accepted": len(frontier), "drain_found": drain_found, "unsettled": unsettled,
                  "transitions": 0, "reached": Counter(), "step_found": {}, "stopped": False, "rows": 0}
        outgoing: list = [None] * self.count
        if expand and frontier:
            rows = self._expand(frontier, set(known), deadline, report)
            untold, self.untold = list(self.untold.items()), {}
            news = self._news()
            outgoing = [pickle.dumps((untold, news, batch), protocol=pickle.HIGHEST_PROTOCOL) if batch is not None
                        else None for batch in rows]
            report["rows"] = sum(len(batch) for batch in rows if batch is not None)
        report["peak_bytes"] = peak_bytes()
        # The seen set's table and its fingerprints (each a 64-bit int object): what the visited set costs here.
        report["seen_bytes"] = sys.getsizeof(self.seen) + len(self.seen) * _FINGERPRINT_BYTES
        report["rebuilt"] = walk.replays
        return report, outgoing

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
        batches = [pickle.loads(batch) for batch in incoming]
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
                _key, _order, details, parts, abandoned, shared, path, world = held
                if world is not None:  # its maker built it: the memos here are likely to miss on it too
                    memo = world.job_memo
                    world.job_memo = {name: value for name, value in memo.items() if not name.startswith(DETAIL)}
                held = Entry(details, parts, abandoned, shared, world, None, None, None, None)
                held.path = path
            frontier.append((order, held))
        return frontier

    def _expand(self, frontier, known: set, deadline, report) -> list:
        walk, seen, count, me = self.walk, self.seen, self.count, self.index
        rows: list = [[] if number != me else None for number in range(count)]
        candidates = self.candidates
        made, codes, untold = self.made, self.codes, self.untold
        step_found = report["step_found"]
        reached = report["reached"]
        transitions = 0
        for order, entry in frontier:
            if deadline is not None and time.monotonic() > deadline:
                report["stopped"] = True
                break
            base = order << STRIDE_BITS
            path = entry.path
            for place, (action, child, key, broken) in enumerate(walk.successors(entry, seen, known, reached)):
                transitions += 1
                if broken or child is not None:
                    meant = walk.last_meant
                    known_step = made.get((id(action), meant))
                    if known_step is None or known_step[0] is not action:
                        step = (action, meant)
                        code = step_code(step)
                        if code not in codes:
                            codes[code] = untold[code] = step
                        known_step = made[(id(action), meant)] = (action, code)
                    code = known_step[1]
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
                    rows[owner].append((
                        key, base + place, child.details, child.parts, child.abandoned, child.shared, child.path,
                        child.world,
                    ))
        for _order, entry in frontier:
            entry.parent = None  # its children have its World if they need it; nothing older is kept
        report["transitions"] = transitions
        return rows


def peak_bytes() -> int:
    """This process's peak resident memory (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


# -- the coordinator ---------------------------------------------------------------------------------
def coordinate(result, transport, invariants, *, max_depth, time_budget, progress, started) -> None:
    """Run the levels through ``transport`` (processes or Ray actors) and fill in ``result``.

    ``transport.round(expand, known, seconds_left)`` runs one ``Partition.advance`` in every
    partition, delivering each the batches the others sent it last round, and returns the reports.
    """
    from fence.explore.abstract import replayable
    from fence.explore.judging import verdicts

    found: dict[str, tuple] = {}
    teardown = {inv.name for inv in invariants if inv.at_teardown}
    depth = 0
    out_of_budget = None
    remaining = False
    peak = 0
    reports: list[dict] = []
    while True:
        expand = max_depth is None or depth < max_depth
        seconds_left = None
        if time_budget is not None:
            seconds_left = time_budget - (time.perf_counter() - started)
            if seconds_left <= 0:
                out_of_budget = "time_budget"
                break
        reports = transport.round(expand, frozenset(found), seconds_left)
        accepted = sum(report["accepted"] for report in reports)
        result.states += accepted
        peak = max(peak, sum(report["peak_bytes"] for report in reports))
        before = set(found)
        _least(found, [report["drain_found"] for report in reports])
        unsettled = [order for report in reports for order in report["unsettled"]]
        if teardown <= set(found) and not teardown <= before:
            # One process stops draining once every teardown invariant is found: count what it drained.
            last = max(found[name][0] for name in teardown - before)
            unsettled = [order for order in unsettled if order <= last]
        result.drains_unsettled += len(unsettled)
        if accepted == 0:
            break
        if not expand:
            remaining = True
            break
        _least(found, [report["step_found"] for report in reports])
        result.transitions += sum(report["transitions"] for report in reports)
        for report in reports:
            result.reached.update(report["reached"])
        if any(report["stopped"] for report in reports):
            out_of_budget = "time_budget"
            break
        depth += 1
        if progress is not None:
            result.depth, result.seconds = depth, time.perf_counter() - started
            result.queued = sum(report["rows"] for report in reports)  # sent to their owners, not yet deduplicated
            progress(result)
    result.depth = depth
    result.visited_bytes = sum(report["seen_bytes"] for report in reports)
    result.peak_bytes = peak
    result.exhausted = out_of_budget is None and not remaining
    result.stopped_by = out_of_budget
    paths = {name: replayable(World(result.policy, result.config), path) for name, (_, path) in found.items()}
    verdicts(result, invariants, paths, out_of_budget)
    result.seconds = time.perf_counter() - started


def _least(found: dict, findings: list[dict]) -> None:
    """Record each invariant not found before at the least order any partition found it."""
    for name in sorted({name for first in findings for name in first} - set(found)):
        found[name] = min((first[name] for first in findings if name in first), key=_by_order)


# -- transports: processes on this machine, or Ray actors ------------------------------------------
class ProcessTransport:
    """Partitions in forked processes on this machine; the coordinator hands each its batches, unread."""

    def __init__(self, count: int, setup: tuple) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        self.pipes, self.processes = [], []
        for index in range(count):
            here, there = context.Pipe()
            process = context.Process(target=_partition_process, args=(there, index, count, setup), daemon=True)
            process.start()
            there.close()
            self.pipes.append(here)
            self.processes.append(process)
        self.incoming: list[list[bytes]] = [[] for _ in range(count)]

    def round(self, expand: bool, known: frozenset, seconds_left: float | None) -> list[dict]:
        for pipe, batches in zip(self.pipes, self.incoming):
            pipe.send((batches, expand, known, seconds_left))
        replies = [_received(pipe) for pipe in self.pipes]
        self.incoming = [[] for _ in self.pipes]
        for _report, outgoing in replies:
            for owner, batch in enumerate(outgoing):
                if batch is not None:
                    self.incoming[owner].append(batch)
        return [report for report, _ in replies]

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:  # the process is gone already
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()

    def kill(self) -> None:
        for process in self.processes:
            process.kill()


def _received(pipe):
    reply = pipe.recv()
    if isinstance(reply, str):  # a partition's traceback
        raise RuntimeError(f"an explorer partition failed:\n{reply}")
    return reply


def _partition_process(pipe, index: int, count: int, setup: tuple) -> None:
    import signal
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the coordinator's to handle (it kills us)
    gc.disable()  # fence's own parts hold no cycles (see fence.explore.walk._LongLived); this process is the walk's
    try:
        partition = Partition(index, count, *setup)
        while True:
            order = pipe.recv()
            if order is None:
                return
            pipe.send(partition.advance(*order))
    except Exception:
        pipe.send(traceback.format_exc())


class RayTransport:
    """Partitions as Ray actors: each round's batches go from actor to actor through Ray's object store.

    ``address`` is a running cluster's address (as ``ray.init`` takes it), or "local" to start a
    cluster of this machine's own for the walk (no dashboard) and stop it after.
    """

    def __init__(self, count: int, setup: tuple, address: str) -> None:
        import ray

        self.ray = ray
        self.started_here = False
        if not ray.is_initialized():
            if address == "local":
                # Ray starts its workers at niceness 15 (ray-project/ray#24928), to yield to its own daemons
                # and to everything else on the node; on a shared machine the walk's actors then wait behind
                # every other process, and the walk is the job here. A cluster's own setting is its own.
                os.environ.setdefault("RAY_worker_niceness", "0")
                ray.init(num_cpus=count, include_dashboard=False, log_to_driver=False, configure_logging=False,
                         _node_ip_address="127.0.0.1")  # this machine's loopback only
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            self.started_here = True
        actor = ray.remote(num_cpus=1)(RayPartition)
        self.actors = [actor.remote(index, count, setup) for index in range(count)]
        self.incoming: list[list] = [[] for _ in range(count)]

    def round(self, expand: bool, known: frozenset, seconds_left: float | None) -> list[dict]:
        count = len(self.actors)
        calls = [
            actor.advance.options(num_returns=count + 1).remote(expand, known, seconds_left, *batches)
            for actor, batches in zip(self.actors, self.incoming)
        ]
        # Each batch stays in the object store: its reference goes to its owner's next call, and Ray
        # hands the bytes from actor to actor (top-level arguments are fetched before the call runs).
        self.incoming = [[] for _ in range(count)]
        for sender, refs in enumerate(calls):
            for owner in range(count):
                if owner != sender:
                    self.incoming[owner].append(refs[1 + owner])
        return self.ray.get([refs[0] for refs in calls])

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        if self.started_here:
            self.ray.shutdown()

    kill = close


class RayPartition:
    """A ``Partition`` in a Ray actor: an empty batch (this actor's own slot, or nothing to send) is b""."""

    def __init__(self, index: int, count: int, setup: tuple) -> None:
        gc.disable()  # as in a process of ProcessTransport: the actor's process is the walk's
        self.partition = Partition(index, count, *setup)

    def advance(self, expand: bool, known: frozenset, seconds_left, *incoming: bytes):
        report, outgoing = self.partition.advance([batch for batch in incoming if batch], expand, known, seconds_left)
        return (report, *[batch or b"" for batch in outgoing])


# -- the entry --------------------------------------------------------------------------------------
def partition_problem(policy, config, options: dict) -> str | None:
    """Why this walk cannot be partitioned (it then runs in one process), or None."""
    from fence.explore.successors import memo_judges
    from fence.explore.walk import INVARIANTS

    if options.get("destination_factory") is not None or options.get("ledger_factory") is not None:
        return "a user's destination or ledger is walked in one process (its copies are checked against replays)"
    if not World(policy, config).fast_copy_is_faithful() or not _fence_policy(policy):
        return "a user's policy is walked in one process (its calls are checked twice)"
    steps_judged = [inv for inv in options.get("invariants", INVARIANTS) if not inv.at_teardown]
    if not memo_judges(steps_judged):
        return "a user's step invariant is judged on whole Worlds, in one process"
    if options.get("max_states") is not None or options.get("stop_when_all_violated"):
        return "a state budget (--max-states) is kept exactly by one process"
    unknown = set(options) - {"max_depth", "time_budget", "symmetry", "invariants", "progress"}
    if unknown:
        return f"{', '.join(sorted(unknown))} is one process's option"
    return None


def _fence_policy(policy) -> bool:
    from fence.model.policies import FENCE_POLICY_TYPES

    return type(policy) in FENCE_POLICY_TYPES


def explore_partitioned(policy, config, *, partitions: int = 2, ray_address: str | None = None, **options):
    """``explore``, with each state owned by one of ``partitions`` processes (or Ray actors at ``ray_address``).

    The same results as one process (states, transitions, depth, verdicts, the same shortest
    counterexamples); where the walk cannot be partitioned it runs in one and says why.
    """
    from fence.explore.results import Exploration
    from fence.explore.walk import INVARIANTS, explore

    problem = partition_problem(policy, config, options)
    if problem is not None:
        found = explore(policy, config, **options)
        found.one_process_because = problem
        return found
    started = time.perf_counter()
    invariants = options.get("invariants", INVARIANTS)
    symmetry = options.get("symmetry", False)
    result = Exploration(policy, config, options.get("max_depth"), symmetry, processes=partitions)
    setup = (policy, config, symmetry, invariants)
    if ray_address is not None:
        transport = RayTransport(partitions, setup, ray_address)
        result.partitioned_on = f"{partitions} Ray actors ({ray_address})"
    else:
        transport = ProcessTransport(partitions, setup)
        result.partitioned_on = f"{partitions} processes"
    try:
        coordinate(result, transport, invariants, max_depth=options.get("max_depth"),
                   time_budget=options.get("time_budget"), progress=options.get("progress"), started=started)
    except BaseException:
        transport.kill()
        raise
    transport.close()
    return result


def ray_problem(address: str) -> str | None:
    """Why ``--ray ADDRESS`` cannot work (Ray missing, an address that does not parse or answer), or None.

    Checked before the walk: ``ray.init`` on an address nobody listens at retries for minutes.
    """
    import importlib.util
    import socket

    if importlib.util.find_spec("ray") is None:
        return "--ray needs Ray, which is not installed here; install it with: pip install 'fence[ray]'"
    if address in ("local", "auto"):
        return None
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return (f"--ray {address!r} is not an address: give HOST:PORT of the cluster's head (ray start --head "
                "prints it), ray://HOST:PORT for Ray Client, 'auto' for the cluster this machine belongs to, "
                "or 'local' to start one here")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as error:
        return (f"--ray {address}: no Ray cluster answers there ({error.strerror or error}); start one with "
                "'ray start --head' and pass the address it prints, or use --ray local")
    return None
