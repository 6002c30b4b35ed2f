"""A Redis database as a target keeps it: its image (``RedisImage``), model time moved on it, and a session.

See ``fence.targets.images`` for what an image holds and how time is kept in it
(ticks, never instants).
"""

from __future__ import annotations

import math
import time as wall
from fnmatch import fnmatchcase
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, TypeVar

from fence.base.errors import BackendError
from fence.model.restore import Restorer
from fence.targets.library_session import LibrarySession
from fence.targets.model_time import ModelTime

T = TypeVar("T")


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

    def with_values(self, value_of: Callable[[bytes, str, object], object]) -> RedisImage:
        """The image with each key's contents as ``value_of(name, kind, contents)`` answers: for a ledger's
        ``_canonical``, what decides no answer (an instant inside a pickle) left out of a value."""
        return RedisImage(tuple((name, kind, value_of(name, kind, value)) for name, kind, value in self.keys),
                          self.ttls)


def _names(names: Iterable[str | bytes]) -> frozenset[bytes]:
    return frozenset(name.encode() if isinstance(name, str) else name for name in names)


def _timed(name: bytes, timestamps: frozenset[bytes]) -> bool:
    """Is ``name`` one of ``timestamps``, a key name or a glob pattern (``started:*``: one set per job key)?"""
    return name in timestamps or any(fnmatchcase(name, pattern) for pattern in timestamps)


def left_out(contents: object) -> None:
    """For ``deciding``: the key decides no answer (a dead letter nothing reads back): left out of the snapshot."""
    return None


def scores_zeroed(contents: tuple) -> tuple:
    """For ``deciding``: a sorted set whose members decide and whose scores (instants no answer compares) do
    not: each score 0, so that the value keeps a sorted set's shape."""
    return tuple((member, 0) for member, _ in contents)


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


@dataclass(frozen=True)
class InstantsIn:
    """Instants a system keeps inside the values of some hashes (a delayed message's eta in its JSON), which it
    compares with its clock: kept in an image as whole ticks ahead of the clock at the dump, rounded up, and
    loaded half a tick earlier than that, as a TTL is; moved back by ``move_time``; and in a snapshot, the model
    tick they fall due at.

    ``hashes`` names the hashes (a glob pattern, ``dramatiq:*.DQ.msgs``); ``read(value)`` is the instant in
    one of their values (None: it has none), ``write(value, instant)`` the value with the instant replaced;
    instants are ``per_second`` units a second (1000: milliseconds).
    """

    hashes: str
    read: Callable[[bytes], float | None]
    write: Callable[[bytes, float], bytes]
    per_second: float = 1.0

    def _moved(self, value: bytes, move: Callable[[float], float]) -> bytes:
        instant = self.read(value)
        return value if instant is None else self.write(value, move(instant))

    def _mapped(self, image: RedisImage, move: Callable[[float], float]) -> RedisImage:
        pattern = self.hashes.encode()
        return image.with_values(lambda name, kind, value: value if kind != "hash" or not fnmatchcase(name, pattern)
                                 else tuple((field, self._moved(data, move)) for field, data in value))

    def as_ticks(self, image: RedisImage, time: ModelTime) -> RedisImage:
        """``image`` (instants as the server keeps them) with each instant as whole ticks ahead, rounded up."""
        now, tick = wall.time() * self.per_second, time.tick_seconds * self.per_second
        return self._mapped(image, lambda instant: math.ceil((instant - now) / tick))

    def as_instants(self, image: RedisImage, time: ModelTime) -> RedisImage:
        """``image`` (ticks ahead) with each back as an instant, half a tick before the tick it falls due."""
        now, tick = wall.time() * self.per_second, time.tick_seconds * self.per_second
        return self._mapped(image, lambda ticks: int(now + (ticks - 0.5) * tick))

    def at_model_ticks(self, image: RedisImage, now: float) -> RedisImage:
        """``image`` (ticks ahead) with each as the model tick it falls due at, for a snapshot."""
        return self._mapped(image, lambda ahead: int(now + ahead))

    def move_back(self, client, time: ModelTime, ticks: float) -> None:
        """Each instant in the server's hashes ``ticks`` of model time earlier."""
        by = int(time.seconds(ticks) * self.per_second)
        for name in client.keys(self.hashes):
            for field, data in client.hgetall(name).items():
                client.hset(name, field, self._moved(data, lambda instant: instant - by))


