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
    The key is written by hand; ``congruence.key_congruence`` holds it against
    ``fence.explore.whole_state.whole_state``, every field read mechanically, by
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

The step memo (users' plug-ins)
    On the generic path a job's step is remembered the same way, under the
    job's entries in fence's parts of the generic key, the shared context and
    the plug-ins' whole snapshots (``fence.explore.plugin_memo`` argues why
    that answers exactly the real step, given the premise the generic key
    rests on). A transition into a visited key is then judged from the
    memo, and a new state it answered is keyed from it (its World still
    stepped for real, to be expanded and drained); every 64th answer (every n-th with ``check_memo=n``) is stepped for
    real too, and a difference makes the walk unfaithful: it proves nothing.

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

import time
from typing import Callable

from fence.explore.abstract import AbstractWalk
from fence.search.counterexample import Counterexample
from fence.model.destination import Destination, Guards
from fence.explore.drain_judge import DrainJudge
from fence.model.invariants import INVARIANTS, Invariant
from fence.model.ledger import Ledger
from fence.model.policies import FENCE_POLICY_TYPES, JanitorPolicy
from fence.model.policy_twins import PolicyNotKeyable, keyable_problem
from fence.explore.visited import Frontier, Parents, VisitedTable
from fence.model.world import Action, ModelConfig, World
from fence.explore.results import Exploration
from fence.explore.faithfulness import FaithfulnessCheck, Unfaithful
from fence.explore.successors import _Memo
from fence.explore.judging import _judge
from fence.explore.long_lived import LongLived as _LongLived
from fence.explore.world_walk import WorldWalk
from fence.explore.plugin_memo import PluginStepMemo
from fence.explore.plugin_memo import unsuitable as plugin_memo_unsuitable


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
    (every transition cloned and applied), for comparison. With users' plug-ins the memo
    is ``fence.explore.plugin_memo``'s, unless it finds the plug-ins or invariants unsuitable.
    ``by_whole_state=True`` is the reference the hand-kept key is tested against:
    fence's own parts only, every enabled action taken (no janitor stands for
    another), each state keyed by ``fence.explore.whole_state.whole_state``, no memo and no
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
    teardown_names = {inv.name for inv in teardown_invariants}
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
    plugin_memo = None
    if faithfulness_check is not None and memo and plugin_memo_unsuitable(root, step_invariants) is None:
        plugin_memo = PluginStepMemo(check_memo)
    judge_drain = DrainJudge(teardown_invariants, memos.steps if memos is not None and memos.usable else None)

    # One walk, over one of two kinds of state: fence's own parts with the built-in step
    # invariants are expanded and judged from the memos, a World built only when one
    # misses (fence.explore.abstract); every other world is cloned and stepped (``WorldWalk``).
    # Either way the walk sees each state by its key's fingerprint (``fence.explore.visited``): the
    # visited set maps fingerprints to state numbers, the parents give the paths back.
    if memos is not None and memos.usable:
        strategy = AbstractWalk(memos, judge_drain, symmetry, step_invariants, root, parents=parents)
    else:
        strategy = WorldWalk(root, symmetry, step_invariants, judge_drain, by_whole_state, parents, plugin_memo)
    visited = VisitedTable(strategy.root_key(), parents)

    def check_teardown(node: int, state) -> None:
        if teardown_names <= found.keys():  # asked once per new state: no generator
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
            if counts_quiet:  # the transitions into visited states that broke nothing (``AbstractWalk.quiet``)
                result.transitions += strategy.quiet
                strategy.quiet = 0

    budgeted = time_budget is not None or max_states is not None
    only_new_children = getattr(strategy, "only_new_children", False)
    counts_quiet = isinstance(strategy, AbstractWalk)
    if counts_quiet:
        strategy.quiet = 0
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
                long_lived.next_level()
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


