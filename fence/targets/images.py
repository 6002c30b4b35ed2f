"""Images of a server's state for a target's ``dump()``, ``load(image)`` and ``snapshot()``.

Theory of operation
-------------------
The explorer copies a target's ledger by its image (``fence.model.restore``): one
immutable value holding everything the ledger keeps on the server, read back
by ``dump`` and written back, whatever the server held, by ``load``. Two
servers cover the shipped targets and most job systems, so their images are
written once here:

* ``RedisImage`` (``dump_redis``, ``load_redis``, ``RedisDatabase``): every key
  of one Redis database (its db number), with its type and contents (lists,
  hashes, sets, sorted sets, strings) and its TTL. A load is a ``FLUSHDB`` and
  every key written back, in one transaction.
* ``SchemaImage`` (``PostgresTables``): a list of PostgreSQL tables, each as
  JSON rows ordered by id, and their id sequences. A load is one transaction
  that deletes every row, inserts the image's with their ids, and sets every
  sequence as it was. ``PostgresSession`` holds it for a library that runs
  on asyncio, on the library's own connection.

Model time in an image is ticks, never instants (``protocol.ModelTime``): a
stored instant the system compares with its clock (a Redis sorted set of
delivery times, a heartbeat column) is kept as whole ticks before the clock at
the dump, and a load sets it that far before the clock at the load; a Redis TTL
is kept as the whole ticks left (rounded up), and loaded as that many ticks
less half a tick, so that a key expires at the same model tick after a load as
before it. The real seconds that pass between two calls are in no image.
Ids that depend on the path taken (uuid4 tags, worker ids) are kept as they
are: the system answers with them; a ledger's ``snapshot()`` names them by rank.
"""

from __future__ import annotations

import json
import math
import re
import time as wall
from fnmatch import fnmatchcase
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterable, Mapping

from fence.base.errors import BackendError
from fence.targets.protocol import ModelTime, Restorer


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


# -- Redis ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RedisImage:
    """Every key of a Redis database, as a value.

    ``keys`` is a tuple of (key, type, contents), sorted by key: a list's items
    in order, a hash's and a set's members sorted, a string's value, a sorted
    set's (member, score) pairs (a timestamp set's scores as ticks ago); all as
    Redis returns them (bytes). ``ttls`` is (key, whole ticks left) for each key
    with an expiry.
    """

    keys: tuple[tuple[bytes, str, object], ...]
    ttls: tuple[tuple[bytes, int], ...] = ()


def _names(names: Iterable[str | bytes]) -> frozenset[bytes]:
    return frozenset(name.encode() if isinstance(name, str) else name for name in names)


def _timed(name: bytes, timestamps: frozenset[bytes]) -> bool:
    """Is ``name`` one of ``timestamps``, a key name or a glob pattern (``started:*``: one set per job key)?"""
    return name in timestamps or any(fnmatchcase(name, pattern) for pattern in timestamps)


_READERS = {
    "list": lambda pipe, name: pipe.lrange(name, 0, -1),
    "hash": lambda pipe, name: pipe.hgetall(name),
    "set": lambda pipe, name: pipe.smembers(name),
    "zset": lambda pipe, name: pipe.zrange(name, 0, -1, withscores=True),
    "string": lambda pipe, name: pipe.get(name),
}