class RedisDatabase:
    """One Redis database as a target keeps it: its image, emptied, and model time moved on it."""

    def __init__(
        self, client, time: ModelTime, *, timestamps: Iterable[str | bytes] = (),
        milliseconds: Iterable[str | bytes] = (), instants: Iterable[InstantsIn] = (),
        deciding: Mapping[str, Callable[[object], object]] | None = None,
    ) -> None:
        self.client = client
        self.time = time
        self.timestamps = _names(timestamps)
        self.milliseconds = _names(milliseconds)
        """The timestamp sets scored in milliseconds (``dump_redis``)."""
        self.instants = tuple(instants)
        """Instants inside hash values (``InstantsIn``), kept as ticks ahead."""
        self.deciding = [(pattern.encode(), decides) for pattern, decides in (deciding or {}).items()]
        """What of a key's contents decides an answer, by key name or glob pattern (the first that matches):
        ``decides(contents)``, None to leave the key out; applied in ``snapshot`` only."""
        self._move_back = client.register_script(MOVE_BACK)

    def dump(self) -> RedisImage:
        image = dump_redis(self.client, self.time, timestamps=self.timestamps, milliseconds=self.milliseconds)
        for instants in self.instants:
            image = instants.as_ticks(image, self.time)
        return image

    def load(self, image: RedisImage) -> None:
        for instants in self.instants:
            image = instants.as_instants(image, self.time)
        load_redis(self.client, image, self.time, timestamps=self.timestamps, milliseconds=self.milliseconds)

    def empty(self) -> None:
        self.client.flushdb()

    def _existing(self, patterns: frozenset[bytes]) -> list[bytes]:
        return sorted({name for pattern in patterns for name in self.client.keys(pattern)})

    def move_time(self, ticks: float) -> None:
        """Model time on by ``ticks``: every timestamp set's scores that much earlier, every TTL that much shorter."""
        in_seconds, in_ms = self._existing(self.timestamps), self._existing(self.milliseconds)
        self._move_back(keys=in_seconds + in_ms, args=[self.time.seconds(ticks), len(in_seconds)])
        for instants in self.instants:
            instants.move_back(self.client, self.time, ticks)

    def snapshot(
        self, image: RedisImage, now: float, *, leave_out: tuple[bytes, ...] = (),
        canonical: Callable[[object], object] = lambda value: value,
        deciding: Mapping[str, Callable[[object], object]] | None = None,
    ) -> tuple:
        """``image`` as a snapshot: keys by ``canonical`` name and contents, timestamps and TTLs at model ticks.

        A timestamp set's score is the tick of ``now`` (the ledger's clock) it
        stands at, a TTL the tick the key expires at; keys whose name starts with
        one of ``leave_out`` are left out (what decides no answer), and a key
        ``deciding`` names (this call's, then the database's) is what its function
        answers of its contents (left out on None: a key whose answer depends on
        other keys, say); hashes, sets and sorted sets are sorted after ``canonical``
        renamed them. Instants in hash values (``InstantsIn``) are the tick they
        fall due at.
        """
        for instants in self.instants:
            image = instants.at_model_ticks(image, now)
        ttls = dict(image.ttls)
        deciding = [(pattern.encode(), decides) for pattern, decides in (deciding or {}).items()] + self.deciding
        keys = []
        for name, kind, value in image.keys:
            if leave_out and name.startswith(leave_out):
                continue
            decides = next((decides for pattern, decides in deciding if fnmatchcase(name, pattern)), None)
            if decides is not None and (value := decides(value)) is None:
                continue
            if kind == "zset" and _timed(name, self.timestamps | self.milliseconds):
                value = tuple((member, now - ticks) for member, ticks in value)
            value = canonical(value)
            entry = (canonical(name), kind, tuple(sorted(value)) if kind in ("hash", "set", "zset") else value)
            keys.append(entry + ((now + ttls[name],) if name in ttls else ()))
        return tuple(sorted(keys))


