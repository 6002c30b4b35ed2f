"""The exhaustive explorer on celery with kombu's Redis transport, what only it shows.

celery's ledger (every key of its Redis database: kombu's queues, bindings,
``unacked`` and ``unacked_index``, with fence's own records beside them) is
restorable (``fence.model.restore``: a dump of every key, a load after FLUSHDB),
and the destination is fence's in-memory one, so the explorer's generic path
copies worlds and keys them by their ``snapshot()`` (delivery tags and task ids
by rank), and its FaithfulnessCheck replays paths from scratch on an emptied
database. What every target shows (restore_visible's duplicate found and
replayed; celery's ack on failure, keyed by the delivery tag alone, the shortest
breach of 5; the guarded row proved with and without failures) is in
tests/test_targets_rows.py. Here: a restore or a snapshot of celery's keys that
forgets something is caught; a copy's restore after a load (a regression at two
jobs); and the deep profile's walk at 2 units x 2 jobs.

Every test needs Redis and celery (see tests/test_targets_celery.py).
"""

from __future__ import annotations

import pytest

from fence.model.policies import POLICIES
from fence.model.world import ModelConfig, Reserve, Scan, Tick, World
from fence.targets import TARGETS, explore_target
from tests.target_explorer_checks import FAITHFULNESS, mutated_walk_is_caught, zset_scores_now
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.redis


celery_module, shipped, guarded = system_fixtures("celery")


# -- what the FaithfulnessCheck is for: a copy that forgets something -------------------------
def _forget_delivery_times(module, monkeypatch):
    """A load that sets every delivery time in unacked_index to now: time restored as an instant, not as ticks."""
    real = module.load_keys

    monkeypatch.setattr(module, "load_keys", lambda client, image: real(client, module.Image(zset_scores_now(image.keys))))


def _forget_the_queues(module, monkeypatch):
    """A load that leaves every queue empty: a message restored to its queue is lost in a copy."""
    real = module.load_keys
    monkeypatch.setattr(module, "load_keys", lambda client, image: real(
        client, module.Image(tuple(key for key in image.keys if key[1] != "list"))))


def _snapshot_without_time(module, monkeypatch):
    """A snapshot that drops unacked_index's delivery ticks and the deliveries' deadlines: when a lease runs out."""
    real = module.CeleryLedger.snapshot

    def timeless(self):
        deliveries, keys, *rest = real(self)
        deliveries = tuple(d[:3] + d[4:] for d in deliveries)  # the deadline is fourth (Taken's field order)
        keys = tuple(k for k in keys if k[1] != "zset")
        return (deliveries, keys, *rest)

    monkeypatch.setattr(module.CeleryLedger, "snapshot", timeless)


CAUGHT = {
    # mutation: (row, how it is caught)
    # every load makes the deliveries new: a lease never runs out, the drain never settles, and that
    # "violation" does not replay on a fresh database, so it is not reported: the walk is unfaithful
    _forget_delivery_times: ("celery+guard", "does not replay"),
    _forget_the_queues: ("celery", "unfaithful"),
    _snapshot_without_time: ("celery+guard", "unfaithful"),
}


@pytest.mark.parametrize("mutation", list(CAUGHT), ids=lambda mutation: mutation.__name__.strip("_"))
def test_a_restore_or_snapshot_that_forgets_something_is_caught(mutation, celery_module, redis_url, monkeypatch):
    """Each mutation of the image or the snapshot stops the walk as unfaithful, or a false violation fails to replay."""
    mutation(celery_module, monkeypatch)
    row, how = CAUGHT[mutation]
    mutated_walk_is_caught(row, redis_url, how)


