"""The verdict gate: the models' findings for each policy, pinned and re-found.

Three layers, fastest first:
* every counterexample in tests/pinned/ still replays and still breaks its
  invariant (deterministic, milliseconds: a changed policy that fixes or moves
  a known bug shows up here first);
* Hypothesis finds the naive duplicate write from scratch, and both its own
  shrinker and fence's minimiser cut it to a short story;
* every policy is judged by the machines, exactly as ``fence verdicts`` judges
  it (derandomised, so every CI run draws the same examples), and compared cell
  by cell with fence/expected_verdicts.txt.
"""

from pathlib import Path

import pytest

from fence.search import counterexample
from fence.model.invariants import BY_NAME
from fence.search.minimise import minimise
from fence.model.policies import POLICIES
from fence.checking.checking import PROFILES
from fence.checking.verdicts import DEFAULT_CONFIGS, Verdict, run_once, judge, profile_settings, survey_config
from fence.checking.expected import EXPECTED_FILE, compare, load_expected, parse_expected
from fence.model.world import ModelConfig

PINNED = sorted(Path(__file__).with_name("pinned").glob("*.json"))
EXPECTED = load_expected()


def test_expected_file_names_every_builtin_policy_and_invariant():
    """The committed matrix has one row per built-in policy and a verdict per invariant."""
    assert list(EXPECTED) == list(POLICIES)
    for row in EXPECTED.values():
        assert set(row) == set(BY_NAME)


def test_every_expected_violation_has_a_pinned_counterexample():
    """A promised violation is backed by a counterexample that CI replays every run."""
    pinned = {path.stem for path in PINNED}
    for policy, row in EXPECTED.items():
        for invariant, verdict in row.items():
            if verdict is Verdict.VIOLATED:
                assert f"{policy}__{invariant}" in pinned, f"no pinned counterexample for {policy}/{invariant}"


@pytest.mark.parametrize("path", PINNED, ids=[p.stem for p in PINNED])
def test_pinned_counterexample_still_breaks_its_invariant(path):
    """Replaying a saved counterexample through today's model breaks the same invariant."""
    policy, _config, invariant, _actions, _drains = counterexample.load(path)
    assert EXPECTED[policy.name][invariant] is Verdict.VIOLATED, "pinned for a cell expected to hold"
    world, violation = counterexample.replay(path)
    assert violation, f"{path.name} no longer breaks {invariant}:\n" + "\n".join(s.sentence for s in world.trace)


def _print_story(steps) -> list:
    chosen = [step for step in steps if not step.drain]
    print("\n".join(f"{n}. t={s.now}: {s.sentence}" for n, s in enumerate(chosen, 1)))
    return chosen


def test_hypothesis_finds_the_naive_duplicate_and_it_shrinks_to_at_most_12_steps(capsys):
    """From scratch, Hypothesis finds naive's double write and shrinks it; minimised, it is <= 12 steps.

    Hypothesis' own stateful shrinker stops at 13 steps on this machine (it
    cannot delete two non-adjacent steps at once); fence's minimiser, replaying
    the same world, takes that to at most 12. Both stories are printed.
    """
    _machine, found = run_once(
        POLICIES["naive"],
        ModelConfig(),
        [BY_NAME["no_duplicate_writes"]],
        profile_settings(300, 30, shrink=True),
        None,
        None,
    )
    assert found is not None, "Hypothesis did not find the naive duplicate write"
    print(f"Hypothesis shrank it to {found.rule_steps} steps:")
    _print_story(found.trace)
    shrunk = minimise(POLICIES["naive"], ModelConfig(), [s.action for s in found.trace if not s.drain], found.invariant)
    print(f"fence minimised that to {len(shrunk.actions)} steps:")
    assert len(_print_story(shrunk.world.trace)) <= 12


def test_fence_verdicts_path_finds_the_naive_duplicate_in_at_most_12_steps(capsys):
    """The survey-and-minimise path of ``fence verdicts`` gives a counterexample as short."""
    examples, steps, _shrink = PROFILES["default"]
    result = survey_config(POLICIES["naive"], ModelConfig(), run_settings=profile_settings(examples, steps))
    example = result.counterexamples["no_duplicate_writes"]
    chosen = _print_story(example.steps)
    assert len(chosen) <= 12
    assert example.rule_steps <= example.found_steps


def test_a_flipped_expectation_is_reported_as_a_difference():
    """Changing one committed verdict makes the comparison fail on exactly that cell."""
    text = EXPECTED_FILE.read_text()
    flipped = text.replace(
        "abandon-fenced          proved    proved", "abandon-fenced          violated  proved", 1
    )
    assert flipped != text
    expected = parse_expected(flipped)

    class Report:  # the shape compare() reads, with the committed verdicts observed
        def __init__(self, name):
            self.policy = POLICIES[name]
            self.cells = {inv: type("Cell", (), {"verdict": v})() for inv, v in EXPECTED[name].items()}

    differences = compare([Report(name) for name in POLICIES], expected)
    assert [(d.policy, d.invariant) for d in differences] == [("abandon-fenced", "no_duplicate_writes")]


@pytest.mark.parametrize("name", list(POLICIES))
def test_the_machines_reproduce_the_expected_row(name):
    """The policy through the machines, as ``fence verdicts`` runs it: observed equals committed."""
    examples, steps, _shrink = PROFILES["default"]
    report = judge(POLICIES[name], configs=DEFAULT_CONFIGS, run_settings=profile_settings(examples, steps))
    differences = compare([report], {name: EXPECTED[name]})
    stories = []
    for invariant, cell in report.cells.items():
        if cell.counterexample:
            stories.append(counterexample.steps_text(cell.counterexample))
        elif cell.detail:
            stories.append(f"{name}/{invariant}: {cell.verdict.value}: {cell.detail}")
    assert not differences, "\n".join(map(str, differences)) + "\n\n" + "\n\n".join(stories)


def test_the_drain_retries_a_job_whose_attempts_ran_out_even_with_a_warm_cache():
    """Regression: drain() used an enabled-actions list cached before draining, so a job
    that had used all its attempts was never retried and ended with no effect (found
    as a fenced/everything_settles "violation" whose trace did not replay)."""
    from fence.model.world import World

    path = Path(__file__).with_name("regressions") / "drain_warm_cache.json"
    policy, config, _invariant, actions, _drains = counterexample.load(path)
    world = World(policy, config)
    for action in actions:
        world.apply(action)
    world.enabled("retry")  # what the machine's last precondition check did
    assert world.drain()
    assert BY_NAME["everything_settles"].check(world) is None


# The thorough profile's report, not the gate: about 2% of CI's CPU on a slow machine, so with --run-slow.
@pytest.mark.slow
def test_thorough_path_reports_hypothesis_shrink_and_keeps_the_shorter_trace():
    """With hypothesis_shrink, a violated cell records Hypothesis' shrunk length and is never longer."""
    result = survey_config(
        POLICIES["naive"], ModelConfig(), run_settings=profile_settings(100, 30), hypothesis_shrink=True
    )
    example = result.counterexamples["no_duplicate_writes"]
    assert example.hypothesis_steps is not None
    assert example.rule_steps <= min(example.hypothesis_steps, example.found_steps)
    assert "its shrinker cut one to" in counterexample.steps_text(example)
