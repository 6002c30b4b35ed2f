"""The explorer's state key: what a world's future depends on, as one hashable value.

``fence.explore.walk`` says why the key may merge the states it merges ("The
state key"); ``fence.explore.transitions`` and ``fence.explore.abstract`` build on the
per-job parts made here. It sits below all three so that none of them imports
another in a circle.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
from typing import Callable

from fence.model.destination import payloads_by_key
from fence.model.key_pieces import GENERIC_SLOTS
from fence.model.ledger import Ledger, ReservationState
from fence.model.policies import FENCE_POLICY_TYPES, Evidence
from fence.model.state_table import WORLD_STATE, compile_key_code
from fence.model.world import Action, MessageKind, Phase, World, destination_snapshot, ledger_snapshot


def state_key(world: World, symmetry: bool = False) -> tuple:
    """A hashable picture of everything the world's future depends on (see above).

    It is the clock and one part per job, each part written in names relative to
    its job (attempt 2, reservation r2, "ticket for <job> (revision 2)"). With
    ``symmetry`` the parts are sorted, so states that differ by a renaming of
    the jobs get one key. A world with a user's ledger, destination or policy
    is keyed by ``generic_state_key``, which renames jobs inside the plug-ins'
    snapshots mechanically (``symmetric_form``). Enum values are read as
    ``_value_``: the ``value`` property costs more than the rest of the key.
    """
    if not world.fast_copy_is_faithful():
        return generic_state_key(world, symmetry)
    # Each job's part is kept on the world (``World.job_memo``) until a step
    # touches that job: most transitions move one job, and then only its part
    # is made again.
    memo = world.job_memo
    jobs = world.jobs
    missing = [job for job in jobs if job not in memo]
    if missing:
        memo.update(job_parts(world, missing))
    keyed = [memo[job] for job in jobs]
    # The observer's present (mirror, effects seen, abandon answers) is a function
    # of the ledger's and destination's state for fence's own parts, which the
    # parts hold; only what it decides by itself is added.
    abandoned = tuple(sorted(world.observer.abandoned)) if world.observer.abandoned else ()
    return (world.now, tuple(sorted(keyed)) if symmetry else tuple(keyed), abandoned)


# ``job_parts(world, wanted)``: the key's part of each job in ``wanted``, written in names relative to
# the job. Each per-job field of ``fence.model.state_table.WORLD_STATE`` declares what it adds to a
# job's part and why that is all the key needs (``Field.key``, or ``Field.unkeyed``); the function is
# written from those declarations and compiled once (end of this module), with ``job_details``, the
# step memo's detail (``fence.explore.transitions``). A part holds nothing another job's step changes
# (``World.job_memo`` relies on it; tests/test_state_table.py holds it against ``job_projection``).
job_parts: Callable[[World, list[str]], dict[str, tuple]]
job_details: Callable[[World, list[str]], dict[str, tuple]]


def generic_state_key(world: World, symmetry: bool = False) -> tuple:
    """The key of a world with a user's ledger, destination or policy: the whole world, names and all.

    It holds every part fence owns, every janitor's answers by janitor, and the
    plug-ins' own ``snapshot()``. A held answer is keyed by its value if it
    hashes as one, else by the object itself (never merged with another).
    Collections whose order means nothing are frozensets here, so that a
    renaming of the jobs (``symmetric_form``) can sort them again. With
    ``symmetry`` the key is the least of its renamings. Whether a plug-in's
    snapshot really holds all of its state, and whether a plug-in treats job
    names as mere labels, is not trusted: ``FaithfulnessCheck`` tests both on
    the run (a merge of two renamed states is replayed with the names renamed).
    """
    return generic_key_of(generic_parts(world), world.jobs, symmetry)


def generic_key_of(raw: tuple, jobs: list[str], symmetry: bool) -> tuple:
    """``generic_state_key`` of a world whose parts (``generic_parts``) are ``raw``: a function of ``raw`` alone."""
    if not symmetry or len(jobs) < 2:
        return raw
    # Not remembered here: the walk asks once per distinct raw key (``WorldWalk._fingerprint_of_parts``
    # remembers its fingerprint), so a table of forms here was asked 270,819 times at 2x2x2 h2 and never
    # answered, while it kept up to 200,000 keys alive across walks.
    return symmetric_form(raw, list(jobs))[0]


PLUGIN_PARTS_FROM = GENERIC_SLOTS.index("ledger")
"""The index in a generic key from which its parts are the plug-ins' snapshots (fence's records come first)."""

# ``generic_parts(world)``: ``generic_state_key`` without symmetry, fence's records, then (from
# ``PLUGIN_PARTS_FROM``) the plug-ins'. Written from what each field of ``WORLD_STATE`` declares it
# sets of the generic key (``Field.generic_key``, in ``fence.model.key_pieces`` with the reductions it
# shares with the fast key) and compiled once (end of this module).
generic_parts: Callable[[World], tuple]


_NONE = frozenset()
"""``_multiset`` of nothing."""


def symmetric_form(raw: tuple, jobs: list[str]) -> tuple[tuple, dict[str, str]]:
    """The least renaming of a generic key over every permutation of ``jobs``, and the renaming that gave it.

    Every string anywhere in the key (the plug-ins' snapshots included) has its
    job names renamed; frozensets, sets and dicts are written again as sorted
    tuples after renaming, lists and tuples keep their order (a plug-in that
    returns a sorted tuple for what is a set merges fewer states, never wrong
    ones). Two worlds that are renamings of each other get one form. A value
    this cannot look into (an object that is not a plain value, a collection or
    a dataclass) stops the renaming: the key is then ``raw`` itself, merged only
    with equal worlds, which is never wrong either.
    """
    best: tuple | None = None
    best_renaming: dict[str, str] = {}
    for order in itertools.permutations(jobs):
        renaming = dict(zip(jobs, order))
        try:
            form = _canonical_parts(raw, renaming)
        except _NotRenamable:
            return raw, {}
        if best is None or _less(form, best):
            best, best_renaming = form, renaming
    return best, best_renaming


def canonical_renaming(raw: tuple, renaming: dict[str, str]) -> tuple | None:
    """``raw`` renamed by ``renaming`` as ``symmetric_form`` writes it, or None if it cannot be renamed."""
    try:
        return _canonical(raw, renaming, _renamed_text_cache(renaming))
    except _NotRenamable:
        return None


def _canonical_parts(raw: tuple, renaming: dict[str, str]) -> tuple:
    """``_canonical`` of a generic key, part by part, each part's form remembered.

    Most parts of a new state's key (the destination's snapshot, the ledger's,
    the messages in flight) are parts of states seen before: their forms under
    each renaming are looked up, not written again.
    """
    cache = _renamed_text_cache(renaming)
    forms = _PART_FORMS.get(tuple(renaming.items()))
    if forms is None or len(forms) > _PART_FORMS_KEPT:
        forms = _PART_FORMS[tuple(renaming.items())] = {}
    canonical = []
    for part in raw:
        form = forms.get(part)
        if form is None:
            form = forms[part] = _canonical(part, renaming, cache)
        canonical.append(form)
    return tuple(canonical)


_PART_FORMS: dict[tuple, dict] = {}
"""Per renaming: part of a generic key -> its ``_canonical`` form (a pure function: forgetting is safe)."""
_PART_FORMS_KEPT = 400_000


class _NotRenamable(Exception):
    """A key part holds a value whose names fence cannot rename."""


def _less(one: tuple, other: tuple) -> bool:
    try:
        return one < other
    except TypeError:  # values of mixed types somewhere: their text still orders them one way
        return repr(one) < repr(other)


_TEXT_CACHES: dict[tuple, dict[str, str]] = {}


def _renamed_text_cache(renaming: dict[str, str]) -> dict[str, str]:
    """Strings already renamed under ``renaming``: a walk renames the same few names millions of times."""
    cache = _TEXT_CACHES.setdefault(tuple(renaming.items()), {})
    if len(cache) > 200_000:  # payload texts may be many; the names repeat
        cache.clear()
    return cache


# What ``_canonical`` writes for a set, a dict, an enum member, a named tuple or a dataclass starts
# with one of these tags. A tag is a one-name frozenset because ``_canonical`` writes every
# frozenset it meets as a tagged tuple: no value of a plug-in's snapshot comes out as one, so a
# plain tuple such as ``("set", ("a", "b"))`` can never take the form of a set of "a" and "b".
# (A string tag could: two states a plug-in tells apart would share one key.) One name each
# keeps the tag's text, and so the order ``_sorted`` falls back to, the same in every process.
_SET, _DICT, _ENUM, _NAMED_TUPLE, _DATACLASS = (
    frozenset({"set"}), frozenset({"dict"}), frozenset({"enum"}), frozenset({"named tuple"}), frozenset({"dataclass"}))


def _canonical(value, renaming: dict[str, str], cache: dict[str, str]) -> object:
    kind = type(value)
    if kind is str:
        renamed = cache.get(value)
        if renamed is None:
            renamed = cache[value] = _JOB_NAME.sub(lambda match: renaming.get(match.group(0), match.group(0)), value)
        return renamed
    if kind is tuple or kind is list:
        return tuple([_canonical(item, renaming, cache) for item in value])
    if kind in _PLAIN or kind is bytes:
        return value
    if kind is frozenset or kind is set:
        return (_SET, _sorted([_canonical(item, renaming, cache) for item in value]))
    if kind is dict:
        return (_DICT, _sorted([
            (_canonical(k, renaming, cache), _canonical(v, renaming, cache)) for k, v in value.items()
        ]))
    if isinstance(value, enum.Enum):
        return (_ENUM, kind.__qualname__, _canonical(value._value_, renaming, cache))
    if isinstance(value, tuple):  # a named tuple
        return (_NAMED_TUPLE, kind.__qualname__, tuple([_canonical(item, renaming, cache) for item in value]))
    if dataclasses.is_dataclass(value):
        return (_DATACLASS, kind.__qualname__, tuple(
            (f.name, _canonical(getattr(value, f.name), renaming, cache)) for f in dataclasses.fields(value)
        ))
    raise _NotRenamable(kind.__qualname__)


_JOB_NAME = re.compile(r"job\d+")
"""How the model names jobs (``World.jobs``); attempts are ``job#n``, reservations ``job/n``."""


