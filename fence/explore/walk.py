"""The exhaustive explorer: every interleaving of the one model, breadth first.

Theory of operation
-------------------
The explorer drives the same ``World`` the Hypothesis machines drive (the same
ledger, janitor policies, destination code and enabled actions); it only picks
differently: from each state it takes *every* enabled action, breadth first, and
remembers each state it has seen by a compact key so that no state is expanded
twice. Under the bounds of a ``ModelConfig`` (units, jobs, attempts per job,
lease, clock horizon) the reachable state space is finite: the clock never
passes the horizon and a job never makes more than ``max_attempts`` attempts.
The janitor's probe/settle "hold" loop revisits states, which the key absorbs.

The state key
    ``state_key`` keeps what the world's future depends on and merges states
    whose futures differ in nothing the invariants or the drain can see:

    * the clock, and one part per job, written in names relative to the job;
    * a deadline only as "expired" or its tick (the model reads a deadline only
      through ``expired(now)`` of a ``reserved`` reservation, and the clock only
      moves forward), and none once a reservation is no longer ``reserved``;
    * the messages in flight as a collection, not a queue: the rules may deliver
      any of them, and the drain (``World._drain_round``) delivers in an order
      computed from the messages themselves, never in send order; an answer to
      an attempt that no longer waits for one, and a registration at a
      destination that keeps no witness, change nothing when they arrive and are
      left out;
    * an attempt that is done or crashed, with no commit on its way, only as a
      name (its messages still count); the payload only until its commit was
      delivered, and the destination's answer only once it arrived;
    * a janitor's answer only as the decision it leads to (``policy.decide``
      is pure), only while its reservation is ``outcome_unknown`` (a settle of
      anything else is refused, and nothing returns to ``outcome_unknown``),
      and per reservation as a collection: janitors keep no other state, so
      which janitor holds which answer does not matter; the drain settles held
      answers in an order computed from the answers, not from the janitors;
    * the effects of a key in landing order (the first payload is the ticket on
      record), but not which attempt wrote them or the order across keys.

    Every other field of the world the future depends on (attempts used,
    reservation ownership, the ledger's current reservation per key, the
    destination's first payload per key) is a function of what the key holds.
    The key is written by hand; ``key_congruence`` holds it against
    ``fence.explore.state_key.whole_state``, every field read mechanically, by
    checking that the states one key merges have the same steps, findings
    and drain.
    Merged states have the same enabled actions up to steps that change nothing,
    so breadth first still finds a shortest counterexample: a step that changes
    nothing is never on a shortest path.

Fingerprints, and the paths back
    The visited set does not keep the keys themselves: it maps a 64-bit
    fingerprint of each key to the state's number (``fence.explore.visited``), and the
    parents are two arrays of numbers, so a visited state costs about 100-130
    bytes (the dict's slot, the fingerprint and the number as Python ints, 12
    bytes of parents) whatever its key holds. Equal keys always share a fingerprint, so only
    a hash collision can merge two states the key tells apart; the report gives
    the chance of one as TLC does (n^2 / 2^65). A counterexample is the path
    read back from the parent numbers and replayed from scratch, as before; the
    abstract walk lets an entry's parent go once its level is expanded, and
    builds a World it dropped by replaying that path (``AbstractWalk.replay``).

History, and why checking each transition is exact
    Invariants 2, 3, 5 and 7 read history: release records, late effects,
    stale changes, silent replays. The key leaves history out, so two paths to
    one state may carry different records. The explorer therefore never
    carries history: each successor is made by ``World.clone(history=False)``
    and one ``apply``, and every step invariant is checked on it at once. What
    a transition records (a release record's ``unaccounted_effects`` and
    ``owner_could_still_write``, a late effect, a stale change, a silent
    replay) is computed from the state before it and the action alone, and the
    records are append-only, so a run breaks an invariant at its first
    transition that records a bad fact or enters a state whose present part is
    bad (two effects for a key, more live attempts than units, units held
    twice). Every transition out of every reachable state is taken, so every
    such transition is found; breadth first, the first found is at the least
    depth, and the parent pointers give a shortest counterexample (fewest
    chosen steps). The same argument counts the "sometimes" dangers: each is
    counted by the transition that reaches it.

The step memo (fence's own parts)
    Most transitions lead to a state seen before, and most steps touch one
    job. What a job-local step did (the job's new key part, abandon promises,
    findings, dangers) is remembered under everything the world holds about
    that job and the few shared readings the step makes (``fence.explore.transitions``
    says why that is complete), learned from the real clone and apply. A
    transition into a visited key is then counted and judged from the memo
    (``_memo_successors`` says why that judges it exactly); a new state is
    still made by clone and apply. The drain judge puts a first half of a
    drain together job by job the same way. ``explore(check_memo=n)`` takes
    every n-th memoised answer the slow way too and raises on a difference.

The abstract walk (one process, fence's own parts)
    ``explore`` goes further (``fence.explore.abstract``): a new state is held by its
    readings (details, key parts, context, abandon promises) and expanded and
    judged from memos learned from real Worlds (enabled actions per job, the
    step memo, live writers per job, the drain judge); a World is built only
    when one of them misses. Its keys name each part by a number, and are
    fingerprinted by sums (``fence.explore.visited.KeySums``). The workers
    of ``explore_with_workers`` keep the path above.

Invariant 6 (everything_settles), a teardown invariant
    is checked per reachable state by the model's own fault-free drain on a
    clone: ``clone(history=False).drain()``, then the invariant's check, exactly
    what a Hypothesis run does at teardown after its chosen steps. The drain is
    deterministic given the state, and the key keeps every order the drain
    reads, so one drain per distinct key decides it for every path to that
    state. A violation's counterexample is the shortest path to the first such
    state, followed by its drain.

Symmetry
    With ``symmetry=True`` the jobs' parts of the key are sorted, so states that
    differ by a renaming of the jobs (job1 <-> job2 ...) get one key: the rules
    treat jobs alike, so renamed states have renamed futures, and the step
    invariants never name a job. Capacity units carry no names in the model (a
    count), and attempts of one job are not interchangeable (the newest one is
    the ledger's current reservation). Janitors are always treated as
    interchangeable (see the key), and of several janitors' identical steps
    only one is taken (``up_to_janitors``). One caveat, argued rather than
    proved: the drain visits jobs in name order, so invariant 6 on one
    representative of an orbit stands for the others because jobs do not
    interact in the drain (each holds at most one unit and there are at least
    as many units as jobs); the tests compare verdicts with and without
    symmetry, and ``key_congruence`` drains every renamed state of each
    symmetric key at 2 units x 2 jobs x 1 attempt, horizon 1.

Both cores
    ``explore_with_workers`` keeps the same walk, level by level, and shares
    each level's states between worker processes: a worker expands the states
    it owns, judges each transition and drains its new states; the coordinating
    process keeps the one visited set and the parent pointers. A new state is
    owned by a worker that made it (its world never leaves that process) unless
    the load must be evened, when its maker hands it over pickled. Since no
    level starts before the last is finished, the first violation found is still
    at the least depth. The tests walk every policy both ways and compare the
    states, transitions, dangers and verdicts. ``fence.explore.partitioned`` shares the
    walk another way, which pays on fence's own parts: each state is owned by one
    process (or Ray actor) by its fingerprint, and compact rows travel in batches.

Verdicts
    PROVED: the state space under the bounds was exhausted (or, with
    ``max_depth``, every run of at most that many chosen steps was checked) and
    nothing broke. VIOLATED: with the shortest counterexample. UNDETERMINED: a
    budget of states or seconds ran out before the space was exhausted, never a
    pass. Invariants are judged independently, so a violated invariant does not
    stop the search for the others.
"""

