"""PostgreSQL tables as a target keeps them: their image (``SchemaImage``, ``PostgresTables``) and a session.

See ``fence.targets.images`` for what an image holds and how time is kept in it
(ticks, never instants).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterable, Mapping

from fence.base.errors import BackendError
from fence.model.restore import Restorer
from fence.targets.library_session import LibrarySession
from fence.targets.model_time import ModelTime


@dataclass(frozen=True)
class SchemaImage:
    """A list of PostgreSQL tables, as a value: each table's rows as JSON text ordered by id, and their
    id sequences' states. A timed column is a field ``<name>`` of whole ticks before the clock at the dump."""

    tables: tuple[str, ...]
    """Per table, in ``PostgresTables.tables`` order: a JSON array of the rows."""
    sequences: str
    """A JSON array of [last_value, is_called] per table."""

    @cached_property
    def rows(self) -> tuple[list[dict], ...]:
        return tuple(json.loads(text) for text in self.tables)

    def sequence(self, number: int) -> tuple:
        """Table ``number``'s id sequence: it decides the next row's id, which a system's answers may name."""
        return tuple(json.loads(self.sequences)[number])


def literal(text: str) -> str:
    """A SQL string literal (``PostgresTables.sequences_from`` checks standard_conforming_strings is on)."""
    return "'" + text.replace("'", "''") + "'"