def dump_redis(
    client, time: ModelTime, *, timestamps: Iterable[str | bytes] = (), milliseconds: Iterable[str | bytes] = (),
) -> RedisImage:
    """Every key of the client's database as a ``RedisImage`` (two pipelined round trips).

    ``timestamps`` names the sorted sets whose scores are instants (seconds of
    the server's clock) the system compares with its clock, by name or glob
    pattern: kept as ticks ago. ``milliseconds`` names those scored in
    milliseconds (dramatiq's heartbeats), kept alike.
    """
    timed, in_ms = _names(timestamps), _names(milliseconds)
    names = sorted(client.keys("*"))
    with client.pipeline(transaction=True) as pipe:
        for name in names:
            pipe.type(name)
            pipe.pttl(name)
        described = pipe.execute()
    types = [kind.decode() if isinstance(kind, bytes) else kind for kind in described[0::2]]
    ttls = tuple((name, math.ceil(ms / 1000 / time.tick_seconds)) for name, ms in zip(names, described[1::2]) if ms >= 0)
    with client.pipeline(transaction=True) as pipe:
        for name, kind in zip(names, types):
            if kind not in _READERS:
                raise BackendError(f"Redis key {name!r} is a {kind}: fence's image keeps lists, hashes, sets, "
                                   "sorted sets and strings")
            _READERS[kind](pipe, name)
        contents = pipe.execute()
    now = wall.time()
    keys = []
    for name, kind, value in zip(names, types, contents):
        if kind == "list":
            value = tuple(value)
        elif kind == "hash":
            value = tuple(sorted(value.items()))
        elif kind == "set":
            value = tuple(sorted(value))
        elif kind == "zset":
            if _timed(name, in_ms):
                value = tuple((member, time.ticks(now - score / 1000)) for member, score in value)
            elif _timed(name, timed):
                value = tuple((member, time.ticks(now - score)) for member, score in value)
            else:
                value = tuple(value)
        keys.append((name, kind, value))
    return RedisImage(tuple(keys), ttls)


def load_redis(
    client, image: RedisImage, time: ModelTime, *, timestamps: Iterable[str | bytes] = (),
    milliseconds: Iterable[str | bytes] = (),
) -> None:
    """Make the client's database hold exactly ``image``: FLUSHDB and every key written back, in one transaction."""
    timed, in_ms = _names(timestamps), _names(milliseconds)
    now = wall.time()
    with client.pipeline(transaction=True) as pipe:
        pipe.flushdb()
        for name, kind, value in image.keys:
            if kind == "list":
                pipe.rpush(name, *value)
            elif kind == "hash":
                pipe.hset(name, mapping=dict(value))
            elif kind == "set":
                pipe.sadd(name, *value)
            elif kind == "zset":
                if _timed(name, in_ms):
                    pipe.zadd(name, {member: (now - time.seconds(ticks)) * 1000 for member, ticks in value})
                elif _timed(name, timed):
                    pipe.zadd(name, {member: now - time.seconds(ticks) for member, ticks in value})
                else:
                    pipe.zadd(name, dict(value))
            else:
                pipe.set(name, value)
        for name, ticks in image.ttls:
            pipe.pexpire(name, max(1, int(time.seconds(ticks - 0.5) * 1000)))
        pipe.execute()


MOVE_BACK = """
local seconds = tonumber(ARGV[1])
local scored_in_seconds = tonumber(ARGV[2] or #KEYS)
for i, name in ipairs(KEYS) do
    local by = seconds
    if i > scored_in_seconds then by = seconds * 1000 end
    for _, member in ipairs(redis.call('ZRANGE', name, 0, -1)) do
        redis.call('ZINCRBY', name, -by, member)
    end
end
for _, name in ipairs(redis.call('KEYS', '*')) do
    local left = redis.call('PTTL', name)
    if left >= 0 then
        if left <= seconds * 1000 then redis.call('DEL', name) else redis.call('PEXPIRE', name, left - seconds * 1000) end
    end
end
"""
"""Model time moving on, in Redis, in one atomic script: timestamps back (KEYS; after the first ARGV[2] of them,
scored in milliseconds), TTLs shorter (a key past its TTL gone)."""


