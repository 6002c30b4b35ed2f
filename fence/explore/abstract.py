"""The explorer's abstract walk: a new state is expanded and judged from the memos; a World is built only on a miss.

Why
---
With the step memo (``fence.explore.transitions``) a transition into a state seen
before costs a lookup, but every *new* state was still made for real (clone
and apply), its enabled actions listed, and its invariants and drain judged on
that World. At 2 units x 2 jobs x 2 attempts that was nearly all of the walk's
time, while the memos could already answer almost every question asked of the
new state: the step memo learned from 4,864 real steps in a walk of 224,621
states, and the drain judge's memos answered 211,272 of them.

So a state is held by the readings the memos are keyed by (an ``Entry``):

* each job's detail and key part, in job order, each by number (``StepMemo.details``,
  ``AbstractWalk.number``): equal numbers, equal parts, so the walk's keys hash small
  integers (the state key with each part by its number: equal exactly when the
  keys of ``state_key`` are equal, sorted numbers standing for sorted parts),
  and its fingerprint is a sum over the key's pieces (``fence.explore.visited.KeySums``)
  that a step updates, a multiset's sum with symmetry;
* the context (clock, draining, units free and held: ``fence.explore.transitions.context``);
* the abandon promises (the key's third part);
* a World, only if one was built for it.

Expanding it asks four memos, each learned from a real World and never from a
rule restated here:

1. the enabled actions per job: ``(detail, context) ->`` the job's actions after
   ``up_to_janitors``, written relative to the job (``relative_action``), in the
   order the World listed them; the ticks per clock reading.
2. what each action does: the step memo for a job's step (the child's part,
   detail, abandon promises, findings, dangers and context), the tick memo for
   a tick (the parts; a tick changes nothing but the clock, ``Tick.take``).
3. the step invariants of a new state: the findings the step recorded (in the
   step memo's answer) and the present reading of invariant 3, from each job's
   count of live writers (``_readings``).
4. invariant 6 of a new state: the drain judge's memos (``DrainJudge.lookup``).

Whenever one of them misses, the World is built (its parent's World cloned and
the step applied; the parent's World built the same way if it was dropped) and
the question is answered on it by the model itself, which teaches the memo
its answer. Nothing here is a second model of the world: every answer was
once computed by ``World.apply``, ``World.enabled_actions``, the real drain
and the real invariant checks.

Why each new key decides its answer
    The enabled actions of one job: each rule's precondition reads that job's
    slice of the world and the context, all in the job's detail
    (``fence.explore.transitions``) or the context: a reserve reads the attempts the
    job used, the free units and draining; a retry the job's retries queued
    and the same; a start, commit sent, confirm or crash the phases of the
    job's attempts; a delivery or lost answer the job's messages in flight
    (with their multiplicity); a scan the state and deadline of the job's
    reservations and the clock; a probe, after ``up_to_janitors``, whether
    fewer janitors hold an answer for an ``outcome_unknown`` reservation than
    there are janitors (a janitor holds at most one answer per reservation,
    and the detail counts them per reservation); a settle, after
    ``up_to_janitors``, one per reservation and held answer (as the detail
    holds them) and one per second step owed. Which janitor takes it is not
    in the relative form: the concrete action the walk records names the
    janitor of the World the memo learned from, and is translated to a janitor
    that can take it whenever a World is built or a path replayed
    (``translate``). A tick list is a function of the clock and the config.

    The present of invariant 3 (``_no_early_release``: more attempts that can
    still write than units) counts, per attempt, ``can_still_write`` of its
    phase, whether its commit is in flight and whether its identity was
    promised abandoned: all in the job's detail, so each job's count is a
    function of its detail, learned from ``World.live_writers``. This is the
    one place the explorer reads an invariant's structure (findings, or a
    count over capacity); ``_Memo.usable`` restricts the walk to the built-in
    step invariants, so no other check is ever judged this way.

    The drain judge's memos are keyed by details, context, parts and abandon
    promises already (``DrainJudge._from_memos`` says why); whether messages
    are in flight is in each job's detail too.

The rest of the walk is in three modules: ``fence.explore.abstract_state`` (how a
state is held, and the order of its actions), ``fence.explore.abstract_worlds``
(Worlds built on a miss) and ``fence.explore.abstract_checks`` (the memos checked,
with ``check_every``).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from operator import itemgetter

from fence.explore import transitions
from fence.explore.abstract_checks import MemoChecks
from fence.explore.abstract_state import JANITOR_KINDS, Entry, PartNumbers, concrete_action
from fence.explore.abstract_steps import MemoSteps
from fence.explore.abstract_worlds import WorldsOfEntries
from fence.explore.drain_judge import DrainJudge
from fence.model.invariants import StepJudge
from fence.explore.state_key import state_key, up_to_janitors
from fence.explore.transitions import MemoMismatch, relative_action
from fence.explore.visited import EMPTY_SLOT, KEY_PRIME, KeySums, VisitedTable
from fence.model.rules import ACTION_KINDS
from fence.model.world import Action, World

_RANK = {kind: number for number, kind in enumerate(ACTION_KINDS)}
_TICK_RANK = _RANK["tick"]
_by_rank = itemgetter(0)


def enabled_key(detail: int, shared: tuple) -> tuple:
    """What decides one job's enabled actions (see the module docstring); a function so tests can break it."""
    return (detail, shared)


