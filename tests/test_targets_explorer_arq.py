"""The exhaustive explorer on arq with Redis: the same world, copied by restoring every key of the database.

arq's ledger is restorable through ``fence.targets.images`` (every key, TTLs as
ticks); its ``snapshot()`` leaves out what differs between equal states (the
enqueue instants in ``arq:queue`` scores and inside the pickled job and result).
As shipped the explorer finds the duplicate and its path replays on a fresh
database; with the worker's failure path, arq's failure handler (finish the job,
failed) breaks the naive row too; with fence.guard it is proved within
``TARGET_BOUND`` with every danger reached. The walks take one to five minutes:
slow.

Every test needs Redis and arq (see tests/test_targets_arq.py).
"""

from __future__ import annotations

import time

import pytest

from fence.model.policies import POLICIES
from fence.targets import TARGET_BOUND, TARGETS
from tests.target_explorer_checks import (
    guarded_row_proved, shipped_duplicate_replays, shortest_failure_finding_replays,
)
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis
GUARDED = POLICIES["abandon-fenced"]


arq_module, shipped, guarded = system_fixtures("arq")


def test_equal_states_reached_at_different_instants_have_one_snapshot(guarded):
    """Two worlds that made the same moves a few milliseconds apart snapshot alike: enqueue instants are left out."""
    snapshots = []
    for _ in range(2):
        guarded.destination_factory(GUARDED.guards)  # a fresh world: the storage empties the database
        ledger = guarded.ledger_factory(1)
        ledger.reserve("job1", "w1", 0, 2)
        ledger.confirm("job1", "w1")
        snapshots.append(ledger.snapshot())
        time.sleep(0.01)  # a different enqueue_time_ms in the pickled job and result, a different queue score
    assert snapshots[0] == snapshots[1]
    keys = dict((entry[0], entry[2]) for entry in snapshots[0][1])
    assert keys[b"arq:result:job1#1"] == "(True, 1)"  # the result read back: a success, on the job's first try


@pytest.mark.slow
def test_the_explorer_finds_arqs_duplicate_and_it_replays_on_a_fresh_database(shipped, redis_url):
    """Breadth first on arq's re-pick: a job written twice, whose path replays on another storage's emptied database."""
    shipped_duplicate_replays("arq", shipped, redis_url)


@pytest.mark.slow
def test_with_failures_arqs_failed_finish_of_a_released_job_is_found_and_replays(shipped, redis_url):
    """A stale worker's failure finishes the job its lease no longer holds (finish_job keys on the id): found, replayed."""
    sentences = shortest_failure_finding_replays(
        "arq", shipped, redis_url, "capacity_conserved",
        "job1#1: the ledger accepted fail on job1/r1, which was unused (the table allows nothing): it left the table",
    )
    assert sentences[0].startswith("a worker reserves a unit for job1 as attempt job1#1")
    released = next(i for i, s in enumerate(sentences) if "sees job1/r1 expired and frees its unit" in s)
    assert sentences[-1].startswith("job1#1 fails") and released < len(sentences) - 1, sentences


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 16,000 states (the fresh job id doubles arq's keys): 5 min on this machine
def test_the_explorer_proves_the_guarded_row_with_failures_and_reaches_every_danger(guarded):
    """arq with fence.guard, every interleaving within TARGET_BOUND (failures on): nothing broken, every danger reached."""
    guarded_row_proved("arq+guard", guarded, destination_on_the_server=False, bound=TARGET_BOUND)


def test_a_snapshot_without_time_is_reported_unfaithful(redis_url, arq_module):
    """Without the picks' deadlines and the keys' TTLs, a lease taken before a tick merges with one after it: caught."""
    from fence.explore.results import Outcome
    from fence.targets import EXPLORER_BOUND, explore_target

    class WithoutTime(arq_module.ArqLedger):
        def snapshot(self):
            picks, keys, *rest = super().snapshot()
            return (tuple(p.reservation_id for p in picks), tuple(key[:3] for key in keys), *rest)

    class Storage(arq_module.ArqStorage):
        LEDGER = WithoutTime

    storage = Storage(redis_url, guarded=True)
    try:
        found = explore_target(TARGETS["arq+guard"], storage, EXPLORER_BOUND, faithfulness=(20, 40))
    finally:
        storage.close()
    assert found.unfaithful is not None and found.unfaithful.startswith("two states with one key"), found.unfaithful
    assert not found.exhausted and all(r.outcome is not Outcome.PROVED for r in found.results.values())
