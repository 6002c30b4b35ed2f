"""The abstract walk's memos checked against Worlds built the slow way (``check_every``).

Checked, not trusted
    With ``check_every`` n > 0 every n-th answer of each new memo (enabled
    actions, a new state's readings and context, the live-writer judgement,
    the drain judge's answer) is compared with a World built the slow way, and
    a difference raises ``MemoMismatch``.

A mixin of ``fence.explore.abstract.AbstractWalk``: the walk asks its memos,
these methods ask the model.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter

from fence.explore import transitions
from fence.explore.abstract_state import Entry
from fence.explore.drain_judge import DrainJudge
from fence.explore.state_key import job_parts
from fence.explore.transitions import MemoMismatch
from fence.model.world import Action, World


class MemoChecks:
    """Compare the abstract walk's answers with the World's (see the module docstring)."""

    def check_actions(self, entry: Entry, merged: list[tuple]) -> None:
        world = self.fresh(entry)
        per_job = {job: [relative if job is not None else action for action, relative in actions]
                   for job, actions in self.actions_per_job(world).items()}
        answered = {job: [] for job in self.jobs}
        answered[None] = []
        for _rank, index, relative, action, *_answer in sorted(merged, key=itemgetter(0)):
            answered[self.jobs[index] if index >= 0 else None].append(relative if index >= 0 else action)
        if answered != per_job:
            raise MemoMismatch(f"the enabled-actions memo answered {answered}, the World enables {per_job}")


    def check_judgement(self, entry: Entry, index, action: Action, answer, child: World, broken: list,
                        known) -> None:
        """Judge the new state ``child`` as the memos would (readings, step invariants, drain) and compare.

        With ``check_every`` every memoised step is taken for real, so the abstract
        judgement of a new state is made here, beside the real one, to be checked.
        """
        details, shared, abandoned = self.abstract_child(entry, index, action, answer)
        if index is None:
            parts = self.tick_move(entry.parts, entry.shared[0], action.by)
        else:
            parts = entry.parts[:index] + (self.number(answer[0]),) + entry.parts[index + 1:]
        readings = self.memo_readings(details)
        if None in readings:
            return
        writers = Counter(handle.partition("#")[0] for handle in child.live_writers())
        flying = {m.attempt.partition("#")[0] for m in child.network}
        real = [(writers[job], job in flying) for job in self.jobs]
        if readings != real:
            raise MemoMismatch(f"the readings memo answered {readings} after {action}, the World {real}")
        findings = answer[3] if index is not None else ()
        mine = set(self.judge_new(None, findings, known, readings))
        if mine != set(broken):
            raise MemoMismatch(f"the memos judged {sorted(mine)} broken after {action}, the World {sorted(broken)}")
        judge = self.judge_drain
        if judge.invariants:
            now, _draining, free, held = shared
            answer, _learn = judge.lookup(
                list(details), self.jobs, now, free, held, abandoned, any(reading[1] for reading in readings),
                lambda: (now, parts, abandoned),
            )
            if answer is not None:
                real_answer = DrainJudge(judge.invariants)(child.clone(history=False))
                if real_answer != answer:
                    raise MemoMismatch(f"the drain judge's memos answered {answer} after {action}, "
                                       f"the drain {real_answer}")

    def abstract_child(self, entry: Entry, index, action: Action, answer) -> tuple:
        """(details, context, abandon promises) of a child as the memos give them (for a check)."""
        if index is None:  # a tick
            return entry.details, (entry.shared[0] + action.by,) + entry.shared[1:], entry.abandoned
        job = self.jobs[index]
        _part, detail, added, _findings, _got, after = answer
        abandoned = tuple(sorted(set(entry.abandoned).union(job + i for i in added))) if added else entry.abandoned
        return entry.details[:index] + (detail,) + entry.details[index + 1:], after, abandoned


    def check_readings(self, entry: Entry, found: list) -> None:
        """Compare an entry's memoised readings (and its details, parts, context) with its World made afresh."""
        world = self.fresh(entry)
        jobs = self.jobs
        details = tuple(self.steps.intern(d) for d in transitions.job_details(world, jobs).values())
        parts = tuple(self.number(part) for part in job_parts(world, jobs).values())
        abandoned = tuple(sorted(world.observer.abandoned))
        writers = Counter(handle.partition("#")[0] for handle in world.live_writers())
        flying = {m.attempt.partition("#")[0] for m in world.network}
        real = [(writers[job], job in flying) for job in jobs]
        mine = (entry.details, entry.parts, entry.shared, entry.abandoned, found)
        theirs = (details, parts, transitions.context(world), abandoned, real)
        if mine != theirs:
            names = ("details", "key parts", "context", "abandon promises", "live writers and messages")
            differ = [n for n, a, b in zip(names, mine, theirs) if a != b]
            raise MemoMismatch(f"the abstract state differs from its World ({', '.join(differ)}): {mine} vs {theirs}")

