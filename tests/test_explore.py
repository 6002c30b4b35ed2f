"""The exhaustive explorer: verdicts, proofs within bounds, shortest counterexamples, the CLI.

The CI bound is 1 unit x 1 job x 3 attempts, lease 2, horizon 3 (``CI_BOUND``):
the state space under it is exhausted for every policy in 5-40 s each, so the
default run explores naive (the most violations) and abandon-fenced (the safe
policy) and leaves the full matrix to ``--run-slow``. At horizon 3 a lease of 2
expires at most once per attempt, so the third attempt is never started by
the chosen steps (only by the drain); see the README for the horizon-4 figures.
"""

import random
import subprocess
import sys

import pytest

from fence._cli import PROFILES
from fence._explore import Outcome, _DrainJudge, explore, shortest, state_key
from fence._invariants import BY_NAME, required_dangers
from fence._policies import POLICIES
from fence._verdicts import Verdict, load_expected, profile_settings, survey_config
from fence._world import ModelConfig, World

CI_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=3)
EXPECTED = load_expected()
FENCE = [sys.executable, "-m", "fence._cli"]
_CACHE: dict[str, object] = {}


def explored(name: str):
    if name not in _CACHE:
        _CACHE[name] = explore(POLICIES[name], CI_BOUND)
    return _CACHE[name]


def _expected_outcome(verdict: Verdict) -> Outcome:
    return Outcome.VIOLATED if verdict is Verdict.VIOLATED else Outcome.PROVED


def _check_row(name: str) -> None:
    found = explored(name)
    assert found.exhausted, f"{name}: the state space under {CI_BOUND} was not exhausted"
    observed = {inv: item.outcome for inv, item in found.results.items()}
    wanted = {inv: _expected_outcome(v) for inv, v in EXPECTED[name].items()}
    assert observed == wanted


@pytest.mark.parametrize("name", ["naive", "abandon-fenced"])
def test_explorer_row_equals_the_expected_matrix(name):
    """Exhausting the CI bound gives the committed row: violated cells violated, holds cells proved."""
    _check_row(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in POLICIES if n not in ("naive", "abandon-fenced")])
def test_explorer_row_equals_the_expected_matrix_for_every_other_policy(name):
    """The same for the remaining policies (about 3 minutes in all)."""
    _check_row(name)


def test_abandon_fenced_is_proved_at_one_unit_one_job_three_attempts():
    """The safe policy is PROVED for every invariant, with the state space exhausted."""
    found = explored("abandon-fenced")
    assert found.exhausted and found.stopped_by is None
    assert all(item.outcome is Outcome.PROVED for item in found.results.values())
    assert found.outcome() is Outcome.PROVED
    assert found.drains_unsettled == 0


@pytest.mark.parametrize("name", ["naive", "abandon-fenced"])
def test_the_dangerous_states_are_reached(name):
    """Every danger the policy must face is reached by some explored transition."""
    found = explored(name)
    assert not found.missing_dangers()
    for danger in required_dangers(POLICIES[name]):
        assert found.reached[danger.name] > 0


@pytest.mark.parametrize("name", ["naive", "abandon-fenced"])
def test_explorer_and_hypothesis_agree_at_the_same_bound(name):
    """At the CI bound, Hypothesis violates exactly the cells the explorer violates."""
    examples, steps, _shrink = PROFILES["default"]
    hypothesis = survey_config(POLICIES[name], CI_BOUND, run_settings=profile_settings(examples, steps))
    found = explored(name)
    violated = {inv for inv, item in found.results.items() if item.outcome is Outcome.VIOLATED}
    assert set(hypothesis.counterexamples) == violated
    for inv, example in hypothesis.counterexamples.items():
        assert found.results[inv].depth <= example.rule_steps


def test_explorer_shortest_naive_duplicate_is_no_longer_than_the_minimised_one():
    """On the default model, the explorer's shortest naive double write is <= fence's minimised one."""
    examples, steps, _shrink = PROFILES["default"]
    result = survey_config(POLICIES["naive"], ModelConfig(), run_settings=profile_settings(examples, steps))
    minimised = result.counterexamples["no_duplicate_writes"]
    best = shortest(
        POLICIES["naive"], ModelConfig(), BY_NAME["no_duplicate_writes"],
        max_depth=minimised.rule_steps, max_states=None, time_budget=60,
    )
    assert best is not None
    print(f"minimised {minimised.rule_steps} steps, explorer's shortest {best.rule_steps}")
    assert best.rule_steps <= minimised.rule_steps
    assert best.shortest_steps == best.rule_steps


