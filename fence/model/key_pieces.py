"""What each field of a World adds to the explorer's key parts, memo details and generic key, and why.

``fence.model.state_table.WORLD_STATE`` declares every field of a World. This
module holds, field by field, the pieces the table names: what a field adds to a
job's part of the explorer's key (``Field.key``), to the step memo's detail of
the job (``Field.detail``) and to the generic key (``Field.generic_key``), each
next to the reason the key may merge what it merges (``fence.explore.walk``,
"The state key"). The pieces are Python statements: ``per_job_code`` and
``generic_key_code`` write the functions from them, and
``fence.explore.state_key`` compiles them once at import (they are on the
explorer's hot path, where a loop over the table per state would cost more than
the reading; compiled, they are the code a hand would write, as
``World``'s copy is). ``fence.model.state_table.key_code()`` is their source.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class PerJob:
    """What one field adds to each wanted job's key part or memo detail, as code the made function runs.

    Each piece is Python statements, a ``str.format`` string: ``{v}`` is the field's
    value in the world read (``world.<field>``), ``{slot}`` the index of a slot of the
    part (``KEY_SLOTS``, ``DETAIL_SLOTS``); other braces are doubled. ``world``, ``now``
    (the clock) and ``parts`` (each wanted job's list of slots) are in scope, and the
    names ``fence.explore.state_key`` compiles them with. The pieces of all fields
    share one function's locals and run in the table's order, every ``reads`` before
    any ``adds``: a piece may read a name an earlier field's piece set, and a name
    a ``reads`` sets is not reused by an ``adds``.
    """

    reads: str = ""
    """Run first, before any field adds anything: names the other fields' pieces read."""
    adds: str = ""
    """Adds each wanted job's entries: ``part = parts.get(job)``, then ``part[{slot}].append(...)``."""
    per_job: str = ""
    """Run once per wanted job (``job``, ``part``): sets its ``value`` slots."""


@dataclass(frozen=True)
class Slot:
    """One slot of a job's key part or memo detail, and how it is closed into the part."""

    name: str
    kind: str
    """``sorted`` (a list of entries, any order), ``ordered`` (a list whose order counts),
    ``count`` (an int) or ``value`` (set once per job by ``PerJob.per_job``)."""


SLOT_KINDS = {"sorted": ("[]", "_sorted_tuple(part[{i}])"), "ordered": ("[]", "tuple(part[{i}])"),
              "count": ("0", "part[{i}]"), "value": ("None", "part[{i}]")}
"""Each slot kind's start and close, as code."""

KEY_SLOTS = (
    Slot("reservations", "sorted"), Slot("effects", "ordered"), Slot("witness", "sorted"),
    Slot("attempts", "sorted"), Slot("messages", "sorted"), Slot("retries", "count"),
)
"""A job's part of the explorer's key (``fence.explore.state_key.job_parts``)."""

DETAIL_SLOTS = (
    Slot("reservations", "ordered"), Slot("current", "value"), Slot("reserved_count", "value"),
    Slot("effects", "ordered"), Slot("first_payload", "value"), Slot("witness", "sorted"),
    Slot("attempts", "ordered"), Slot("attempts_used", "value"), Slot("messages", "sorted"),
    Slot("retries", "value"), Slot("answers", "sorted"), Slot("follow_ups", "sorted"),
    Slot("mirror", "ordered"), Slot("seen_current", "value"), Slot("seen_effects", "ordered"),
    Slot("seen_effect_count", "value"), Slot("seen_first_payload", "value"), Slot("abandoned", "value"),
    Slot("owners", "ordered"),
)
"""A job's step-memo detail (``fence.explore.transitions.job_details``): everything the world holds about it."""

GENERIC_SLOTS = (
    "now", "attempts", "network", "retries", "follow_ups", "held", "mirror", "abandoned", "seen_effects",
    "ledger", "destination", "policy",
)
"""The generic key's parts: fence's records, then (from ``ledger``) the plug-ins' snapshots."""


# -- each field's pieces, in the table's order ----------------------------------------------------
# A field's ``key`` piece (and ``generic_key``, for the parts fence owns) says how the key abstracts
# what the field holds, each next to why that merges only states with the same future
# (``fence.explore.walk``, "The state key"; ``congruence.key_congruence`` holds the key against
# ``whole_state``, and tests/test_state_table.py a key part against the job's entries). A ``detail``
# piece merges nothing: it is everything the field holds about the job, in names relative to it
# (``fence.explore.transitions`` says why the detail is complete). The generic key is the whole world,
# names and all; collections whose order means nothing are frozensets (``_multiset`` where their
# number counts), so that a renaming of the jobs (``symmetric_form``) can sort them again.
# Enum members are compared by identity (``is``) and read as ``_value_``: an Enum's hash and its
# ``value`` property are Python-level calls, and a key is made per transition.

# -- policy (not state on the fast path)
# A user's policy walked without the twins may keep something: its own snapshot, if it has one.
POLICY_GENERIC = """
policy_snapshot = getattr({v}, "snapshot", None)
key[{policy}] = policy_snapshot() if callable(policy_snapshot) else None
"""

# -- destination
# Effects of a key keep their order: the first payload is the ticket on record (so the
# destination's first payload per key is not keyed apart). Which attempt wrote one, and the
# order across keys, decide nothing.
DESTINATION_KEY = PerJob(adds="""
for e in {v}._effects:
    part = parts.get(e.key)
    if part is not None:
        part[{effects}].append(e.payload.replace(e.key, ""))
for identity, state in {v}._attempts.items():
    job, _, number = identity.partition("#")
    part = parts.get(job)
    if part is not None:
        part[{witness}].append((number, state._value_))
""")

DESTINATION_DETAIL = PerJob(adds="""
for e in {v}._effects:
    part = parts.get(e.key)
    if part is not None:
        part[{effects}].append((e.attempt_id.replace(e.key, ""), e.payload.replace(e.key, "")))
for identity, state in {v}._attempts.items():
    job = identity.partition("#")[0]
    part = parts.get(job)
    if part is not None:
        part[{witness}].append((identity.replace(job, ""), state._value_))
""", per_job="""
first = {v}._first_payload.get(job)
part[{first_payload}] = first.replace(job, "") if first is not None else None
""")

DESTINATION_GENERIC = "key[{destination}] = destination_snapshot({v})"


# -- ledger
# A deadline only as "expired" (-1) or its tick, and only while the reservation is reserved: the
# model reads a deadline only through ``expired(now)`` of a reserved reservation, and the clock only
# moves forward. An outcome_unknown reservation carries the janitors' answers about it (``EVIDENCE_KEY``).
LEDGER_KEY = PerJob(reads="""
reserved, unknown = ReservationState.RESERVED, ReservationState.OUTCOME_UNKNOWN
""", adds="""
for x in {v}._reservations.values():
    job, _, number = x.reservation_id.partition("/")
    part = parts.get(job)
    if part is None:
        continue
    state = x.state
    if state is reserved:
        part[{reservations}].append((number, state._value_, x.deadline if x.deadline > now else -1))
    elif state is unknown:
        rid = x.reservation_id
        answers = [evidence_token(held[rid]) for held in evidence if rid in held]
        part[{reservations}].append((number, state._value_, _sorted_tuple(answers) if answers else ()))
    else:
        part[{reservations}].append((number, state._value_))
""")

LEDGER_DETAIL = PerJob(reads="""
units_freed = {v}.units_freed
""", adds="""
for r in {v}._reservations.values():
    part = parts.get(r.key)
    if part is not None:
        job = r.key
        part[{reservations}].append((r.reservation_id.replace(job, ""), r.owner.replace(job, ""), r.deadline,
                                     r.state._value_, units_freed.get(r.reservation_id, 0)))
""", per_job="""
current = {v}._current_by_key.get(job)
part[{current}] = current.replace(job, "") if current is not None else None
part[{reserved_count}] = {v}._count_by_key.get(job, 0)
""")

# fence's own ledger as the fast key reads it: a deadline only while it can expire. A user's: its snapshot.
LEDGER_GENERIC = """
if type({v}) is Ledger:
    key[{ledger}] = frozenset(
        (r.reservation_id, r.owner, r.state._value_,
         (r.deadline if r.deadline > world.now else -1) if r.state is ReservationState.RESERVED else None)
        for r in {v}._reservations.values()
    )
else:
    key[{ledger}] = ledger_snapshot({v})
"""


# -- observer (not per job: the fast key reads its abandon answers whole, in ``state_key``)
# The observer's mirror of the job's reservations, its current reservation, effects, count and first
# payload, and the abandon promises made for the job's identities.
OBSERVER_DETAIL = PerJob(adds="""
for m in {v}.reservations.values():
    part = parts.get(m.key)
    if part is not None:
        job = m.key
        part[{mirror}].append((m.reservation_id.replace(job, ""), m.attempt.replace(job, ""), m.deadline,
                               m.state._value_, m.times_freed))
for e in {v}.effects:
    part = parts.get(e.key)
    if part is not None:
        part[{seen_effects}].append((e.attempt_id.replace(e.key, ""), e.payload.replace(e.key, "")))
""", per_job="""
seen = {v}.current_by_key.get(job)
part[{seen_current}] = seen.replace(job, "") if seen is not None else None
part[{seen_effect_count}] = {v}.effects_per_key.get(job, 0)
seen = {v}.first_payload.get(job)
part[{seen_first_payload}] = seen.replace(job, "") if seen is not None else None
part[{abandoned}] = tuple(sorted(i.replace(job, "") for i in {v}.abandoned if i.partition("#")[0] == job))
""")

OBSERVER_GENERIC = """
key[{mirror}] = frozenset((m.reservation_id, m.state._value_, m.times_freed) for m in {v}.reservations.values())
key[{abandoned}] = frozenset({v}.abandoned)
key[{seen_effects}] = payloads_by_key({v}.effects)
"""


# -- now
NOW_GENERIC = "key[{now}] = {v}"


# -- network
# A collection, not a queue: the rules may deliver any message, and the drain delivers in an order
# computed from the messages themselves. An answer to an attempt no longer waiting for one is dropped
# on arrival, and a registration reaches a destination that keeps no witness in vain: both are left out.
NETWORK_KEY = PerJob(reads="""
commit, ack, register, commit_sent = MessageKind.COMMIT, MessageKind.ACK, MessageKind.REGISTER, Phase.COMMIT_SENT
witness_kept = world.destination.guards.witness
attempts = world.attempts
commits_in_flight = set()
""", adds="""
for m in {v}:
    job, _, number = m.attempt.partition("#")
    part = parts.get(job)
    if part is None:
        continue
    kind = m.kind
    if kind is commit:
        commits_in_flight.add(m.attempt)  # read by the attempts' piece
    elif kind is ack and attempts[m.attempt].phase is not commit_sent:
        continue
    elif kind is register and not witness_kept:
        continue
    part[{messages}].append((kind._value_, number, m.result._value_ if m.result else ""))
""")

NETWORK_DETAIL = PerJob(adds="""
for m in {v}:
    handle = m.attempt
    job = handle.partition("#")[0]
    part = parts.get(job)
    if part is not None:
        part[{messages}].append((m.kind._value_, handle.replace(job, ""), m.result._value_ if m.result else ""))
""")

# ``answer_nobody_waits_for``, written out: an answer to an attempt no longer waiting for one is
# dropped on arrival.
NETWORK_GENERIC = """
ack, commit_sent = MessageKind.ACK, Phase.COMMIT_SENT
key[{network}] = _multiset([
    (m.kind._value_, m.attempt, m.result._value_ if m.result else "")
    for m in {v}
    if m.kind is not ack or world.attempts[m.attempt].phase is commit_sent
])
"""


# -- attempts
# An attempt that is done or crashed, with no commit on its way, is only its number: its future is
# only what its messages do. A failed one moves no more either (the ledger holds what its report
# did); one that gave up on a refusal is finished too unless it may still report the failure. The
# destination's answer counts once it arrived (confirm or confirm_existing); the payload until the
# commit carrying it was delivered.
ATTEMPT_PHASES = """
crashed, done, acked, failed = Phase.CRASHED, Phase.DONE, Phase.ACKED, Phase.FAILED
refused = Phase.DONE if world.config.failures else Phase.REFUSED
unsent = (Phase.RESERVED, Phase.WORKING)  # a tuple: identity before hashing
"""
"""The phases the fast key and the generic key read to reduce an attempt."""

# ``commits_in_flight`` (of the wanted jobs) is collected by the network's piece, which runs first.
ATTEMPTS_KEY = PerJob(reads=ATTEMPT_PHASES, adds="""
for a in {v}.values():
    job, _, number = a.handle.partition("#")
    part = parts.get(job)
    if part is None:
        continue
    in_flight = a.handle in commits_in_flight
    phase = a.phase
    if phase is failed:
        phase = crashed
    if (phase is crashed or phase is done or phase is refused) and not in_flight:
        part[{attempts}].append((number,))
    elif phase is crashed:
        part[{attempts}].append((number, "crashed", a.payload.replace(job, "")))
    else:
        part[{attempts}].append((
            number, phase._value_,
            a.ack._value_ if phase is acked else "",
            a.payload.replace(job, "") if (phase in unsent or in_flight) else "",
        ))
""")

ATTEMPTS_DETAIL = PerJob(adds="""
for a in {v}.values():
    part = parts.get(a.key)
    if part is not None:
        job = a.key
        part[{attempts}].append((
            a.handle.replace(job, ""), a.identity.replace(job, ""), a.reservation_id.replace(job, ""),
            a.payload.replace(job, ""), a.phase._value_, a.ack._value_ if a.ack is not None else "", a.wrote,
        ))
""")

# As in the fast key: a finished or crashed attempt with no commit on its way is only its names
# (``wrote`` only names where a crash was); the answer counts once it arrived, the payload until the
# commit carrying it landed.
ATTEMPTS_GENERIC = ATTEMPT_PHASES + """
commit = MessageKind.COMMIT
commits_in_flight = {{m.attempt for m in world.network if m.kind is commit}}
attempts = []
for a in {v}.values():
    in_flight = a.handle in commits_in_flight
    phase = a.phase
    if phase is failed:
        phase = crashed
    if (phase is crashed or phase is done or phase is refused) and not in_flight:
        attempts.append((a.handle, a.identity, a.reservation_id, "gone"))
    else:
        attempts.append((
            a.handle, a.identity, a.reservation_id, phase._value_,
            a.ack._value_ if phase is acked else "",
            a.payload if (phase in unsent or in_flight) else "", a.wrote,
        ))
key[{attempts}] = frozenset(attempts)
"""


# -- attempts_used (unkeyed, ``WORLD_STATE`` says why)
ATTEMPTS_USED_DETAIL = PerJob(per_job="""
part[{attempts_used}] = {v}[job]
""")


# -- retry_queue
# Retries are taken by job: only their number counts.
RETRY_QUEUE_KEY = PerJob(adds="""
for job in {v}:
    part = parts.get(job)
    if part is not None:
        part[{retries}] += 1
""")

RETRY_QUEUE_DETAIL = PerJob(per_job="""
part[{retries}] = {v}.count(job)
""")

# Retries are taken by job, in any order.
RETRY_QUEUE_GENERIC = "key[{retries}] = _multiset({v}) if {v} else _NONE"


# -- evidence
# A janitor's answer counts for the decision it leads to (``policy.decide`` is pure), and only while
# its reservation is still outcome_unknown (a settle on anything else is refused, and nothing returns
# to outcome_unknown): the ledger's piece reads the answers held for such a reservation, from every
# janitor, as a sorted collection. Which janitor holds which answer does not matter: janitors are
# interchangeable, and their steps on different reservations touch different entries.
EVIDENCE_KEY = PerJob(reads="""
evidence = {v}
""")

# As collections per reservation: which janitor holds an answer, or owes a second step, does not
# change what a step does (``fence.explore.transitions``).
EVIDENCE_DETAIL = PerJob(adds="""
for answers in {v}:
    for rid, found in answers.items():
        job = world.attempts[world.owner_of_reservation[rid]].key
        part = parts.get(job)
        if part is not None:
            part[{answers}].append((rid.replace(job, ""), evidence_token(found)))
""")

# fence's own Evidence is a value and janitors keep no state: its answers count per reservation,
# whichever janitor holds them (as in the fast key). Any other answer object is kept with its janitor.
# With fence's own ledger and policy, an answer held for a reservation that is no longer
# outcome_unknown only leads to a settle the ledger refuses, which changes nothing (as in the fast
# key): decide() is pure, and the ledger is asked nothing else. A user's ledger may accept that
# settle, and a user's policy may act in it. A set, not a list sorted by reservation: a renaming of
# the jobs must be able to order it again.
EVIDENCE_GENERIC = """
held_values = []
held_by_janitor = []
stale_answers_inert = type(world.ledger) is Ledger and type(world.policy) in FENCE_POLICY_TYPES
unknown = ReservationState.OUTCOME_UNKNOWN
for janitor, answers in enumerate({v}):
    for rid, found in answers.items():
        if type(found) is Evidence:
            if stale_answers_inert and world.ledger._reservations[rid].state is not unknown:
                continue
            held_values.append((rid, evidence_token(found)))
        else:
            held_by_janitor.append((janitor, rid, _held_token(found)))
key[{held}] = (_multiset(held_values), frozenset(held_by_janitor))
"""


# -- owner_of_reservation (unkeyed, ``WORLD_STATE`` says why)
OWNER_OF_RESERVATION_DETAIL = PerJob(adds="""
for rid, handle in {v}.items():
    job = handle.partition("#")[0]
    part = parts.get(job)
    if part is not None:
        part[{owners}].append((rid.replace(job, ""), handle.replace(job, "")))
""")


# -- follow_ups
# A user's policy's second step after a release (``after_release``), not yet taken, counts with its
# reservation: taken later, it may act otherwise. Which janitor takes it does not matter (janitors
# are interchangeable). fence's own policies take none.
FOLLOW_UPS_KEY = PerJob(adds="""
for _janitor, rid in {v}:
    job, _, number = rid.partition("/")
    part = parts.get(job)
    if part is not None:
        part[{reservations}].append((number, "follow_up"))
""")

FOLLOW_UPS_DETAIL = PerJob(adds="""
for _janitor, rid in {v}:
    job = world.attempts[world.owner_of_reservation[rid]].key
    part = parts.get(job)
    if part is not None:
        part[{follow_ups}].append(rid.replace(job, ""))
""")

FOLLOW_UPS_GENERIC = "key[{follow_ups}] = _multiset({v}) if {v} else _NONE"


# -- the functions written from the pieces ----------------------------------------------
def per_job_code(fields: tuple, name: str, slots: tuple[Slot, ...], piece: str) -> str:
    """The source of ``name(world, wanted)`` from every field's ``piece`` (``key`` or ``detail``)."""
    index = {slot.name: str(i) for i, slot in enumerate(slots)}
    declared = [(field, getattr(field, piece)) for field in fields if getattr(field, piece) is not None]
    unwritten = [slot.name for slot in slots if not any(
        "{" + slot.name + "}" in part.adds + part.per_job for _field, part in declared)]
    if unwritten:
        raise ValueError(f"{name}: no field's {piece} writes slot(s) {', '.join(unwritten)}")

    def written(field, text: str, indent: str) -> list[str]:
        if not text.strip():
            return []
        try:
            code = text.strip("\n").format(v="world." + field.name, **index)
        except KeyError as unknown:
            raise ValueError(f"{field.name}'s {piece} names {unknown}, not a slot of {name}") from None
        return [f"{indent}# {field.name}", textwrap.indent(code, indent)]

    close = ", ".join(SLOT_KINDS[slot.kind][1].format(i=i) for i, slot in enumerate(slots))
    each_job = [line for field, part in declared for line in written(field, part.per_job, "        ")]
    return "\n".join([
        f"def {name}(world, wanted):",
        "    now = world.now",
        f"    parts = {{job: [{', '.join(SLOT_KINDS[slot.kind][0] for slot in slots)}] for job in wanted}}",
        *[line for field, part in declared for line in written(field, part.reads, "    ")],
        *[line for field, part in declared for line in written(field, part.adds, "    ")],
        *(["    for job, part in parts.items():", *each_job] if each_job else []),
        f"    return {{job: ({close}) for job, part in parts.items()}}",
        "",
    ])


def generic_key_code(fields: tuple) -> str:
    """The source of ``generic_parts(world)``: every field's ``generic_key`` piece, in the order of its first slot."""
    index = {name: str(i) for i, name in enumerate(GENERIC_SLOTS)}
    declared = [field for field in fields if field.generic_key]
    unwritten = [name for name in GENERIC_SLOTS if not any("{" + name + "}" in f.generic_key for f in declared)]
    if unwritten:
        raise ValueError(f"generic_parts: no field's generic_key sets slot(s) {', '.join(unwritten)}")

    def first_slot(field) -> int:
        return min(i for i, name in enumerate(GENERIC_SLOTS) if "{" + name + "}" in field.generic_key)

    lines = ["def generic_parts(world):", f"    key = [None] * {len(GENERIC_SLOTS)}"]
    for field in sorted(declared, key=first_slot):  # today's order of reading: a plug-in's snapshots last
        try:
            code = field.generic_key.strip("\n").format(v="world." + field.name, **index)
        except KeyError as unknown:
            raise ValueError(f"{field.name}'s generic_key names {unknown}, not a slot of generic_parts") from None
        lines += [f"    # {field.name}", textwrap.indent(code, "    ")]
    return "\n".join([*lines, "    return tuple(key)", ""])
