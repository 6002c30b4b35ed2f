"""The exhaustive explorer on procrastinate, what only it shows: restores and snapshots that forget something.

The target's ledger and fence's destination beside it are restorable
(``fence.model.restore``): the explorer's generic path deep-copies them as images of
their tables and keys them by their ``snapshot()``, and its FaithfulnessCheck
replays paths from scratch on emptied tables to test both. What every target
shows (the shipped row's duplicate found and replayed, the guarded row proved
with and without failures) is in tests/test_targets_rows.py. Here: a restore or
a snapshot of procrastinate's tables that forgets something is caught, and
judge_target combines both engines on both rows.

Every test needs PostgreSQL and procrastinate (see tests/test_targets.py).
"""

from __future__ import annotations

import pytest

from fence.explore.results import Outcome
from fence.checking.verdicts import Verdict, profile_settings
from fence.targets import EXPLORER_BOUND, TARGETS, judge_target
from tests.target_explorer_checks import FAITHFULNESS, mutated_walk_is_caught
from tests.target_fixtures import system_fixtures

pytestmark = pytest.mark.postgres


procrastinate_module, _, _ = system_fixtures("procrastinate")


# -- what the FaithfulnessCheck is for: a copy that forgets something -------------------------
def _mutated_load(module, monkeypatch, mutate) -> None:
    """The adapter's session loading ``mutate(script)`` instead of its image's load script."""
    def load(session, image):
        session.run(session.execute(mutate(session.image.load_script(image, session.sequences))))

    monkeypatch.setattr(module.Session, "load", load)


def _forget_sequences(module, monkeypatch):
    """A load that leaves every sequence where the last user left it."""
    _mutated_load(module, monkeypatch, lambda script: ";\n".join(
        line for line in script.split(";\n") if not line.startswith("SELECT setval")))


def _forget_heartbeats(module, monkeypatch):
    """A load that sets every worker's heartbeat to now: time restored as an instant, not as ticks."""
    _mutated_load(module, monkeypatch, lambda script: script.replace("(w->>'heartbeat_ticks_ago')::int", "0"))


def _snapshot_without_time(module, monkeypatch):
    """A snapshot that drops the heartbeats' ticks and the fetches' deadline column: when a lease runs out."""
    real = module.ProcrastinateLedger.snapshot

    def timeless(self):
        jobs, _heartbeats, periodic, sequence, fetches, *rest = real(self)
        return (jobs, periodic, sequence, tuple(fetch[:-1] for fetch in fetches), *rest)

    monkeypatch.setattr(module.ProcrastinateLedger, "snapshot", timeless)


CAUGHT = {
    # mutation: how it is caught
    _forget_sequences: "unfaithful",  # the next row's id is taken: procrastinate refuses what a fresh database does
    _snapshot_without_time: "unfaithful",  # a lease reserved before a tick merged with one reserved after it
    # every load makes the heartbeats new: a lease never runs out, the drain never settles, and that
    # "violation" does not replay on a fresh database, so it is not reported: the walk is unfaithful
    _forget_heartbeats: "does not replay",
}


# The heartbeats' case (24 s: its walk runs until the false violation fails to replay) with --run-slow;
# tests/test_targets_explorer_celery.py catches the same kind of mutation in every run.
@pytest.mark.parametrize("mutation", [
    mutation if mutation is not _forget_heartbeats else pytest.param(mutation, marks=pytest.mark.slow)
    for mutation in CAUGHT
], ids=lambda mutation: mutation.__name__.strip("_"))
def test_a_restore_or_snapshot_that_forgets_something_is_caught(mutation, procrastinate_module, postgres_url,
                                                                monkeypatch):
    """Each mutation of the image or the snapshot stops the walk as unfaithful, or a false violation fails to replay.

    At the bound without failures, where the guarded row holds: a false violation there is the mutation's alone.
    """
    mutation(procrastinate_module, monkeypatch)
    mutated_walk_is_caught("procrastinate+guard", postgres_url, CAUGHT[mutation], bound=EXPLORER_BOUND, said=("answer",))


# -- both engines, as fence targets combines them ----------------------------------------------
@pytest.mark.slow
def test_judge_target_combines_both_engines_on_both_rows(postgres_url, procrastinate_module):
    """judge_target: the shipped row violated by both engines, the guarded row, with workers that never fail, proved
    (Hypothesis: not-found)."""
    from fence.model.world import ModelConfig

    one = [ModelConfig(capacity=1, jobs=1)]
    shipped = judge_target(TARGETS["procrastinate"], postgres_url, configs=one,
                           run_settings=profile_settings(40, 30), faithfulness=FAITHFULNESS).report
    for name, verdict in shipped.hypothesis_verdicts.items():
        if verdict is Verdict.VIOLATED:  # what Hypothesis found, the explorer finds within its bound
            assert shipped.exploration.results[name].outcome is Outcome.VIOLATED, name
    assert shipped.cells["no_duplicate_writes"].verdict is Verdict.VIOLATED
    guarded = judge_target(TARGETS["procrastinate+guard"], postgres_url, configs=one,
                           run_settings=profile_settings(40, 30), faithfulness=FAITHFULNESS, failures=False).report
    assert set(guarded.hypothesis_verdicts.values()) == {Verdict.NOT_FOUND}
    assert {cell.verdict for cell in guarded.cells.values()} == {Verdict.PROVED}, {
        name: cell.detail for name, cell in guarded.cells.items()}
