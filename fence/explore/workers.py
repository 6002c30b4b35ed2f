"""The walk's levels shared between worker processes, each expanding the states it owns; the coordinator keeps the visited set."""

from __future__ import annotations

import gc
import itertools
import sys
import time
from collections import Counter
from typing import Callable

from fence.model.destination import Destination, Guards
from fence.explore.drain_judge import DrainJudge
from fence.model.invariants import INVARIANTS, Invariant
from fence.model.ledger import Ledger
from fence.model.policies import JanitorPolicy
from fence.explore.state_key import state_key
from fence.explore.transitions import DETAIL
from fence.explore.visited import Parents, of_plain
from fence.model.world import Action, ModelConfig, World
from fence.explore.results import Exploration
from fence.explore.successors import _Memo, _memo_successors, _successors, memo_judges
from fence.explore.judging import _judge
from fence.explore.walk import explore


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