# -- two jobs ----------------------------------------------------------------------------------
def test_a_copys_restore_after_a_load_restores_the_delivery_it_names(shipped, celery_module):
    """Regression: with two deliveries past their lease in one tick, a copy's scan restored the other one.

    Found at 2 units x 2 jobs by the FaithfulnessCheck's replays (a BackendError, "restore_visible
    restored [...], not [...]"): the copy paged restore_visible by a read made before its image was
    loaded, and a load writes a tick's delivery times as one score, which Redis ranks by tag where
    the read had ranked them by the instants they were taken at. Fresh worlds are tried until the
    tags rank the other way round from the instants (each try: an even chance).
    """
    config = ModelConfig(capacity=2, jobs=2, max_attempts=2, horizon=2)
    for _ in range(40):
        world = World(POLICIES["naive"], config, shipped.destination_factory, shipped.ledger_factory)
        for action in [Reserve("job1"), Reserve("job2"), Tick(2)]:
            world.apply(action)
        assert {r.reservation_id for r in world.ledger.expired(world.now)} == {"job1/r1", "job2/r1"}
        first, second = (world.ledger.delivery_of(rid)[0] for rid in ("job1/r1", "job2/r1"))
        if first > second:  # taken first, ranked first by tag: a load turns the read's order round
            break
    else:
        pytest.fail("40 fresh worlds, and the first delivery's tag never ranked above the second's")
    copy = world.clone()
    world.apply(Scan(0, "job1/r1"))  # the original changes the database: the copy must load its image
    said = copy.apply(Scan(0, "job2/r1")).sentence
    assert copy.ledger.get("job2/r1").state.value == "unused", said
    assert copy.ledger.get("job1/r1").state.value == "reserved"
    assert world.ledger.get("job1/r1").state.value == "unused" and world.ledger.get("job2/r1").state.value == "reserved"


# With --run-slow (13 s). Its deeper walk is cut by time, so the budget is 20 s, not 2: at a load of 7 a
# 2 s budget once ended before the first level did.
@pytest.mark.slow
def test_the_deep_profile_walks_two_jobs_after_the_proof_and_checks_every_depth_it_finishes(redis_url, celery_module):
    """judge_target's deeper walk (fence targets --profile deep): recorded apart, cut by its budget, faithful, the proof kept."""
    from fence.checking.verdicts import Verdict, profile_settings
    from fence.targets import EXPLORER_DEEP_BOUND, judge_target

    found = judge_target(TARGETS["celery+guard"], redis_url, configs=[ModelConfig(capacity=1, jobs=1)],
                         run_settings=profile_settings(5, 10), faithfulness=FAITHFULNESS,
                         deeper=(EXPLORER_DEEP_BOUND,), deeper_budget=20)
    walk, = found.deeper
    assert walk.config == EXPLORER_DEEP_BOUND and walk.stopped_by == "time_budget" and not walk.exhausted
    assert walk.unfaithful is None and walk.faithfulness_checks > 0 and walk.depth > 0
    assert {cell.verdict for cell in found.report.cells.values()} == {Verdict.PROVED}  # the first bound's proof
    assert found.report.exploration.config.jobs == 1 and found.report.exploration.exhausted


@pytest.mark.slow
def test_a_violation_the_deeper_walk_finds_becomes_its_cell(shipped, redis_url):
    """A cell Hypothesis left not-found is violated by what the walk at 2x2x2 found, with that walk's counterexample."""
    from fence.model.invariants import BY_NAME
    from fence.checking.verdicts import Verdict, profile_settings
    from fence.targets import EXPLORER_DEEP_BOUND, _with_violations, judge_target

    duplicate = BY_NAME["no_duplicate_writes"]
    report = judge_target(TARGETS["celery"], redis_url, configs=[ModelConfig(capacity=1, jobs=1)],
                          run_settings=profile_settings(1, 5), explore=False).report
    assert report.cells[duplicate.name].verdict is not Verdict.VIOLATED  # one run of five steps: too short
    walk = explore_target(TARGETS["celery"], shipped, EXPLORER_DEEP_BOUND, invariants=(duplicate,),
                          stop_when_all_violated=True, faithfulness=FAITHFULNESS)
    _with_violations(report, walk)
    cell = report.cells[duplicate.name]
    assert cell.verdict is Verdict.VIOLATED and cell.counterexample.config == EXPLORER_DEEP_BOUND
    assert "within 2 unit(s), 2 job(s)" in cell.detail
