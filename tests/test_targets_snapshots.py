"""A target's snapshot with a part left out, written as a user would: a subclass of the shipped ledger.

The explorer merges a target's states by its ledger's ``snapshot()`` and trusts
it only as far as its FaithfulnessCheck can show (``fence.explore.walk``). Here
each target's guarded row gets a storage whose ledger wraps the shipped
``snapshot()`` and drops one part of it, the way an adapter written outside the
repository might:

- **time** (the heartbeats' or delivery times' ticks, and the deadlines fence's
  records keep): reported unfaithful at the bound every profile exhausts and at
  the deep profile's 2 units x 2 jobs, on the first merge of a reserve before a
  tick with one after it, which answer ``expired`` differently.
- **the server's image** (the rows, log, sequences or Redis keys read back):
  *not* incomplete for these three adapters, so rightly not reported. Their
  own records (each fetch's row and worker, each pick, each delivery) and
  fence's records beside them (every answer the ledger gave, in the
  observer's mirror) decide what the server holds: walked at 2 units x 2 jobs
  by hand for minutes, no two states with one key but for the image differed
  in it on procrastinate or celery, and on pgqueuer only in the order of two
  jobs' entries in its log, which no call reads. What the
  image is for is the restore (a load that forgets a sequence, a queue or the
  log is caught: tests/test_targets_explorer*.py); were an adapter to keep
  state on the server that its records do not mirror, leaving the image out of
  its snapshot would merge states that answer differently, and the check
  would be what catches it. The test below pins the finding: the walk without
  the image is faithful and merges no more states than the shipped snapshot
  (pgqueuer: merges only what its log's order kept apart).
"""

from __future__ import annotations

import json
import os

import pytest

from fence.explore.results import Outcome
from fence.targets import EXPLORER_BOUND, EXPLORER_DEEP_BOUND, TARGETS, explore_target
from tests.target_explorer_checks import FAITHFULNESS


def _procrastinate():
    from fence.targets.procrastinate import ProcrastinateLedger, ProcrastinateStorage

    class WithoutTime(ProcrastinateLedger):
        def snapshot(self):
            jobs, _heartbeats, periodic, sequence, fetches, *rest = super().snapshot()
            return (jobs, periodic, sequence, tuple(fetch[:-1] for fetch in fetches), *rest)  # a fetch's deadline last

    class WithoutImage(ProcrastinateLedger):
        def snapshot(self):
            _jobs, _heartbeats, _periodic, _sequence, fetches, *rest = super().snapshot()
            return (fetches, *rest)

    return ProcrastinateStorage, WithoutTime, WithoutImage


def _pgqueuer():
    from fence.targets.pgqueuer import PgqueuerLedger, PgqueuerStorage

    class WithoutTime(PgqueuerLedger):
        def snapshot(self):
            rows, logged, counted, sequence, picks, *rest = super().snapshot()
            rows = tuple(json.dumps({k: v for k, v in json.loads(row).items() if not k.endswith("_ticks_ago")})
                         for row in rows)
            return (rows, logged, counted, sequence, tuple(pick[:-1] for pick in picks), *rest)

    class WithoutImage(PgqueuerLedger):
        def snapshot(self):
            _rows, _logged, _counted, _sequence, picks, *rest = super().snapshot()
            return (picks, *rest)

    return PgqueuerStorage, WithoutTime, WithoutImage


def _celery():
    from fence.targets.celery_redis import CeleryLedger, CeleryStorage

    class WithoutTime(CeleryLedger):
        def snapshot(self):
            deliveries, keys, *rest = super().snapshot()
            deliveries = tuple(d[:3] + d[4:] for d in deliveries)  # a delivery's deadline is its fourth (Taken's)
            return (deliveries, tuple(key for key in keys if key[1] != "zset"), *rest)  # unacked_index's ticks

    class WithoutImage(CeleryLedger):
        def snapshot(self):
            deliveries, _keys, *rest = super().snapshot()
            return (deliveries, *rest)

    return CeleryStorage, WithoutTime, WithoutImage


SYSTEMS = {"procrastinate": _procrastinate, "pgqueuer": _pgqueuer, "celery": _celery}
SERVER = {"postgres": pytest.mark.postgres, "redis": pytest.mark.redis}
GUARDED = [pytest.param(row, marks=SERVER[TARGETS[row].server], id=row)
           for row in ("procrastinate+guard", "pgqueuer+guard", "celery+guard")]


def _storage(row: str, which: int, request):
    """The row's storage with the ledger variant ``which`` (1: without time, 2: without the image)."""
    target = TARGETS[row]
    url = request.getfixturevalue("postgres_url" if target.server == "postgres" else "redis_url")
    try:
        found = SYSTEMS[target.system]()
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the {target.system} target for real, and it cannot be imported: {error}",
                        pytrace=False)
        pytest.skip(f"{target.system} is not installed ({error}): pip install -e '.[test]'")
    storage_type = found[0]
    variant = found[which] if which else storage_type.LEDGER

    class Storage(storage_type):
        LEDGER = variant

    return Storage(url, **target.options)


def _explore(row: str, which: int, request, bound, **options):
    storage = _storage(row, which, request)
    try:
        return explore_target(TARGETS[row], storage, bound, faithfulness=FAITHFULNESS, **options)
    finally:
        storage.close()


@pytest.mark.parametrize("bound", [EXPLORER_BOUND, EXPLORER_DEEP_BOUND], ids=["1x1x2", "2x2x2"])
@pytest.mark.parametrize("row", GUARDED)
def test_a_snapshot_without_time_is_reported_unfaithful(row, bound, request):
    """A snapshot without the ticks and deadlines merges a lease reserved before a tick with one after it: unfaithful, nothing proved."""
    found = _explore(row, 1, request, bound)
    assert found.unfaithful is not None and found.unfaithful.startswith("two states with one key"), found.unfaithful
    assert "tick(" in found.unfaithful and "'expired'" in found.unfaithful  # the lease that ran out, in one only
    assert 0 < found.faithfulness_checks <= sum(FAITHFULNESS) and not found.exhausted
    assert all(result.outcome is not Outcome.PROVED for result in found.results.values())


@pytest.mark.parametrize("row", [
    pytest.param("procrastinate+guard", marks=[pytest.mark.postgres, pytest.mark.slow], id="procrastinate+guard"),
    pytest.param("pgqueuer+guard", marks=[pytest.mark.postgres, pytest.mark.slow], id="pgqueuer+guard"),
    pytest.param("celery+guard", marks=[pytest.mark.redis, pytest.mark.slow], id="celery+guard"),  # 19 s
])
def test_a_snapshot_without_the_servers_image_loses_nothing_these_adapters_answer_by(row, request):
    """At 2 units x 2 jobs, to depth 5: without the image the walk is as faithful, and merges no states the shipped snapshot keeps apart but pgqueuer's log order."""
    shipped = _explore(row, 0, request, EXPLORER_DEEP_BOUND, max_depth=5)
    without = _explore(row, 2, request, EXPLORER_DEEP_BOUND, max_depth=5)
    assert shipped.unfaithful is None and without.unfaithful is None
    assert without.faithfulness_checks == shipped.faithfulness_checks > 0
    assert without.depth == shipped.depth == 5
    if TARGETS[row].system == "pgqueuer":
        assert without.states <= shipped.states  # the log keeps two jobs' entries in the order they came
    else:
        assert (without.states, without.transitions) == (shipped.states, shipped.transitions)