from __future__ import annotations

import enum
import gc
import itertools
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from fence.model import protocol

from fence.explore import transitions as memo_rules
from fence.explore.abstract import AbstractWalk, replayable
from fence.search.counterexample import Counterexample
from fence.search.counterexample import to_json as counterexample_json
from fence.model.destination import Destination, Guards, TicketService
from fence.explore.drain_judge import DrainJudge, drain_plainly
from fence.model.invariants import BY_NAME, INVARIANTS, Invariant, StepJudge, ObserverFinding, required_dangers
from fence.model.ledger import Ledger, Move
from fence.search.minimise import replay_actions
from fence.model.policies import FENCE_POLICY_TYPES, JanitorPolicy
from fence.model.policy_twins import PolicyNotKeyable, keyable_problem, rename
from fence.explore.state_key import (
    PLUGIN_PARTS_FROM, answer_nobody_waits_for, canonical_renaming, generic_key_of, generic_parts, generic_state_key,
    state_key, up_to_janitors, whole_state,
)
from fence.explore.transitions import DETAIL, MemoMismatch, StepMemo, TickMemo, facts_of, relative_action
from fence.explore.visited import (
    FINGERPRINT_BITS, Fingerprints, Frontier, Parents, VisitedTable, collision_probability,
    describe_collisions, of_plain,
)
from fence.model.world import Action, ModelConfig, World

# The explorer's default clock horizon: small enough that 2 units x 2 jobs is
# exhausted in seconds, long enough for a lease to expire twice and for a retry
# to expire again (docs/status.md has the measured figures).
EXPLORER_HORIZON = 6


class Outcome(enum.Enum):
    PROVED = "proved"
    VIOLATED = "violated"
    UNDETERMINED = "undetermined"


@dataclass
class InvariantResult:
    invariant: Invariant
    outcome: Outcome
    counterexample: Counterexample | None = None
    depth: int | None = None
    """Chosen steps of the shortest counterexample."""


@dataclass
class Exploration:
    policy: JanitorPolicy
    config: ModelConfig
    max_depth: int | None
    symmetry: bool
    results: dict[str, InvariantResult] = field(default_factory=dict)
    states: int = 0
    transitions: int = 0
    depth: int = 0
    """The deepest level of chosen steps expanded."""
    seconds: float = 0.0
    exhausted: bool = False
    """True when no unexplored state is left under the config (and depth) bounds."""
    stopped_by: str | None = None
    """'max_states' or 'time_budget' when a budget ran out."""
    reached: Counter = field(default_factory=Counter)
    """Per danger: how many transitions reached it."""
    drains_unsettled: int = 0
    unfaithful: str | None = None
    """Why the plug-ins could not be explored faithfully (nothing is proved then)."""
    queued: int = 0
    """States found but not yet expanded, at the last progress report."""
    faithfulness_checks: int = 0
    """How many times the generic path's copies and merges were tested against fresh replays."""
    renamings_checked: int = 0
    """Of those, merges of two states that are renamings of each other (jobs symmetric): each replayed
    with the jobs renamed, and compared with the original and with the merged state."""
    processes: int = 1
    """How many processes shared the breadth-first levels."""
    one_process_because: str | None = None
    """Why a walk asked to share its levels between processes ran in one (``explore_with_workers``)."""
    policy_calls_checked: int = 0
    """A user's policy on the keyed engine: how many of its calls were made twice and agreed (``fence.model.policy_twins``)."""
    whole_worlds_because: str | None = None
    """Why a user's policy was walked as whole worlds rather than keyed like fence's own (``explore``)."""
    fingerprint_bits: int = FINGERPRINT_BITS
    """Each visited state is kept as a fingerprint of its key of this many bits (``fence.explore.visited``)."""
    visited_bytes: int = 0
    """What the visited set (fingerprints and state numbers) and the parent pointers held at the end."""
    spilled: int = 0
    """States the one-process walk's frontier wrote to a file, its level outgrowing ``frontier_budget``."""
    rebuilt: int = 0
    """Worlds the one-process walk rebuilt by replaying their path from the root (``AbstractWalk.replay``,
    ``WorldWalk.replay``): a frontier keeps states as numbers, and Worlds only while they are few."""

    partitioned_on: str | None = None
    """Where a partitioned walk's owners ran (``fence.explore.partitioned``): "2 processes", "2 Ray actors (ADDRESS)"."""
    peak_bytes: int = 0
    """A partitioned walk (``fence.explore.partitioned``): the peak resident memory of its partitions, summed."""

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0

    @property
    def collision_probability(self) -> float:
        """The chance that two distinct states shared a fingerprint and were merged: about n^2 / 2^(b+1)."""
        return collision_probability(self.states, self.fingerprint_bits)

    def missing_dangers(self) -> list[str]:
        return [d.name for d in required_dangers(self.policy, self.config) if self.reached[d.name] == 0]

    def outcome(self) -> Outcome:
        """The policy's overall outcome: violated beats undetermined beats proved.

        A walk that never reached a danger the policy must face proves nothing
        about it: undetermined, however exhausted the space was.
        """
        outcomes = {r.outcome for r in self.results.values()}
        for worst in (Outcome.VIOLATED, Outcome.UNDETERMINED):
            if worst in outcomes:
                return worst
        return Outcome.UNDETERMINED if self.missing_dangers() else Outcome.PROVED


# -- the search ------------------------------------------------------------------------
def explore(policy: JanitorPolicy, config: ModelConfig, **options) -> Exploration:
    """Breadth-first over every enabled action; a verdict per invariant (``walk``'s options).

    A user's policy with fence's own ledger and destination is walked on the
    keyed engine, as fence's policies are, with every call it gets made twice
    (``fence.model.policy_twins``); at the first call that shows it is not
    stateless, local, blind to names and deterministic, the walk starts again
    on whole worlds (``generic_state_key``) and the result says why
    (``whole_worlds_because``).
    """
    if _keys_users_policy(policy, options):
        try:
            return walk(policy, config, key_policy=True, **options)
        except PolicyNotKeyable as why:
            because = f"policy {policy.name!r} is walked as whole worlds: {why}"
    else:
        because = None
        problem = keyable_problem(policy) if type(policy) not in FENCE_POLICY_TYPES else None
        if problem:
            because = f"policy {policy.name!r} is walked as whole worlds: {problem}"
    found = walk(policy, config, **options)
    found.whole_worlds_because = because
    return found


