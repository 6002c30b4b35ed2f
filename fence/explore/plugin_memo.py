"""The step memo of the generic path: a step of one job, with users' plug-ins, answered from what it did before.

Why
---
A world with a user's ledger, destination or policy is walked whole
(``fence.explore.world_walk``): every transition is a deep copy of the plug-ins,
one real step and a generic key (``generic_parts``). fence's own parts answer
most transitions from their step memo instead (``fence.explore.transitions``),
because almost every step touches one job and most lead to a state seen
before. This is that memo for the generic path: what a step on job J did is
remembered under

    (the step, J's records in fence's parts, the shared context, the plug-ins' snapshots)

and a later step with the same four is answered from the memo: J's records
after it, the plug-ins' snapshots after it, and the facts it recorded
(invariants with findings, dangers reached). The child's generic parts are
then put together from the parent's (every other job's records as they were)
and the answer, and a transition into a state seen before is counted and
judged without a copy or a step. A transition into a new state is always
taken for real, so every World the walk keeps was made by the model; when
the memo answered it, the new state is keyed (and split by job) from the
answer as a state seen before is, rather than read again off its World.

The memo key
    *J's records* are J's entries in each of fence's parts of the generic key
    (``PLUGIN_PARTS_FROM`` parts: attempts, messages in flight, retries queued,
    the policy's second steps owed, held answers with their janitor where the
    key keeps it, the observer's mirror, abandon promises, the writes seen per
    key, and fence's own ledger's reservations when the ledger is fence's),
    exactly as the generic key holds them: an entry is J's by the attempt,
    job or reservation it names (a reservation by the attempt that owns it,
    ``World.owner_of_reservation``, so a user's ledger may name them as it
    likes). The *context* is what a job's step reads outside its job: the
    clock, whether the world drains, the units free by fence's own ledger (a
    user's ledger's count is in its snapshot) and the units held by the
    observer's count (``fence.explore.transitions.context``). The *snapshots*
    are the plug-ins' whole: a user's ledger's, the destination's and the
    policy's, as the generic key holds them. The step is the action itself,
    janitor and names included. Names are never rewritten: see "Names" below.

Why an answer is exactly the real step (soundness)
    The generic key rests on one premise: a plug-in's answers and its state
    after a call are a function of its snapshot and the call (``generic_state_key``;
    ``FaithfulnessCheck`` tests it on the run). Given that premise:

    * A step on J runs fence's rule for it (``Action.take``), which reads J's
      records, the shared context and the plug-ins (with J's names and J's
      records as arguments), and writes J's records, the plug-ins and the
      facts; no rule of a job's step reads or writes another job's records
      (``fence.explore.transitions`` argues this for fence's parts, and
      ``StepMemo`` is checked on it). The plug-ins' answers, and their
      snapshots after, are then a function of the memo key by the premise.
    * J's records in the generic key are reduced as the whole key is (a
      finished attempt only as names, a deadline only while it can expire,
      an answer nobody waits for left out, a stale answer dropped with fence's
      own ledger and policy); every one of those reductions reads J's own
      records and the clock only. Two worlds that agree on the memo key may
      differ in what the reductions leave out, but the generic key already
      stands on that difference changing nothing: swap J's full records of
      one world into the other and the generic key does not change.
    * So two steps with one memo key give J the same records, leave the
      plug-ins with the same snapshots and record the same facts, and every
      other job's records stay as they were: the child's generic parts are the
      parent's with J's entries and the snapshots replaced, which is what
      ``compose`` builds. Its key, fingerprint and place in the visited set
      are then those of the real child.
    * Judging a transition into a state seen before from the facts alone is
      exact as for fence's own parts (``fence.explore.successors._memo_successors``):
      an invariant judged on findings breaks iff the step recorded one, and
      invariant 3's present reading is a function of the state's key, judged
      when the walk first reached it. So the memo is used only with the
      built-in step invariants (``memo_judges``).

    Three things would make an answer depend on more than its key, and the
    memo refuses them rather than trusting the premise further: an answer
    held as an object (keyed by its identity, ``_held_token``), or a snapshot
    with a value compared by identity, is never remembered (each real step
    makes a new one, which a remembered answer would stand for wrongly); a
    step that changed another job's records or the clock is never remembered
    (it is not job-local); and a world where an entry cannot be given a job
    (a reservation no attempt owns) is stepped for real throughout.

Names
    The brief was to write the key relative to J, so that job1's step answers
    job2's. It is not done: an answer must give the child's snapshot as the
    plug-in would write it, and a snapshot renamed from another job's is
    that value only if the plug-in lists names in an order a renaming keeps
    (one that sorts its keys does not). A wrong snapshot can map a new state
    onto a visited one, which would hide states. Keyed by absolute names an
    answer needs nothing beyond the generic key's own premise, with or
    without ``--symmetry`` (whose renaming happens afterwards, in the key).

Checked, not trusted
    Every ``check_every``-th answer (``CHECK_EVERY`` unless the walk says
    otherwise) is also taken for real and compared: J's records, the
    snapshots, the facts and the child's whole generic parts. A difference
    means a plug-in's answers depend on more than its snapshot (or a fault
    here), and raises ``PluginMemoMismatch``: an ``Unfaithful``, so the walk
    stops and proves nothing, and says why. ``tests/test_plugin_symmetry.py``
    holds the walk's conclusions equal with the memo on and off, and shows a
    snapshot that leaves state out caught by these checks alone.

Falls back to the plain walk (``unsuitable`` says why) when a user's ledger
or destination has no ``snapshot()``, a plug-in declares ``STEP_MEMO = False``
in its class, or a step invariant is one the memo cannot judge.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools

from fence.explore.faithfulness import Unfaithful
from fence.explore.state_key import PLUGIN_PARTS_FROM, generic_parts, up_to_janitors
from fence.explore.successors import memo_judges
from fence.explore.transitions import facts_of
from fence.model.destination import TicketService
from fence.model.ledger import Ledger
from fence.model.world import World

_HELD = 5
"""The index of the held answers in the generic parts: (values per reservation, objects per janitor)."""
_LEDGER = PLUGIN_PARTS_FROM
"""fence's own ledger's reservations, or a user's ledger's snapshot."""
_SPLIT_HELD_VALUES, _SPLIT_HELD_OBJECTS, _SPLIT_LEDGER = 4, 5, 9
"""Where the held answers and fence's own ledger are in a split (``_split``)."""


