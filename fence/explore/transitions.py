"""The explorer's memo of job-local transitions: a step into a state seen before costs a lookup.

Why
---
At 2 units x 2 jobs x 2 attempts about seven in eight transitions lead to a
state the explorer has seen already; running the model (clone, apply, key,
invariants) for each of them was most of the walk's time. Almost every step
touches one job only (``Action.job_in``), and what it does is decided by
that job's own slice of the world and a few shared readings. So what a
job-local step did is remembered under

    (the job's *detail*, the shared *context*, the step written relative to the job)

and a later step with the same three is answered from the memo: the job's new
key part and detail, the identities the destination then promised to abandon,
the facts the step recorded (dangers reached, invariants with findings), and
the context after it (read by the explorer's abstract walk, ``fence.explore.abstract``).
The answer always comes from running the real model once (``World.apply`` on
a clone); nothing here restates a rule of the model.

Why the memo key is complete
    The *detail* (``job_details``) is everything the world holds about one job,
    in names relative to the job, with nothing merged: its reservations in the
    ledger (with absolute deadlines, owners, the key's current reservation and
    count, units freed), the destination's effects for its key (writer and
    payload, in landing order), its first payload and witness entries, its
    attempts with every field, their messages in flight, its retries queued,
    the janitors' held answers about its reservations and the policy's
    second steps owed on them (as collections: which janitor holds one does
    not change what a step does, see below), the observer's mirror of its
    reservations, its current reservation, effects, count and first payload,
    and the abandon promises made for its identities, and who owns each of
    its reservations. The *context* is what a step reads outside the job:
    the clock, whether the world drains, the units free by the ledger's count
    and held by the observer's (a reserve reads them). Policy, guards and
    config are fixed for one exploration (the memo lives for one).

    Things a job-local step reads that are left out, and why they cannot
    change the answer:

    * which janitor acts or holds an answer: janitors keep no state but their
      held answers (``fence.explore.state_key.up_to_janitors``); a probe adds an answer, a
      settle takes the one it names (its answer is in the step's relative
      form), a second step is owed per reservation; the key counts answers
      per reservation as a collection, and so does the detail;
    * the sequence numbers of effects (a count across jobs): written into the
      new ``Effect`` only, read by no rule, key or invariant;
    * the whole effects list that ``Observer._gained`` compares: for fence's
      own destination and observer the two lists are always equal, so the
      comparison always passes;
    * the order of messages and retries across jobs, and of the enabled
      actions: the explorer takes actions from the real world and the memo
      only answers what one of them does.

    A tick touches every job but changes nothing but the clock (``Tick.take``)
    and records nothing; a job's key part reads the clock only through
    ``deadline > now`` of a reserved reservation, whose deadline the part
    holds while it is in the future, so the part after a tick is a function
    of the part before, the clock and the tick (``TickMemo``).

Checked, not trusted
    ``check_every`` > 0 recomputes every n-th answer the slow way and raises
    ``MemoMismatch`` on any difference (``tests/test_explore.py`` runs it with
    n = 1 and shows it catches a detail that leaves something out).
"""

from __future__ import annotations

from fence.explore.state_key import evidence_token, job_details, job_parts
from fence.model.world import JOB_DETAIL as DETAIL
from fence.model.world import Action, World


class MemoMismatch(AssertionError):
    """A memoised answer differs from the model's own (the memo key left something out)."""


def context(world: World) -> tuple:
    """What a job-local step reads outside its job: the clock, draining, units free and held."""
    return (world.now, world.draining, world.ledger.free, world.observer.held)


def relative_action(world: World, action: Action, job: str) -> tuple:
    """``action`` written relative to ``job``, without the janitor (see the module docstring)."""
    return action.relative(world, job, evidence_token)


def _abandoned_by(world: World, job: str) -> frozenset:
    return frozenset(i for i in world.observer.abandoned if i.partition("#")[0] == job)


class StepMemo:
    """Job-local transitions, memoised: (detail, context, relative step) -> what the step did.

    Details are held by number (``intern``): equal numbers, equal details.
    """

    def __init__(self, check_every: int = 0) -> None:
        self.answers: dict[tuple, tuple] = {}
        self.numbers: dict[tuple, int] = {}
        """Each distinct detail seen, and its number (``intern``)."""
        self.by_number: list[tuple] = []
        """Each distinct detail at its number: what a partitioned walk sends instead of its own numbers."""
        self.check_every = check_every
        self.hits = 0
        self.checks = 0

    def intern(self, detail: tuple) -> int:
        """A detail's number: one per distinct detail, so memo keys hash a number, not a deep tuple."""
        number = self.numbers.get(detail)
        if number is None:
            number = self.numbers[detail] = len(self.numbers)
            self.by_number.append(detail)
        return number

    def details(self, world: World) -> dict[str, int]:
        """The world's per-job details (by number), kept in ``World.job_memo`` until a step touches the job."""
        memo = world.job_memo
        missing = [job for job in world.jobs if DETAIL + job not in memo]
        if missing:
            for job, detail in job_details(world, missing).items():
                memo[DETAIL + job] = self.intern(detail)
        return {job: memo[DETAIL + job] for job in world.jobs}

    def learn(self, memo_key: tuple, job: str, parent: World, child: World, findings: tuple, reached: dict) -> tuple:
        """Remember what the step from ``parent`` to ``child`` (applied for real) did to ``job``."""
        part = child.job_memo.get(job)
        if part is None:
            part = job_parts(child, [job])[job]
        detail = self.intern(job_details(child, [job])[job])
        cut = len(job)
        added = tuple(sorted(i[cut:] for i in _abandoned_by(child, job) - _abandoned_by(parent, job)))
        answer = (part, detail, added, findings, reached, context(child))
        self.answers[memo_key] = answer
        return answer

    def verify(self, memo_key: tuple, answer: tuple, job: str, parent: World, child: World,
               findings: tuple, reached: dict) -> None:
        """Compare a memoised answer with the step taken for real on ``child``."""
        self.checks += 1
        fresh = child.clone(history=False)
        fresh.job_memo = {}
        cut = len(job)
        added = tuple(sorted(i[cut:] for i in _abandoned_by(child, job) - _abandoned_by(parent, job)))
        real = (job_parts(fresh, [job])[job], self.intern(job_details(fresh, [job])[job]), added, findings, reached,
                context(fresh))
        if real != answer:
            names = ("key part", "detail", "abandon promises", "findings", "dangers reached", "context after")
            differ = [n for n, a, b in zip(names, answer, real) if a != b]
            raise MemoMismatch(
                f"the step memo answered {memo_key[2]} on {job} differently from the model "
                f"({', '.join(differ)}): memo {answer}, model {real}"
            )

    def should_check(self) -> bool:
        if not self.check_every:
            return False
        self.hits += 1
        return self.hits % self.check_every == 0


class TickMemo:
    """A tick's effect on one job's key part: (part, clock, tick) -> part (see the module docstring)."""

    def __init__(self) -> None:
        self.parts: dict[tuple, tuple] = {}

    def learn(self, parent_parts: dict[str, tuple], now: int, by: int, child: World) -> None:
        for job, part in parent_parts.items():
            self.parts[(part, now, by)] = child.job_memo[job]


def facts_of(child: World) -> tuple[tuple, dict]:
    """What a step recorded on a clone without history: (invariants with findings, dangers reached)."""
    findings = tuple(sorted(child.observer.findings.by_invariant))
    reached = {name: count for name, count in sorted(child.reached.items()) if count}
    return findings, reached

