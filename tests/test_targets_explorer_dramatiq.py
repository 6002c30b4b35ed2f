"""The exhaustive explorer on dramatiq with its Redis broker: the same world, copied by restoring Redis.

dramatiq's ledger (every key of its Redis database: queues, message hashes,
ack sets, heartbeats, delay and dead-letter queues, with fence's own records
beside them) is restorable: its image keeps heartbeats and dead-letter
instants (milliseconds) as ticks ago and a delayed retry's eta as ticks ahead,
and its ``snapshot()`` names worker and message ids by rank. Here: maintenance
is violated and the explorer's counterexample replays on a fresh database; a
stale worker's failure (Retries enqueues a second retry) is the shortest
breach of invariant 5 and replays too; a restore or a snapshot that forgets
something is caught; and the guarded recovery is proved within
``TARGET_BOUND`` (failures on, about 4 minutes) with every danger reached.

The walks that take more than a few seconds are marked slow (--run-slow): the
non-slow suite keeps the mutations, and tests/test_targets_dramatiq.py replays
the shipped row's duplicate on its fixed path.

Every test needs Redis and dramatiq (see tests/test_targets_dramatiq.py).
"""

from __future__ import annotations


import pytest

from fence.targets import TARGET_BOUND
from tests.target_explorer_checks import (
    guarded_row_proved, mutated_walk_is_caught, shipped_duplicate_replays, shortest_failure_finding_replays,
)
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis


dramatiq_module, shipped, guarded = system_fixtures("dramatiq")


@pytest.mark.slow
def test_the_explorer_finds_dramatiqs_duplicate_and_it_replays_on_a_fresh_database(shipped, redis_url):
    """Breadth first on maintenance: a job written twice, whose path replays on another storage's emptied database."""
    shipped_duplicate_replays("dramatiq", shipped, redis_url)


@pytest.mark.slow
def test_a_stale_workers_failure_is_the_shortest_breach_of_invariant_5_and_it_replays(shipped, redis_url):
    """Retries enqueues a retry whatever the worker holds: the stalled worker's failure, after the retry took the
    message, is accepted (the broker changed) and fence's facts call it a stale attempt changing a newer one."""
    story = shortest_failure_finding_replays(
        "dramatiq", shipped, redis_url, "stale_attempt_cannot_change_newer",
        "job1#1's fail changed job1/r2, which belongs to job1#2")
    assert story[2:] == ["janitor 0 sees job1/r1 expired and frees its unit",
                         "job1 is retried: a worker reserves a unit as attempt job1#2 (lease until t=4)",
                         "job1#1 fails before its effect and reports it: job1/r1 is unused"]


@pytest.mark.slow
def test_the_explorer_proves_the_guarded_row_with_failures_and_reaches_every_danger(guarded):
    """dramatiq with fence.guard, every interleaving within TARGET_BOUND (workers that may fail): nothing broken,
    every danger reached, failure_after_effect included, copies faithful (about 4 minutes)."""
    guarded_row_proved("dramatiq+guard", guarded, destination_on_the_server=False, bound=TARGET_BOUND)


# -- what the FaithfulnessCheck is for: a copy that forgets something ---------------------------
def _forget_heartbeats(module, monkeypatch):
    """A load that stamps every heartbeat now: time restored as an instant, not as ticks ago."""
    real = module.DramatiqLedger.load

    def now_again(self, image):
        keys = tuple((name, kind, tuple((member, 0) for member, _ in value) if kind == "zset" else value)
                     for name, kind, value in image.keys)
        real(self, module.RedisImage(keys, image.ttls))

    monkeypatch.setattr(module.DramatiqLedger, "load", now_again)


def _forget_the_ack_sets(module, monkeypatch):
    """A load that drops every worker's ack set: a copy forgets which worker holds the message."""
    real = module.DramatiqLedger.load
    monkeypatch.setattr(module.DramatiqLedger, "load", lambda self, image: real(self, module.RedisImage(
        tuple(key for key in image.keys if not key[0].startswith(b"dramatiq:__acks__.")), image.ttls)))


def _snapshot_without_time(module, monkeypatch):
    """A snapshot that drops the heartbeat ticks and the reservations' deadlines: when a lease runs out."""
    real = module.DramatiqLedger.snapshot

    def timeless(self):
        takes, keys, *rest = real(self)
        takes = tuple(t[:5] + t[6:] for t in takes)
        return (takes, tuple(k for k in keys if k[1] != "zset"), *rest)

    monkeypatch.setattr(module.DramatiqLedger, "snapshot", timeless)


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
