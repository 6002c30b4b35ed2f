"""The target protocol (``fence.targets.protocol``): its members, checked once, and its helpers.

A target's ledger is a plug-in like any other: a member missing from it gets
the one-line protocol error in every engine, never an AttributeError from deep
inside one (issue 25: a ledger without ``held`` failed all seven cells that way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fence.base.errors import PluginBroken
from fence.explore.walk import explore
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig
from fence.targets import Target

BAD = Path(__file__).resolve().parent / "targets_bad"
FORGETS_HELD = Target(
    row="forgets-held", system="fence", policy=POLICIES["naive"], recovery="fence's own, in memory",
    time="none: it has no clock of its own", server="none", storage="forgets_held:ForgetsHeldStorage",
    explorable=True,
)


@pytest.fixture
def forgets_held(monkeypatch):
    monkeypatch.syspath_prepend(str(BAD))
    import forgets_held

    return forgets_held


def _one_line_naming_held(error: PluginBroken) -> None:
    message = str(error)
    assert "\n" not in message
    assert message.startswith("ledger (ForgetsHeld in forgets_held.py) has no held; ")
    assert "free, held" in message  # the whole protocol is listed, held included


def test_a_target_ledger_without_held_gets_the_one_line_error_from_check_target(forgets_held):
    """fence.testing.check_target (machines with the lockstep, then the explorer) stops on the protocol error."""
    from fence.testing import check_target

    with pytest.raises(PluginBroken) as raised:
        check_target(FORGETS_HELD, "none:", profile="quick")
    _one_line_naming_held(raised.value)


def test_a_ledger_without_held_gets_the_one_line_error_from_the_explorer(forgets_held):
    """The explorer alone (which never reads held itself) stops on the same line at its first question."""
    with pytest.raises(PluginBroken) as raised:
        explore(POLICIES["naive"], ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2),
                ledger_factory=forgets_held.ForgetsHeld)
    _one_line_naming_held(raised.value)


def test_a_ledger_without_held_is_refused_when_loaded(capsys):
    """fence check --ledger FILE.py:ATTR: one line naming held, exit 2, before anything runs."""
    from fence.cli.main import main

    assert main(["check", "naive", "--ledger", f"{BAD / 'forgets_held.py'}:ForgetsHeld"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "without held" in err, err


@pytest.mark.redis
def test_a_target_ledger_that_states_no_failure_handler_gets_the_one_line_error(redis_url, monkeypatch):
    """TargetLedger has no default _fail: a target without one stops at its first failure report with one line
    naming the ledger and what to write, never a report that silently succeeded."""
    from fence.targets.loading import load_storage, load_target
    from fence.targets.protocol import TargetLedger
    from fence.testing import check_target

    row = load_target(f"{Path(__file__).resolve().parent / 'user_targets' / 'idempotency_records.py'}:ROW")
    monkeypatch.setattr(load_storage(row).LEDGER, "_fail", TargetLedger._fail)
    with pytest.raises(PluginBroken) as raised:
        check_target(row, redis_url, profile="quick", explore=False)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("ledger (RecordsLedger in idempotency_records.py): fail('job1', ")
    assert "RecordsLedger states no failure handler: implement _fail(record)" in message


# -- the helpers ----------------------------------------------------------------------------
def test_only_if_it_moves_accepts_a_call_that_changed_the_state_and_refuses_one_that_did_not():
    """A system that refuses nothing: the call is made either way, and refused when it moved nothing."""
    from fence.base.errors import IllegalMove
    from fence.targets.protocol import only_if_it_moves, refused_unless

    started = {"job1"}
    calls = []

    def finish():
        calls.append("finish")
        started.discard("job1")
        return "done"

    assert only_if_it_moves(lambda: "job1" in started, finish, "nothing to finish") == "done"
    with pytest.raises(IllegalMove, match="nothing to finish"):
        only_if_it_moves(lambda: "job1" in started, finish, "nothing to finish")
    assert calls == ["finish", "finish"]  # the second call was made, and found to change nothing
    refused_unless(True, "never raised")
    with pytest.raises(IllegalMove, match="stale"):
        refused_unless(False, "stale")


def test_model_time_maps_a_lease_onto_a_timeout_half_a_tick_short():
    """A lease of L ticks runs out between ticks L-1 and L of the server's clock, never on a boundary."""
    from fence.targets.protocol import ModelTime

    time = ModelTime(tick_seconds=60.0)
    assert time.timeout(2) == 90.0 and time.seconds(3) == 180.0
    assert time.ticks(119.9) == 2 and time.ticks(60.2) == 1
    assert "make_interval(secs => (w->>'x')::int * 60.0)" in time.sql_instant("(w->>'x')::int")


