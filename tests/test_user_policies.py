"""A user's policy on fence's own engine: keyed, memoised and symmetric like the built-ins, every call checked.

Each built-in policy is copied line for line into a plug-in file
(``tests/user_policies/builtin_copies.py``) and loaded by ``FILE.py:ATTR``, as
a user's is: the explorer must walk the copy exactly as it walks the built-in.
And each habit the keyed engine cannot allow (``tests/user_policies/not_keyable.py``)
must send the walk to whole worlds, with the reason, and to the verdict a
walk of whole worlds reaches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fence.explore.results import Outcome
from fence.explore.walk import explore, walk
from fence.model.invariants import BY_NAME
from fence.model.plugins import load_policy
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig

HERE = Path(__file__).resolve().parent / "user_policies"
COPIES = {
    "naive": "Naive", "reconcile": "Reconcile", "fenced": "Fenced", "witness": "Witness",
    "witness-fenced": "WitnessFenced", "abandon": "Abandon", "abandon-fenced": "AbandonFenced",
    "abandon-fenced-shared": "AbandonFencedShared",
}
CI_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=3)
HORIZON_4 = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=4)
TWO_BY_TWO = ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2)
TWO_JOBS_ONE_ATTEMPT = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2)
# Every copy at the CI bound in every run; naive (violated) at 2x2x2 in every run, and the
# proved abandon-fenced at two jobs with one attempt each (two jobs and their renaming, 13k
# states), since its 2x2x2 pair of walks (224k states each) was a tenth of the CI budget;
# every 2x2x2 walk, and horizon 4, with --run-slow. The benchmark times them all
# (fence bench explorer with the copies' specs).
DEEP_IN_EVERY_RUN = ("naive",)


def copy_of(name: str):
    return load_policy(f"{HERE / 'builtin_copies.py'}:{COPIES[name]}")


def what_it_concludes(found) -> dict:
    """Everything a walk concludes, but the policy's name and the time it took."""
    return {
        "states": found.states, "transitions": found.transitions, "depth": found.depth,
        "exhausted": found.exhausted, "unsettled": found.drains_unsettled,
        "reached": dict(found.reached),
        "results": {
            name: (item.outcome, item.depth,
                   [step.sentence for step in item.counterexample.steps] if item.counterexample else None)
            for name, item in found.results.items()
        },
    }


def _assert_walked_alike(name: str, config: ModelConfig, symmetry: bool = False) -> None:
    builtin = explore(POLICIES[name], config, symmetry=symmetry)
    copied = explore(copy_of(name), config, symmetry=symmetry)
    assert copied.whole_worlds_because is None, copied.whole_worlds_because
    assert copied.symmetry == symmetry
    assert builtin.policy_calls_checked == 0
    assert copied.policy_calls_checked > 0 or not copied.policy.hold_on_expiry  # naive's frees on the scan, unasked
    assert what_it_concludes(copied) == what_it_concludes(builtin)


@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_of_a_builtin_is_walked_as_the_builtin_at_the_ci_bound(name):
    _assert_walked_alike(name, CI_BOUND)


@pytest.mark.parametrize("name", [
    name if name in DEEP_IN_EVERY_RUN else pytest.param(name, marks=pytest.mark.slow) for name in COPIES
])
def test_a_copy_of_a_builtin_is_walked_as_the_builtin_at_2x2x2_symmetric(name):
    _assert_walked_alike(name, TWO_BY_TWO, symmetry=True)


def test_the_proved_copy_is_walked_as_the_builtin_with_two_jobs_renamed():
    _assert_walked_alike("abandon-fenced", TWO_JOBS_ONE_ATTEMPT, symmetry=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COPIES))
def test_a_copy_of_a_builtin_is_walked_as_the_builtin_at_horizon_4(name):
    _assert_walked_alike(name, HORIZON_4)


def not_keyable(attribute: str):
    return load_policy(f"{HERE / 'not_keyable.py'}:{attribute}")


NOT_KEYABLE = {
    "ForJob2Only": "named job",
    "AsksAboutJob1": "asked about 'job1', which is not job2's",
    "ReadsEveryEffect": "read effects(), which is not one job's",
    "CountsItsProbes": "changed the policy's own fields (it keeps state)",
    "CoinFlip": "its decide()",
    "AnswersItsOwnEvidence": "answered a MoreEvidence, not a fence.Evidence",
    "DeclaresState": "it declares state of its own (snapshot())",
}


@pytest.mark.parametrize("attribute", list(NOT_KEYABLE))
def test_a_policy_the_keyed_engine_cannot_hold_is_walked_as_whole_worlds(attribute):
    """Each habit is caught (two jobs, so that a name and another job can show) and the walk says which."""
    found = explore(not_keyable(attribute), TWO_JOBS_ONE_ATTEMPT, max_states=300)
    assert found.whole_worlds_because is not None, "walked keyed"
    assert NOT_KEYABLE[attribute] in found.whole_worlds_because, found.whole_worlds_because
    assert found.policy_calls_checked == 0  # the walk that counts is the whole worlds'


def test_the_same_policy_without_the_habit_is_keyed():
    found = explore(not_keyable("AbandonFenced"), TWO_JOBS_ONE_ATTEMPT, symmetry=True)
    assert found.whole_worlds_because is None and found.symmetry and found.policy_calls_checked > 0
    assert found.exhausted and {item.outcome for item in found.results.values()} == {Outcome.PROVED}


def test_a_policy_that_frees_one_job_unsafely_gets_the_whole_worlds_verdict():
    """The habit changes a verdict: job2's unit is freed while its write can still land.

    The keyed walk would take job1's answers for job2's (they have the same
    part); the twins catch it and the whole worlds find the violation.
    """
    inv = BY_NAME["no_release_while_effect_exists"]
    policy = not_keyable("ForJob2Only")
    found = explore(policy, TWO_JOBS_ONE_ATTEMPT, invariants=(inv,), stop_when_all_violated=True)
    assert "named job" in found.whole_worlds_because
    assert found.results[inv.name].outcome is Outcome.VIOLATED
    assert any("job2" in step.sentence for step in found.results[inv.name].counterexample.steps)
    alone = walk(policy, TWO_JOBS_ONE_ATTEMPT, invariants=(inv,), stop_when_all_violated=True)
    assert alone.results[inv.name].outcome is Outcome.VIOLATED


def test_at_one_job_a_name_or_another_job_cannot_matter():
    """With one job there is no other name to swap with: the twin is the call made again, and it agrees."""
    for attribute in ("ForJob2Only", "AsksAboutJob1"):
        found = explore(not_keyable(attribute), CI_BOUND)
        assert found.whole_worlds_because is None and found.policy_calls_checked > 0, attribute
