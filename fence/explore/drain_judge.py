"""Invariant 6 (everything_settles) per explored state: the model's own drain, memoised by drain round."""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from fence.explore import transitions
from fence.model.invariants import Invariant
from fence.explore.drain_memo import DrainMemo
from fence.explore.state_key import state_key
from fence.explore.transitions import MemoMismatch
from fence.explore.visited import KEY_PRIME, Fingerprints, of_plain
from fence.model.world import World


class DrainJudge:
    """The teardown invariants after ``World.drain``, memoised by drain round.

    The loop is ``World.drain``'s own (mark draining, then rounds of the model's
    ``_drain_round`` until the fingerprint stops changing, at most ``MAX_ROUNDS``),
    with one addition: the state at the start of each round is looked up by its
    key and round number, and what the drain from there concluded is reused.
    Drains from distinct states converge fast (at 1 unit x 1 job x 2 attempts,
    15,000 states led to 401 distinct states after one round), so this saves most
    of the drain work; ``tests/test_explore.py`` checks it against ``drain()``.

    The first round is looked up halfway, for fence's own parts: each explored
    state is drained once, so its first round never starts at a state seen
    before, but after its first half (``World._drain_workers``: messages
    delivered, workers stepped) states meet (at 2 units x 2 jobs x 1 attempt,
    13,575 drains met 1,676 distinct states there). A first half that took a
    step makes the round no fixed point (``_drain_workers`` says why), so what
    follows depends on the state reached alone. That holds of a user's plug-ins
    too (the argument is about fence's messages and workers), keyed by the
    generic key; only the per-job composition of first halves (``halves``) is
    for fence's own parts.
    """

    MAX_ROUNDS = 12  # World.drain's default
    FIRST_ROUND_HALFWAY = "first round, workers done"
    """Memo tag: after a first round's ``_drain_workers`` took a step."""
    FIRST_ROUND_DELIVERING = "first round, delivering"
    """Memo tag: in a first round's deliveries, with a message still in flight."""

    def __init__(self, invariants: list[Invariant], steps=None, memo=None) -> None:
        self.invariants = invariants
        self.memo = DrainMemo() if memo is None else memo
        """Answers by the fingerprint (``fence.explore.visited``) of a state key with the round or tag appended,
        not by the key itself: at one job the keys (some eight tuples each) were most of what a walk kept, all of it
        scanned by the cyclic collector after the walk, for the collision risk the visited set takes. In flat
        arrays of at most two generations (``fence.explore.drain_memo``): it grows with the walk. ``memo`` is
        another store with ``get`` and item assignment (the partitioned walk's is a dict: it sends the items
        learned since it last sent, in insertion order)."""
        self._generic_fingerprints = Fingerprints()
        """For the keys of a user's plug-ins (sets, snapshot values): one instance per walk, as ``WorldWalk``'s."""
        self.steps = steps
        """The walk's step memo (``fence.explore.transitions.StepMemo``), or None: see ``_from_memos``."""
        self.halves: dict[tuple, tuple] = {}
        """(a job's detail, the context) -> what a first half does to the job: see ``_from_memos``."""
        self._halves_by_context: dict[tuple, dict] = {}
        """The same answers by context, then detail, as ``lookup`` reads them (a copy it fills)."""
        self.number: Callable[[tuple], int] | None = None
        """The abstract walk's numbering of key parts (``fence.explore.abstract``), or None: with it, the
        first round's memo keys and ``halves`` name each part by its number (equal numbers,
        equal parts), so a lookup hashes small integers."""
        self.sums = None
        """With ``number``, the abstract walk's ``fence.explore.visited.KeySums`` without symmetry: the first
        round's memo keys fingerprinted by them (``first_round_fingerprint``), not encoded and hashed."""

    def first_round_key(self, key: tuple) -> tuple:
        """A state key (without symmetry) as the first round's memo keys write it."""
        number = self.number
        if number is None:
            return key
        return (key[0], tuple([number(part) for part in key[1]]), key[2])

    def first_round_fingerprint(self, key: tuple, tag: str, fingerprint=of_plain) -> int:
        """The memo's key for a first round's state ``key`` (as ``first_round_key`` writes it) and ``tag``."""
        sums = self.sums
        if sums is None:
            return fingerprint(key + (tag,))
        return sums(key[0], key[1], (key[2], tag))

    def _from_memos(self, world: World) -> tuple[tuple | None, Missed | None]:
        """The answer for a fast world without draining it, if the memos have it.

        First by the key its first half (``World._drain_workers``) would reach,
        put together job by job from ``halves``: what a first half did to each
        job's part, learned from first halves run for real (``_learn_halves``);
        then by its own key, if messages are in flight. Returns (answer, None)
        or (None, what ``lookup`` learned: ``Missed``).

        Why a first half composes per job: each of its steps (deliveries,
        confirms, commits sent, starts) is job-local and reads nothing outside
        its job but the context (clock, draining, units free and held; see
        ``fence.explore.transitions``); a job's steps come in the order they would
        come in if the job were alone (the next message is the least in flight,
        so the least of its job's; worker steps go by attempt, and a job's
        attempts share its name as prefix); and the context does not change
        in a first half: it takes no unit (no reserve), so free units only
        rise, and ``_learn_halves`` keeps only first halves that ended with the
        context they started with, so none of their steps changed it.
        """
        details = self.steps.details(world)
        now, _, free, held = transitions.context(world)
        jobs = world.jobs
        return self.lookup(
            [details[job] for job in jobs], jobs, now, free, held, world.observer.abandoned, bool(world.network),
            lambda: self.first_round_key(state_key(world)),
        )

    def lookup(self, details: Sequence[int], jobs: list[str], now: int, free: int, held: int, abandoned,
               in_flight: bool, own_key: Callable[[], tuple]) -> tuple[tuple | None, Missed | None]:
        """``_from_memos`` on a state given by its readings: each job's detail (by number, in job
        order), the context, the abandon promises, whether messages are in flight, and (asked
        only then) its key without symmetry as ``first_round_key`` writes it. The explorer's
        abstract walk asks this with no world.

        On a miss it also returns what it learned (``Missed``), for ``__call__`` on the same
        state: it need not look up again the keys that just missed."""
        shared = (now, True, free, held)
        get = self.halves.get
        # ``halves`` by context, then detail: the context hashed once per state, not once per job. Filled
        # from ``halves`` as it is asked (others write ``halves``: ``_learn_halves``, a partitioned walk).
        by_detail = self._halves_by_context.get(shared)
        if by_detail is None:
            by_detail = self._halves_by_context[shared] = {}
        sums = self.sums
        # Called once per new state: one pass over the jobs, no generators. With ``sums`` the halfway
        # key's fingerprint is summed in the same pass, as ``first_round_fingerprint`` sums it.
        tables = sums.parts if sums is not None else None
        parts = []
        total = 0
        stepped = added = False
        for position, detail in enumerate(details):
            half = by_detail.get(detail)
            if half is None:
                half = get((detail, shared))
                if half is None:
                    parts = None
                    break
                by_detail[detail] = half
            parts.append(half[0])
            if tables is not None:
                total += tables[position][half[0]]
            if half[1]:
                stepped = True
            if half[2]:
                added = True
        learn = halfway_key = own = None
        if parts is None:
            learn = (dict(zip(jobs, details)), shared, frozenset(abandoned))
        elif stepped:
            if added:
                abandoned = set(abandoned)
                for job, detail in zip(jobs, details):
                    abandoned.update(job + i for i in get((detail, shared))[2])
            promises = tuple(sorted(abandoned)) if abandoned else ()
            if tables is not None:
                halfway_key = (total + sums.clock[now] + sums.promises[(promises, self.FIRST_ROUND_HALFWAY)]) % KEY_PRIME
            else:
                halfway_key = self.first_round_fingerprint((now, tuple(parts), promises), self.FIRST_ROUND_HALFWAY)
            answer = self.memo.get(halfway_key)
            if answer is not None:
                return answer, None
            # No state on the way there has an answer either, so its own key is not asked (``Missed.halfway``).
            return None, Missed(learn, halfway_key, None)
        # else the first half takes no step: no halfway key (see ``__call__``)
        if in_flight:
            own = self.first_round_fingerprint(own_key(), self.FIRST_ROUND_DELIVERING)
            answer = self.memo.get(own)
            if answer is not None:
                return answer, None
        return None, Missed(learn, halfway_key, own)

    def generic_lookup(self, raw: tuple) -> tuple[tuple | None, Missed]:
        """``__call__``'s first lookup for a world with a user's plug-ins whose generic parts are ``raw``
        and which has messages in flight, without copying it: (answer, None) or (None, the key missed)."""
        own = self.first_round_fingerprint(raw, self.FIRST_ROUND_DELIVERING, self._generic_fingerprints)
        answer = self.memo.get(own)
        return (answer, None) if answer is not None else (None, Missed(None, None, own))

    def _learn_halves(self, learn: tuple, drained: World, steps_before: int) -> None:
        """Remember what the first half just taken on ``drained`` did to each job (see ``_from_memos``)."""
        details, shared, abandoned_before = learn
        if transitions.context(drained) != shared:
            return  # a step changed the context: this first half does not compose
        cut = {job: len(job) for job in drained.jobs}
        stepped = {job: False for job in drained.jobs}
        for step in drained.trace[steps_before:]:
            stepped[drained.attempts[step.action.attempt].key] = True
        state_key(drained)  # fills the parts
        added_now = drained.observer.abandoned - abandoned_before
        for job in drained.jobs:
            added = tuple(sorted(i[cut[job]:] for i in added_now if i.partition("#")[0] == job))
            part = drained.job_memo[job]
            self.halves[(details[job], shared)] = (self.number(part) if self.number else part, stepped[job], added)

    def __call__(self, world: World, missed=False) -> tuple[tuple[str, ...], bool]:
        """``missed``: what ``lookup`` gave besides no answer, when it was just asked about this world."""
        if not self.invariants:
            return (), True
        known = None
        if missed is not False:
            known = missed
        elif self.steps is not None and world.fast_copy_is_faithful():
            answer, known = self._from_memos(world)
            if answer is not None:
                if not self.steps.should_check():
                    return answer
                if DrainJudge(self.invariants)(world) != answer:  # checked: made again with no memo
                    raise MemoMismatch(f"the drain judge's memoised answer {answer} differs from the drain's")
                return answer
        learn = known.learn if known is not None else None
        # The keys ``lookup`` has just looked up and missed (None where it did not) are not looked up again.
        own_missed = known.own if known is not None else None
        fingerprint = of_plain if world.fast_copy_is_faithful() else self._generic_fingerprints
        drained = world.clone(history=False)
        drained.start_draining()
        seen: list[int] = []
        answer = None
        settled = False
        after = None
        first_round = 0
        # The first half is looked up for every world (the class docstring says why).
        in_flight = sorted(drained.network, key=_drain_order_key)
        steps = len(drained.trace)
        # While messages are in flight, the first half delivers the next one and
        # goes on as it would from the state that delivery leads to: every state
        # on the way ends the first half where this one does. Such a state is
        # often another explored state (this one's child by that delivery).
        # Unless ``lookup`` missed where they all end (``Missed.halfway``): then none of them has an answer.
        if known is not None and known.halfway is not None:
            while drained.network:
                drained._drain_deliver_next()
        while drained.network:
            # The state itself: ``lookup`` missed on its key already; the states after it are looked up.
            key, answer = self._key_and_answer(own_missed, drained, self.FIRST_ROUND_DELIVERING, fingerprint)
            own_missed = None
            if answer is not None:
                break
            seen.append(key)
            drained._drain_deliver_next()
        if answer is not None:
            for key in seen:
                self.memo[key] = answer
            if learn is not None:
                # The answer is known, but what this first half does to each job is not:
                # finish it (the steps a first half takes from here) only to learn that,
                # so that states sharing these jobs' details compose (``_from_memos``).
                while drained.network:
                    drained._drain_deliver_next()
                drained._drain_worker_steps()
                self._learn_halves(learn, drained, steps)
            return answer
        drained._drain_worker_steps()
        if len(drained.trace) > steps:
            if learn is not None:
                self._learn_halves(learn, drained, steps)
            # ``lookup`` may have composed this key from the jobs' first halves and missed on it;
            # the memo has gained nothing since (the deliveries above found no answer).
            halfway = known.halfway if known is not None else None
            key, answer = self._key_and_answer(halfway, drained, self.FIRST_ROUND_HALFWAY, fingerprint)
            if answer is not None:
                for key in seen:
                    self.memo[key] = answer
                return answer
            seen.append(key)
            drained._drain_clock_and_janitors()
            # The first half took a step, so this round is no fixed point; checked
            # cheaply where it could fail: no message in flight before is in flight now.
            assert not in_flight or sorted(drained.network, key=_drain_order_key) != in_flight
            first_round = 1
        for number in range(first_round, self.MAX_ROUNDS):
            # Round 0 is not looked up: it starts at the state itself, and the
            # explorer drains each distinct state once (distinct keys with symmetry
            # are distinct without it), so a first round is never seen twice.
            if number:
                key = fingerprint(state_key(drained) + (number,))
                answer = self.memo.get(key)
                if answer is not None:
                    break
                seen.append(key)
            # A round starts where the last one ended: its fingerprint is the last one's ``after``.
            before, steps = after if after is not None else drained.fingerprint(), len(drained.trace)
            drained._drain_round()
            after = drained.fingerprint()
            if drained.reached_fixed_point(before, steps, after):
                settled = True
                break
        if answer is None:
            broken = tuple(inv.name for inv in self.invariants if inv.check(drained))
            answer = (broken, settled)
        for key in seen:
            self.memo[key] = answer
        return answer

    def _key_and_answer(self, missed: int | None, drained: World, tag: str, fingerprint) -> tuple[int, tuple | None]:
        """The memo key of ``drained`` at ``tag`` and the memo's answer for it.

        ``missed`` is the key ``lookup`` composed and missed on, if it did: it is
        not made or looked up again, only checked (``_check_key``) when memo checks are on.
        """
        if missed is not None:
            self._check_key(missed, drained, tag, fingerprint)
            return missed, None
        key = self.first_round_fingerprint(self.first_round_key(state_key(drained)), tag, fingerprint)
        return key, self.memo.get(key)

    def _check_key(self, key: int, drained: World, tag: str, fingerprint) -> None:
        """With memo checks on, ``key`` (as ``lookup`` gave it) must be the one ``drained``'s own state key gives."""
        if self.steps is None or not self.steps.check_every:
            return
        made = self.first_round_fingerprint(self.first_round_key(state_key(drained)), tag, fingerprint)
        if made != key:
            raise MemoMismatch(f"the drain judge's memo key for '{tag}' was composed as {key}, the World's is {made}")


