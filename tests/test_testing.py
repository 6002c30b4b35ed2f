"""fence in a user's own CI: ``fence.testing`` and the pytest plugin, used as a user uses them.

The assertions must pass where the verdict backs them and fail, with the
counterexample and its replay command, where it does not. The plugin is run
in a pytest of its own (pytester, a subprocess), and the worked example under
examples/ticket-fleet runs exactly as its README says, so that it cannot rot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fence import BadInput, Guards, Reconcile, TicketService, fenced
from fence.search import counterexample
from fence.checking.verdicts import Verdict
from fence.checking.expected import load_expected
from fence.model.world import ModelConfig
from fence.testing import INVARIANT_NAMES, check, check_target

# One worker takes the whole file, so that each module fixture's check (about 10 s) is made once, not once
# per worker that happens to get one of its tests.
pytestmark = pytest.mark.xdist_group("testing")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ticket-fleet"
# For the tests of what is recorded and refused, not of the verdicts: one unit, one job,
# two attempts to horizon 2 (every danger reached), instead of check's default bounds.
SMALL_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2)


@pytest.fixture(scope="module")
def naive(tmp_path_factory):
    return check("naive", profile="quick", out=tmp_path_factory.mktemp("naive"))


@pytest.fixture(scope="module")
def abandon_fenced(tmp_path_factory):
    # The assertions' semantics, at a small bound: its proof at check's default bounds is
    # tests/test_check_bounds.py's (a user's copy of it) and the verdict gate's.
    return check("abandon-fenced", profile="quick", out=tmp_path_factory.mktemp("abandon-fenced"),
                 explorer_bounds=[SMALL_BOUND])


# -- the assertions --------------------------------------------------------------------
def test_naive_is_violated_where_the_committed_matrix_says_and_its_files_replay(naive):
    expected = load_expected()["naive"]
    naive.assert_matches(expected)
    violated = [name for name, verdict in expected.items() if verdict is Verdict.VIOLATED]
    naive.assert_violated(*violated)
    naive.assert_violated()
    for name in violated:
        policy, config, invariant, actions, _drains = counterexample.load(naive.replay_file(name))
        assert (policy.name, invariant) == ("naive", name) and actions
    assert naive.replay_file("capacity_conserved") is None  # proved: no file


def test_assert_proved_on_naive_fails_with_the_table_the_steps_and_the_replay_command(naive):
    with pytest.raises(AssertionError) as failed:
        naive.assert_proved()
    message = str(failed.value)
    assert message.startswith("fence: policy 'naive': expected proved: no_duplicate_writes is violated")
    assert "policy  1" in message  # the table
    assert "=> job1 ended with 2 effects, not exactly one" in message  # the steps
    assert f"replay it: fence replay {naive.replay_file('no_duplicate_writes')}" in message
    naive.assert_proved("capacity_conserved", "no_silent_replay")  # the cells that are proved


def test_assert_matches_fails_on_any_changed_cell_either_way(naive):
    flipped = dict(load_expected()["naive"], capacity_conserved=Verdict.VIOLATED)
    with pytest.raises(AssertionError, match="capacity_conserved is proved, expected violated"):
        naive.assert_matches(flipped)
    with pytest.raises(AssertionError, match="no_duplicate_writes is violated, expected proved"):
        naive.assert_matches({"no_duplicate_writes": "proved"})


def test_a_safe_policy_is_proved_and_not_violated(abandon_fenced):
    abandon_fenced.assert_proved().assert_not_found()
    assert set(abandon_fenced.verdicts.values()) == {Verdict.PROVED}
    assert abandon_fenced.written == []
    with pytest.raises(AssertionError, match="expected violated: any invariant"):
        abandon_fenced.assert_violated()
    with pytest.raises(AssertionError, match="expected violated: no_duplicate_writes"):
        abandon_fenced.assert_violated("no_duplicate_writes")


def test_not_found_is_weaker_than_proved_and_says_so(abandon_fenced):
    # Only Hypothesis searched (explore=False): "not found" at best, which assert_proved refuses.
    hypothesis_only = check("abandon-fenced", profile="quick", explore=False, configs=[ModelConfig(1, 1)])
    hypothesis_only.assert_not_found()
    with pytest.raises(AssertionError, match="expected proved: no_duplicate_writes is not-found"):
        hypothesis_only.assert_proved()


def test_names_that_are_not_invariants_or_verdicts_are_refused(naive):
    with pytest.raises(ValueError, match="unknown invariant 'no_duplicates': use one of no_duplicate_writes"):
        naive.assert_proved("no_duplicates")
    with pytest.raises(ValueError, match="unknown verdict 'holds'"):
        naive.assert_matches({"capacity_conserved": "holds"})
    assert INVARIANT_NAMES[0] == "no_duplicate_writes" and len(INVARIANT_NAMES) == 7


# -- plug-ins as objects ----------------------------------------------------------------
def test_a_policy_class_is_recorded_so_that_fence_replay_loads_it(tmp_path):
    checked = check(Reconcile, profile="quick", out=tmp_path, configs=[ModelConfig(1, 1)], explorer_bounds=[SMALL_BOUND])
    checked.assert_violated("no_duplicate_writes")
    data = counterexample.read_json(checked.replay_file("no_duplicate_writes"))
    assert data["plugins"] == {"policy": "fence.model.policies:Reconcile"}
    policy, *_ = counterexample.load(checked.replay_file("no_duplicate_writes"))
    assert policy == Reconcile()


def test_objects_fence_cannot_import_again_are_named_and_replay_refuses_them(tmp_path):
    checked = check(
        fenced(Reconcile(), name="mine"), destination=lambda guards: TicketService(guards),
        profile="quick", out=tmp_path, configs=[ModelConfig(1, 1)], explorer_bounds=[SMALL_BOUND],
    )
    with pytest.raises(AssertionError) as failed:
        checked.assert_proved("no_release_while_effect_exists")
    assert "fence replay cannot run these files: the policy and the destination cannot be imported again" in str(failed.value)
    assert "replay it:" not in str(failed.value)
    with pytest.raises(BadInput, match="found with a policy passed to fence.testing as an object fence cannot import"):
        counterexample.load(checked.replay_file("no_release_while_effect_exists"))


@pytest.mark.parametrize("arguments, refusal", [
    ((lambda: None,), "is not a janitor policy but a function"),
    (("no_such_policy",), "unknown policy 'no_such_policy'"),
    (("naive",), None),
])
def test_bad_plug_ins_are_one_line_refusals(arguments, refusal):
    if refusal is None:  # the same call with a broken destination
        with pytest.raises(BadInput, match="returned None when called with the policy's Guards"):
            check(*arguments, destination=lambda guards: None, profile="quick")
        return
    with pytest.raises(BadInput, match=refusal):
        check(*arguments, profile="quick")


def test_bad_settings_are_one_line_refusals():
    with pytest.raises(BadInput, match="unknown profile 'fast'"):
        check("naive", profile="fast")
    with pytest.raises(BadInput, match="capacity must be at least 1"):
        check("naive", profile="quick", configs=[ModelConfig(0, 1)])
    with pytest.raises(BadInput, match="unknown target 'sidekiq'"):
        check_target("sidekiq", "postgresql://nowhere/none")
    assert Guards().describe() == "none"


@pytest.mark.postgres
@pytest.mark.slow  # 9 s; check_target on a user's target is in every run in tests/test_targets_user.py
def test_check_target_judges_a_real_queue_and_keeps_its_lockstep_findings(postgres_url, tmp_path):
    # The machines alone: the explorer on a target has tests of its own (tests/test_targets_explorer.py).
    shipped = check_target("procrastinate", postgres_url, profile="quick", explore=False, out=tmp_path)
    assert shipped.report.exploration is None
    shipped.assert_violated("no_duplicate_writes")
    assert shipped.lockstep_findings, "a stale finish_job completing the retry's row is a finding"
    assert shipped.replay_file("no_duplicate_writes").is_file()
    with pytest.raises(AssertionError, match="expected not-found: no_duplicate_writes is violated"):
        shipped.assert_not_found()


# -- the pytest plugin, in a pytest of its own ----------------------------------------------
USER_TESTS = '''
def test_naive_is_proved(fence_check):
    fence_check("naive").assert_proved()
'''


def test_the_plugin_writes_counterexamples_where_asked_and_summarises_each_check(pytester, tmp_path):
    pytester.makepyfile(test_user=USER_TESTS)
    out = tmp_path / "artifacts"
    result = pytester.runpytest_subprocess("--fence-profile", "quick", "--fence-out", str(out), "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*fence: policy 'naive': expected proved: no_duplicate_writes is violated*",
        "*replay it: fence replay *naive__no_duplicate_writes.json",
        "*= fence =*",
        "test_user.py::test_naive_is_proved: naive: 4 violated, 3 proved; counterexamples in *",
    ])
    written = sorted(path.name for path in out.rglob("*.json"))
    assert "naive__no_duplicate_writes.json" in written and len(written) == 4


def test_the_plugin_can_be_turned_off_and_refuses_an_unknown_profile(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    off = pytester.runpytest_subprocess("-p", "no:fence", "-p", "no:cacheprovider")
    off.assert_outcomes(errors=1)
    off.stdout.fnmatch_lines(["*fixture 'fence_check' not found*"])
    pytester.makeini("[pytest]\nfence_profile = fast\n")
    refused = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*fence_profile = 'fast' in the ini file: use one of quick, default, thorough*"])


# -- the worked example, as its README runs it --------------------------------------------
def _example_pytest(directory: Path, *arguments: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "FENCE_PROFILE"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments],
        cwd=directory, env=environment, capture_output=True, text=True, timeout=600,
    )


@pytest.mark.slow  # 37 s: the example's own pytest, two checks at the default bounds; the plugin's path runs above in every run
def test_the_worked_example_passes_as_its_readme_says():
    run = _example_pytest(EXAMPLE)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
    assert "look-up-then-release: 3 violated, 4 proved" in run.stdout
    assert "cancel-unless-created: 7 proved" in run.stdout


@pytest.mark.slow  # 10-15 s: the generic explorer path on the example's own plug-ins
def test_the_worked_example_fails_when_its_help_desk_forgets_a_cancellation(tmp_path):
    # The same project with one bug: cancelling does not record the cancellation,
    # so a late create still lands after the unit went back.
    copy = tmp_path / "ticket-fleet"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    desk = copy / "ticket_fleet" / "helpdesk.py"
    source = desk.read_text()
    recorded = "        self._claims[attempt_id] = AttemptState.ABANDONED  # also for an attempt we never heard of\n"
    assert recorded in source
    desk.write_text(source.replace(recorded, ""))
    run = _example_pytest(copy, "-k", "cancelling")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "fence: policy 'cancel-unless-created': expected proved: no_release_while_effect_exists is violated" in run.stdout