class PluginMemoMismatch(Unfaithful):
    """A remembered step differs from the step taken for real: a plug-in depends on more than its snapshot."""


def unsuitable(world: World, step_invariants) -> str | None:
    """Why the generic path may not use the step memo on these plug-ins and invariants, or None."""
    if not memo_judges(step_invariants):
        return "a step invariant of the user's is judged on the whole child world"
    parts = {"destination": world.destination, "ledger": world.ledger, "policy": world.policy}
    for kind, part in parts.items():
        if getattr(type(part), "STEP_MEMO", True) is False:
            return f"the {kind} declares STEP_MEMO = False"
    for kind, part, own in (("destination", world.destination, TicketService), ("ledger", world.ledger, Ledger)):
        if type(part) is not own and not callable(getattr(part, "snapshot", None)):
            return f"the {kind} has no snapshot()"
    return None


class PluginStepMemo:
    """Steps of one job with users' plug-ins: (step, job's records, context, snapshots) -> what it did.

    Records, snapshots and the other jobs' records are held by number (``number``:
    equal numbers, equal values), so a lookup hashes a step and a few integers.
    """

    CHECK_EVERY = 64
    """Every n-th answer is also taken for real and compared, unless the walk asks for another n."""
    KEPT = 400_000
    """Children's fingerprints and numbered values remembered at most (forgotten all at once: always safe)."""

    def __init__(self, check_every: int = 0) -> None:
        self.answers: dict[tuple, tuple | None] = {}
        """(step, records number, context, snapshots number) -> (J's records after and their number, the
        snapshots after and their number, findings, dangers reached), or None: not one job's step alone."""
        self.check_every = check_every or self.CHECK_EVERY
        self.hits = 0
        self.checks = 0
        self.new_by_answer = 0
        """New states keyed by a memo answer's parts (their Worlds still stepped for real)."""
        self._numbers: dict = {}
        self._fingerprints: dict[tuple, int] = {}
        """A state's numbered form (clock, each job's records by number, the snapshots by number) -> its key's
        fingerprint: the numbered form is a function of the generic parts and they of it (equal numbers, equal
        values; every entry is some job's)."""
        self._made: dict[int, tuple] = {}
        """id of a new child the walk will expand -> (it, its trace length, its generic parts, its split, numbers)."""
        self._made_before: dict[int, tuple] = {}
        """``_made`` of the level being expanded (``next_level``)."""
        self._plain_values: dict = {}

    def number(self, value) -> int:
        """``value``'s number in this walk: one per distinct value."""
        numbers = self._numbers
        found = numbers.get(value)
        if found is None:
            if len(numbers) >= self.KEPT:  # numbers already handed out stay in the answers: start a new range
                self._numbers = numbers = {}
                self.answers.clear()
                self._fingerprints.clear()
            found = numbers[value] = next(_NUMBERS)
        return found

    def successors(self, world: World, visited, known, reached, fingerprint_of, judge, step_invariants):
        """``WorldWalk.successors`` of a world with plug-ins: ``(action, child, key, broken)`` per action.

        ``fingerprint_of`` maps generic parts to the walk's key fingerprint; a
        step answered from the memo into a state in ``visited`` yields no child.
        A state's fingerprint is also remembered by its numbered form (the clock,
        each job's records by number, the snapshots by number): a function of its
        generic parts, and they of it.
        """
        parent = _Parent(world, self, self._made_before.pop(id(world), None))
        answers, fingerprints = self.answers, self._fingerprints
        now = parent.raw[0]
        for action in up_to_janitors(world, world.enabled_actions()):
            job = parent.job_of(action)
            memo_key = answer = composed = None
            checking = False
            if job is not None:
                memo_key = parent.memo_key(job, action)
                answer = answers.get(memo_key, _UNKNOWN)
                if answer is not _UNKNOWN and answer is not None:
                    self.hits += 1
                    checking = self.hits % self.check_every == 0
                    numbered = (now, parent.numbers_after(job, answer[1]), answer[3])
                    key = fingerprints.get(numbered)
                    if key is None or checking:
                        composed = parent.compose(job, answer)
                        key = self._remember(numbered, fingerprint_of(composed))
                    if not checking and key in visited:
                        findings, got = answer[4], answer[5]
                        if got:
                            reached.update(got)
                        broken = [inv.name for inv in step_invariants
                                  if inv.name in findings and inv.name not in known] if findings else []
                        yield action, None, key, broken
                        continue
            child = world.clone(history=False)
            child.apply(action)
            if answer is not _UNKNOWN and answer is not None and not checking:
                # A new state the memo answered: keyed by the answer's parts, as a state seen before
                # is; the World is still the model's, made for its expansion and its drain.
                self.new_by_answer += 1
                raw = composed if composed is not None else parent.compose(job, answer)
                split = parent.split_after(job, answer[0])
                numbers = (parent.numbers_after(job, answer[1]), answer[3])
            else:
                raw = generic_parts(child)
                split = _split(child, raw, parent.fence_ledger) if parent.attributed else None
                if split is None:
                    numbers, key = None, fingerprint_of(raw)
                else:
                    numbers = (tuple([self.number(_records_of(split, j)) for j in parent.jobs]),
                               self.number(_plugins_of(raw, parent.fence_ledger)))
                    numbered = (raw[0], *numbers)
                    key = fingerprints.get(numbered)
                    if key is None:
                        key = self._remember(numbered, fingerprint_of(raw))
            if job is not None and (answer is _UNKNOWN or checking):
                findings, got = facts_of(child)
                real = parent.learned(job, raw, split, numbers, findings, got)
                if answer is _UNKNOWN:
                    answers[memo_key] = real
                else:
                    self._verify(action, answer, real, composed, raw)
            seen = key in visited
            if not seen and len(self._made) < _MADE_KEPT:
                self._made[id(child)] = (child, len(child.trace), raw, split, numbers)
            yield action, child, key, judge(child, known, reached, seen)

    def parts_of(self, world: World) -> tuple | None:
        """The generic parts of ``world``, a new state just made by ``successors``, or None if not kept."""
        made = self._made.get(id(world))
        if made is None or made[0] is not world or made[1] != len(world.trace):
            return None
        return made[2]

    def _remember(self, numbered: tuple, key: int) -> int:
        fingerprints = self._fingerprints
        if len(fingerprints) >= self.KEPT:
            fingerprints.clear()
        fingerprints[numbered] = key
        return key

    def next_level(self) -> None:
        """The walk starts on the next level: the children made in the last are the ones it expands now.

        Those of the level before that which were not expanded (the walk kept only their
        number, and rebuilds them) are let go.
        """
        self._made_before, self._made = self._made, {}

    def _verify(self, action, answer, real, composed, raw) -> None:
        self.checks += 1
        if real == answer and composed == raw:
            return
        names = ("the job's records", "the plug-ins' snapshots", "the findings", "the dangers reached")
        mine = (answer[0], answer[2], answer[4], answer[5])
        theirs = (real[0], real[2], real[4], real[5]) if real is not None else (None,) * 4
        differ = [name for name, a, b in zip(names, mine, theirs) if a != b] or ["the other jobs' records"]
        raise PluginMemoMismatch(
            f"the step memo answered {action.to_dict()} differently from the step taken for real "
            f"({', '.join(differ)}): a plug-in's answers depend on more than its snapshot() and the "
            "records fence keeps of the job; put every attribute that decides an answer in snapshot(), "
            "or set STEP_MEMO = False on its class"
        )

    def plain(self, value) -> bool:
        """Is ``value`` (a snapshot) equal only to values equal to it, never compared by identity?"""
        try:
            known = self._plain_values.get(value)
        except TypeError:
            return False
        if known is None:
            if len(self._plain_values) >= self.KEPT:
                self._plain_values.clear()
            known = self._plain_values[value] = _is_value(value)
        return known


