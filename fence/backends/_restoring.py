"""fence's SQL ledger and destination, restorable: what the explorer copies on a real database.

``SqlLedger`` and ``SqlDestination`` unchanged, with ``fence.model.restore``'s two
methods added: a copy is its image of the tables it keeps (the ledger:
``fence_reservations`` and ``fence_keys``; the destination: ``fence_effects``
and ``fence_attempts``) and the state of their id sequences, and before each
call it makes sure the database holds its image. ``fence_settings`` is in
neither image: the two constructors write it once, the same for every world of
one storage, and nothing else changes it.

Each class's ``snapshot()`` is computed from its image (no query) in the form
of the class it extends, with what else decides an answer added; the ids of
rows (``seq``) and the sequences are left out, since only their order decides
anything (effects are numbered by landing order) and the next id is always the
largest yet.
"""

from __future__ import annotations

import json

from fence.model.destination import Guards, payloads_by_key
from fence.model.restore import Restorable, Restorer, reads, writes
from fence.backends._sql import SqlDestination, SqlLedger
from fence.backends._store import POSTGRES, SqlStore

_SEQUENCED = {"fence_reservations": "seq", "fence_effects": "seq"}
"""Tables whose ``seq`` is an insertion-ordered id (PostgreSQL: an identity; SQLite: the rowid)."""


class TablesImage:
    """Rows of some of fence's tables, and their sequences, as a value: dump and load on one store.

    An image is ``(rows, server_side)``: ``rows`` per table as tuples in the
    table's column order (what ``snapshot()`` reads), and on PostgreSQL the same
    rows as JSON text with each sequence's state, so that a dump and a load are
    one round trip each (on SQLite, in process, the rows alone: a rowid is the
    largest yet plus one, so the rows decide it).
    """

    def __init__(self, store: SqlStore, tables: tuple[tuple[str, str], ...]) -> None:
        self.store = store
        self.tables = tables
        """(table, ORDER BY columns) in the order a load inserts them."""
        self.columns = {table: [column[0] for column in store._connection.execute(
            f"SELECT * FROM {table} LIMIT 0").description] for table, _ in tables}
        self.sequences: dict[str, str] = {}
        if store.dialect is POSTGRES:
            for table, _ in tables:
                if table in _SEQUENCED:
                    (name,) = store.one("SELECT pg_get_serial_sequence(?, ?)", (table, _SEQUENCED[table]))
                    self.sequences[table] = name
            texts = ", ".join(
                f"(SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY {order}), '[]') FROM {table} t)::text"
                for table, order in tables
            )
            states = ", ".join(
                f"(SELECT jsonb_build_array(last_value, is_called) FROM {name})::text" for name in self.sequences.values()
            )
            self._dump_query = f"SELECT {texts}" + (f", {states}" if states else "")

    def dump(self) -> tuple:
        store = self.store
        if store.dialect is not POSTGRES:
            return (tuple(tuple(tuple(row) for row in store.rows(f"SELECT * FROM {table} ORDER BY {order}"))
                          for table, order in self.tables), None)
        found = store.one(self._dump_query)
        texts, states = found[:len(self.tables)], found[len(self.tables):]
        rows = tuple(
            tuple(tuple(row[column] for column in self.columns[table]) for row in json.loads(text))
            for (table, _), text in zip(self.tables, texts)
        )
        return (rows, (tuple(texts), tuple(states)))

    def load(self, image: tuple) -> None:
        rows, server_side = image
        store = self.store
        if store.dialect is not POSTGRES:
            with store.write():
                for table, _ in reversed(self.tables):
                    store.run(f"DELETE FROM {table}")
                for (table, _), table_rows in zip(self.tables, rows):
                    for row in table_rows:
                        store.run(f"INSERT INTO {table} VALUES ({', '.join('?' for _ in row)})", row)
            return
        texts, states = server_side
        statements = ["BEGIN"] + [f"DELETE FROM {table}" for table, _ in reversed(self.tables)]
        for (table, _), text in zip(self.tables, texts):
            overriding = " OVERRIDING SYSTEM VALUE" if table in self.sequences else ""
            statements.append(f"INSERT INTO {table}{overriding} SELECT * FROM "
                              f"jsonb_populate_recordset(NULL::{table}, {_literal(text)}::jsonb)")
        for name, state in zip(self.sequences.values(), states):
            last, called = json.loads(state)
            statements.append(f"SELECT setval({_literal(name)}, {int(last)}, {'true' if called else 'false'})")
        statements.append("COMMIT")
        store._connection.execute(";\n".join(statements))