def _keys_users_policy(policy: JanitorPolicy, options: dict) -> bool:
    """Is this a user's policy (with fence's own ledger and destination) that the keyed engine may try?"""
    return (
        type(policy) not in FENCE_POLICY_TYPES
        and options.get("destination_factory") is None
        and options.get("ledger_factory") is None
        and not options.get("by_whole_state")
        and keyable_problem(policy) is None
    )


def walk(
    policy: JanitorPolicy,
    config: ModelConfig,
    *,
    max_depth: int | None = None,
    max_states: int | None = None,
    time_budget: float | None = None,
    symmetry: bool = False,
    invariants: tuple[Invariant, ...] = INVARIANTS,
    destination_factory: Callable[[Guards], Destination] | None = None,
    stop_when_all_violated: bool = False,
    ledger_factory: Callable[[int], Ledger] | None = None,
    progress: Callable[[Exploration], None] | None = None,
    faithfulness: tuple[int, int] | None = None,
    check_memo: int = 0,
    memo: bool | None = None,
    by_whole_state: bool = False,
    key_policy: bool = False,
    frontier_budget: int | None = None,
) -> Exploration:
    """Breadth-first over every enabled action; a verdict per invariant (``explore`` is the entry).

    With a user's ledger, destination or policy the walk takes the generic path
    (deep copies, ``generic_state_key``, no symmetry) and ``FaithfulnessCheck``
    tests on the run that the plug-ins can be explored that way; if they cannot,
    the result says so (``unfaithful``) and proves nothing. ``faithfulness`` is
    (new states, merges) it replays, when not ``FaithfulnessCheck``'s own: on a
    real database each replay costs a fresh world and many restores.
    ``check_memo`` n > 0 compares every n-th answer of the step memo with the
    model's own step (``fence.explore.transitions``); a difference raises. ``memo``: None
    (the default) uses the memos where they pay, with more than one job (with one,
    a step's memo key holds the whole state, which is expanded once, so the memo
    never answers twice and only costs); True always (``check_memo`` implies it), False never
    (every transition cloned and applied), for comparison.
    ``by_whole_state=True`` is the reference the hand-kept key is tested against:
    fence's own parts only, every enabled action taken (no janitor stands for
    another), each state keyed by ``fence.explore.state_key.whole_state``, no memo and no
    symmetry; it merges only states equal in every field, so it is slow.
    ``frontier_budget``: bytes of a level's frontier kept in memory before the rest
    spills to a file (``fence.explore.visited.Frontier``; ``FRONTIER_BUDGET`` by default).
    """
    if by_whole_state:
        memo, symmetry = False, False
    started = time.perf_counter()
    result = Exploration(policy, config, max_depth, symmetry)
    step_invariants = [inv for inv in invariants if not inv.at_teardown]
    teardown_invariants = [inv for inv in invariants if inv.at_teardown]
    found: dict[str, tuple[int, Action | None]] = {}
    """invariant name -> (node of the state before the breaking step, that step), or (node, None)
    for a teardown invariant broken by the drain from that node."""

    root = World(policy, config, destination_factory, ledger_factory)
    if key_policy:
        root.key_users_policy()  # its calls are checked twice; PolicyNotKeyable ends this walk
    if by_whole_state and not root.fast_copy_is_faithful():
        raise ValueError("by_whole_state reads fence's own parts only; a user's plug-ins take the generic path")
    parents = Parents()  # the root is state 0
    faithfulness_check = None
    if not root.fast_copy_is_faithful():
        faithfulness_check = FaithfulnessCheck(
            policy, config, destination_factory, ledger_factory, parents, symmetry=symmetry,
        )
        if faithfulness is not None:
            faithfulness_check.NEW_STATES, faithfulness_check.MERGES = faithfulness

    if memo is None:
        memo = config.jobs > 1 or check_memo > 0
    memos = _Memo(step_invariants, check_memo) if faithfulness_check is None and memo else None
    judge_drain = DrainJudge(teardown_invariants, memos.steps if memos is not None and memos.usable else None)

    # One walk, over one of two kinds of state: fence's own parts with the built-in step
    # invariants are expanded and judged from the memos, a World built only when one
    # misses (fence.explore.abstract); every other world is cloned and stepped (``WorldWalk``).
    # Either way the walk sees each state by its key's fingerprint (``fence.explore.visited``): the
    # visited set maps fingerprints to state numbers, the parents give the paths back.
    if memos is not None and memos.usable:
        strategy = AbstractWalk(memos, judge_drain, symmetry, step_invariants, root, parents=parents)
    else:
        strategy = WorldWalk(root, symmetry, step_invariants, judge_drain, by_whole_state, parents)
    visited = VisitedTable(strategy.root_key(), parents)

    def check_teardown(node: int, state) -> None:
        if all(inv.name in found for inv in teardown_invariants):
            return
        broken, settled = strategy.judge_drain_of(state)
        result.drains_unsettled += not settled
        for name in broken:
            found.setdefault(name, (node, None))

    def over_budget() -> str | None:
        if time_budget is not None and time.perf_counter() - started > time_budget:
            return "time_budget"
        if max_states is not None and len(parents) >= max_states:
            return "max_states"
        return None

    def expand(node: int, state, following: list) -> str | None:
        """Take each action from ``state``; judge each successor; queue the new ones.

        The budget is asked after each new state, not only between states
        expanded: one state of a large bound has hundreds of successors, each
        judged by a drain, so a budget asked between expansions ran over by
        minutes. Returns why it stopped early, or None.
        """
        taken = 0  # counted here and added once: the loop runs once per transition
        try:
            for action, child, key, broken in strategy.successors(state, visited, found, result.reached):
                taken += 1
                if broken:
                    for name in broken:
                        found[name] = (node, action)
                        strategy.meant_finding(name)
                if faithfulness_check is not None:
                    faithfulness_check.after_transition(node, action, child, visited.get(key))
                # The abstract walk yields a child only for a state not visited (``only_new_children``).
                if child is None or (not only_new_children and key in visited):
                    continue
                child_node = visited.add(key, node, action, strategy.meant_of(child))
                strategy.adopt(child, child_node)
                following.append(strategy.encode(child_node, child))
                check_teardown(child_node, child)
                if budgeted and (stopped := over_budget()) is not None:
                    return stopped
            return None
        finally:
            result.transitions += taken

    budgeted = time_budget is not None or max_states is not None
    only_new_children = getattr(strategy, "only_new_children", False)
    check_teardown(0, strategy.root)
    frontier = Frontier(strategy.width, frontier_budget)
    frontier.append(strategy.encode(0, strategy.root))
    following = frontier
    depth = 0
    out_of_budget = None
    long_lived = _LongLived(faithfulness_check is None)  # fence's own parts only: they hold no cycles
    try:
        while frontier and out_of_budget is None:
            if max_depth is not None and depth >= max_depth:
                break
            following = Frontier(strategy.width, frontier_budget)
            for row in frontier:
                node, world = strategy.decode(row)
                out_of_budget = over_budget()
                if out_of_budget is not None:
                    break
                try:
                    out_of_budget = expand(node, world, following)
                    if out_of_budget is not None:
                        break
                except Unfaithful as problem:
                    result.unfaithful = str(problem)
                    out_of_budget = "unfaithful"
                    break
                if stop_when_all_violated and len(found) == len(invariants):
                    out_of_budget = out_of_budget or "all_violated"
                    break
            else:
                depth += 1
                strategy.next_level(frontier)
                result.spilled += frontier.spilled
                frontier.close()
                frontier = following
                if progress is not None:
                    result.depth, result.states, result.queued = depth, len(parents), len(frontier)
                    result.seconds = time.perf_counter() - started
                    progress(result)
                continue
            break
    finally:
        long_lived.close()
        frontier.close()
        if following is not frontier:
            following.close()
    # The sampled checks stand behind a proof; a walk cut short proves nothing, and
    # its violations are replayed from scratch anyway (``_counterexample``).
    if faithfulness_check is not None and out_of_budget is None:
        try:
            faithfulness_check.finish()
        except Unfaithful as problem:
            result.unfaithful = str(problem)
            out_of_budget = "unfaithful"
    result.depth = depth
    result.states = len(parents)
    result.visited_bytes = visited.bytes_used()
    result.rebuilt = strategy.replays
    result.exhausted = out_of_budget is None and not frontier
    result.stopped_by = out_of_budget if out_of_budget != "all_violated" else None
    result.seconds = time.perf_counter() - started
    if faithfulness_check is not None:
        result.faithfulness_checks = faithfulness_check.checks
        result.renamings_checked = faithfulness_check.renamings_checked
    if root.policy_twins is not None:
        result.policy_calls_checked = root.policy_twins.calls

    _judge(result, invariants, found, parents, out_of_budget, destination_factory, ledger_factory,
           meant=strategy.meant)
    return result


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
                 by_whole_state: bool = False, parents: Parents | None = None) -> None:
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
        raw = generic_parts(world)
        found = self._by_parts.get(raw)
        if found is None:
            if len(self._by_parts) >= self.GENERIC_KEPT:
                self._by_parts.clear()
            found = self._by_parts[raw] = self.fingerprint(generic_key_of(raw, world.jobs, self.symmetry))
        return found

    def judge_drain_of(self, world: World) -> tuple[tuple[str, ...], bool]:
        if self.by_whole_state:
            return drain_plainly(world, self.judge_drain.invariants)
        return self.judge_drain(world)

    def adopt(self, child: World, node: int) -> None:
        pass

    def meant_finding(self, name: str) -> None:
        pass

    def meant_of(self, child: World) -> None:
        return None

    def next_level(self, expanded) -> None:
        pass

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


