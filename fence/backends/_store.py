"""Where the SQL ledger and destination keep their tables: the two dialects, the schema, one connection.

``SqlStore`` opens SQLite or PostgreSQL, creates or checks fence's tables
(``SCHEMA_VERSION``), and runs statements on its one connection: reads, a write
transaction (SQLite ``BEGIN IMMEDIATE``; PostgreSQL's own), a statement alone,
the database's clock. What is decided in those transactions, and why, is in
``fence.backends._sql``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from fence.base.errors import BackendError

SCHEMA_VERSION = 1
TABLES = ("fence_reservations", "fence_keys", "fence_effects", "fence_attempts", "fence_settings")


@dataclass(frozen=True)
class Dialect:
    name: str
    serial: str
    """The column type of an insertion-ordered id."""
    boolean: str
    clock: str
    """The database's clock in seconds since the epoch, as a float."""
    lock_row: str
    """Appended to a SELECT whose rows the transaction is about to change."""
    skip_locked: str
    """Appended to the janitor's claim query: rows another janitor holds are skipped."""
    materialized: str
    """Between ``AS`` and the janitor's claim query in its ``WITH``: evaluated once, whatever the plan."""


SQLITE = Dialect(
    "sqlite",
    serial="INTEGER PRIMARY KEY",
    boolean="INTEGER",
    # julianday('now') has millisecond resolution; unixepoch('subsec') needs 3.42.
    clock="((julianday('now') - 2440587.5) * 86400.0)",
    lock_row="",  # BEGIN IMMEDIATE already holds the database's one write lock
    skip_locked="",
    materialized="",  # no row locks to over-take; AS MATERIALIZED needs SQLite 3.35
)


POSTGRES = Dialect(
    "postgresql",
    serial="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    boolean="BOOLEAN",
    clock="(extract(epoch from clock_timestamp())::float8)",
    lock_row=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    materialized=" MATERIALIZED",
)