def _literal(text: str) -> str:
    """A SQL string literal (PostgreSQL with standard_conforming_strings on, its default)."""
    return "'" + text.replace("'", "''") + "'"


class _TablesRestorable(Restorable):
    """A restorable SQL part whose image is its tables' (``self._tables``, a ``TablesImage``)."""

    def dump(self) -> tuple:
        return self._tables.dump()

    def load(self, image: tuple) -> None:
        self._tables.load(image)


class RestorableSqlLedger(_TablesRestorable, SqlLedger):
    """``SqlLedger`` whose copies are images of its tables (see the module doc)."""

    SNAPSHOT_IS_COMPLETE = True
    """Its ``snapshot()`` holds everything that decides its next answers (``fence.model.drain.snapshot_is_complete``)."""

    SHARED = ("store", "_tables")

    def __init__(self, store: SqlStore, capacity: int, restorer: Restorer) -> None:
        super().__init__(store, capacity)
        self._tables = TablesImage(store, (("fence_reservations", "seq"), ("fence_keys", "key")))
        self._restoring(restorer)

    def snapshot(self) -> tuple:
        """``SqlLedger.snapshot()``'s picture, with each unit freed and claim, and each key's count."""
        (reservations, keys), _ = self.image()
        # fence_reservations: seq, reservation_id, key, owner, deadline, whole_ticks, state, freed, claimed_by
        return (
            # A set, as fence.Ledger's: the order of the rows decides nothing.
            # A deadline only while the lease is reserved, as fence.Ledger's: then it decides expiry.
            frozenset((rid, owner, (int(deadline) if whole else deadline) if state == "reserved" else None,
                       state, freed, claimed)
                      for _, rid, _key, owner, deadline, whole, state, freed, claimed in reservations),
            frozenset(tuple(row) for row in keys),
        )

    get = reads(SqlLedger.get)
    reservations = reads(SqlLedger.reservations)
    current = reads(SqlLedger.current)
    held = property(reads(SqlLedger.held.fget))
    units_freed = property(reads(SqlLedger.units_freed.fget))
    expired = reads(SqlLedger.expired)
    claimed_by = reads(SqlLedger.claimed_by)
    reserve = writes(SqlLedger.reserve)
    apply = writes(SqlLedger.apply)
    owner_move = writes(SqlLedger.owner_move)
    claim_expired = writes(SqlLedger.claim_expired)


class RestorableSqlDestination(_TablesRestorable, SqlDestination):
    """``SqlDestination`` whose copies are images of its tables (see the module doc)."""

    SNAPSHOT_IS_COMPLETE = True
    """Its ``snapshot()`` holds everything that decides its next answers (``fence.model.drain.snapshot_is_complete``)."""

    SHARED = ("store", "guards", "_tables")

    def __init__(self, store: SqlStore, guards: Guards, restorer: Restorer) -> None:
        super().__init__(store, guards)
        self._tables = TablesImage(store, (("fence_effects", "seq"), ("fence_attempts", "attempt_id")))
        self._restoring(restorer)

    def snapshot(self) -> tuple:
        """``SqlDestination.snapshot()``'s picture, from the image."""
        (effects, attempts), _ = self.image()
        # fence_effects: seq, key, attempt_id, payload, fence_key (a function of the key and the guards)
        return (
            payloads_by_key((key, attempt, payload) for _, key, attempt, payload, _fence in effects),
            frozenset(tuple(row) for row in attempts),
        )

    register = writes(SqlDestination.register)
    commit = writes(SqlDestination.commit)
    abandon_unless_committed = writes(SqlDestination.abandon_unless_committed)
    lookup = reads(SqlDestination.lookup)
    attempt_state = reads(SqlDestination.attempt_state)
    effects = reads(SqlDestination.effects)


__all__ = ["RestorableSqlDestination", "RestorableSqlLedger", "TablesImage"]