class RedisSession(LibrarySession):
    """A target's session on one Redis database: a client, its ``RedisDatabase`` and the ``Restorer``.

    What ``TargetStorage`` asks of a session (``empty``, ``versions``, ``close``)
    and what ``TargetLedger`` dumps and loads by; a target adds its library's
    handle on ``client``, and names its library's distributions in ``LIBRARIES``
    for ``versions()``. Its ``time`` (a ``ModelTime``) is its ledger's too.
    What every Redis adapter needed beside: ``library`` opens the library's own
    handle (a failure is one line naming it) and ``closing`` closes it with the
    session; ``worker(reservation_id)`` is a worker per reservation from the
    subclass's ``new_worker()`` (or any worker by name, made once); ``loop``,
    ``run`` and ``on_loop`` an event loop for a library on asyncio.
    """

    LIBRARIES: dict[str, str] = {}
    """What ``versions()`` reports beside the server: {name: the pip distribution whose version it is}."""

    def __init__(
        self, url: str, time: ModelTime, *, timestamps: Iterable[str | bytes] = (),
        milliseconds: Iterable[str | bytes] = (), instants: Iterable[InstantsIn] = (),
        deciding: Mapping[str, Callable[[object], object]] | None = None,
    ) -> None:
        import redis

        super().__init__()
        self.client = redis.Redis.from_url(url, socket_connect_timeout=5)
        try:
            self.client.ping()
        except redis.RedisError as error:
            self.client.close()
            raise BackendError(f"{url}: cannot reach Redis there ({error}); start one with scripts/redis.sh start") from None
        self.time = time
        """The target's model time (``ModelTime``): its ledger's too."""
        self.database = RedisDatabase(self.client, time, timestamps=timestamps, milliseconds=milliseconds,
                                      instants=instants, deciding=deciding)
        self.restorer = Restorer()
        """Which ledger's image the database holds (``fence.model.restore``)."""

    def dump(self) -> RedisImage:
        return self.database.dump()

    def move_time(self, ticks: float) -> None:
        """Model time on by ``ticks`` (``RedisDatabase.move_time``): what ``TargetLedger._move_clock`` calls."""
        self.database.move_time(ticks)

    def load(self, image: RedisImage) -> None:
        self.database.load(image)

    def snapshot(self, image: RedisImage, now: float, **canonical) -> tuple:
        """``image`` as a snapshot at the ledger's clock ``now`` (``RedisDatabase.snapshot``, its options too):
        what ``TargetLedger.snapshot()`` holds by default."""
        return self.database.snapshot(image, now, **canonical)

    def empty(self) -> None:
        """Empty the database for a fresh world (the ledger using it keeps its image)."""
        self.restorer.release()
        self.database.empty()

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {**{name: version(dist) for name, dist in self.LIBRARIES.items()},
                "redis": self.client.info("server")["redis_version"]}

    def library(self, url: str, name: str, open_library: Callable[[], T]) -> T:
        """``open_library()``, the library's own handle on this Redis; if that fails, the session closed and one
        line (``BackendError``) saying that ``name`` cannot reach Redis at ``url``."""
        try:
            return open_library()
        except Exception as error:
            self.close()
            raise BackendError(f"{url}: {name} cannot reach Redis there ({error})") from None

    def close(self) -> None:
        try:
            self._close_library()
        finally:
            try:
                if "loop" in self.__dict__:
                    self.loop.close()
            finally:
                self.client.close()



__all__ = ["MOVE_BACK", "InstantsIn", "RedisDatabase", "RedisImage", "RedisSession", "dump_redis", "left_out",
           "load_redis", "scores_zeroed"]