class _LongLived:
    """Keeps Python's cyclic garbage collector out of one ``explore`` of fence's own parts.

    The walk allocates a few small objects per transition and keeps every key,
    parent pointer, memo answer and the frontier's worlds until it ends, and the
    collector's passes scan all that is not yet collected again and again:
    about four tenths of a walk's time at 2x2x2 even with the survivors of each
    level frozen (``gc.freeze``). None of it forms reference cycles (the
    worlds hold none; ``tests/test_explore.py`` checks that a walk leaves no
    cyclic garbage), so everything the walk drops is freed by its reference
    count, and the collector is switched off for the walk and on again at its
    end. Nothing is done for a user's plug-ins (whose state may hold cycles),
    or if the collector is off already.
    """

    def __init__(self, wanted: bool) -> None:
        self.active = wanted and gc.isenabled()
        if self.active:
            gc.disable()

    def close(self) -> None:
        if self.active:
            gc.enable()


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
        self._sampled_new: list[tuple[int, tuple[int, Action, World]]] = []
        self._sampled_merges: list[tuple[int, tuple[int, Action, int]]] = []
        # Per depth: breadth first, the depth being expanded has its nodes numbered below
        # ``_next_depth_from``, and the next depth's are numbered from there on (each after
        # this is told of the transition that found it).
        self._next_depth_from = 0
        self._depth_sampler = random.Random(2)  # its own, so that the reservoir above draws as it did
        self._depth_new: list[tuple[int, tuple[int, Action, World]]] = []
        self._depth_merges: list[tuple[int, tuple[int, Action, int]]] = []
        self._depth_seen = [0, 0]
        self._depth_spent = [0, 0]
        """Checks made at their depth so far, of new states and of merges: at most half of each budget."""
        self._checked_by_depth: set[tuple[str, int]] = set()
        """The sampled transitions checked at their depth already, by kind and the walk's number for them."""

    def after_transition(self, node: int, action: Action, child: World, seen_as: int | None) -> None:
        if node >= self._next_depth_from:  # the first transition out of the next depth
            self._check_depth()
            self._next_depth_from = len(self.parents)
        if seen_as is None:
            self.new_states += 1
            if self.new_states <= self.NEW_STATES // 4:
                self._check_new(node, action, child)
            else:
                # The walk never changes a world it has made (each step is taken on a
                # copy), so the child can wait here to be checked later.
                item = (node, action, child)
                self._sample(self._sampled_new, self.NEW_STATES - self.NEW_STATES // 4, self.new_states, item)
                self._depth_seen[0] += 1
                self._draw(self._depth_new, self.DEPTH_NEW_STATES, self._depth_seen[0], (self.new_states, item))
        else:
            self.merges += 1
            if self.merges <= self.MERGES // 4:
                self._check_merge(node, action, seen_as)
            else:
                item = (node, action, seen_as)
                self._sample(self._sampled_merges, self.MERGES - self.MERGES // 4, self.merges, item)
                self._depth_seen[1] += 1
                self._draw(self._depth_merges, self.DEPTH_MERGES, self._depth_seen[1], (self.merges, item))

    def _sample(self, reservoir: list, size: int, seen: int, item: tuple) -> None:
        """Keep ``item`` with the chance that leaves each candidate so far equally likely to be kept."""
        if size <= 0:
            return
        if len(reservoir) < size:
            reservoir.append((seen, item))
            return
        slot = self._sampler.randrange(seen)
        if slot < size:
            reservoir[slot] = (seen, item)

    def _draw(self, drawn: list, size: int, seen: int, entry: tuple) -> None:
        """``_sample`` for one depth, with its own random numbers."""
        if len(drawn) < size:
            drawn.append(entry)
        elif (slot := self._depth_sampler.randrange(seen)) < size:
            drawn[slot] = entry

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


def _successors(world: World, symmetry: bool, step_invariants, known, reached: Counter, by_whole_state=False):
    """Every transition out of ``world``: ``(action, child, key, broken)`` per action taken.

    One action per group of janitors' interchangeable ones (``up_to_janitors``),
    each on a clone without history, so ``broken`` (the step invariants not in
    ``known`` that this transition breaks) and the dangers it adds to ``reached``
    are what the transition alone did. Both ``explore`` and the workers of
    ``explore_with_workers`` walk the graph through this. ``by_whole_state``:
    every enabled action, each child keyed by ``whole_state`` (no reduction).
    """
    judge = StepJudge(step_invariants)
    actions = world.enabled_actions()
    for action in (actions if by_whole_state else up_to_janitors(world, actions)):
        child = world.clone(history=False)
        child.apply(action)
        broken = judge(child, known, reached)
        yield action, child, whole_state(child) if by_whole_state else state_key(child, symmetry), broken


def memo_judges(step_invariants) -> bool:
    """Whether the memos (and so the abstract walk) may judge these step invariants: the built-in ones only.

    Each is judged on the findings the observer recorded, or is the built-in
    invariant 3, whose present reading the abstract walk learns per job.
    """
    return all(
        isinstance(inv.check, ObserverFinding) or inv.check is BY_NAME["no_early_release"].check for inv in step_invariants
    )


class _Memo:
    """The step and tick memos of one walk (``fence.explore.transitions``), and whether it may use them.

    Only fence's own parts qualify, and only the built-in step invariants: a
    transition into a state seen before is then judged on the facts it
    recorded alone (see ``_memo_successors``).
    """

    def __init__(self, step_invariants, check_every: int = 0) -> None:

        self.usable = memo_judges(step_invariants)
        self.steps = StepMemo(check_every)
        self.ticks = TickMemo()


def _memo_successors(world: World, symmetry: bool, step_invariants, known, reached: Counter, visited, memo: _Memo):
    """``_successors``, with a step into a state in ``visited`` answered from the memo: its child is None.

    Each child is yielded, and looked up in ``visited``, by its key's fingerprint (``fence.explore.visited``).

    Why the facts are all a transition into a visited state needs: what a step
    records (findings, dangers) is in the memo's answer. The other reading of
    the step invariants, the present of invariant 3 (more live writers than
    units), is a function of the state key (attempts' phases, commits in
    flight, abandon promises, all in the key), so the first transition into
    that state (or the root, which has no attempts) judged it already: if it
    was broken, it is in ``known``. A step into a state not in ``visited`` is
    taken for real (clone and apply) as in ``_successors``; the memo then only
    spares its key part. With ``memo.steps.check_every`` every n-th memo
    answer is compared with the real step (``MemoMismatch``).
    """

    steps, ticks = memo.steps, memo.ticks
    judge = StepJudge(step_invariants)
    state_key(world, symmetry)  # fills the parts of world.job_memo
    jobs = world.jobs
    job_memo = world.job_memo
    parts = {job: job_memo[job] for job in jobs}
    details = steps.details(world)
    shared = memo_rules.context(world)
    abandoned = world.observer.abandoned
    abandoned_key = tuple(sorted(abandoned)) if abandoned else ()
    now = world.now
    answers, check_every = steps.answers, steps.check_every
    no_findings: list[str] = []
    for action in up_to_janitors(world, world.enabled_actions()):
        answer = key = None
        checking = False
        if action.kind == "tick":
            job = None
            by = action.by
            new_parts = [ticks.parts.get((parts[j], now, by)) for j in jobs]
            if None not in new_parts:
                key = of_plain((now + by, tuple(sorted(new_parts)) if symmetry else tuple(new_parts), abandoned_key))
                checking = check_every and steps.should_check()
                if not checking and key in visited:
                    yield action, None, key, no_findings  # a tick records nothing (fence.explore.transitions)
                    continue
        else:
            job = action.job_in(world)
            memo_key = (details[job], shared, relative_action(world, action, job))
            answer = answers.get(memo_key)
            if answer is not None:
                part, _detail, added, findings, got, _context = answer
                if added:
                    new_abandoned = tuple(sorted(abandoned | {job + i for i in added}))
                else:
                    new_abandoned = abandoned_key
                new_parts = [part if j == job else parts[j] for j in jobs]
                key = of_plain((now, tuple(sorted(new_parts)) if symmetry else tuple(new_parts), new_abandoned))
                checking = check_every and steps.should_check()
                if not checking and key in visited:
                    if got:
                        for name, count in got.items():
                            reached[name] += count
                    if findings:
                        yield action, None, key, [
                            inv.name for inv in step_invariants if inv.name in findings and inv.name not in known
                        ]
                    else:
                        yield action, None, key, no_findings
                    continue
        child = world.clone(history=False)
        child.apply(action)
        if job is None:  # a tick: every part moves with the clock, and no detail changes
            child_key = of_plain(state_key(child, symmetry))
            ticks.learn(parts, now, action.by, child)
            if checking:
                findings, got = facts_of(child)
                fresh = child.clone(history=False)
                fresh.job_memo = {}
                again = {j: steps.intern(d) for j, d in memo_rules.job_details(fresh, jobs).items()}
                if child_key != key or findings or got or again != details:
                    raise MemoMismatch(f"the tick memo answered {action} differently from the model")
            for j in jobs:
                child.job_memo[DETAIL + j] = details[j]
        else:
            if answer is None:
                findings, got = facts_of(child)
                answer = steps.learn(memo_key, job, world, child, findings, got)
            elif checking:
                findings, got = facts_of(child)
                steps.verify(memo_key, answer, job, world, child, findings, got)
            child.job_memo[job] = answer[0]
            child.job_memo[DETAIL + job] = answer[1]
            child_key = of_plain(state_key(child, symmetry))
            if checking and child_key != key:
                raise MemoMismatch(f"the step memo's key for {action} differs from the model's")
        broken = judge(child, known, reached)
        yield action, child, child_key, broken


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


def key_congruence(
    policy: JanitorPolicy, config: ModelConfig, *, symmetry: bool = False, invariants: tuple[Invariant, ...] = INVARIANTS,
    key: Callable[[World, bool], tuple] | None = None, most: int = 10,
) -> tuple[int, list[str]]:
    """Whether the hand-kept key only merges states with the same future, at these bounds: (states, differences).

    Walks every reachable state by ``whole_state`` (every field, every enabled
    action) and groups the states by ``state_key``. Merging a group is sound
    when its states are alike to every judge: the same keys one step away, each
    step breaking the same step invariants, and the same drain (invariant 6 and
    whether it settles). A step that leads back to the same key is left out
    unless it breaks an invariant the state did not already break: it changes
    nothing the key holds (a settle refused on an answer gone stale is one, and
    a registration delivered to a destination that keeps no witness). Each group's first state is compared with
    every other; the walk stops at the ``most``-th difference. ``key`` replaces
    ``state_key`` (a test breaks it to see this fail).
    """
    key = key or state_key
    step_invariants = [inv for inv in invariants if not inv.at_teardown]
    teardown_invariants = [inv for inv in invariants if inv.at_teardown]
    root = World(policy, config)
    if not root.fast_copy_is_faithful():
        raise ValueError("key_congruence reads fence's own parts only; a user's plug-ins take the generic path")
    seen = {whole_state(root)}
    frontier = [root]
    first_of: dict[tuple, tuple] = {}
    differences: list[str] = []
    states = 0
    while frontier:
        following = []
        for world in frontier:
            states += 1
            own_key = key(world, symmetry)
            present = world.clone(history=False)  # no findings: only a present-state invariant can fire
            broken_already = {inv.name for inv in step_invariants if inv.check(present)}
            steps = set()
            for action in world.enabled_actions():
                child = world.clone(history=False)
                child.apply(action)
                broken = tuple(inv.name for inv in step_invariants if inv.check(child))
                child_key = key(child, symmetry)
                if child_key != own_key:
                    steps.add((child_key, broken))
                elif set(broken) - broken_already:  # a step that changes nothing the key holds, but records a finding
                    steps.add((child_key, broken))
                whole = whole_state(child)
                if whole not in seen:
                    seen.add(whole)
                    following.append(child)
            drain = drain_plainly(world, teardown_invariants)
            first = first_of.setdefault(own_key, (frozenset(steps), drain))
            if (first[0], first[1]) != (frozenset(steps), drain):
                only_first, only_this = len(first[0] - steps), len(steps - first[0])
                differences.append(
                    f"one key merges states that differ: {only_first} step(s) only from the first, {only_this} only "
                    f"from another, drains {first[1]} and {drain} (key {own_key!r})"
                )
                if len(differences) >= most:
                    return states, differences
        frontier = following
    return states, differences


def shortest(
    policy: JanitorPolicy,
    config: ModelConfig,
    inv: Invariant,
    *,
    max_depth: int | None = None,
    max_states: int | None = 200_000,
    time_budget: float | None = None,
    destination_factory: Callable[[Guards], Destination] | None = None,
    ledger_factory: Callable[[int], Ledger] | None = None,
) -> Counterexample | None:
    """The shortest counterexample for one invariant, or None if none within the budget."""
    found = explore(
        policy,
        config,
        max_depth=max_depth,
        max_states=max_states,
        time_budget=time_budget,
        invariants=(inv,),
        destination_factory=destination_factory,
        ledger_factory=ledger_factory,
        stop_when_all_violated=True,
    )
    return found.results[inv.name].counterexample


# -- both cores ----------------------------------------------------------------------------
# Why a walk asked for several processes runs in one: share_levels="where_it_pays" (the default).
ONE_PROCESS_FASTER = (
    "the abstract walk in one process outpaces levels shared between processes "
    "(fence bench explorer --explorer-workers 2 measures both; docs/status.md quotes them)"
)


def explore_with_workers(
    policy: JanitorPolicy, config: ModelConfig, *, workers: int = 1, share_levels: str = "where_it_pays", **options,
) -> Exploration:
    """``explore``, with ``workers >= 2`` sharing each breadth-first level between processes where that pays.

    Where it pays (``share_levels="where_it_pays"``): fence's own parts judged
    by a step invariant of the user's, which the memos cannot judge, so that
    every new state is cloned and applied for real. With the built-in
    invariants one process takes the abstract walk (``fence.explore.abstract``), which
    is faster than two processes sharing levels on the step memo's path (the
    workers do not take the abstract walk: its memo numbers are one process's
    own; docs/status.md quotes ``fence bench explorer``'s figures); the result says so
    (``one_process_because``). ``share_levels="always"`` shares them whenever
    it can, to compare or to test the shared walk.

    The search is the same walk level by level; what is shared is the work on a
    level. Each worker process expands the states it owns (clone, apply, the
    step invariants, the key) and drains its new states for invariant 6; this
    process keeps the one visited set and the parent pointers, and gives each
    new state to a worker that already holds it (the least loaded of those); only
    keys and actions travel, and the few pickled worlds ``_balance`` hands from a
    busier worker to an idler one. A level is
    finished by every worker before the next starts, so states are numbered by
    depth as in ``explore`` and the first violation of an invariant is still at
    the least depth: its counterexample is as short (possibly another one of the
    same length). A state budget (``max_states``) is kept exactly by ``explore``
    alone, so with one the search runs in one process.
    """
    if share_levels not in ("where_it_pays", "always"):
        raise ValueError(f"share_levels must be 'where_it_pays' or 'always', got {share_levels!r}")
    if workers < 2 or options.get("max_states") is not None or options.get("stop_when_all_violated"):
        return explore(policy, config, **options)

    def in_one_process(because: str) -> Exploration:
        found = explore(policy, config, **options)
        found.one_process_because = because
        return found

    if not World(policy, config, options.get("destination_factory"), options.get("ledger_factory")).fast_copy_is_faithful():
        return in_one_process("a user's plug-ins are walked in one process (their calls checked, or whole worlds)")
    steps_judged = [inv for inv in options.get("invariants", INVARIANTS) if not inv.at_teardown]
    if share_levels == "where_it_pays" and memo_judges(steps_judged) and options.get("memo", True):
        return in_one_process(ONE_PROCESS_FASTER)
    import multiprocessing
    import pickle

    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    try:  # worlds travel between workers, and without fork so do the policy and options
        pickle.dumps((World(policy, config, options.get("destination_factory")), policy, options))
    except Exception:
        return in_one_process("the policy, destination or options do not pickle, and worlds must travel between processes")
    options.pop("max_states", None)
    options.pop("stop_when_all_violated", None)
    return _explore_on_workers(policy, config, workers, context, **options)


def _explore_on_workers(
    policy: JanitorPolicy,
    config: ModelConfig,
    workers: int,
    context,
    *,
    max_depth: int | None = None,
    time_budget: float | None = None,
    symmetry: bool = False,
    invariants: tuple[Invariant, ...] = INVARIANTS,
    destination_factory: Callable[[Guards], Destination] | None = None,
    ledger_factory: Callable[[int], Ledger] | None = None,
    progress: Callable[[Exploration], None] | None = None,
) -> Exploration:
    started = time.perf_counter()
    deadline = time.monotonic() + time_budget if time_budget is not None else None
    result = Exploration(policy, config, max_depth, symmetry, processes=workers)
    setup = (policy, config, symmetry, invariants, destination_factory)
    pipes, processes = [], []
    for _ in range(workers):
        here, there = context.Pipe()
        process = context.Process(target=_level_worker, args=(there, setup), daemon=True)
        process.start()
        there.close()
        pipes.append(here)
        processes.append(process)
    found: dict[str, tuple[int, Action | None]] = {}
    parents = Parents()  # the root, state 0, is the first state worker 0 sends
    visited: dict[int, int] = {}  # fingerprint -> state number (``fence.explore.visited``)
    # per worker: the states to take up next, as (node, fingerprint, None) for a world it made
    # itself or (node, fingerprint, pickled world) for one handed over by another worker
    owned: list[list[tuple[int, int, bytes | None]]] = [[] for _ in range(workers)]
    out_of_budget = None
    depth = 0
    remaining = False  # states found but not expanded (a depth bound stopped the walk)

    news: list[list[int]] = [[] for _ in range(workers)]  # per worker: the states the others found last round

    def run_round(expand: bool, seed: bool = False) -> None:
        """Every worker takes up the states it owns and, if ``expand``, expands them."""
        nonlocal owned, out_of_budget, news
        for number, pipe in enumerate(pipes):
            pipe.send((owned[number], set(found), expand, seed and number == 0, deadline, news[number]))
        replies = [_receive(pipe) for pipe in pipes]
        owned = [[] for _ in range(workers)]
        candidates: dict[int, tuple[int | None, Action | None, list[int]]] = {}
        for number, (children, step_found, drain_found, transitions, reached, unsettled, stopped) in enumerate(replies):
            result.transitions += transitions
            result.reached.update(reached)
            result.drains_unsettled += unsettled
            if stopped:
                out_of_budget = "time_budget"
            for name, node in sorted(drain_found.items()):
                found.setdefault(name, (node, None))
            for name, (node, action) in sorted(step_found.items()):
                found.setdefault(name, (node, action))
            for key, parent, action in children:
                if key in visited:
                    continue
                holder = candidates.get(key)
                if holder is None:
                    candidates[key] = (parent, action, [number])
                else:
                    holder[2].append(number)
        load = [0] * workers
        movable: list[list[tuple[int, int]]] = [[] for _ in range(workers)]  # held by one worker only
        news = [[] for _ in range(workers)]
        for key, (parent, action, holders) in candidates.items():
            for number in range(workers):
                if number not in holders:
                    news[number].append(key)
            node = parents.add(parent, action) if parent is not None else 0  # only the root has no parent
            visited[key] = node
            worker = min(holders, key=load.__getitem__)
            load[worker] += 1
            owned[worker].append((node, key, None))
            if len(holders) == 1:
                movable[worker].append((node, key))
        _balance(owned, movable, pipes)

    try:
        run_round(expand=False, seed=True)  # worker 0 makes the root
        while any(owned) and out_of_budget is None:
            if max_depth is not None and depth >= max_depth:
                remaining = True
                run_round(expand=False)  # judge the last level's drains, expand nothing
                break
            run_round(expand=True)
            if out_of_budget is None:
                depth += 1
                if progress is not None:
                    result.depth, result.states, result.queued = depth, len(parents), sum(map(len, owned))
                    result.seconds = time.perf_counter() - started
                    progress(result)
    except BaseException:  # Ctrl-C or a failure: the workers' level is not worth waiting for
        for process in processes:
            process.kill()
        raise
    finally:
        for pipe in pipes:
            try:
                pipe.send(None)
            except OSError:  # the worker is gone already
                pass
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
    result.depth = depth
    result.states = len(parents)
    result.visited_bytes = _visited_bytes(visited, parents)
    result.exhausted = out_of_budget is None and not remaining and not any(owned)
    result.stopped_by = out_of_budget
    _judge(result, invariants, found, parents, out_of_budget, destination_factory)
    result.seconds = time.perf_counter() - started
    return result


def _visited_bytes(visited: dict[int, int], parents: Parents) -> int:
    """The bytes the visited set (its table, fingerprints and state numbers) and the parent pointers hold."""
    numbers = sum(map(sys.getsizeof, itertools.islice(visited.values(), 257, None)))  # 0-256 are Python's own
    return sys.getsizeof(visited) + sum(map(sys.getsizeof, visited)) + numbers + parents.bytes_used()


def _balance(owned, movable, pipes) -> None:
    """Move new states from the busier workers to the idler ones, so each expands its share.

    A state is owned by a worker that made it; only what one worker alone holds
    is moved, pickled by its maker and handed over whole (about 85 us a world,
    against ~1 ms to expand it), and only as many as even the load out.
    """

    share = sum(map(len, owned)) // len(owned)
    moves: dict[int, list[tuple[int, int]]] = {}
    takers = [n for n in range(len(owned)) if len(owned[n]) < share]
    for giver in range(len(owned)):
        excess = len(owned[giver]) - share
        if excess <= 0 or not takers:
            continue
        moving = movable[giver][:excess]
        moves[giver] = moving
    if not moves:
        return
    for giver, moving in moves.items():
        pipes[giver].send(("export", [key for _, key in moving]))
    for giver, moving in moves.items():
        worlds = _receive(pipes[giver])
        moved = {node for node, _ in moving}
        owned[giver] = [entry for entry in owned[giver] if entry[0] not in moved]
        for node, key in moving:
            taker = min(takers, key=lambda n: len(owned[n]))
            owned[taker].append((node, key, worlds[key]))


def _receive(pipe):
    reply = pipe.recv()
    if isinstance(reply, str):  # a worker's traceback
        raise RuntimeError(f"an explorer worker failed:\n{reply}")
    return reply


def _level_worker(pipe, setup) -> None:
    """One worker of ``_explore_on_workers``: take up states, judge and expand them, a level a round.

    It keeps the worlds it made whose keys it has sent, until the coordinator
    says which of them it owns; every key it sends once, so the coordinator sees
    each state at most once per worker.
    """
    import pickle
    import signal
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the coordinator's to handle (it kills us)
    gc.disable()  # fence's own parts only (see explore_with_workers): no cycles, see _LongLived
    policy, config, symmetry, invariants, destination_factory = setup
    step_invariants = [inv for inv in invariants if not inv.at_teardown]
    memo = _Memo(step_invariants)
    judge_drain = DrainJudge([inv for inv in invariants if inv.at_teardown], memo.steps if memo.usable else None)
    # States by their keys' fingerprints (``fence.explore.visited``), as the coordinator knows them.
    waiting: dict[int, World] = {}
    sent: set[int] = set()
    try:
        while True:
            order = pipe.recv()
            if order is None:
                return
            if order[0] == "export":  # hand some of the worlds made to another worker
                pipe.send({key: pickle.dumps(waiting.pop(key), protocol=pickle.HIGHEST_PROTOCOL) for key in order[1]})
                continue
            to_take_up, already_found, expand, seed, deadline, found_elsewhere = order
            # States the other workers found last round: a step into one is answered by the memo
            # (the invariants its first transition broke are in already_found) and not sent again.
            sent.update(found_elsewhere)
            frontier = [
                (node, waiting[key] if handed is None else _handed_over(pickle.loads(handed)))
                for node, key, handed in to_take_up
            ]
            waiting = {}
            drain_found: dict[str, int] = {}
            unsettled = 0
            for node, world in frontier:
                if all(inv.name in already_found or inv.name in drain_found for inv in judge_drain.invariants):
                    break
                broken, settled = judge_drain(world)
                unsettled += not settled
                for name in broken:
                    drain_found.setdefault(name, node)
            children: list[tuple[tuple, int | None, Action | None]] = []
            step_found: dict[str, tuple[int, Action]] = {}
            transitions = 0
            reached: Counter = Counter()
            stopped = False
            if seed:
                root = World(policy, config, destination_factory)
                key = of_plain(state_key(root, symmetry))
                sent.add(key)
                waiting[key] = root
                children.append((key, None, None))
            if expand:
                known = set(already_found)
                for node, world in frontier:
                    if deadline is not None and time.monotonic() > deadline:
                        stopped = True
                        break
                    if memo.usable:  # a step into a state this worker has sent is answered by the memo
                        walk = _memo_successors(world, symmetry, step_invariants, known, reached, sent, memo)
                    else:
                        walk = ((action, child, of_plain(key), broken) for action, child, key, broken
                                in _successors(world, symmetry, step_invariants, known, reached))
                    for action, child, key, broken in walk:
                        transitions += 1
                        for name in broken:
                            step_found[name] = (node, action)
                            known.add(name)
                        if key in sent:
                            continue
                        sent.add(key)
                        waiting[key] = child
                        children.append((key, node, action))
            pipe.send((children, step_found, drain_found, transitions, reached, unsettled, stopped))
    except Exception:
        pipe.send(traceback.format_exc())


def _handed_over(world: World) -> World:
    """A world another worker made, less its memo details: they are numbers of that worker's memo."""
    world.job_memo = {name: value for name, value in world.job_memo.items() if not name.startswith(DETAIL)}
    return world


def describe_bounds(found: Exploration) -> str:
    config = found.config
    text = (
        f"{config.capacity} unit(s) x {config.jobs} job(s) x {config.max_attempts} attempt(s), "
        f"lease {config.lease}, horizon {config.horizon}, {config.janitors} janitor(s)"
    )
    if found.max_depth is not None:
        text += f", at most {found.max_depth} chosen steps"
    return text + (", jobs symmetric" if found.symmetry else "")


def level_line(found: Exploration) -> str:
    """One breadth-first level, as TLC prints it: depth, states, rate, what is queued."""
    return (
        f"depth {found.depth}: {found.states:,} distinct states, {found.states_per_second:,.0f} states/s, "
        f"{found.queued:,} queued ({found.seconds:.1f}s)"
    )


def report_text(found: Exploration) -> str:
    lines = [f"policy {found.policy.name}, bounds: {describe_bounds(found)}"]
    if found.exhausted:
        scope = "the state space under these bounds was exhausted"
    elif found.unfaithful:
        scope = f"stopped: the plug-ins cannot be explored faithfully: {found.unfaithful}"
    elif found.stopped_by:
        scope = f"the {found.stopped_by.replace('_', ' ')} ran out before the state space was exhausted"
    else:
        scope = f"every run of at most {found.max_depth} chosen steps was checked (deeper states remain)"
    lines.append(
        f"{found.states} distinct states, {found.transitions} transitions, depth {found.depth}, "
        f"{found.seconds:.1f}s, {found.states_per_second:.0f} states/s; {scope}"
    )
    lines.append(describe_collisions(found.states, found.fingerprint_bits))
    if found.whole_worlds_because:
        lines.append(found.whole_worlds_because)
    if found.faithfulness_checks:
        renamed = f", {found.renamings_checked} of them merges across a renaming of the jobs" if found.symmetry else ""
        lines.append(f"the plug-ins were replayed from scratch {found.faithfulness_checks} times and agreed{renamed}"
                     if not found.unfaithful else f"{found.faithfulness_checks} replays of the plug-ins{renamed}")
    if found.policy_calls_checked:
        lines.append(
            f"the user's policy keyed like fence's own: each of its {found.policy_calls_checked} calls was made "
            "twice, with its job's names swapped, and agreed"
        )
    if found.partitioned_on:
        lines.append(f"each state owned by one of {found.partitioned_on}, by its fingerprint")
    elif found.processes > 1:
        lines.append(f"each level shared between {found.processes} processes")
    elif found.one_process_because:
        lines.append(f"in one process: {found.one_process_because}")
    vacuous = " (but see NOT REACHED below)" if found.missing_dangers() else ""
    for name, item in found.results.items():
        text = f"  {item.invariant.label}: {item.outcome.value.upper()}"
        if item.outcome is Outcome.PROVED:
            text += vacuous
        if item.depth is not None:
            text += f" (shortest counterexample: {item.depth} chosen steps)"
        lines.append(text)
    danger_text = ", ".join(f"{d.name} x{found.reached[d.name]}" for d in required_dangers(found.policy, found.config))
    lines.append(f"dangers reached (transitions): {danger_text}")
    missing = found.missing_dangers()
    if missing:
        lines.append("NOT REACHED: " + ", ".join(missing) + " (a proof under these bounds says little)")
    if found.drains_unsettled:
        lines.append(f"{found.drains_unsettled} drain(s) found no fixed point")
    return "\n".join(lines)


def to_json(found: Exploration) -> dict:
    return {
        "policy": found.policy.name,
        "config": {
            "capacity": found.config.capacity, "jobs": found.config.jobs,
            "max_attempts": found.config.max_attempts, "lease": found.config.lease,
            "horizon": found.config.horizon, "janitors": found.config.janitors,
        },
        "max_depth": found.max_depth,
        "symmetry": found.symmetry,
        "outcome": found.outcome().value,
        "verdicts": {name: item.outcome.value for name, item in found.results.items()},
        "shortest_steps": {name: item.depth for name, item in found.results.items() if item.depth is not None},
        "counterexamples": {
            name: counterexample_json(item.counterexample)
            for name, item in found.results.items() if item.counterexample
        },
        "states": found.states,
        "transitions": found.transitions,
        "depth": found.depth,
        "seconds": round(found.seconds, 3),
        "states_per_second": round(found.states_per_second),
        "fingerprint_bits": found.fingerprint_bits,
        "collision_probability": found.collision_probability,
        "visited_bytes": found.visited_bytes,
        "exhausted": found.exhausted,
        "stopped_by": found.stopped_by,
        "unfaithful": found.unfaithful,
        "faithfulness_checks": found.faithfulness_checks,
        "renamings_checked": found.renamings_checked,
        "processes": found.processes,
        "partitioned_on": found.partitioned_on,
        "one_process_because": found.one_process_because,
        "whole_worlds_because": found.whole_worlds_because,
        "policy_calls_checked": found.policy_calls_checked,
        "dangers_reached": {d.name: found.reached[d.name] for d in required_dangers(found.policy, found.config)},
    }