@pytest.mark.redis
def test_a_redis_image_keeps_timestamps_and_ttls_as_ticks(redis_url):
    """Dump, load after a FLUSHDB, and model time moving on: a start instant and a TTL stand at the same ticks."""
    import time as wall

    import redis

    from fence.targets.images import RedisDatabase
    from fence.targets.protocol import ModelTime

    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
        database = RedisDatabase(client, ModelTime(tick_seconds=60.0), timestamps=("started:*",))
        client.zadd("started:job1", {"7": wall.time() - 120.0})  # started two ticks ago
        client.set("lock:job1", "worker", px=int(1.5 * 60_000))  # a TTL of 1.5 ticks: gone at the second tick
        client.rpush("waiting:job2", "8")
        image = database.dump()
        assert dict(image.ttls) == {b"lock:job1": 2}
        assert (b"started:job1", "zset", ((b"7", 2),)) in image.keys
        client.flushdb()
        database.load(image)
        assert database.dump() == image  # the same ticks after a load
        now = 5
        snapshot = database.snapshot(image, now)
        assert (b"started:job1", "zset", ((b"7", 3),)) in snapshot  # started at tick 5 - 2
        assert (b"lock:job1", "string", b"worker", 7) in snapshot  # expires at tick 5 + 2
        database.move_time(1)
        moved = database.dump()
        assert (b"started:job1", "zset", ((b"7", 3),)) in moved.keys and dict(moved.ttls) == {b"lock:job1": 1}
        database.move_time(1)
        assert client.exists("lock:job1") == 0 and client.llen("waiting:job2") == 1
    finally:
        client.flushdb()
        client.close()


def test_ranked_ids_and_moved_columns_are_what_the_adapters_share():
    """images.ranked_ids names uuids by first appearance (after the erasures); a PostgresTables image moves its
    timed columns back by the ticks' seconds, and a session on tables with none keeps no instant to move."""
    import re
    from types import SimpleNamespace

    from fence.targets.images import PostgresSession, PostgresTables, ranked_ids
    from fence.targets.protocol import ModelTime

    first, second = b"0" * 8 + b"-0000-0000-0000-" + b"0" * 12, b"1" * 8 + b"-1111-1111-1111-" + b"1" * 12
    canonical = ranked_ids(erase=[(re.compile(rb"at=\d+"), b"at=0")])
    assert canonical((second + b" at=17", first.decode(), (second,), 3)) == (b"<id0> at=0", "<id1>", (b"<id0>",), 3)
    tables = PostgresTables(("jobs", "workers"), ModelTime(tick_seconds=60.0), timed={"workers": {"beat": "beat_ago"}})
    assert tables.move_time_script(2) == "UPDATE workers SET beat = beat - make_interval(secs => 120.0)"
    untimed = PostgresTables(("jobs",), ModelTime(tick_seconds=60.0))
    assert PostgresSession.keeps_instants.fget(SimpleNamespace(image=tables))
    assert not PostgresSession.keeps_instants.fget(SimpleNamespace(image=untimed))  # _move_clock then writes nothing


