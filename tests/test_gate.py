"""The verdict gate: the models' findings for each policy, pinned and re-found.

Three layers, fastest first:
* every counterexample in tests/pinned/ still replays and still breaks its
  invariant (deterministic, milliseconds: a changed policy that fixes or moves
  a known bug shows up here first);
* Hypothesis finds the naive duplicate write from scratch and shrinks it short;
* (slow) every policy is judged by the machines and compared cell by cell with
  fence/expected_verdicts.txt.
"""

from pathlib import Path

import pytest

from fence import _counterexample
from fence._invariants import BY_NAME
from fence._policies import POLICIES
from fence._verdicts import (
    EXPECTED_FILE,
    Verdict,
    _run_once,
    compare,
    judge_all,
    load_expected,
    parse_expected,
    profile_settings,
)
from fence._world import ModelConfig

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
    policy, _config, invariant, _actions, _drains = _counterexample.load(path)
    assert EXPECTED[policy.name][invariant] is Verdict.VIOLATED, "pinned for a cell expected to hold"
    world, violation = _counterexample.replay(path)
    assert violation, f"{path.name} no longer breaks {invariant}:\n" + "\n".join(s.sentence for s in world.trace)


def test_hypothesis_finds_the_naive_duplicate_and_shrinks_it_to_at_most_12_steps(capsys):
    """From scratch, the machine finds naive's double write in a short, readable story."""
    machine, violation = _run_once(
        POLICIES["naive"], ModelConfig(), [BY_NAME["no_duplicate_writes"]], profile_settings(300, 30), None, None
    )
    assert violation is not None, "Hypothesis did not find the naive duplicate write"
    chosen = [step for step in violation.trace if not step.drain]
    print("\n".join(f"{n}. {s.sentence}" for n, s in enumerate(chosen, 1)))
    assert len(chosen) <= 12


def test_a_flipped_expectation_is_reported_as_a_difference():
    """Changing one committed verdict makes the comparison fail on exactly that cell."""
    text = EXPECTED_FILE.read_text()
    flipped = text.replace(
        "abandon-fenced          holds     holds", "abandon-fenced          violated  holds", 1
    )
    assert flipped != text
    expected = parse_expected(flipped)

    class Report:  # the shape compare() reads, with the committed verdicts observed
        def __init__(self, name):
            self.policy = POLICIES[name]
            self.cells = {inv: type("Cell", (), {"verdict": v})() for inv, v in EXPECTED[name].items()}

    differences = compare([Report(name) for name in POLICIES], expected)
    assert [(d.policy, d.invariant) for d in differences] == [("abandon-fenced", "no_duplicate_writes")]


@pytest.mark.slow
def test_the_machines_reproduce_the_expected_matrix():
    """Every policy through the machines: observed verdicts equal the committed ones."""
    reports = judge_all(POLICIES.values(), run_settings=profile_settings(300, 35), progress=None)
    differences = compare(reports, EXPECTED)
    stories = []
    for report in reports:
        for name, cell in report.cells.items():
            if cell.counterexample:
                stories.append(_counterexample.steps_text(cell.counterexample))
            elif cell.detail:
                stories.append(f"{report.policy.name}/{name}: {cell.verdict.value}: {cell.detail}")
    assert not differences, "\n".join(map(str, differences)) + "\n\n" + "\n\n".join(stories)