class PostgresTables:
    """Dump, load and empty of a list of tables and their id sequences, as SQL any driver can run.

    ``tables`` in the order a load inserts them (a row's references first);
    ``timed`` names, per table, the timestamp columns the system compares with
    its clock and the image field that keeps each as ticks ago (``{"jobs":
    {"heartbeat": "heartbeat_ticks_ago"}}``); ``identity`` the tables whose id
    is GENERATED ALWAYS (inserted with ``OVERRIDING SYSTEM VALUE``);
    ``refilled_by_triggers`` the tables an insert into an earlier table writes
    to (emptied again just before their own rows go in); ``cascade`` truncates
    with CASCADE when emptying; ``ordered_by`` names, per table keyed by
    something other than an ``id`` column (DBOS's by a workflow id), the
    ``ORDER BY`` of its rows over the alias ``t``: such a table has no id
    sequence to keep; ``deciding`` names, per table, what of a row decides an
    answer (``row -> value``, None for nothing), for ``PostgresSession.snapshot``.
    """

    def __init__(
        self, tables: Iterable[str], time: ModelTime, *, timed: Mapping[str, Mapping[str, str]] | None = None,
        identity: Iterable[str] = (), refilled_by_triggers: Iterable[str] = (), cascade: bool = False,
        ordered_by: Mapping[str, str] | None = None, deciding: Mapping[str, Callable[[dict], object]] | None = None,
    ) -> None:
        self.tables = tuple(tables)
        self.time = time
        self.timed = {table: dict(columns) for table, columns in (timed or {}).items()}
        self.identity = frozenset(identity)
        self.refilled = frozenset(refilled_by_triggers)
        self.cascade = cascade
        self.ordered_by = dict(ordered_by or {})
        self.deciding = dict(deciding or {})

    def sequences_query(self) -> str:
        """One statement: each table's id sequence (``name``, ``sequence``), and the setting a load needs."""
        names = ", ".join(literal(table) for table in self.tables)
        sequence = "pg_get_serial_sequence(t, 'id')"
        if self.ordered_by:  # only the tables keyed by an id have its sequence
            keyed = [literal(table) for table in self.tables if table not in self.ordered_by]
            sequence = f"CASE WHEN t IN ({', '.join(keyed)}) THEN {sequence} END" if keyed else "NULL::text"
        return (f"SELECT t AS name, {sequence} AS sequence, "
                "current_setting('standard_conforming_strings') AS conforming "
                f"FROM unnest(ARRAY[{names}]::text[]) t")

    def sequences_from(self, rows: Iterable[Mapping]) -> dict[str, str]:
        """``sequences_query``'s rows as {table: sequence}; BackendError if a load could not quote safely."""
        rows = list(rows)
        if any(row["conforming"] != "on" for row in rows):
            raise BackendError("standard_conforming_strings is off; fence's restore needs it on")
        return {row["name"]: row["sequence"] for row in rows}

    def move_time_script(self, ticks: float) -> str:
        """Model time on by ``ticks``: every timed column that many ticks earlier (statements joined by ``;``)."""
        seconds = self.time.seconds(ticks)
        return ";\n".join(
            f"UPDATE {table} SET " + ", ".join(f"{c} = {c} - make_interval(secs => {seconds})" for c in columns)
            for table, columns in self.timed.items()
        )

    def empty_statement(self) -> str:
        return f"TRUNCATE {', '.join(self.tables)} RESTART IDENTITY{' CASCADE' if self.cascade else ''}"

    def dump_query(self, sequences: Mapping[str, str]) -> str:
        """One statement that reads a ``SchemaImage``: columns ``t0``, ``t1``, ... and ``sequences``."""
        parts = []
        for number, table in enumerate(self.tables):
            row = "to_jsonb(t)"
            columns = self.timed.get(table)
            if columns:
                ticks = ", ".join(f"'{field}', {self.time.sql_ticks_ago(f't.{column}')}"
                                  for column, field in columns.items())
                row = f"(to_jsonb(t) - {' - '.join(literal(c) for c in columns)}) || jsonb_build_object({ticks})"
            order = self.ordered_by.get(table, "t.id")
            parts.append(f"(SELECT coalesce(jsonb_agg({row} ORDER BY {order}), '[]') FROM {table} t)::text AS t{number}")
        states = ", ".join(f"(SELECT jsonb_build_array(last_value, is_called) FROM {sequences[t]})"
                           if sequences[t] is not None else "'null'::jsonb" for t in self.tables)
        return f"SELECT {', '.join(parts)}, jsonb_build_array({states})::text AS sequences"

    def image_from(self, row: Mapping) -> SchemaImage:
        """``dump_query``'s one row as a ``SchemaImage``."""
        return SchemaImage(tuple(row[f"t{number}"] for number in range(len(self.tables))), row["sequences"])

    def load_script(self, image: SchemaImage, sequences: Mapping[str, str]) -> str:
        """One transaction, as one script (statements joined by ``;\\n``), that makes the tables hold ``image``.

        Rows are inserted with their ids (triggers fire), timed columns set back
        from their ticks, and every sequence set as it was.
        """
        statements = ["BEGIN"] + [f"DELETE FROM {table}" for table in reversed(self.tables)]
        for table, text in zip(self.tables, image.tables):
            rows = f"{literal(text)}::jsonb"
            columns = self.timed.get(table)
            if columns:
                instants = ", ".join(f"'{column}', {self.time.sql_instant(f'(w->>{literal(field)})::int')}"
                                     for column, field in columns.items())
                rows = f"(SELECT coalesce(jsonb_agg(w || jsonb_build_object({instants})), '[]') FROM jsonb_array_elements({rows}) w)"
            if table in self.refilled:
                statements.append(f"DELETE FROM {table}")  # what the inserts before wrote through triggers
            overriding = " OVERRIDING SYSTEM VALUE" if table in self.identity else ""
            statements.append(f"INSERT INTO {table}{overriding} SELECT * FROM jsonb_populate_recordset(NULL::{table}, {rows})")
        kept = [(table, state) for table, state in zip(self.tables, json.loads(image.sequences)) if state is not None]
        if kept:
            statements.append("SELECT " + ", ".join(
                f"setval({literal(sequences[table])}, {int(last)}, {'true' if called else 'false'})"
                for table, (last, called) in kept
            ))
        statements.append("COMMIT")
        return ";\n".join(statements)


