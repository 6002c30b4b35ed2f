"""The state table: every field of a World declared once, and the code derived from it.

Theory of operation
-------------------
A World's fields used to be listed by hand wherever the world is copied or read
whole: its field-by-field copy, the worker side both copies share, the drain's
fingerprint, the explorer's whole state, the per-job parts of the explorer's
key. A field added to one list and forgotten in another is a soundness bug (a
fixed point or a key that merges states that differ). ``WORLD_STATE`` is the
one list: each ``Field`` says how the field is copied, whether it is state (and
if not, why), how the drain's fingerprint reads it (or why it need not), and
whether its entries are each one job's. Derived from it:

* ``World``'s field-by-field copy and the worker side (``_copy_worker_side``),
  and ``World.fingerprint``: functions written out from the table and compiled
  once when ``fence.model.world`` is imported, as ``dataclasses`` writes an
  ``__init__``. They are on the explorer's hot path, where a loop over the
  table per copy would cost more than the copy; compiled, they are the code a
  hand would write.
* ``NOT_STATE``, what ``fence.explore.whole_state`` leaves out of a world and
  of fence's parts;
* ``job_projection(world, job)``: one job's entries of every per-job field,
  which tests hold the explorer's memoised per-job key parts against (a step of
  one job leaves every other job's projection as it was, and a job's key part
  is a function of its projection and the clock).

A World that holds a field the table does not declare refuses to be made
(``undeclared_fields``): an undeclared field would not be copied.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    """One field of a World, as every reader and copier of a world needs to know it."""

    name: str
    copy: str
    """The copy's value, as a Python expression: ``{v}`` is the field's value in the world
    copied (a ``str.format`` field: other braces are doubled); ``history`` (whether the copy
    keeps the trace and findings) is in scope."""
    not_state: str = ""
    """Why the field is not state (the same in every state, history, or a cache); empty if it is state."""
    per_job: bool = False
    """Each of its entries (or, for a part, each entry of its records) is one job's: a step of one job
    changes no other job's entries, which the explorer's per-job key memo relies on."""
    fingerprint: str = ""
    """How ``World.fingerprint`` reads it, as an expression of ``{v}``; empty for a field it leaves out."""
    unfingerprinted: str = ""
    """For state the fingerprint leaves out: why a drain round that changes it changes a fingerprinted one too."""
    generic: bool = False
    """Copied by ``World._generic_clone`` itself (a user's part, or one a user's part can point at),
    not by the worker side both copies share."""
    key: PerJob | None = None
    """What it adds to each job's part of the explorer's key (``KEY_SLOTS``); None for a field that adds nothing."""
    unkeyed: str = ""
    """For a per-job field with no ``key``: why the key need not read it (a function of what the key holds)."""
    detail: PerJob | None = None
    """What it adds to each job's step-memo detail (``DETAIL_SLOTS``): everything it holds about the job."""

    def __post_init__(self) -> None:
        if self.not_state and (self.per_job or self.fingerprint or self.unfingerprinted or self.key or self.detail):
            raise ValueError(f"{self.name}: a field that is not state is neither per job, fingerprinted nor keyed")
        if not self.not_state and bool(self.fingerprint) == bool(self.unfingerprinted):
            raise ValueError(f"{self.name}: state is fingerprinted, or says why not (unfingerprinted), not both")
        if self.per_job and bool(self.key) == bool(self.unkeyed):
            raise ValueError(
                f"{self.name}: a per-job field says what it adds to a job's key part (key=PerJob(...)), "
                "or why the key need not read it (unkeyed=...), not both")
        if self.per_job and self.detail is None:
            raise ValueError(f"{self.name}: a per-job field says what it adds to a job's memo detail (detail=PerJob(...))")


@dataclass(frozen=True)
class PerJob:
    """What one field adds to each wanted job's key part or memo detail, as code the made function runs.

    Each piece is Python statements, a ``str.format`` string: ``{v}`` is the field's
    value in the world read (``world.<field>``), ``{slot}`` the index of a slot of the
    part (``KEY_SLOTS``, ``DETAIL_SLOTS``); other braces are doubled. ``world``, ``now``
    (the clock) and ``parts`` (each wanted job's list of slots, by name) are in scope.
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


# -- what each per-job field adds to a job's key part, and why the key may merge what it merges --
# (``fence.explore.walk``, "The state key"; ``congruence.key_congruence`` holds the key against
# ``whole_state``). Enum members are compared by identity (``is``) and read as ``_value_``: an
# Enum's hash and its ``value`` property are Python-level calls, and a key is made per transition.

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
        held = held_answers.get(x.reservation_id)
        part[{reservations}].append((number, state._value_, _sorted_tuple([evidence_token(found) for found in held])
                                     if held else ()))
    else:
        part[{reservations}].append((number, state._value_))
""")

