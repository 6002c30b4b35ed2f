"""Real backends: the ledger and the destination in memory, on SQLite, on PostgreSQL.

``open_backend(url, capacity=..., guards=...)`` returns a ``Backend`` whose
``ledger`` has fence.Ledger's interface and whose ``destination`` has the
fence.Destination protocol (plus ``snapshot()``), whichever URL it was given:

* ``memory:``                         fence's own Ledger and TicketService, in this process
* ``sqlite:///abs/path.db``           one file, shared by every process on this machine;
  everything after ``sqlite://`` is the path, so ``sqlite://relative.db`` is relative
* ``postgresql://user@host:port/db``  a fleet across machines (psycopg 3)

The in-memory core is the specification: the SQL implementations (``_sql``)
decide through the same pure functions and are held to it step by step by the
models (tests/test_backends.py). Every method keeps the core's ``now``; for real
runs ``now=None`` means the database's clock (``Backend.clock()``), read inside
the transaction that uses it, so a fleet judges leases on one clock.

A URL that does not parse, a database that cannot be reached and a schema of
another version raise ``BackendError`` with one line saying what to do.

Beside this module, which opens backends:

* ``_store``      the SQL store: SQLite and PostgreSQL dialects, the schema, one connection
* ``_sql``        the ledger and the destination on a store, deciding through the core's functions
* ``_restoring``  the same, restorable, so that the explorer copies a model world on SQL
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from fence.model.destination import Guards, TicketService
from fence.base.errors import BackendError
from fence.model.ledger import Ledger, Move, Reservation
from fence.model.restore import Restorer
from fence.backends._restoring import RestorableSqlDestination, RestorableSqlLedger
from fence.backends._sql import SqlDestination, SqlLedger
from fence.backends._store import SCHEMA_VERSION, SqlStore

__all__ = [
    "SCHEMA_VERSION", "Backend", "BackendError", "MemoryLedger", "ModelStorage", "open_backend",
    "open_store", "reset_backend",
]

URL_HELP = "use memory:, sqlite:///ABSOLUTE/PATH.db or postgresql://USER@HOST:PORT/DBNAME"


class MemoryLedger(Ledger):
    """fence.Ledger with the backend extras: ``now=None`` reads this process's clock,
    and ``claim_expired`` (atomic only because one process owns the ledger)."""

    SNAPSHOT_IS_COMPLETE = True
    """Its ``snapshot()`` holds everything that decides its next answers (``fence.model.drain.snapshot_is_complete``)."""

    def __init__(self, capacity: int, clock=time.time) -> None:
        super().__init__(capacity)
        self._clock = clock
        self._claimed_by: dict[str, str] = {}

    def reserve(self, key: str, owner: str, now: float | None, lease: float) -> Reservation:
        return super().reserve(key, owner, self._clock() if now is None else now, lease)

    def expired(self, now: float | None = None) -> list[Reservation]:
        return super().expired(self._clock() if now is None else now)

    def claim_expired(
        self, now: float | None, janitor: str, move: Move = Move.EXPIRE_AND_HOLD, limit: int = 100
    ) -> list[Reservation]:
        """Make ``move`` on up to ``limit`` expired leases; see SqlLedger.claim_expired."""
        claimed = []
        for reservation in self.expired(now)[:limit]:
            claimed.append(self.apply(reservation.reservation_id, move))
            self._claimed_by[reservation.reservation_id] = janitor
        return claimed

    def claimed_by(self, reservation_id: str) -> str | None:
        return self._claimed_by.get(reservation_id)


@dataclass
class Backend:
    """One open backend: a ledger and a destination on the same storage, one connection."""

    url: str
    ledger: Any
    destination: Any
    store: SqlStore | None = field(default=None, repr=False)
    """The SQL store behind both (None for ``memory:``)."""

    def clock(self) -> float:
        """The backend's clock in seconds: the database's (this process's for memory:)."""
        return time.time() if self.store is None else self.store.clock()

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sqlite_path(url: str) -> Path:
    path = url[len("sqlite://"):]
    if not path or path.endswith("/") or path.startswith(":memory:"):
        raise BackendError(f"{url!r} names no database file; {URL_HELP}")
    return Path(path)


def open_store(url: str, *, reset: bool = False, namespace: str | None = None) -> SqlStore | None:
    """The SQL store at ``url`` (None for ``memory:``), its schema checked or created.

    ``namespace`` keeps fence's tables apart from other users of the same URL:
    a PostgreSQL schema of that name, or for SQLite a sibling file
    (``fence.db`` -> ``fence.NAMESPACE.db``).
    """
    if not isinstance(url, str):
        raise BackendError(f"{url!r} is not a backend URL; {URL_HELP}")
    if url == "memory:":
        return None
    if url.startswith("sqlite://"):
        path = sqlite_path(url)
        if namespace:
            path = path.with_name(f"{path.stem}.{namespace}{path.suffix}")
        return SqlStore.sqlite(url, path, reset=reset)
    if url.startswith(("postgresql://", "postgres://")):
        return SqlStore.postgres(url, reset=reset, namespace=namespace)
    raise BackendError(f"{url!r} is not a backend URL; {URL_HELP}")


def open_backend(url: str, *, capacity: int, guards: Guards, reset: bool = False) -> Backend:
    """Open (creating its tables if needed) the ledger and destination at ``url``.

    ``reset=True`` empties fence's tables first (and recreates them if their
    schema version differs). Several processes may open the same URL at once.
    """
    store = open_store(url, reset=reset)
    if store is None:
        return Backend(url, MemoryLedger(capacity), TicketService(guards))
    try:
        return Backend(url, SqlLedger(store, capacity), SqlDestination(store, guards), store)
    except BaseException:
        store.close()
        raise


def reset_backend(url: str) -> None:
    """Empty fence's tables at ``url``, recreating them if their schema version differs."""
    store = open_store(url, reset=True)
    if store is not None:
        store.close()


class ModelStorage:
    """World factories that put each model world on one backend, emptied for it.

    ``World(policy, config, storage.destination_factory, storage.ledger_factory)``:
    the World asks for its destination and its ledger one after the other; the
    first of the two calls empties the store, the second gets the other half of
    the same store. One connection serves every world in turn, so only one
    world at a time may live on it (the machines, the minimiser and replay all
    build one world after another).

    On SQL the ledger and destination are restorable (``fence.backends._restoring``):
    a world's copies take turns on the one connection, each loading its own
    image of the tables before it reaches them, so the explorer copies them
    like any plug-in; emptying the store for a fresh world keeps the image of
    whichever copy held it.

    Pickled into a worker process (``fence verdicts --backend`` judges on two),
    it becomes that process's own storage, in a namespace named for the process,
    so parallel workers never empty each other's tables.
    """

    def __init__(self, url: str, *, namespace: str | None = None) -> None:
        self.url = url
        self.namespace = namespace
        self.store = open_store(url, reset=True, namespace=namespace)
        self._half_given = False
        self.restorers = {"ledger": Restorer(), "destination": Restorer()}
        """Which copy's image fence's ledger tables, and its destination tables, hold (fence.model.restore)."""

    def __reduce__(self):
        return (_storage_of_this_process, (self.url,))

    def _fresh(self) -> None:
        if self.store is not None and not self._half_given:
            for restorer in self.restorers.values():
                restorer.release()
            self.store.reset()
        self._half_given = not self._half_given

    def destination_factory(self, guards: Guards):
        self._fresh()
        if self.store is None:
            return TicketService(guards)
        return RestorableSqlDestination(self.store, guards, self.restorers["destination"])

    def ledger_factory(self, capacity: int):
        self._fresh()
        if self.store is None:
            return Ledger(capacity)
        return RestorableSqlLedger(self.store, capacity, self.restorers["ledger"])

    def close(self) -> None:
        if self.store is not None:
            self.store.close()



_PROCESS_STORAGE: dict[str, ModelStorage] = {}


def _storage_of_this_process(url: str) -> ModelStorage:
    """One ModelStorage per URL per process, in a namespace of its own."""
    if url not in _PROCESS_STORAGE:
        _PROCESS_STORAGE[url] = ModelStorage(url, namespace=f"fence_worker_{os.getpid()}")
    return _PROCESS_STORAGE[url]


POSTGRES_SCRIPT = Path(__file__).resolve().parent.parent / "_scripts" / "postgres.sh"
"""Package data, so that an installed fence starts its own cluster (scripts/postgres.sh runs it in a checkout)."""


REDIS_SCRIPT = Path(__file__).resolve().parent.parent / "_scripts" / "redis.sh"
"""Package data, like POSTGRES_SCRIPT: the celery target starts its own Redis from an installed fence too."""


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """A private PostgreSQL cluster (127.0.0.1 only, in a temporary directory), stopped on the way out.

    Started by the project's own script; BackendError in one line if it cannot be.
    """
    with _private_server(POSTGRES_SCRIPT, "PostgreSQL cluster", "FENCE_POSTGRES_URL") as url:
        yield url


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A private Redis server (127.0.0.1 only, nothing on disk, a temporary directory), stopped on the way out.

    Started by the project's own script; BackendError in one line if it cannot be.
    """
    with _private_server(REDIS_SCRIPT, "Redis server", "FENCE_REDIS_URL") as url:
        yield url


@contextlib.contextmanager
def _private_server(script: Path, what: str, variable: str) -> Iterator[str]:
    """``script start`` (its last line is the URL), yielded, then ``script stop URL``."""
    started = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, timeout=600)
    if started.returncode != 0:
        last = (started.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackendError(f"could not start a private {what} ({last}); set {variable}")
    url = started.stdout.strip().splitlines()[-1]
    try:
        yield url
    finally:
        subprocess.run(["bash", str(script), "stop", url], capture_output=True, timeout=120)