def _multiset(items) -> frozenset:
    """Items whose order means nothing but whose number does (two janitors holding one answer)."""
    counts: dict = {}
    for item in items:  # not Counter(items): its isinstance(Mapping) check costs more than the counting
        counts[item] = counts.get(item, 0) + 1
    return frozenset(counts.items())


def answer_nobody_waits_for(world: World, kind: str, attempt: str) -> bool:
    """Is a message of ``kind`` (its value) to ``attempt`` an answer that attempt no longer waits for?

    Its arrival changes nothing, so the generic key leaves it out, and the
    FaithfulnessCheck does not compare what two merged worlds say when it arrives.
    """
    return kind == _ACK and world.attempts[attempt].phase is not Phase.COMMIT_SENT


_ACK = MessageKind.ACK.value


def _held_token(found) -> object:
    """A user's answer object as a key part.

    An object that prints its fields (a dataclass, say) is keyed by that text,
    with memory addresses cut out: an answer that carries the destination it
    came from then keys alike in every copy of the world, since each copy's
    answer points at its own copy of the destination. Any other object is keyed
    by itself: never merged with another answer (and kept alive by the key, so
    its id is not reused). Merges are tested by ``FaithfulnessCheck`` either way.
    """
    if type(found).__repr__ is not object.__repr__:
        return (type(found).__qualname__, _ADDRESS.sub("", repr(found)))
    return ("object", id(found), found)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def evidence_token(evidence) -> tuple:
    """A janitor's held answer as a key part: the answer itself, never the policy's decision on it.

    The policy's ``decide`` runs when a settle is taken and at no other moment
    (a decide that writes would otherwise write while the explorer only looks).
    fence's own ``Evidence`` is a frozen value; fields are read as ``_value_``
    for speed.
    """
    # Sortable: None is written as "" (no AttemptState has that value).
    return (
        -1 if evidence.key_exists is None else int(evidence.key_exists),
        evidence.attempt_state._value_ if evidence.attempt_state is not None else "",
        evidence.attempt_asked,
        evidence.abandon_result._value_ if evidence.abandon_result is not None else "",
    )