def test_what_of_a_key_or_a_row_decides_an_answer_is_declared_once_for_the_snapshot():
    """``deciding``: a Redis key's contents as its function answers (the call's first, then the database's; None
    leaves the key out), and a PostgreSQL table's rows as the sorted values they decide (None leaves a row out)."""
    from types import SimpleNamespace

    from fence.targets.images import PostgresSession, PostgresTables, RedisDatabase, RedisImage, SchemaImage
    from fence.targets.images import left_out, scores_zeroed
    from fence.targets.protocol import ModelTime

    client = SimpleNamespace(register_script=lambda script: None)
    database = RedisDatabase(client, ModelTime(tick_seconds=60.0), deciding={"queue": scores_zeroed, "dead:*": left_out})
    image = RedisImage(((b"beats", "zset", ((b"w1", 0), (b"w2", 0))), (b"dead:job1", "list", (b"7",)),
                        (b"queue", "zset", ((b"job1", 1700000000.5),))))
    assert database.snapshot(image, 0) == ((b"beats", "zset", ((b"w1", 0), (b"w2", 0))), (b"queue", "zset", ((b"job1", 0),)))
    busy = database.snapshot(image, 0, deciding={"beats": lambda beats: tuple(b for b in beats if b[0] == b"w2")})
    assert busy[0] == (b"beats", "zset", ((b"w2", 0),))
    assert database.snapshot(image, 0, deciding={"beats": lambda beats: ()})[0][0] == b"beats"  # () is kept
    assert [key[0] for key in database.snapshot(image, 0, deciding={"beats": left_out})] == [b"queue"]

    tables = PostgresTables(("jobs", "inputs", "log"), ModelTime(tick_seconds=60.0),
                            deciding={"jobs": lambda job: (job["id"], job["status"]), "inputs": left_out})
    rows = SchemaImage(('[{"id": 2, "status": "done", "at": 5}, {"id": 1, "status": "doing", "at": 9}]',
                        '[{"id": 1, "body": "x"}]', '[{"id": 1}]'), "[[2, true], [1, true], [1, true]]")
    snapshot = PostgresSession.snapshot(SimpleNamespace(image=tables), rows, 0)
    assert snapshot == (((1, "doing"), (2, "done")), (), '[{"id": 1}]', "[[2, true], [1, true], [1, true]]")


def test_a_sessions_library_handles_close_last_opened_first_and_its_workers_are_made_once_by_name():
    """LibrarySession (both servers' sessions): ``closing`` handles run newest first; ``worker(name, make)`` makes a
    worker once per name (``new_worker`` by default); ``on_loop`` makes an object with the session's loop current."""
    import asyncio

    from fence.targets.library_session import LibrarySession

    class Library(LibrarySession):
        def new_worker(self):
            return object()

    session, closed = Library(), []
    session.closing(lambda: closed.append("pool"))
    session.closing(lambda: closed.append("app"))
    assert session.worker("job1/r1") is session.worker("job1/r1") is not session.worker("job1/r2")
    assert session.worker(1.5, lambda: "worker for a lease of 1.5") == session.worker(1.5) == "worker for a lease of 1.5"
    try:
        assert session.on_loop(asyncio.get_event_loop) is session.loop
        assert session.run(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        asyncio.set_event_loop(None)
        session.loop.close()
    session._close_library()
    assert closed == ["app", "pool"]


def test_fence_targets_offers_exactly_the_profiles_the_table_defines():
    """The parser names the profiles without importing fence.targets; the one table is fence.targets'."""
    from fence.cli.targets_command import PROFILE_NAMES
    from fence.targets import EXPLORER_BOUND, TARGET_PROFILES

    assert PROFILE_NAMES == tuple(TARGET_PROFILES)
    assert all(profile.bounds[0] == EXPLORER_BOUND for profile in TARGET_PROFILES.values())
    assert all(config.failures for profile in TARGET_PROFILES.values() for config in profile.configs)


def test_the_shipped_adapters_stand_on_fence_s_public_names_alone():
    """Each shipped adapter is written as a user's would be: no fence._ module imported (the public API's own
    modules, fence.targets' __init__, protocol and images, are what the adapters stand on). The adapters are
    the modules the built-in rows' storages live in."""
    import ast
    import importlib

    from fence.targets import TARGETS

    adapters = {Path(importlib.import_module(target.storage.rpartition(":")[0]).__file__)
                for target in TARGETS.values()}
    private = {}
    for adapter in sorted(adapters):
        for node in ast.walk(ast.parse(adapter.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            private.update({f"{adapter.name}:{node.lineno}": name for name in names
                            if name.startswith("fence") and any(part.startswith("_") for part in name.split("."))})
    assert private == {}
    assert len(adapters) == 6  # six shipped systems, each checked above