def test_a_violation_found_under_a_budget_is_still_violated_and_the_rest_undetermined():
    """A tiny state budget leaves unbroken invariants UNDETERMINED, never PROVED."""
    found = explore(POLICIES["naive"], CI_BOUND, max_states=50)
    assert found.stopped_by == "max_states" and not found.exhausted
    assert found.results["no_early_release"].outcome is Outcome.VIOLATED
    assert found.results["capacity_conserved"].outcome is Outcome.UNDETERMINED
    assert found.outcome() is Outcome.VIOLATED


def test_symmetry_gives_the_same_verdicts_with_fewer_states():
    """Treating jobs as interchangeable keeps every verdict and shrinks the explored space."""
    config = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2)
    plain = explore(POLICIES["naive"], config, max_depth=9)
    reduced = explore(POLICIES["naive"], config, max_depth=9, symmetry=True)
    assert {k: v.outcome for k, v in plain.results.items()} == {k: v.outcome for k, v in reduced.results.items()}
    assert reduced.states < plain.states


def test_the_memoised_drain_judges_as_drain_does():
    """Invariant 6 through the explorer's memoised drain equals World.drain() on random states."""
    inv = BY_NAME["everything_settles"]
    rng = random.Random(5)
    for name in ("naive", "witness-fenced", "abandon-fenced-shared"):
        judge = _DrainJudge([inv])
        for _ in range(60):
            world = World(POLICIES[name], ModelConfig(capacity=2, jobs=2))
            for _ in range(rng.randrange(0, 25)):
                actions = world.enabled_actions()
                if not actions:
                    break
                world.apply(rng.choice(actions))
            broken, _settled = judge(world)
            plain = world.clone()
            plain.drain()
            assert (inv.name in broken) == bool(inv.check(plain))


def test_clone_is_independent_and_keeps_the_state():
    """A clone has the same fingerprint, and moving it leaves the original alone."""
    world = World(POLICIES["naive"], ModelConfig(capacity=2, jobs=2))
    for action in ["reserve", "start", "send_commit"]:
        world.apply(world.enabled(action)[0])
    copy = world.clone()
    assert copy.fingerprint() == world.fingerprint() and state_key(copy) == state_key(world)
    copy.apply(copy.enabled("deliver")[0])
    assert copy.fingerprint() != world.fingerprint()
    assert len(world.trace) == 3 and len(copy.trace) == 4
    assert world.clone(history=False).trace == []


def run(*args, cwd=None):
    return subprocess.run([*FENCE, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_cli_explore_exit_3_when_the_state_budget_runs_out(tmp_path):
    """``fence explore --max-states`` too small to finish exits 3 (undetermined), not 0."""
    result = run("explore", "--policy", "abandon-fenced", "--max-states", "20", "--out", str(tmp_path))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "UNDETERMINED" in result.stdout


def test_cli_explore_exit_0_when_proved_and_1_when_violated(tmp_path):
    """A tiny horizon: abandon-fenced is proved (exit 0), naive violated (exit 1, files written)."""
    proved = run("explore", "--policy", "abandon-fenced", "--horizon", "2", "--out", str(tmp_path))
    assert proved.returncode == 0, proved.stdout + proved.stderr
    violated = run("explore", "--policy", "naive", "--horizon", "2", "--out", str(tmp_path), "--json")
    assert violated.returncode == 1, violated.stdout + violated.stderr
    assert (tmp_path / "naive__no_early_release.json").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--policy", "no-such-policy"], "unknown policy"),
        (["--capacity", "0"], "must be at least 1"),
        (["--horizon", "-1"], "cannot be negative"),
        (["--max-states", "-5"], "must be at least 1"),
        (["--time-budget", "0"], "more than 0 seconds"),
        (["--capacity", "1", "--jobs", "2"], "must not exceed capacity"),
    ],
)
def test_cli_explore_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    """Each bad explore argument is one line on stderr, exit 2, no traceback."""
    result = run("explore", *args, "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr
