"""What a target's ledger records of each reservation it took, and how a record stands in a snapshot.

A record (``Taken``, or anything with the four fields of ``TakenReservation``)
names the reservation and what the system called the job it took: a message
id, a row, a claim token. Some of those the library draws by the path taken
(a uuid4 per publish, a worker id): equal states reached by different paths
hold different ones, and the explorer must see them as one state. A record
declares such a field ``library_id()``, and ``record_snapshot`` names it by
its rank (``ranked_ids``), the same renaming the ledger's snapshot gives the
server's image, so that an id in a record and the same id in a key agree. A
field that decides no answer beside the others (the message's bytes as it was
fetched, which the library finds again by its id) is ``not_in_snapshot()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Callable, Iterable, Protocol

SNAPSHOT = "fence.snapshot"
"""The field metadata key a declaration below sets: how the field stands in a snapshot."""
RANKED, LEFT_OUT = "ranked", "left out"


def library_id(**options):
    """A record field holding an id the library drew (a uuid, a worker id): named by rank in a snapshot."""
    return field(**options, metadata={SNAPSHOT: RANKED})


def not_in_snapshot(**options):
    """A record field that decides no answer beside the record's other fields: left out of a snapshot."""
    return field(**options, metadata={SNAPSHOT: LEFT_OUT})


class TakenReservation(Protocol):
    """A target's own record of one reservation it took (a fetch, a pick, a delivery)."""

    reservation_id: str
    key: str
    owner: str
    deadline: float


@dataclass(frozen=True)
class Taken:
    """A record of one reservation to subclass (``TakenReservation``): a frozen dataclass whose subclass adds
    what the system calls the job it took (a message id, a row, a claim token) after these four fields,
    declaring an id the library drew ``library_id()`` and what decides nothing ``not_in_snapshot()``."""

    reservation_id: str
    key: str
    owner: str
    deadline: float


def declares_snapshot(record: object) -> bool:
    """Does ``record``'s class declare how a field of it stands in a snapshot (``library_id``, ...)?"""
    return is_dataclass(record) and any(SNAPSHOT in f.metadata for f in fields(record))


def record_snapshot(record: object, canonical: Callable[[object], object]) -> object:
    """``record`` as a snapshot holds it: the record itself unless its class declares fields (then the tuple
    of its fields in order, each ``library_id`` through ``canonical``, each ``not_in_snapshot`` left out)."""
    if not declares_snapshot(record):
        return record
    kept = [(f.metadata.get(SNAPSHOT), getattr(record, f.name)) for f in fields(record)]
    return tuple(canonical(value) if how == RANKED else value for how, value in kept if how != LEFT_OUT)


# -- ids that depend on the path taken ------------------------------------------------------
UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A uuid4 as text: a delivery tag, a task or message id, a worker id."""


def ranked_ids(
    identity: re.Pattern = UUID, *, erase: Iterable[tuple[re.Pattern, bytes]] = (),
) -> Callable[[object], object]:
    """A renaming for one ``snapshot()``: each match of ``identity`` named ``<idN>`` by the rank of its first
    appearance, in bytes, in str and through tuples; each ``erase`` (pattern, replacement) applied first (what
    decides no answer, such as an instant nothing compares with the clock). Equal states reached by
    different paths then snapshot alike; call it on fence's own records first, so that ranks follow them."""
    ranks: dict[bytes, int] = {}

    def canonical(value):
        if isinstance(value, bytes):
            for pattern, replacement in erase:
                value = pattern.sub(replacement, value)
            return identity.sub(lambda found: b"<id%d>" % ranks.setdefault(found.group(0), len(ranks)), value)
        if isinstance(value, str):
            return canonical(value.encode()).decode()
        return tuple(canonical(part) for part in value) if isinstance(value, tuple) else value

    return canonical


__all__ = ["UUID", "Taken", "TakenReservation", "declares_snapshot", "library_id", "not_in_snapshot", "ranked_ids",
           "record_snapshot"]