class PostgresSession(LibrarySession):
    """A target's session on one PostgreSQL database for a library on asyncio: its event loop, the library's
    handle, its tables' ``PostgresTables`` image and the ``Restorer``.

    What ``TargetStorage`` asks of a session (``empty``, ``versions``,
    ``close``) and what ``TargetLedger`` dumps and loads by; its ``time`` (the
    tables' ``ModelTime``) is its ledger's too. A target says how its library
    opens (``open_library``: the library's handle made on the loop, its schema
    ensured, the tables' image returned) and how a statement reaches the server
    on the library's own connection (``execute``, ``fetch``), so that the image
    is read and written where the library reads and writes. A library not on
    asyncio (DBOS) keeps the image on a connection of the session's own
    instead (``own_connection``), and writes neither. A handle the library
    opens is closed with the session by ``closing(close)`` (also when
    ``open_library`` fails after it), or in ``close_library``.
    """

    SYSTEM = "the library"
    """Its name in errors and in ``versions`` (as pip names it)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.opened = False
        self._own = None
        """The session's own connection (``own_connection``), if it made one."""
        try:
            self.image = self.open_library(url)
            self.time = self.image.time
            self.opened = True
            self.sequences = self.image.sequences_from(self.run(self.fetch(self.image.sequences_query())))
        except Exception as error:
            self.close()
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendError(f"{url}: cannot open {self.SYSTEM} there ({reason})") from None
        self.restorer = Restorer()
        """Which ledger's image the tables hold (``fence.model.restore``)."""
        self._dump_query = self.image.dump_query(self.sequences)

    # -- what a target writes --------------------------------------------------------------
    def open_library(self, url: str) -> PostgresTables:
        """Open the library on ``self.loop`` (``self.run``), ensure its schema, return its tables' image."""
        raise NotImplementedError

    async def execute(self, script: str) -> None:
        """Run ``script`` (statements joined by ``;``, no parameters) on the library's connection; by default on
        the session's own (``own_connection``)."""
        self._own_connection().execute(script)

    async def fetch(self, query: str) -> list[Mapping]:
        """The rows of ``query`` on the library's connection, each as a mapping by column name; by default on the
        session's own (``own_connection``)."""
        return self._own_connection().execute(query).fetchall()

    def own_connection(self, url: str) -> None:
        """For a library not on asyncio, in ``open_library``: a psycopg connection of the session's own
        (autocommit, rows as dicts), where the default ``execute`` and ``fetch`` run; closed with the session."""
        import psycopg  # here: only such a target needs it
        from psycopg.rows import dict_row

        self._own = psycopg.connect(url, autocommit=True, row_factory=dict_row)

    def _own_connection(self):
        if self._own is None:
            raise NotImplementedError(f"{type(self).__name__} says nowhere how a statement reaches the server: "
                                      "implement execute and fetch, or call own_connection(url) in open_library")
        return self._own

    def close_library(self) -> None:
        """Close what ``open_library`` opened and gave no ``closing`` (called only if it returned)."""

    # -- the session -------------------------------------------------------------------------
    def rows(self, query: str) -> list[Mapping]:
        """The rows of ``query`` (``fetch``), from outside the loop."""
        return self.run(self.fetch(query))

    def empty(self) -> None:
        """Empty the library's tables for a fresh world (the ledger using them keeps its image)."""
        self.restorer.release()
        self.run(self.execute(self.image.empty_statement()))

    def dump(self) -> SchemaImage:
        (row,) = self.run(self.fetch(self._dump_query))
        return self.image.image_from(row)

    def load(self, image: SchemaImage) -> None:
        self.run(self.execute(self.image.load_script(image, self.sequences)))

    def snapshot(self, image: SchemaImage, now: float) -> tuple:
        """``image`` as a snapshot (what ``TargetLedger.snapshot()`` holds by default): each table the tables'
        ``deciding`` names as the sorted values its rows decide (a row deciding None left out), any other as
        its rows, and the id sequences. Timed columns stay ticks before the dump (a target whose snapshot
        compares them at the ledger's clock ``now`` writes its own)."""
        return tuple(text if (decides := self.image.deciding.get(table)) is None
                     else tuple(sorted(value for value in map(decides, rows) if value is not None))
                     for table, text, rows in zip(self.image.tables, image.tables, image.rows)) + (image.sequences,)

    @property
    def keeps_instants(self) -> bool:
        """Do the tables keep an instant the system compares with its clock (any ``timed`` column)? If not,
        ``TargetLedger._move_clock`` moves nothing (DBOS's tables: an executor's death is fence's word)."""
        return bool(self.image.timed)

    def move_time(self, ticks: float) -> None:
        """Model time on by ``ticks``: the timed columns moved back (what ``TargetLedger._move_clock`` calls)."""
        self.run(self.execute(self.image.move_time_script(ticks)))

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        (row,) = self.run(self.fetch("SHOW server_version"))
        return {self.SYSTEM: version(self.SYSTEM), "postgresql": row["server_version"]}

    def close(self) -> None:
        try:
            try:
                if self.opened:
                    self.close_library()
            finally:
                self._close_library()
        finally:
            try:
                if self._own is not None:
                    self._own.close()
            finally:
                self.loop.close()



__all__ = ["PostgresSession", "PostgresTables", "SchemaImage", "literal"]
