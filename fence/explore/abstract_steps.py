"""The abstract walk's steps the fast path does not take, and the memo answers it reads.

A mixin of ``fence.explore.abstract.AbstractWalk``: ``successors`` takes a job's
step the step memo answers, and a tick the tick memo answers, itself (the
transitions a walk is made of); what is rarer is here. ``slow_successor``
takes one transition from the memos the long way (the fingerprint summed
afresh), or for real on the entry's World (``real_step``) when a memo misses
or a memo check is due, learning what was missing. The module docstring of
``fence.explore.abstract`` says why each answer is the model's.
"""

from __future__ import annotations

from collections import Counter

from fence.explore import transitions
from fence.explore.abstract_state import Entry, translate
from fence.explore.state_key import state_key
from fence.explore.transitions import DETAIL, MemoMismatch, facts_of


class MemoSteps:
    """The abstract walk's transitions off its fast path (see the module docstring)."""

    def move(self, memo_key: tuple) -> tuple | None:
        """The step memo's answer for ``memo_key``, with the new part by number; None if not learned."""
        answer = self.steps.answers.get(memo_key)
        if answer is None:
            return None
        part, detail, added, findings, got, after = answer
        return (self.number(part), detail, added, findings, got, after)

    def answer_item(self, item: list, parts: tuple, details: tuple, shared: tuple) -> tuple | None:
        """Fill in ``item``'s step memo answer (``move``) and, unless the step adds abandon promises, what
        it adds to the fingerprint's sum from ``parts`` (``AbstractWalk.concrete``); the answer, or None."""
        index = item[1]
        answer = item[4] = self.move((details[index], shared, item[2]))
        if answer is not None and not answer[2]:
            table = self.fingerprint.parts[index]
            item[6] = parts[index]
            item[7] = table[answer[0]] - table[parts[index]]
        return answer

    def slow_successor(self, item: list, entry: Entry, visited, known, reached: Counter) -> tuple:
        """The transition of ``item`` out of ``entry`` that the fast path of ``successors`` does not take
        (a tick or step a memo has not learned, a step that adds abandon promises, any with memo checks
        on): (action, child, key, broken), the child None for a visited state."""
        steps = self.steps
        details, parts, shared, abandoned = entry.details, entry.parts, entry.shared, entry.abandoned
        now = shared[0]
        _rank, index, relative, action, answer, meant, _before, _sum_change = item
        self.last_meant = meant
        key = None
        checking = False
        if relative is None:  # a tick: every part moves with the clock, nothing else but the clock changes
            new_parts = self.tick_move(parts, now, action.by)
            if new_parts is not None:
                key = self.fingerprint(now + action.by, new_parts, abandoned)
                checking = steps.check_every and steps.should_check()
                if not checking:
                    if key in visited:
                        return action, None, key, ()
                    child = Entry(details, new_parts, abandoned, (now + action.by,) + shared[1:], None,
                                  entry, action, None, None)
                    return action, child, key, self.judge_new(child, (), known)
            return self.real_step(entry, None, None, None, action, None, None, checking, key, visited, known, reached)
        if answer is None:
            answer = self.answer_item(item, parts, details, shared)
        if answer is not None:
            part, detail, added, findings, got, after = answer
            new_abandoned = self.promises_after(abandoned, self.jobs[index], added) if added else abandoned
            new_parts = parts[:index] + (part,) + parts[index + 1:]
            key = self.fingerprint(now, new_parts, new_abandoned)
            checking = steps.check_every and steps.should_check()
            if not checking:
                if got:
                    for name, count in got.items():
                        reached[name] += count
                if key in visited:
                    return action, None, key, [
                        inv.name for inv in self.step_invariants if inv.name in findings and inv.name not in known
                    ] if findings else ()
                child = Entry(details[:index] + (detail,) + details[index + 1:], new_parts, new_abandoned,
                              after, None, entry, action, self.jobs[index], relative)
                return action, child, key, self.judge_new(child, findings, known)
        memo_key = (details[index], shared, relative)
        return self.real_step(entry, index, self.jobs[index], relative, action, memo_key,
                              steps.answers.get(memo_key), checking, key, visited, known, reached)

    def promises_after(self, abandoned: tuple, job: str, added: tuple) -> tuple:
        """The abandon promises after a step of ``job`` added ``added`` (relative to it), sorted as the key's."""
        after = self.promised_after.get((abandoned, job, added))
        if after is None:
            after = self.promised_after[(abandoned, job, added)] = tuple(sorted(set(abandoned).union(
                job + identity for identity in added)))
        return after

    def tick_move(self, parts: tuple, now: int, by: int) -> tuple | None:
        """The parts after a tick from the tick memo, by number; None if it has not learned one of them."""
        learned = self.ticks.parts
        moved = []
        for number in parts:
            after = learned.get((self.parts_by_number[number], now, by))
            if after is None:
                return None
            moved.append(self.tick_moves.setdefault((number, now, by), self.number(after)))
        return tuple(moved)

    def real_step(self, entry: Entry, index, job, relative, action, memo_key, answer, checking, abstract_key,
                  visited, known, reached: Counter) -> tuple:
        """The step taken on the entry's World, as ``_memo_successors`` takes it: learning what was missing."""
        world = self.world_of(entry)
        action = translate(world, action, job, relative)
        child = world.clone(history=False)
        child.apply(action)
        steps, symmetry = self.steps, self.symmetry
        if job is None:  # a tick
            child_key = state_key(child, symmetry)
            self.ticks.learn({name: self.parts_by_number[part] for name, part in zip(self.jobs, entry.parts)},
                             world.now, action.by, child)
            if checking:
                findings, got = facts_of(child)
                fresh = child.clone(history=False)
                fresh.job_memo = {}
                again = tuple(steps.intern(d) for d in transitions.job_details(fresh, self.jobs).values())
                if findings or got or again != entry.details:
                    raise MemoMismatch(f"the tick memo answered {action} differently from the model")
            for name, detail in zip(self.jobs, entry.details):
                child.job_memo[DETAIL + name] = detail
        else:
            findings, got = facts_of(child)
            if answer is None:
                answer = steps.learn(memo_key, job, world, child, findings, got)
            elif checking:
                steps.verify(memo_key, answer, job, world, child, findings, got)
            child.job_memo[job] = answer[0]
            child.job_memo[DETAIL + job] = answer[1]
            child_key = state_key(child, symmetry)
        memo = child.job_memo
        child_key = self.fingerprint(child_key[0], tuple([self.number(memo[job]) for job in self.jobs]), child_key[2])
        if checking and child_key != abstract_key:
            raise MemoMismatch(f"the memos' key after {action} differs from the model's")
        broken = self.judge_step(child, known, reached)
        if child_key in visited:
            return action, None, child_key, broken
        if checking:  # before entry_of learns this World's readings: judge it as the memos would
            self.check_judgement(entry, index, action, answer, child, broken, known)
        made = self.entry_of(child, entry, action, job, relative)
        if checking and (made.details, made.shared, made.abandoned) != self.abstract_child(entry, index, action, answer):
            raise MemoMismatch(f"the memos' state after {action} differs from the model's")
        return action, made, child_key, broken
