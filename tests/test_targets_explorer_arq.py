"""The exhaustive explorer on arq with Redis, what only it shows: a snapshot that leaves out enqueue instants.

arq's ledger is restorable through ``fence.targets.images`` (every key, TTLs as
ticks); its ``snapshot()`` leaves out what differs between equal states (the
enqueue instants in ``arq:queue`` scores and inside the pickled job and result).
What every target shows (the shipped row's duplicate found and replayed; arq's
failure handler, finishing a job its lease no longer holds, the shortest
breach of 4; the guarded row proved with failures, minutes: slow) is in
tests/test_targets_rows.py. Here: equal states snapshot alike, and a snapshot
without time is reported unfaithful.

Every test needs Redis and arq (see tests/test_targets_arq.py).
"""

from __future__ import annotations

import time

import pytest

from fence.model.policies import POLICIES
from tests.target_explorer_checks import snapshot_without_time
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis
GUARDED = POLICIES["abandon-fenced"]


arq_module, shipped, guarded = system_fixtures("arq")


def test_equal_states_reached_at_different_instants_have_one_snapshot(guarded):
    """Two worlds that made the same moves a few milliseconds apart snapshot alike, though the images they dumped
    while the job was queued differ: the enqueue instants (the queue's score, the pickled job's) are left out.

    (Until issue 27's rework this compared only the snapshots after the confirm, when neither instant is
    left on the server: it could not fail on them.)"""
    snapshots, images = [], []
    for _ in range(2):
        guarded.destination_factory(GUARDED.guards)  # a fresh world: the storage empties the database
        ledger = guarded.ledger_factory(1)
        ledger.reserve("job1", "w1", 0, 2)
        images.append(ledger.dump())
        reserved = ledger.snapshot()
        ledger.confirm("job1", "w1")
        snapshots.append((reserved, ledger.snapshot()))
        time.sleep(0.01)  # a different enqueue_time_ms in the pickled job, a different queue score
    assert images[0] != images[1]
    assert snapshots[0] == snapshots[1] and snapshots[0][0] != snapshots[0][1]


def test_a_snapshot_without_time_is_reported_unfaithful(redis_url, arq_module, monkeypatch):
    """Without the picks' deadlines and the keys' TTLs, a lease taken before a tick merges with one after it: caught."""
    from fence.explore.results import Outcome
    from fence.targets import EXPLORER_BOUND, TARGETS, explore_target

    snapshot_without_time(arq_module.ArqLedger, monkeypatch)
    storage = TARGETS["arq+guard"].open(redis_url)
    try:
        found = explore_target(TARGETS["arq+guard"], storage, EXPLORER_BOUND, faithfulness=(20, 40))
    finally:
        storage.close()
    assert found.unfaithful is not None and found.unfaithful.startswith("two states with one key"), found.unfaithful
    assert not found.exhausted and all(r.outcome is not Outcome.PROVED for r in found.results.values())
