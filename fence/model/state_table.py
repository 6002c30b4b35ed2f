"""The state table: every field of a World declared once, and the code derived from it.

Theory of operation
-------------------
A World's fields used to be listed by hand wherever the world is copied or read
whole: its field-by-field copy, the worker side both copies share, the drain's
fingerprint, the explorer's whole state, the per-job parts of the explorer's
key. A field added to one list and forgotten in another is a soundness bug (a
fixed point or a key that merges states that differ). ``WORLD_STATE`` is the
one list: each ``Field`` says how the field is copied, whether it is state (and
if not, why), how the drain's fingerprint reads it (or why it need not),
whether its entries are each one job's, and what it adds to the explorer's
keys (pieces of code in ``fence.model.key_pieces``, each with the reason the
key may merge what it merges). Derived from it:

* ``World``'s field-by-field copy and the worker side (``_copy_worker_side``),
  and ``World.fingerprint``: functions written out from the table and compiled
  once when ``fence.model.world`` is imported, as ``dataclasses`` writes an
  ``__init__``. They are on the explorer's hot path, where a loop over the
  table per copy would cost more than the copy; compiled, they are the code a
  hand would write.
* the explorer's per-job key parts (``job_parts``), the step memo's per-job
  details (``job_details``) and the generic key's parts (``generic_parts``),
  written from each field's ``key``, ``detail`` and ``generic_key`` pieces and
  compiled once when ``fence.explore.state_key`` is imported
  (``compile_key_code``). A per-job field that says neither what it adds
  to a job's key part nor why the key need not read it (``unkeyed``), or that
  adds nothing to the detail or the generic key, is refused as the table is
  made;
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
from dataclasses import dataclass

from fence.model.key_pieces import (
    ATTEMPTS_DETAIL, ATTEMPTS_GENERIC, ATTEMPTS_KEY, ATTEMPTS_USED_DETAIL, DESTINATION_DETAIL, DESTINATION_GENERIC,
    DESTINATION_KEY, DETAIL_SLOTS, EVIDENCE_DETAIL, EVIDENCE_GENERIC, EVIDENCE_KEY, FOLLOW_UPS_DETAIL,
    FOLLOW_UPS_GENERIC, FOLLOW_UPS_KEY, KEY_SLOTS, LEDGER_DETAIL, LEDGER_GENERIC, LEDGER_KEY, NETWORK_DETAIL,
    NETWORK_GENERIC, NETWORK_KEY, NOW_GENERIC, OBSERVER_DETAIL, OBSERVER_GENERIC, OWNER_OF_RESERVATION_DETAIL, POLICY_GENERIC,
    RETRY_QUEUE_DETAIL, RETRY_QUEUE_GENERIC, RETRY_QUEUE_KEY, PerJob, generic_key_code, per_job_code,
)


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
    generic_key: str = ""
    """What it sets of the generic key (``GENERIC_SLOTS``): statements, ``key[{slot}] = ...``, over ``{v}``;
    empty for a per-job field only if it is ``unkeyed`` (for the same reason)."""

    def __post_init__(self) -> None:
        if self.not_state and (self.per_job or self.fingerprint or self.unfingerprinted or self.key or self.detail):
            raise ValueError(f"{self.name}: a field that is not state is neither per job, fingerprinted nor keyed")
        if not self.not_state and bool(self.fingerprint) == bool(self.unfingerprinted):
            raise ValueError(f"{self.name}: state is fingerprinted, or says why not (unfingerprinted), not both")
        if self.per_job and bool(self.key) == bool(self.unkeyed):
            raise ValueError(
                f"{self.name}: a per-job field says what it adds to a job's key part (key=PerJob(...)), "
                "or why the key need not read it (unkeyed=...), not both")
        if self.per_job and not (self.generic_key or self.unkeyed):
            raise ValueError(f"{self.name}: a per-job field says what it sets of the generic key (generic_key=...)")
        if self.per_job and self.detail is None:
            raise ValueError(f"{self.name}: a per-job field says what it adds to a job's memo detail (detail=PerJob(...))")


SAME = "{v}"
"""The copy holds the same object: a value, or something no step changes."""

WORLD_STATE: tuple[Field, ...] = (
    Field("policy", SAME, generic=True, generic_key=POLICY_GENERIC,
          not_state="the walk's policy, the same in every state (fence's policies are frozen; "
                    "a user's keyed by the twins is checked to keep nothing)"),
    Field("config", SAME, not_state="the walk's bounds, the same in every state", generic=True),
    Field("destination", "{v}.clone()", per_job=True, fingerprint="destination_snapshot({v})", generic=True,
          key=DESTINATION_KEY, detail=DESTINATION_DETAIL, generic_key=DESTINATION_GENERIC),
    Field("ledger", "{v}.copy()", per_job=True, fingerprint="ledger_snapshot({v})", generic=True,
          key=LEDGER_KEY, detail=LEDGER_DETAIL, generic_key=LEDGER_GENERIC),
    # Not per job: the key reads its abandon answers whole, and the rest follows from fence's parts.
    Field("observer", "{v}.copy(findings=history)", generic=True, detail=OBSERVER_DETAIL, generic_key=OBSERVER_GENERIC,
          unfingerprinted="it records what the ledger, the destination and the network did: a round "
                          "that changes it changes them"),
    Field("policy_twins", SAME,
          not_state="the walk's checks of a user's policy (fence.model.policy_twins), the same in every state"),
    Field("_janitors", "None", generic=True,
          not_state="references to the ledger, the destination and the policy; janitors keep no state "
                    "(made on first use: most copies take a step no janitor takes part in)"),
    Field("now", SAME, fingerprint="{v}", generic_key=NOW_GENERIC),
    Field("jobs", SAME, not_state="the job names, the same in every state"),
    # Before attempts: the attempts' key piece reads the commits in flight the network's piece collects.
    Field("network", "list({v})", per_job=True,  # Message is frozen
          fingerprint="tuple(sorted((m.kind.value, m.attempt, m.result.value if m.result else '') for m in {v}))",
          key=NETWORK_KEY, detail=NETWORK_DETAIL, generic_key=NETWORK_GENERIC),
    Field("attempts", "{{handle: _copy_attempt(a) for handle, a in {v}.items()}}", per_job=True,
          fingerprint="tuple((a.handle, a.phase.value, a.ack.value if a.ack else None, a.wrote, a.payload) "
                      "for a in {v}.values())", key=ATTEMPTS_KEY, detail=ATTEMPTS_DETAIL,
          generic_key=ATTEMPTS_GENERIC),
    Field("attempts_used", "dict({v})", per_job=True,
          unfingerprinted="it counts attempts made, each of which adds to ``attempts``",
          unkeyed="it counts the job's attempts, each of which its key part holds (a finished one as its number)",
          detail=ATTEMPTS_USED_DETAIL),
    Field("retry_queue", "list({v})", per_job=True, fingerprint="tuple({v})",
          key=RETRY_QUEUE_KEY, detail=RETRY_QUEUE_DETAIL, generic_key=RETRY_QUEUE_GENERIC),
    Field("evidence", "[dict(e) for e in {v}]", per_job=True, generic=True,  # fence's Evidence is frozen
          fingerprint="tuple(tuple(sorted(e.items(), key=lambda kv: kv[0])) for e in {v})",
          key=EVIDENCE_KEY, detail=EVIDENCE_DETAIL, generic_key=EVIDENCE_GENERIC),
    Field("owner_of_reservation", "dict({v})", per_job=True,
          unfingerprinted="it names each reservation's attempt, made with it (``attempts``)",
          unkeyed="reservation job/rN is made by attempt job#N (``World.new_attempt`` counts both only when "
                  "the ledger reserves), so which attempt owns a reservation is in the names the key holds",
          detail=OWNER_OF_RESERVATION_DETAIL),
    Field("follow_ups", "list({v})", per_job=True, fingerprint="tuple({v})",
          key=FOLLOW_UPS_KEY, detail=FOLLOW_UPS_DETAIL, generic_key=FOLLOW_UPS_GENERIC),
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


def compile_key_code(namespace: dict, fields: tuple[Field, ...] = WORLD_STATE) -> dict[str, object]:
    """``job_parts(world, wanted)``, ``job_details(world, wanted)`` and ``generic_parts(world)``, compiled once.

    The first two return a dict from each wanted job to its part (``KEY_SLOTS``) or
    detail (``DETAIL_SLOTS``), made by every field's ``key`` or ``detail`` piece in
    table order; the third the generic key's parts (``GENERIC_SLOTS``), from every
    field's ``generic_key``. ``namespace`` holds what the pieces name (the enums,
    ``evidence_token``, the snapshot readers); ``fields`` is the table (another only in tests).
    """
    source = key_code(fields)
    scope = dict(namespace)
    exec(compile(source, "<fence.model.state_table: the explorer's key parts and memo details>", "exec"), scope)
    return {name: scope[name] for name in ("job_parts", "job_details", "generic_parts")}


def key_code(fields: tuple[Field, ...] = WORLD_STATE) -> str:
    """The source ``compile_key_code`` compiles (print it to read the key parts, details and generic key)."""
    return "\n".join([
        per_job_code(fields, "job_parts", KEY_SLOTS, "key"),
        per_job_code(fields, "job_details", DETAIL_SLOTS, "detail"),
        generic_key_code(fields),
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
