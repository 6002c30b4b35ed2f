"""A state's successors, each judged: by cloning and stepping a World, or from the step memo where it answers."""

from __future__ import annotations

from collections import Counter

from fence.explore import transitions as memo_rules
from fence.model.invariants import BY_NAME, StepJudge, ObserverFinding
from fence.explore.state_key import state_key, up_to_janitors
from fence.explore.whole_state import whole_state
from fence.explore.transitions import DETAIL, MemoMismatch, StepMemo, TickMemo, facts_of, relative_action
from fence.explore.visited import of_plain
from fence.model.world import World


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