def _schema(d: Dialect) -> list[str]:
    return [
        "CREATE TABLE fence_schema (version INTEGER NOT NULL)",
        "CREATE TABLE fence_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        f"""CREATE TABLE fence_reservations (
            seq {d.serial},
            reservation_id TEXT NOT NULL UNIQUE,
            key TEXT NOT NULL,
            owner TEXT NOT NULL,
            deadline DOUBLE PRECISION NOT NULL,
            whole_ticks {d.boolean} NOT NULL,
            state TEXT NOT NULL,
            freed INTEGER NOT NULL DEFAULT 0,
            claimed_by TEXT)""",
        "CREATE INDEX fence_reservations_expiry ON fence_reservations (state, deadline)",
        "CREATE TABLE fence_keys (key TEXT PRIMARY KEY, current_id TEXT NOT NULL, attempts INTEGER NOT NULL)",
        f"""CREATE TABLE fence_effects (
            seq {d.serial},
            key TEXT NOT NULL,
            attempt_id TEXT NOT NULL,
            payload TEXT NOT NULL,
            fence_key TEXT UNIQUE)""",
        "CREATE INDEX fence_effects_key ON fence_effects (key, seq)",
        "CREATE TABLE fence_attempts (attempt_id TEXT PRIMARY KEY, state TEXT NOT NULL)",
        f"INSERT INTO fence_schema (version) VALUES ({SCHEMA_VERSION})",
    ]


class SqlStore:
    """One connection to one database, and the transactions fence runs on it."""

    def __init__(self, url: str, dialect: Dialect, connection: Any, *, reset: bool) -> None:
        self.url = url
        self.dialect = dialect
        self._connection = connection
        self._prepare(reset)

    # -- connecting --------------------------------------------------------------
    @classmethod
    def sqlite(cls, url: str, path: Path, *, reset: bool) -> SqlStore:
        if not path.parent.is_dir():
            raise BackendError(f"{url}: the directory {path.parent} does not exist; create it or fix the URL")
        try:
            # isolation_level=None: no implicit transactions; fence says BEGIN IMMEDIATE itself.
            connection = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA busy_timeout=30000")
        except sqlite3.Error as error:
            raise BackendError(f"{url}: cannot open the SQLite file {path} ({error}); check the path and its permissions") from None
        return cls(url, SQLITE, connection, reset=reset)

    @classmethod
    def postgres(cls, url: str, *, reset: bool, namespace: str | None = None) -> SqlStore:
        try:
            import psycopg
        except ImportError:
            raise BackendError(f"{url}: PostgreSQL needs psycopg 3: pip install -e '.[postgres]'") from None
        try:
            connection = psycopg.connect(url, autocommit=True, connect_timeout=5)
            if namespace:  # fence's tables in a schema of their own (one per verdict worker)
                connection.execute(f'CREATE SCHEMA IF NOT EXISTS "{namespace}"')
                connection.execute(f'SET search_path TO "{namespace}"')
        except psycopg.ProgrammingError as error:
            raise BackendError(f"{url}: not a PostgreSQL URL ({_one_line(error)}); write postgresql://USER@HOST:PORT/DBNAME") from None
        except psycopg.Error as error:
            raise BackendError(
                f"{url}: cannot reach PostgreSQL ({_one_line(error)}); start it with "
                "scripts/postgres.sh start and use the URL it prints"
            ) from None
        return cls(url, POSTGRES, connection, reset=reset)

    def close(self) -> None:
        self._connection.close()

    # -- statements --------------------------------------------------------------
    def _sql(self, text: str) -> str:
        # Written with sqlite's ? placeholders; psycopg wants %s.
        return text if self.dialect is SQLITE else text.replace("?", "%s")

    def rows(self, text: str, params: tuple = ()) -> list[tuple]:
        return self._connection.execute(self._sql(text), params).fetchall()

    def one(self, text: str, params: tuple = ()) -> tuple | None:
        return self._connection.execute(self._sql(text), params).fetchone()

    def run(self, text: str, params: tuple = ()) -> int:
        """Execute a change; how many rows it changed."""
        return self._connection.execute(self._sql(text), params).rowcount

    def one_alone(self, text: str, params: tuple = ()) -> tuple | None:
        """One statement as a transaction of its own: one round trip on PostgreSQL.

        A single statement is atomic by itself; outside a transaction the
        autocommit connection runs it without the BEGIN and COMMIT round trips
        of ``write``. SQLite (no round trips to save) and a caller already inside
        a transaction take ``write`` as before.
        """
        if self.dialect is POSTGRES and not self.in_transaction():
            return self.one(text, params)
        with self.write():
            return self.one(text, params)

    def in_transaction(self) -> bool:
        if self.dialect is SQLITE:
            return self._connection.in_transaction
        from psycopg.pq import TransactionStatus

        return self._connection.info.transaction_status is not TransactionStatus.IDLE

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction: committed if the block returns, rolled back if it raises."""
        if self.dialect is SQLITE:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")
        else:
            with self._connection.transaction():
                yield

    def clock(self) -> float:
        return self.one(f"SELECT {self.dialect.clock}")[0]

    # -- schema ------------------------------------------------------------------
    def _prepare(self, reset: bool) -> None:
        """Create the schema if there is none; check its version; empty it if asked."""
        try:
            with self.write():
                if self.dialect is POSTGRES:
                    # Two processes opening a fresh database must not both create it.
                    self.run("SELECT pg_advisory_xact_lock(?)", (0x66656E6365,))
                found = self._schema_version()
                if found is None:
                    for statement in _schema(self.dialect):
                        self.run(statement)
                elif found != SCHEMA_VERSION and reset:
                    for table in (*TABLES, "fence_schema"):
                        self.run(f"DROP TABLE IF EXISTS {table}")
                    for statement in _schema(self.dialect):
                        self.run(statement)
                elif found != SCHEMA_VERSION:
                    raise BackendError(
                        f"{self.url}: schema version {found} found, fence expects {SCHEMA_VERSION}; "
                        f"run 'fence db reset {self.url}' (deletes fence's tables there) or open it with reset=True"
                    )
                elif reset:
                    self.empty()
        except BackendError:
            self.close()
            raise
        except Exception as error:  # sqlite3.Error, psycopg.Error: not fence's database to use
            self.close()
            raise BackendError(f"{self.url}: cannot prepare fence's tables ({_one_line(error)}); check the database and its permissions") from None

    def _schema_version(self) -> int | None:
        if self.dialect is SQLITE:
            exists = self.one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fence_schema'")
        else:
            exists = self.one("SELECT to_regclass('fence_schema')")
            exists = exists if exists and exists[0] is not None else None
        if not exists:
            return None
        row = self.one("SELECT MAX(version) FROM fence_schema")
        return row[0] if row and row[0] is not None else 0

    def empty(self) -> None:
        """Delete every row fence keeps (call inside a write transaction)."""
        for table in TABLES:
            self.run(f"DELETE FROM {table}")

    def reset(self) -> None:
        with self.write():
            self.empty()

    def setting(self, name: str, value: str) -> None:
        """Record a setting the first time; BackendError if the database holds another value."""
        with self.write():
            self.run("INSERT INTO fence_settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", (name, value))
            stored = self.one("SELECT value FROM fence_settings WHERE name = ?", (name,))[0]
        if stored != value:
            raise BackendError(
                f"{self.url}: this database holds {name} {stored}, not {value}; open it with the "
                f"same {name}, or reset it ('fence db reset {self.url}')"
            )

    def counts(self) -> dict[str, int]:
        return {table: self.one(f"SELECT COUNT(*) FROM {table}")[0] for table in TABLES}


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
