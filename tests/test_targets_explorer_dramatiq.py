"""The exhaustive explorer on dramatiq with its Redis broker, what only it shows: copies that forget something.

dramatiq's ledger (every key of its Redis database: queues, message hashes,
ack sets, heartbeats, delay and dead-letter queues, with fence's own records
beside them) is restorable: its image keeps heartbeats and dead-letter
instants (milliseconds) as ticks ago and a delayed retry's eta as ticks ahead,
and its ``snapshot()`` names worker and message ids by rank. What every target
shows (maintenance's duplicate found and replayed; a stale worker's failure,
Retries enqueueing a second retry, the shortest breach of 5; the guarded row
proved with failures, about 4 minutes) is in tests/test_targets_rows.py, its
walks of more than a few seconds slow. Here: a restore or a snapshot of
dramatiq's keys that forgets something is caught.

Every test needs Redis and dramatiq (see tests/test_targets_dramatiq.py).
"""

from __future__ import annotations

import pytest

from fence.targets.images import RedisImage
from tests.target_explorer_checks import mutated_walk_is_caught, snapshot_without_time, zset_scores_now
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis


dramatiq_module, _, _ = system_fixtures("dramatiq")


# -- what the FaithfulnessCheck is for: a copy that forgets something ---------------------------
# Each mutation goes through the public target API: the ledger's load(image) and snapshot(), the RedisImage.
def _forget_heartbeats(module, monkeypatch):
    """A load that stamps every heartbeat now: time restored as an instant, not as ticks ago."""
    real = module.DramatiqLedger.load

    monkeypatch.setattr(module.DramatiqLedger, "load", lambda self, image: real(
        self, RedisImage(zset_scores_now(image.keys), image.ttls)))


def _forget_the_ack_sets(module, monkeypatch):
    """A load that drops every worker's ack set: a copy forgets which worker holds the message."""
    real = module.DramatiqLedger.load
    monkeypatch.setattr(module.DramatiqLedger, "load", lambda self, image: real(self, RedisImage(
        tuple(key for key in image.keys if not key[0].startswith(b"dramatiq:__acks__.")), image.ttls)))


def _snapshot_without_time(module, monkeypatch):
    """A snapshot without the heartbeat ticks and the reservations' deadlines: when a lease runs out."""
    snapshot_without_time(module.DramatiqLedger, monkeypatch)


CAUGHT = {
    # mutation: (row, how it is caught)
    _forget_heartbeats: ("dramatiq+guard", "unfaithful"),
    _forget_the_ack_sets: ("dramatiq", "unfaithful"),
    _snapshot_without_time: ("dramatiq+guard", "unfaithful"),
}


@pytest.mark.parametrize("mutation", list(CAUGHT), ids=lambda mutation: mutation.__name__.strip("_"))
def test_a_restore_or_snapshot_that_forgets_something_is_caught(mutation, dramatiq_module, redis_url, monkeypatch):
    """Each mutation of the image or the snapshot stops the walk as unfaithful, or a false violation fails to replay."""
    mutation(dramatiq_module, monkeypatch)
    row, how = CAUGHT[mutation]
    mutated_walk_is_caught(row, redis_url, how)