def readings_key(detail: int) -> int:
    """What decides one job's live writers and whether it has messages in flight: its detail."""
    return detail



class AbstractWalk(MemoSteps, WorldsOfEntries, MemoChecks):
    """The memos of one ``explore`` walk that spare building Worlds, and the walk's steps through them."""

    only_new_children = True
    """``successors`` yields a child only for a key not in ``visited`` (looked up there just before)."""

    quiet: int | None = None
    """None: ``successors`` yields every transition; a count (the one-process walk and each partition set 0):
    it yields no transition into a visited state that broke nothing, and adds it here instead, before its
    next yield and at its end, so a walk stopped at any yield has counted the transitions before it, as
    when they were yielded. Most transitions are such, and a yield each was
    a tenth of the walk."""

    numbering = PartNumbers
    """How key parts are numbered: in the order met (one process); ``fence.explore.partitioned`` numbers them by
    content, so that every process gives a state the same fingerprint."""

    def key_sums(self, symmetry: bool, positions: int) -> KeySums:
        """How keys are fingerprinted: by sums of random numbers (``fence.explore.visited.KeySums``)."""
        return KeySums(symmetry, positions)

    def __init__(self, memo, judge_drain, symmetry: bool, step_invariants, root: World, *, parents) -> None:
        self.fingerprint = self.key_sums(symmetry, len(root.jobs))
        """What the walk's keys are given to the visited set as: (now, parts, promises) -> fingerprint."""
        self.parents = parents
        """The walk's ``fence.explore.visited.Parents``: the path to an entry whose parent was let go."""
        self.replays = 0
        """Worlds built by replaying a path from the root (``replay``)."""
        self.steps, self.ticks = memo.steps, memo.ticks
        self.judge_drain = judge_drain
        self.symmetry = symmetry
        self.step_invariants = step_invariants
        self.judge_step = StepJudge(step_invariants)
        # _Memo.usable: every step invariant is judged on findings, or is the built-in invariant 3.
        judged_on_more = self.judge_step.judged_on_more
        self.present_judged = judged_on_more[0].name if judged_on_more else None
        self.capacity = root.config.capacity
        self.jobs = root.jobs
        self.enabled: dict[tuple, tuple] = {}
        """``enabled_key`` -> the job's (rank, relative action, janitor) in the World's order."""
        self.concrete: dict[tuple, list[dict]] = {}
        """context -> per job index, detail -> the job's [rank, job index, relative action, action, move,
        meant, before, sum_change]: made once, with each step's ``move`` filled in once the step memo has it (the memo key
        is the detail, the context and the relative action, all fixed for the list), ``meant`` (job,
        relative action) for a janitor's step, else None (``last_meant``), and, with the move, what the
        step adds to the fingerprint's sum from the job's part ``before`` (``answer_item``): the job's
        part is read from its detail and the clock, so ``before`` is the part of every state the list is
        for, and the fast path of ``successors`` checks that it is."""
        self.tick_actions: dict[int, list] = {}
        """The clock -> its ticks, as [rank, -1, None, action, None, None, None, None]."""
        self.promised_after: dict[tuple, tuple] = {}
        """(abandon promises, job, promises its step added) -> the promises after (``promises_after``)."""
        self.readings: dict[int, tuple[int, bool]] = {}
        """``readings_key`` -> (the job's live writers, whether it has messages in flight)."""
        self.meant: dict[str, tuple[str, tuple]] = {}
        """Invariant name -> (job, relative action) of the janitor's step that broke it (``translate``);
        what the janitor's step into a state was meant to do is kept with its parent (``meant_of``)."""
        self.last_meant: tuple[str, tuple] | None = None
        """(job, relative action) of the janitor's step ``successors`` yielded last, else None."""
        self.number = self.numbering()
        self.parts_by_number = self.number.parts
        self.tick_moves: dict[tuple, int] = {}
        """The tick memo's answers by part number: (part, clock, tick) -> part."""
        self.built: OrderedDict[int, World] = OrderedDict()
        """State number -> the World built for it while this level was expanded (``world_of``), oldest first;
        at most ``kept_worlds`` here and in ``built_before`` (``keep_world``)."""
        self.built_before: OrderedDict[int, World] = OrderedDict()
        """The same for the level before: kept so that the level being expanded finds its parents' Worlds."""
        self.contexts = PartNumbers()
        self.promises = PartNumbers()
        """Contexts and abandon promises by number, as the frontier's rows name them (``encode``)."""
        # The drain judge's first-round keys by part number too (not a bound method of the
        # walk, which holds the judge: a walk must leave no reference cycle, see _LongLived).
        judge_drain.number = self.number
        judge_drain.sums = self.key_sums(False, len(self.jobs))
        self.root = self.entry_of(root, None, None, None, None)
        self.root.node = 0
        self.built = OrderedDict()  # the root keeps its World: every World can be built again from it
        self.width = 3 + 2 * len(self.jobs)
        """Numbers per state in the frontier (``encode``)."""

    # -- readings from real Worlds ---------------------------------------------------------
    def root_key(self) -> int:
        """The root's key by its fingerprint (``fingerprint``)."""
        root = self.root
        return self.fingerprint(root.shared[0], root.parts, root.abandoned)

    def entry_of(self, world: World, parent, action, job, relative) -> Entry:
        state_key(world, self.symmetry)  # fills the parts in world.job_memo
        numbers = self.steps.details(world)
        memo = world.job_memo
        jobs = self.jobs
        abandoned = world.observer.abandoned
        entry = Entry(
            tuple(numbers[job] for job in jobs), tuple(self.number(memo[job]) for job in jobs),
            tuple(sorted(abandoned)) if abandoned else (), transitions.context(world), world,
            parent, action, job, relative,
        )
        self.learn_readings(world, entry.details)
        return entry

    def learn_readings(self, world: World, details: tuple) -> None:
        writers = Counter(handle.partition("#")[0] for handle in world.live_writers())
        flying = {m.attempt.partition("#")[0] for m in world.network}
        for job, detail in zip(self.jobs, details):
            self.readings[readings_key(detail)] = (writers[job], job in flying)

    def actions_per_job(self, world: World) -> dict[str | None, list[tuple[Action, tuple | None]]]:
        """The World's own actions after ``up_to_janitors``, per job (None: the ticks), each with
        its form relative to its job (None for a tick), in the World's order."""
        per_job: dict[str | None, list] = {job: [] for job in self.jobs}
        per_job[None] = []
        for action in up_to_janitors(world, world.enabled_actions()):
            job = action.job_in(world)
            per_job[job].append((action, relative_action(world, action, job) if job is not None else None))
        return per_job

    def learn_enabled(self, world: World, details: tuple) -> None:
        per_job = self.actions_per_job(world)
        shared = transitions.context(world)
        for job, detail in zip(self.jobs, details):
            self.enabled[enabled_key(detail, shared)] = tuple(
                (_RANK[action.kind], relative, getattr(action, "janitor", 0)) for action, relative in per_job[job]
            )
        self.tick_actions[world.now] = [[_TICK_RANK, -1, None, action, None, None, None, None]
                                        for action, _ in per_job[None]]

    def meant_of(self, entry: Entry):
        """What the janitor's step into ``entry`` was meant to do (``translate``), else None."""
        if entry.job is not None and entry.action.kind in JANITOR_KINDS:
            return (entry.job, entry.relative)
        return None

    def meant_finding(self, name: str) -> None:
        """The step just yielded broke ``name``: remember what it was meant to do, if a janitor's."""
        if self.last_meant is not None:
            self.meant[name] = self.last_meant

    # -- the walk ------------------------------------------------------------------------------
    def actions_of(self, entry: Entry) -> list[tuple]:
        """The entry's actions as [rank, job index, relative action or None for a tick, action, move or None,
        meant or None] (``concrete``)."""
        shared = entry.shared
        merged = self.tick_actions.get(shared[0])
        if merged is not None:
            merged = list(merged)
            per_job = self.concrete.get(shared)  # the context hashed once per state, not once per job
            if per_job is None:
                per_job = self.concrete[shared] = [{} for _job in self.jobs]
            for index, detail in enumerate(entry.details):
                mine = per_job[index].get(detail)
                if mine is None:
                    learned = self.enabled.get(enabled_key(detail, shared))
                    if learned is None:
                        merged = None
                        break
                    job = self.jobs[index]
                    mine = per_job[index][detail] = [
                        [rank, index, relative, concrete_action(job, relative, janitor), None,
                         (job, relative) if relative[0] in JANITOR_KINDS else None, None, None]
                        for rank, relative, janitor in learned
                    ]
                merged += mine
        if merged is None:
            self.learn_enabled(self.world_of(entry), entry.details)
            return self.actions_of(entry)
        if self.steps.check_every and self.steps.should_check():
            self.check_actions(entry, merged)
        merged.sort(key=_by_rank)
        return merged

    def successors(self, entry: Entry, visited, known, reached: Counter):
        """Every transition out of ``entry``, as ``_memo_successors`` yields them: (action, child, key, broken).

        ``child`` is None for a state in ``visited``, else an ``Entry``; a transition the
        memos answer builds no World.
        """
        steps = self.steps
        check_every = steps.check_every
        # The fingerprints (fence.explore.visited.KeySums): a child's is its parent's sum with a number or two swapped.
        fingerprint = self.fingerprint
        part_numbers = fingerprint.parts
        details, parts, shared, abandoned = entry.details, entry.parts, entry.shared, entry.abandoned
        now = shared[0]
        clock_numbers = fingerprint.clock
        promised = fingerprint.promises[abandoned]
        here = clock_numbers[now] + promised
        for table, part in zip(part_numbers, parts):
            here += table[part]
        if check_every:  # every transition the long way, each memo answer counted for the check
            for item in self.actions_of(entry):
                yield self.slow_successor(item, entry, visited, known, reached)
            return
        tick_moves = self.tick_moves
        counting = self.quiet is not None
        probed_here = type(visited) is VisitedTable  # probed here, once per transition, without a call
        quiet = 0
        for item in self.actions_of(entry):
            # The loop runs once per transition: most are a job's step the memo answers, into a state
            # visited already, which costs one test, one addition, one lookup (``concrete``'s ``sum_change``).
            _rank, index, relative, action, answer, meant, before, sum_change = item
            if before != parts[index]:  # not that: a tick (``before`` is None), or not answered for this part yet
                if quiet:  # counted before anything is yielded (see ``quiet``)
                    self.quiet += quiet
                    quiet = 0
                if index < 0:  # a tick: every part moves with the clock, nothing else but the clock changes
                    by = action.by
                    new_parts = tuple([tick_moves.get((part, now, by)) for part in parts])
                    if None in new_parts:
                        new_parts = self.tick_move(parts, now, by)
                        if new_parts is None:
                            yield self.slow_successor(item, entry, visited, known, reached)
                            continue
                    key = clock_numbers[now + by] + promised
                    for table, part in zip(part_numbers, new_parts):
                        key += table[part]
                    key %= KEY_PRIME
                    if key in visited:
                        if counting:
                            quiet += 1
                        else:
                            yield action, None, key, ()
                    else:
                        self.last_meant = None
                        child = Entry(details, new_parts, abandoned, (now + by,) + shared[1:], None,
                                      entry, action, None, None)
                        yield action, child, key, self.judge_new(child, (), known)
                    continue
                if answer is None:
                    answer = self.answer_item(item, parts, details, shared)
                    before, sum_change = item[6], item[7]
                if answer is None or sum_change is None or before != parts[index]:
                    yield self.slow_successor(item, entry, visited, known, reached)
                    continue
            key = (here + sum_change) % KEY_PRIME
            got = answer[4]
            if got:
                for name, count in got.items():
                    reached[name] += count
            findings = answer[3]
            if probed_here:  # ``VisitedTable.__contains__`` written out: its attributes read anew, ``add`` may have grown it
                slots, kept, mask = visited._index, visited._fingerprints, visited._mask
                slot = key & mask
                while True:
                    node = slots[slot]
                    if node == EMPTY_SLOT:
                        seen = False
                        break
                    if kept[node] == key:
                        seen = True
                        break
                    slot = (slot + 1) & mask
            else:
                seen = key in visited
            if seen:
                if findings:
                    if quiet:
                        self.quiet += quiet
                        quiet = 0
                    self.last_meant = meant
                    yield action, None, key, [
                        inv.name for inv in self.step_invariants if inv.name in findings and inv.name not in known
                    ]
                elif counting:
                    quiet += 1
                else:
                    yield action, None, key, ()
            else:
                if quiet:
                    self.quiet += quiet
                    quiet = 0
                self.last_meant = meant
                child = Entry(details[:index] + (answer[1],) + details[index + 1:],
                              parts[:index] + (answer[0],) + parts[index + 1:], abandoned,
                              answer[5], None, entry, action, self.jobs[index], relative)
                yield action, child, key, self.judge_new(child, findings, known)
        if quiet:
            self.quiet += quiet

    def judge_new(self, child: Entry | None, findings: tuple, known, readings: list | None = None) -> list[str]:
        """The step invariants a transition into the new state ``child`` broke, without its World.

        The findings the step recorded, and invariant 3's present: more live writers than
        units, summed over the jobs' readings (``readings``, else the memo's for ``child``).
        """
        broken = [inv.name for inv in self.step_invariants if inv.name in findings and inv.name not in known
                  ] if findings else []
        name = self.present_judged
        if name is not None and name not in known and name not in broken:
            if readings is None:
                readings = self.readings_of(child)
            writers = 0
            for reading in readings:
                writers += reading[0]
            if writers > self.capacity:
                broken.append(name)
        return broken

    def memo_readings(self, details: tuple) -> list:
        """Each job's readings as the memo holds them (None where it has not learned them)."""
        readings = self.readings
        return [readings.get(readings_key(detail)) for detail in details]

    def readings_of(self, entry: Entry) -> list[tuple[int, bool]]:
        found = entry.readings
        if found is not None:
            return found
        found = self.memo_readings(entry.details)
        if None in found:
            self.learn_readings(self.world_of(entry), entry.details)
            found = self.memo_readings(entry.details)
        elif self.steps.check_every and self.steps.should_check():
            self.check_readings(entry, found)
        entry.readings = found
        return found

    def judge_drain_of(self, entry: Entry) -> tuple[tuple[str, ...], bool]:
        """Invariant 6 of a new state: from the drain judge's memos, or its World drained for real."""
        judge = self.judge_drain
        if not judge.invariants:
            return (), True
        if entry.world is None:
            in_flight = False
            for reading in self.readings_of(entry):
                if reading[1]:
                    in_flight = True
                    break
            now, _draining, free, held = entry.shared
            answer, learn = judge.lookup(
                entry.details, self.jobs, now, free, held, entry.abandoned, in_flight,
                lambda: (now, entry.parts, entry.abandoned),
            )
            if answer is not None:
                if self.steps.check_every and self.steps.should_check():
                    real = DrainJudge(judge.invariants)(self.fresh(entry))
                    if real != answer:
                        raise MemoMismatch(f"the drain judge's memoised answer {answer} differs from the drain's {real}")
                return answer
            return judge(self.world_of(entry), missed=learn)  # asked on the readings the World has
        return judge(self.world_of(entry))