class RedisDatabase:
    """One Redis database as a target keeps it: its image, emptied, and model time moved on it."""

    def __init__(
        self, client, time: ModelTime, *, timestamps: Iterable[str | bytes] = (),
        milliseconds: Iterable[str | bytes] = (),
    ) -> None:
        self.client = client
        self.time = time
        self.timestamps = _names(timestamps)
        self.milliseconds = _names(milliseconds)
        """The timestamp sets scored in milliseconds (``dump_redis``)."""
        self._move_back = client.register_script(MOVE_BACK)

    def dump(self) -> RedisImage:
        return dump_redis(self.client, self.time, timestamps=self.timestamps, milliseconds=self.milliseconds)

    def load(self, image: RedisImage) -> None:
        load_redis(self.client, image, self.time, timestamps=self.timestamps, milliseconds=self.milliseconds)

    def empty(self) -> None:
        self.client.flushdb()

    def _existing(self, patterns: frozenset[bytes]) -> list[bytes]:
        return sorted({name for pattern in patterns for name in self.client.keys(pattern)})

    def move_time(self, ticks: float) -> None:
        """Model time on by ``ticks``: every timestamp set's scores that much earlier, every TTL that much shorter."""
        in_seconds, in_ms = self._existing(self.timestamps), self._existing(self.milliseconds)
        self._move_back(keys=in_seconds + in_ms, args=[self.time.seconds(ticks), len(in_seconds)])

    def snapshot(
        self, image: RedisImage, now: float, *, leave_out: tuple[bytes, ...] = (),
        canonical: Callable[[object], object] = lambda value: value,
    ) -> tuple:
        """``image`` as a snapshot: keys by ``canonical`` name and contents, timestamps and TTLs at model ticks.

        A timestamp set's score is the tick of ``now`` (the ledger's clock) it
        stands at, a TTL the tick the key expires at; keys whose name starts with
        one of ``leave_out`` are left out (what decides no answer); hashes, sets
        and sorted sets are sorted after ``canonical`` renamed them.
        """
        ttls = dict(image.ttls)
        keys = []
        for name, kind, value in image.keys:
            if leave_out and name.startswith(leave_out):
                continue
            if kind == "zset" and _timed(name, self.timestamps | self.milliseconds):
                value = tuple((member, now - ticks) for member, ticks in value)
            value = canonical(value)
            entry = (canonical(name), kind, tuple(sorted(value)) if kind in ("hash", "set", "zset") else value)
            keys.append(entry + ((now + ttls[name],) if name in ttls else ()))
        return tuple(sorted(keys))


class RedisSession:
    """A target's session on one Redis database: a client, its ``RedisDatabase`` and the ``Restorer``.

    What ``TargetStorage`` asks of a session (``empty``, ``versions``, ``close``)
    and what ``TargetLedger`` dumps and loads by; a target adds its library's
    handle on ``client``.
    """

    def __init__(
        self, url: str, time: ModelTime, *, timestamps: Iterable[str | bytes] = (),
        milliseconds: Iterable[str | bytes] = (),
    ) -> None:
        import redis

        self.client = redis.Redis.from_url(url, socket_connect_timeout=5)
        try:
            self.client.ping()
        except redis.RedisError as error:
            self.client.close()
            raise BackendError(f"{url}: cannot reach Redis there ({error}); start one with scripts/redis.sh start") from None
        self.database = RedisDatabase(self.client, time, timestamps=timestamps, milliseconds=milliseconds)
        self.restorer = Restorer()
        """Which ledger's image the database holds (``fence.model.restore``)."""

    def dump(self) -> RedisImage:
        return self.database.dump()

    def move_time(self, ticks: float) -> None:
        """Model time on by ``ticks`` (``RedisDatabase.move_time``): what ``TargetLedger._move_clock`` calls."""
        self.database.move_time(ticks)

    def load(self, image: RedisImage) -> None:
        self.database.load(image)

    def empty(self) -> None:
        """Empty the database for a fresh world (the ledger using it keeps its image)."""
        self.restorer.release()
        self.database.empty()

    def versions(self) -> dict[str, str]:
        return {"redis": self.client.info("server")["redis_version"]}

    @cached_property
    def loop(self):
        """An event loop of the session's own, for a library on asyncio (arq): made on first use."""
        import asyncio  # here: importing fence.targets (every fence command's parser) stays light

        return asyncio.new_event_loop()

    def run(self, coroutine):
        """``coroutine`` run to its end on the session's ``loop``."""
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        try:
            if "loop" in self.__dict__:
                self.loop.close()
        finally:
            self.client.close()