def up_to_janitors(world: World, actions: list[Action]) -> list[Action]:
    """The actions, less those another janitor's same action already stands for.

    Janitors keep no state but the answers they hold, and the key counts those
    per reservation without saying which janitor holds which. So any janitor's
    scan of a reservation leads to the same state, any janitor's probe of it
    (by one that holds no answer for it) to states with one key, and so does a
    settle by any janitor holding an answer with the same decision. One of each
    is taken; the state space is the same, with fewer transitions to it.
    """
    taken: set[tuple] = set()
    kept = []
    for action in actions:
        same = action.janitors_alike(world, evidence_token)
        if same is None:
            kept.append(action)
        elif same not in taken:
            taken.add(same)
            kept.append(action)
    return kept


_PLAIN = frozenset({type(None), bool, int, float, str})


def _sorted(items: list) -> tuple:
    try:
        return tuple(sorted(items))
    except TypeError:  # of mixed types: still one order for equal contents
        return tuple(sorted(items, key=repr))


def _sorted_tuple(items: list) -> tuple:
    """``tuple(sorted(items))``, without the sort when there is nothing to order."""
    return tuple(items) if len(items) < 2 else tuple(sorted(items))


def _derive_key_code(fields: tuple = WORLD_STATE) -> tuple[Callable, Callable, Callable]:
    code = compile_key_code(fields=fields, namespace={
        "ReservationState": ReservationState, "MessageKind": MessageKind, "Phase": Phase,
        "evidence_token": evidence_token, "_sorted_tuple": _sorted_tuple, "_held_token": _held_token,
        "_multiset": _multiset, "_NONE": _NONE, "Evidence": Evidence, "Ledger": Ledger,
        "FENCE_POLICY_TYPES": FENCE_POLICY_TYPES, "payloads_by_key": payloads_by_key,
        "ledger_snapshot": ledger_snapshot, "destination_snapshot": destination_snapshot,
    })
    code["job_parts"].__doc__ = "The key's part of each job in ``wanted``, written in names relative to the job."
    code["job_details"].__doc__ = "Each wanted job's step-memo detail: everything the world holds about it."
    code["generic_parts"].__doc__ = "``generic_state_key`` without symmetry: fence's records, then the plug-ins'."
    return code["job_parts"], code["job_details"], code["generic_parts"]


job_parts, job_details, generic_parts = _derive_key_code()
