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
partition told of it need not build that World itself. A batch is packed
once per owner per round (its rows by ``marshal``, the rest pickled:
``fence.explore.partition._packed``). The path is all the parent bookkeeping
there is: a World that a memo miss needs is rebuilt by replaying it
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
    One judgement waits a round: invariant 3's present reading on a new state is
    judged by the state's owner, on the least order that reached it
    (``Partition._judge_entered``), where one process judges it on the first
    transition into the state; so the partitions are told of a name found by a
    round's expansion only a round later, and the coordinator keeps a finding's
    least order over all rounds (orders of a deeper level are always larger).

What is not shared: ``max_states`` and ``stop_when_all_violated`` (the one-process
walk keeps them exactly), user plug-ins and user step invariants (their walks are
not keyed by the memos); those run in one process and the result says why.
"""

from __future__ import annotations

import time

from fence.model.world import World
from fence.explore.partition import _by_order
from fence.explore.transports import ProcessTransport, RayTransport




# -- the coordinator ---------------------------------------------------------------------------------
def coordinate(result, transport, invariants, *, max_depth, time_budget, progress, started) -> None:
    """Run the levels through ``transport`` (processes or Ray actors) and fill in ``result``.

    ``transport.round(expand, known, seconds_left)`` runs one ``Partition.advance`` in every
    partition, delivering each the batches the others sent it last round, and returns the reports.
    """
    from fence.explore.abstract_state import replayable
    from fence.explore.judging import verdicts

    found: dict[str, tuple] = {}
    teardown = {inv.name for inv in invariants if inv.at_teardown}
    depth = 0
    out_of_budget = None
    remaining = False
    peak = 0
    reports: list[dict] = []
    known: frozenset = frozenset()
    """What the partitions are told is found: not yet what the last round's expansion found (see above)."""
    while True:
        expand = max_depth is None or depth < max_depth
        seconds_left = None
        if time_budget is not None:
            seconds_left = time_budget - (time.perf_counter() - started)
            if seconds_left <= 0:
                out_of_budget = "time_budget"
                break
        reports = transport.round(expand, known, seconds_left)
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
        # Transitions of the level before into this level's states, judged by the states' owners.
        _least(found, [report["entered_found"] for report in reports])
        if accepted == 0:
            break
        if not expand:
            remaining = True
            break
        known = frozenset(found)
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
    """Record each invariant at the least order any partition found it, in this round or before."""
    for name in sorted({name for first in findings for name in first}):
        least = min((first[name] for first in findings if name in first), key=_by_order)
        if name not in found or least[0] < found[name][0]:
            found[name] = least


# -- transports: processes on this machine, or Ray actors ------------------------------------------


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