# -- PostgreSQL -------------------------------------------------------------------------------
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
    with CASCADE when emptying.
    """

    def __init__(
        self, tables: Iterable[str], time: ModelTime, *, timed: Mapping[str, Mapping[str, str]] | None = None,
        identity: Iterable[str] = (), refilled_by_triggers: Iterable[str] = (), cascade: bool = False,
    ) -> None:
        self.tables = tuple(tables)
        self.time = time
        self.timed = {table: dict(columns) for table, columns in (timed or {}).items()}
        self.identity = frozenset(identity)
        self.refilled = frozenset(refilled_by_triggers)
        self.cascade = cascade

    def sequences_query(self) -> str:
        """One statement: each table's id sequence (``name``, ``sequence``), and the setting a load needs."""
        names = ", ".join(literal(table) for table in self.tables)
        return ("SELECT t AS name, pg_get_serial_sequence(t, 'id') AS sequence, "
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
            parts.append(f"(SELECT coalesce(jsonb_agg({row} ORDER BY t.id), '[]') FROM {table} t)::text AS t{number}")
        states = ", ".join(f"(SELECT jsonb_build_array(last_value, is_called) FROM {sequences[t]})" for t in self.tables)
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
        states = json.loads(image.sequences)
        statements.append("SELECT " + ", ".join(
            f"setval({literal(sequences[table])}, {int(last)}, {'true' if called else 'false'})"
            for table, (last, called) in zip(self.tables, states)
        ))
        statements.append("COMMIT")
        return ";\n".join(statements)


class PostgresSession:
    """A target's session on one PostgreSQL database for a library on asyncio: its event loop, the library's
    handle, its tables' ``PostgresTables`` image and the ``Restorer``.

    What ``TargetStorage`` asks of a session (``empty``, ``versions``,
    ``close``) and what ``TargetLedger`` dumps and loads by. A target says how
    its library opens (``open_library``: the library's handle made on the
    loop, its schema ensured, the tables' image returned) and how a statement
    reaches the server on the library's own connection (``execute``,
    ``fetch``), so that the image is read and written where the library reads
    and writes.
    """

    SYSTEM = "the library"
    """Its name in errors and in ``versions`` (as pip names it)."""

    def __init__(self, url: str) -> None:
        import asyncio  # here: importing fence.targets (every fence command's parser) stays light

        self.loop = asyncio.new_event_loop()
        self.opened = False
        try:
            self.image = self.open_library(url)
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
        """Run ``script`` (statements joined by ``;``, no parameters) on the library's connection."""
        raise NotImplementedError

    async def fetch(self, query: str) -> list[Mapping]:
        """The rows of ``query`` on the library's connection, each as a mapping by column name."""
        raise NotImplementedError

    def close_library(self) -> None:
        """Close what ``open_library`` opened (called only if it returned)."""

    # -- the session -------------------------------------------------------------------------
    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def empty(self) -> None:
        """Empty the library's tables for a fresh world (the ledger using them keeps its image)."""
        self.restorer.release()
        self.run(self.execute(self.image.empty_statement()))

    def dump(self) -> SchemaImage:
        (row,) = self.run(self.fetch(self._dump_query))
        return self.image.image_from(row)

    def load(self, image: SchemaImage) -> None:
        self.run(self.execute(self.image.load_script(image, self.sequences)))

    def move_time(self, ticks: float) -> None:
        """Model time on by ``ticks``: the timed columns moved back (what ``TargetLedger._move_clock`` calls)."""
        self.run(self.execute(self.image.move_time_script(ticks)))

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        (row,) = self.run(self.fetch("SHOW server_version"))
        return {self.SYSTEM: version(self.SYSTEM), "postgresql": row["server_version"]}

    def close(self) -> None:
        try:
            if self.opened:
                self.close_library()
        finally:
            self.loop.close()


__all__ = ["MOVE_BACK", "UUID", "PostgresSession", "PostgresTables", "RedisDatabase", "RedisImage", "RedisSession",
           "SchemaImage", "dump_redis", "literal", "load_redis", "ranked_ids"]