class Missed(NamedTuple):
    """What ``DrainJudge.lookup`` learned of a state on a miss, for ``DrainJudge.__call__`` on it."""

    learn: tuple | None
    """What ``_learn_halves`` needs, when a job's first half is not known yet."""
    halfway: int | None
    """The memo key of where the first half ends, composed from the jobs' halves, if it takes a step.

    Its miss says that no state on the way there (the deliveries of the first half) has an answer:
    a drain stores a delivery's key only with the answer for where its first half ends, or after
    finding an answer at a key stored that way (``__call__``), so the answer for the end would have
    been stored with it. ``lookup`` and ``__call__`` then look none of them up, nor store them: a state
    whose jobs' halves are known asks for this key first, and stops there once it is stored. (A lookup
    skipped, or a key not stored, can only cost a drain, never change an answer.)"""
    own: int | None
    """The state's own memo key in a first round's deliveries, if messages are in flight and ``halfway``
    is None."""


def _drain_order_key(message) -> tuple:
    return (message.kind._value_, message.attempt, message.result._value_ if message.result else "")


def drain_plainly(world: World, invariants: list[Invariant]) -> tuple[tuple[str, ...], bool]:
    """The teardown invariants ``world`` breaks after the model's own drain, with no memo: (broken, settled).

    What ``DrainJudge`` answers, without the memos it keys by ``state_key``:
    the reference walks that test that key (``fence.explore.congruence.key_congruence``)
    must not lean on it.
    """
    drained = world.clone(history=False)
    settled = drained.drain(DrainJudge.MAX_ROUNDS)
    return tuple(inv.name for inv in invariants if inv.check(drained)), settled