_UNKNOWN = object()
"""Not in the memo (None there means: seen, and not job-local)."""
_NUMBERS = itertools.count()
"""Numbers are never reused, even when a memo forgets its values (``PluginStepMemo.number``)."""
_MADE_KEPT = 60_000
"""New children kept with their generic parts for their expansion at most (the walk keeps 50,000 Worlds)."""


class _Parent:
    """One state being expanded: its generic parts split by job, and its memo keys and children made from them."""

    def __init__(self, world: World, memo: PluginStepMemo, made: tuple | None) -> None:
        self.memo = memo
        self.world = world
        self.fence_ledger = type(world.ledger) is Ledger
        self.jobs = jobs = world.jobs
        self.attributed = False
        self._others: dict[str, tuple] = {}
        if made is not None and made[0] is world and made[1] == len(world.trace):
            self.raw, split, numbers = made[2], made[3], made[4]  # made by the step that found it, not stepped since
        else:
            self.raw, split, numbers = generic_parts(world), None, None
        raw = self.raw
        self.split = split if split is not None else _split(world, raw, self.fence_ledger)
        if self.split is None:
            return
        self.plugins = _plugins_of(raw, self.fence_ledger)
        if not memo.plain(self.plugins):
            return
        if numbers is None:
            numbers = (tuple([memo.number(_records_of(self.split, job)) for job in jobs]), memo.number(self.plugins))
        self.numbers, self.plugins_number = numbers
        self.index = {job: n for n, job in enumerate(jobs)}
        self.context = (raw[0], world.draining, world.ledger.free if self.fence_ledger else None, world.observer.held)
        self.attributed = True

    def job_of(self, action) -> str | None:
        """The job ``action`` touches, or None: a tick, or a state (or reservation) the memo cannot attribute.

        A reservation a user's ledger lists that no attempt owns has no job: its step is taken
        for real, which is where it shows what it is.
        """
        if not self.attributed:
            return None
        try:
            return action.job_in(self.world)
        except KeyError:
            return None

    def memo_key(self, job: str, action) -> tuple:
        return (action, self.numbers[self.index[job]], self.context, self.plugins_number)

    def numbers_after(self, job: str, records: int) -> tuple:
        """Each job's records by number after a step of ``job`` that left its records ``records``."""
        numbers = list(self.numbers)
        numbers[self.index[job]] = records
        return tuple(numbers)

    def others(self, job: str) -> tuple:
        """Every other job's entries, per part."""
        found = self._others.get(job)
        if found is None:
            found = self._others[job] = _others_of(self.split, job)
        return found

    def split_after(self, job: str, records: tuple) -> list[dict[str, list]]:
        """The split (``_split``) of the child of a step of ``job`` that left its records ``records``."""
        split = []
        for groups, mine in zip(self.split, records):
            groups = {other: items for other, items in groups.items() if other != job}
            if mine:
                groups[job] = list(mine)
            split.append(groups)
        return split

    def compose(self, job: str, answer: tuple) -> tuple:
        """The generic parts of the child of a step of ``job`` whose memo answer is ``answer``."""
        records, plugins = answer[0], answer[2]
        parts = [mine | theirs for mine, theirs in zip(records, self.others(job))]
        ledger = parts[_SPLIT_LEDGER] if self.fence_ledger else plugins[0]
        return (
            self.raw[0], parts[0], parts[1], parts[2], parts[3],
            (parts[_SPLIT_HELD_VALUES], parts[_SPLIT_HELD_OBJECTS]), parts[6], parts[7], parts[8],
            ledger, plugins[1], plugins[2],
        )

    def learned(self, job: str, raw: tuple, split, numbers, findings: tuple, got: dict) -> tuple | None:
        """What the real step (to generic parts ``raw``) did, as the memo keeps it; None if not one job's alone."""
        if split is None or raw[0] != self.raw[0]:
            return None
        index = self.index[job]
        records_after, plugins_after = numbers
        if any(n != index and after != before for n, (after, before) in enumerate(zip(records_after, self.numbers))):
            return None  # another job's records changed
        if any(_identity_token(item) for item in split[_SPLIT_HELD_OBJECTS].get(job, ())):
            return None
        plugins = _plugins_of(raw, self.fence_ledger)
        if not self.memo.plain(plugins):
            return None
        return (_records_of(split, job), records_after[index], plugins, plugins_after, findings, got)