# A janitor's answer counts for the decision it leads to (``policy.decide`` is pure), and only while
# its reservation is still outcome_unknown (a settle on anything else is refused, and nothing returns
# to outcome_unknown): the ledger's piece reads it there. Which janitor holds which answer does not
# matter: janitors are interchangeable, and their steps on different reservations touch different entries.
EVIDENCE_KEY = PerJob(reads="""
held_answers = dict()
for answers in {v}:
    for rid, found in answers.items():
        held_answers.setdefault(rid, []).append(found)
""")

# An attempt that is done or crashed (a failed one moves no more either; one that gave up on a
# refusal is finished too unless it may still report the failure), with no commit on its way, is
# only its number: its future is only what its messages do. The destination's answer counts once
# it arrived (confirm or confirm_existing); the payload until the commit carrying it was delivered.
ATTEMPTS_KEY = PerJob(reads="""
commit = MessageKind.COMMIT
commits_in_flight = {{m.attempt for m in world.network if m.kind is commit}}
crashed, done, acked, failed = Phase.CRASHED, Phase.DONE, Phase.ACKED, Phase.FAILED
refused = Phase.DONE if world.config.failures else Phase.REFUSED
unsent = (Phase.RESERVED, Phase.WORKING)  # a tuple: identity before hashing
""", adds="""
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

# Retries are taken by job: only their number counts.
RETRY_QUEUE_KEY = PerJob(adds="""
for job in {v}:
    part = parts.get(job)
    if part is not None:
        part[{retries}] += 1
""")

# A collection, not a queue: the rules may deliver any message, and the drain delivers in an order
# computed from the messages themselves. An answer to an attempt no longer waiting for one is dropped
# on arrival, and a registration reaches a destination that keeps no witness in vain: both are left out.
NETWORK_KEY = PerJob(reads="""
ack, register, commit_sent = MessageKind.ACK, MessageKind.REGISTER, Phase.COMMIT_SENT
witness_kept = world.destination.guards.witness
""", adds="""
for m in {v}:
    job, _, number = m.attempt.partition("#")
    part = parts.get(job)
    if part is None:
        continue
    kind = m.kind
    if kind is ack and world.attempts[m.attempt].phase is not commit_sent:
        continue
    if kind is register and not witness_kept:
        continue
    part[{messages}].append((kind._value_, number, m.result._value_ if m.result else ""))
""")

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


# -- what each field adds to a job's step-memo detail: everything, names relative to the job, nothing merged --
# (``fence.explore.transitions`` says why the detail is complete.)
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

ATTEMPTS_USED_DETAIL = PerJob(per_job="""
part[{attempts_used}] = {v}[job]
""")

RETRY_QUEUE_DETAIL = PerJob(per_job="""
part[{retries}] = {v}.count(job)
""")

NETWORK_DETAIL = PerJob(adds="""
for m in {v}:
    handle = m.attempt
    job = handle.partition("#")[0]
    part = parts.get(job)
    if part is not None:
        part[{messages}].append((m.kind._value_, handle.replace(job, ""), m.result._value_ if m.result else ""))
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

FOLLOW_UPS_DETAIL = PerJob(adds="""
for _janitor, rid in {v}:
    job = world.attempts[world.owner_of_reservation[rid]].key
    part = parts.get(job)
    if part is not None:
        part[{follow_ups}].append(rid.replace(job, ""))
""")

OWNERS_DETAIL = PerJob(adds="""
for rid, handle in {v}.items():
    job = handle.partition("#")[0]
    part = parts.get(job)
    if part is not None:
        part[{owners}].append((rid.replace(job, ""), handle.replace(job, "")))
""")

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


SAME = "{v}"
"""The copy holds the same object: a value, or something no step changes."""

WORLD_STATE: tuple[Field, ...] = (
    Field("policy", SAME, generic=True,
          not_state="the walk's policy, the same in every state (fence's policies are frozen; "
                    "a user's keyed by the twins is checked to keep nothing)"),
    Field("config", SAME, not_state="the walk's bounds, the same in every state", generic=True),
    Field("destination", "{v}.clone()", per_job=True, fingerprint="destination_snapshot({v})", generic=True,
          key=DESTINATION_KEY, detail=DESTINATION_DETAIL),
    Field("ledger", "{v}.copy()", per_job=True, fingerprint="ledger_snapshot({v})", generic=True,
          key=LEDGER_KEY, detail=LEDGER_DETAIL),
    # Not per job: the key reads its abandon answers whole, and the rest follows from fence's parts.
    Field("observer", "{v}.copy(findings=history)", generic=True, detail=OBSERVER_DETAIL,
          unfingerprinted="it records what the ledger, the destination and the network did: a round "
                          "that changes it changes them"),
    Field("policy_twins", SAME,
          not_state="the walk's checks of a user's policy (fence.model.policy_twins), the same in every state"),
    Field("_janitors", "None", generic=True,
          not_state="references to the ledger, the destination and the policy; janitors keep no state "
                    "(made on first use: most copies take a step no janitor takes part in)"),
    Field("now", SAME, fingerprint="{v}"),
    Field("jobs", SAME, not_state="the job names, the same in every state"),
    Field("attempts", "{{handle: _copy_attempt(a) for handle, a in {v}.items()}}", per_job=True,
          fingerprint="tuple((a.handle, a.phase.value, a.ack.value if a.ack else None, a.wrote, a.payload) "
                      "for a in {v}.values())", key=ATTEMPTS_KEY, detail=ATTEMPTS_DETAIL),
    Field("attempts_used", "dict({v})", per_job=True,
          unfingerprinted="it counts attempts made, each of which adds to ``attempts``",
          unkeyed="it counts the job's attempts, each of which its key part holds (a finished one as its number)",
          detail=ATTEMPTS_USED_DETAIL),
    Field("retry_queue", "list({v})", per_job=True, fingerprint="tuple({v})",
          key=RETRY_QUEUE_KEY, detail=RETRY_QUEUE_DETAIL),
    Field("network", "list({v})", per_job=True,  # Message is frozen
          fingerprint="tuple(sorted((m.kind.value, m.attempt, m.result.value if m.result else '') for m in {v}))",
          key=NETWORK_KEY, detail=NETWORK_DETAIL),
    Field("evidence", "[dict(e) for e in {v}]", per_job=True, generic=True,  # fence's Evidence is frozen
          fingerprint="tuple(tuple(sorted(e.items(), key=lambda kv: kv[0])) for e in {v})",
          key=EVIDENCE_KEY, detail=EVIDENCE_DETAIL),
    Field("owner_of_reservation", "dict({v})", per_job=True,
          unfingerprinted="it names each reservation's attempt, made with it (``attempts``)",
          unkeyed="reservation job/rN is made by attempt job#N (``World.new_attempt`` counts both only when "
                  "the ledger reserves), so which attempt owns a reservation is in the names the key holds",
          detail=OWNERS_DETAIL),
    Field("follow_ups", "list({v})", per_job=True, fingerprint="tuple({v})",
          key=FOLLOW_UPS_KEY, detail=FOLLOW_UPS_DETAIL),
    Field("trace", "list({v}) if history else []", not_state="history: what happened, not what can happen next"),
    Field("draining", SAME, unfingerprinted="it is set once, before a drain's first fingerprint"),
    # apply() drops the cache before it changes anything, so the cached lists are never changed.
    Field("_enabled_cache", "dict({v}) if {v} is not None else None",
          not_state="a cache of the enabled actions, computed from the state"),
    Field("job_memo", "dict({v})", generic=True,
          not_state="a cache of key parts and memo details, computed from the state"),
)
"""Every field of a World (see the module doc)."""

PART_NOT_STATE: dict[str, dict[str, str]] = {
    "Ledger": {
        "capacity": "the walk's bound, the same in every state",
        "slots": "a constant of the ledger's kind",
        "_shared": "copy-on-write bookkeeping between clones",
    },
    "TicketService": {"_shared": "copy-on-write bookkeeping between clones"},
    "Observer": {
        "capacity": "the walk's bound, the same in every state",
        "slots": "a constant of the ledger's kind",
        "_shared": "copy-on-write bookkeeping between clones",
        "findings": "history: what broke, judged per transition",
        "reached": "history: the dangers visited, counted per transition",
    },
}
"""The fields of fence's parts that are not state, by class name, and why."""

NOT_STATE: dict[str, dict[str, str]] = {
    "World": {field.name: field.not_state for field in WORLD_STATE if field.not_state},
    **PART_NOT_STATE,
}
"""What is not state, of a World (from ``WORLD_STATE``) and of fence's parts, and why."""

DECLARED = frozenset(field.name for field in WORLD_STATE)


def undeclared_fields(world) -> list[str]:
    """The fields ``world`` holds that ``WORLD_STATE`` does not declare (none, in a world fence made)."""
    return sorted(vars(world).keys() - DECLARED)


def undeclared_problem(world) -> str:
    return (
        f"World field(s) {', '.join(undeclared_fields(world))} not declared in WORLD_STATE "
        "(fence.model.state_table): declare how each is copied and whether it is state"
    )


# -- the code derived from the table ------------------------------------------------
def compile_world_code(namespace: dict) -> dict[str, object]:
    """The copying and fingerprinting functions of a World, written from ``WORLD_STATE`` and compiled once.

    ``namespace`` holds what the table's expressions name (``World``, ``_copy_attempt``,
    the snapshot readers). Returns ``copy_fields(self, history)`` (every field, fence's
    own parts), ``copy_worker_side(self, other, history)`` (the fields both copies
    share) and ``fingerprint(self)``.
    """
    source = world_code()
    scope = dict(namespace)
    exec(compile(source, "<fence.model.state_table: World's copy and fingerprint>", "exec"), scope)
    return {name: scope[name] for name in ("copy_fields", "copy_worker_side", "fingerprint")}


def world_code() -> str:
    """The source ``compile_world_code`` compiles (print it to read the copy a World makes)."""

    def assign(field: Field) -> str:
        return f"    other.{field.name} = {field.copy.format(v='self.' + field.name)}"

    fingerprinted = [field.fingerprint.format(v="self." + field.name) for field in WORLD_STATE if field.fingerprint]
    return "\n".join([
        "def copy_fields(self, history):",
        "    other = World.__new__(World)",
        *[assign(field) for field in WORLD_STATE],
        "    return other",
        "",
        "def copy_worker_side(self, other, history):",
        *[assign(field) for field in WORLD_STATE if not field.generic],
        "",
        "def fingerprint(self):",
        "    return (",
        *[f"        {reading}," for reading in fingerprinted],
        "    )",
        "",
    ])


def compile_per_job_code(namespace: dict) -> dict[str, object]:
    """``job_parts(world, wanted)`` and ``job_details(world, wanted)``, written from the table and compiled once.

    Each returns a dict from each wanted job to its part (``KEY_SLOTS``) or detail
    (``DETAIL_SLOTS``), made by every field's ``key`` or ``detail`` piece in table
    order. ``namespace`` holds what the pieces name (the enums, ``evidence_token``,
    ``_sorted_tuple``).
    """
    source = per_job_code("job_parts", KEY_SLOTS, "key") + "\n" + per_job_code("job_details", DETAIL_SLOTS, "detail")
    scope = dict(namespace)
    exec(compile(source, "<fence.model.state_table: the per-job key parts and memo details>", "exec"), scope)
    return {name: scope[name] for name in ("job_parts", "job_details")}


def per_job_code(name: str, slots: tuple[Slot, ...], piece: str) -> str:
    """The source of ``name(world, wanted)`` from every field's ``piece`` (``key`` or ``detail``)."""
    index = {slot.name: str(i) for i, slot in enumerate(slots)}
    declared = [(field, getattr(field, piece)) for field in WORLD_STATE if getattr(field, piece) is not None]
    unwritten = [slot.name for slot in slots if not any(
        "{" + slot.name + "}" in part.adds + part.per_job for _field, part in declared)]
    if unwritten:
        raise ValueError(f"{name}: no field's {piece} writes slot(s) {', '.join(unwritten)}")

    def written(field: Field, text: str, indent: str) -> list[str]:
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


# -- one job's part of the state ---------------------------------------------------
_JOB_NAME = re.compile(r"job\d+")
"""How the model names jobs (``World.jobs``); attempts are ``job#n``, reservations ``job/n``."""


def job_projection(world, job: str) -> tuple:
    """``job``'s entries of every per-job field of ``world``, as one hashable value.

    A per-job field's entries (a dict's items, a list's or a set's members, and
    a part's records, field by field) each name one job; entries are written
    as their ``repr``. An entry that names no job, or several, raises: the
    field is not per job, and the table says it is.
    """
    return tuple(
        (field.name, _entries(getattr(world, field.name), job, field.name)) for field in WORLD_STATE if field.per_job
    )


def _entries(value, job: str, where: str) -> object:
    kind = type(value)
    if isinstance(value, dict):
        return tuple(sorted(text for text in map(repr, value.items()) if _belongs(text, job, where)))
    if kind is list and value and all(isinstance(item, dict) for item in value):  # evidence: a dict per janitor
        return tuple(_entries(item, job, f"{where}[{n}]") for n, item in enumerate(value))
    if kind is list or kind is tuple:
        return tuple(text for text in map(repr, value) if _belongs(text, job, where))
    if kind is set or kind is frozenset:
        return tuple(sorted(text for text in map(repr, value) if _belongs(text, job, where)))
    if hasattr(value, "__dict__") and type(value).__module__.startswith("fence."):
        left_out = PART_NOT_STATE.get(kind.__name__, {})
        return tuple(
            (name, _entries(part, job, f"{where}.{name}") if isinstance(part, (dict, list, set)) else repr(part))
            for name, part in sorted(vars(value).items()) if name not in left_out
        )
    raise TypeError(f"{where}: a {kind.__qualname__} has no entries to tell apart by job")


def _belongs(text: str, job: str, where: str) -> bool:
    named = set(_JOB_NAME.findall(text))
    if len(named) != 1:
        raise ValueError(f"{where} is declared per job, but its entry {text} names {sorted(named) or 'no job'}")
    return job in named