def _plugins_of(raw: tuple, fence_ledger: bool) -> tuple:
    """The plug-ins' snapshots in the generic parts: a user's ledger's (None for fence's), the destination's, the policy's."""
    return (None if fence_ledger else raw[_LEDGER], raw[_LEDGER + 1], raw[_LEDGER + 2])


def _records_of(split: list[dict[str, list]], job: str) -> tuple:
    return tuple(frozenset(groups.get(job, ())) for groups in split)


def _split(world: World, raw: tuple, fence_ledger: bool) -> list[dict[str, list]] | None:
    """fence's parts of the generic key, each as job -> its entries; None if an entry has no job.

    The parts, in order: attempts, messages, retries, second steps owed, held
    values, held objects, mirror, abandon promises, writes per key, and fence's
    own ledger's reservations (when the ledger is fence's).
    """
    if len(raw) != PLUGIN_PARTS_FROM + 3:  # not the parts read here: take every step for real
        return None
    owner = world.owner_of_reservation

    def by_reservation(rid) -> str | None:
        handle = owner.get(rid)
        return None if handle is None else handle.partition("#")[0]

    values, objects = raw[_HELD]
    readers = [
        (raw[1], lambda item: item[0].partition("#")[0]),
        (raw[2], lambda item: item[0][1].partition("#")[0]),
        (raw[3], lambda item: item[0]),
        (raw[4], lambda item: by_reservation(item[0][1])),
        (values, lambda item: by_reservation(item[0][0])),
        (objects, lambda item: by_reservation(item[1])),
        (raw[6], lambda item: by_reservation(item[0])),
        (raw[7], lambda item: item.partition("#")[0]),
        (raw[8], lambda item: item[0]),
    ]
    if fence_ledger:
        readers.append((raw[_LEDGER], lambda item: by_reservation(item[0])))
    jobs = set(world.jobs)
    split = []
    for part, job_of in readers:
        groups: dict[str, list] = {}
        for item in part:
            job = job_of(item)
            if job not in jobs:
                return None
            groups.setdefault(job, []).append(item)
        split.append(groups)
    return split


def _others_of(split: list[dict[str, list]], job: str) -> tuple:
    return tuple(
        frozenset(item for other, items in groups.items() if other != job for item in items) for groups in split
    )


def _identity_token(item: tuple) -> bool:
    """A held answer the generic key holds by its identity (``_held_token``): no two steps make the same."""
    token = item[2]
    return type(token) is tuple and len(token) == 3 and token[0] == "object"


_SCALARS = frozenset({type(None), bool, int, float, str, bytes})


def _is_value(value) -> bool:
    """Is ``value`` built of values compared by content (no object compared by identity, enum members aside)?"""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(_is_value(item) for item in value)
    if isinstance(value, enum.Enum):
        return True
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return kind.__eq__ is not object.__eq__ and all(
            _is_value(getattr(value, f.name)) for f in dataclasses.fields(value)
        )
    return False
