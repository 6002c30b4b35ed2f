"""A user's own target, in a file outside the repository, end to end (issue 25).

``tests/user_targets/forgetful_desk.py`` is a target as a user writes one, on
fence's public names only: a ticket desk on Redis (redis-py) that claims the
guarded policy but forgets the abandonments it answers. Copied to a directory
outside the checkout, it runs through ``fence targets --target FILE.py:ATTR``
and ``fence.testing.check_target``; its counterexample names the target, and
``fence replay`` replays it on Redis, where it breaks again, while fence's
model, which keeps its abandonments, does not break on the same steps.

Every test that runs the desk needs Redis (the session's server, see conftest.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fence.base.errors import BadInput
from fence.model.invariants import BY_NAME
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES
from fence.live import replay_real
from fence.model.world import Action, ModelConfig
from fence.testing import check_target, replay_target


# Its module fixtures run once: every test of this file on one xdist worker (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("targets-user")

DESK = Path(__file__).resolve().parent / "user_targets" / "forgetful_desk.py"
FENCE = [sys.executable, "-m", "fence.cli.main"]
BROKEN = "no_early_release"
"""What the forgetting breaks: the abandoned attempt's late commit lands."""
DESK_FILE = f"forgetful-desk__abandon-fenced__{BROKEN}.json"


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A directory outside the checkout holding a copy of the desk, as a user's project would."""
    home = tmp_path_factory.mktemp("users-project")
    shutil.copy(DESK, home / "desk.py")
    return home


def _fence(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCE, *args], capture_output=True, text=True, cwd=cwd, timeout=280)


@pytest.fixture(scope="module")
def targets_run(outside, redis_url):
    """``fence targets`` on the desk and on the same desk claiming an impossible tick, into one directory.

    With --out and --report together, as on fence explore: counterexamples into DIR, the report to FILE.
    """
    out = outside / "found"
    result = _fence("targets", "--profile", "quick", "--target", "desk.py:FORGETFUL_DESK",
                    "--target", "desk.py:IMPATIENT_DESK", "--target", "desk.py:HURRIED_LEDGER_DESK", "--redis", redis_url,
                    "--out", str(out), "--report", "desk-report.txt", cwd=outside)
    return result, out


def _steps(path: Path) -> tuple[ModelConfig, list[Action]]:
    data = json.loads(path.read_text())
    chosen = [dict(step) for step in data["steps"] if not step["drain"]]
    for step in chosen:
        step.pop("drain"), step.pop("sentence")
    return ModelConfig(**data["config"]), [Action.from_dict(step) for step in chosen]


@pytest.mark.redis
def test_fence_targets_finds_the_forgetful_desk_from_a_file_outside_the_repository(targets_run, outside):
    """fence targets --target desk.py:ROW judges the user's row, names its files by the row, records the target."""
    result, out = targets_run
    # The desks claim abandon-fenced, which fence's model proves: broken, they fail the run like a guarded row
    # (exit 1), so a user's CI gate on their own target cannot pass a system that breaks its claim.
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:4]}
    assert rows["forgetful-desk"][2].startswith("violated") and rows["impatient-desk"][2].startswith("violated")
    assert "DID NOT REPLAY" not in result.stdout
    # Two targets claiming one policy, in one directory: each row's file, neither overwritten.
    found = json.loads((out / DESK_FILE).read_text())
    assert (out / f"impatient-desk__abandon-fenced__{BROKEN}.json").is_file()
    assert found["target"] == {"row": "forgetful-desk", "spec": f"{(outside / 'desk.py').resolve()}:FORGETFUL_DESK",
                               "storage": f"{(outside / 'desk.py').resolve()}:ForgetfulDeskStorage", "server": "redis"}
    report = (out.parent / "desk-report.txt").read_text()
    assert report.startswith("# command: fence targets")
    assert "== forgetful-desk" in report and not (out / "targets.txt").exists()  # the report went where asked


@pytest.mark.redis
def test_fence_targets_says_when_a_run_outlasts_the_adapters_tick(targets_run):
    """A row whose adapter claims a nanosecond tick (the row's, or its ledger's time) is told its assumption broke;
    the row that claims none is not."""
    result, _ = targets_run
    forgetful, impatient, hurried = (result.stdout.split(f"== {row}")[1].split("\n== ")[0]
                                     for row in ("forgetful-desk", "impatient-desk", "hurried-ledger-desk"))
    assert "ADAPTER ASSUMPTION VIOLATED: a run took" in impatient and "half the 1e-09 s" in impatient
    assert "ADAPTER ASSUMPTION VIOLATED: a run took" in hurried and "half the 1e-09 s" in hurried
    assert "ADAPTER ASSUMPTION VIOLATED" not in forgetful and "model time:" not in forgetful
    assert "impatient-desk: ADAPTER ASSUMPTION VIOLATED" in result.stderr


@pytest.mark.redis
def test_fence_replay_replays_the_desks_counterexample_on_redis_not_on_the_model(targets_run, outside, redis_url):
    """fence replay FILE breaks the invariant again on Redis and says so; fence's model, on the same steps, holds."""
    _, out = targets_run
    result = _fence("replay", str(out / DESK_FILE), "--redis", redis_url, cwd=outside)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "target forgetful-desk" in result.stdout and f"on Redis at {redis_url}" in result.stdout
    assert "BROKEN on the real system (redis-py " in result.stdout and BROKEN in result.stdout.splitlines()[-1]
    # The model keeps the abandonment, so the late commit is refused there: a replay on it would say
    # "did not reproduce", which is why a target's file never goes to the model.
    config, chosen = _steps(out / DESK_FILE)
    assert replay_actions(POLICIES["abandon-fenced"], config, chosen, BY_NAME[BROKEN]) is None
    with pytest.raises(BadInput, match="replays on the real system only"):
        replay_real(out / DESK_FILE, tick=0.001)


@pytest.mark.redis
def test_check_target_takes_a_spec_or_the_target_and_its_failure_gives_the_replay_that_works(outside, redis_url,
                                                                                              tmp_path):
    """check_target on the desk's spec finds it violated; its file is the row's, and the command it prints replays it."""
    checked = check_target(f"{outside / 'desk.py'}:FORGETFUL_DESK", redis_url, out=tmp_path)
    checked.assert_violated(BROKEN)
    assert checked.replay_file(BROKEN) == tmp_path / DESK_FILE
    with pytest.raises(AssertionError) as failed:
        checked.assert_not_found(BROKEN)
    message = str(failed.value)
    assert message.startswith("fence: target 'forgetful-desk' (claims the policy 'abandon-fenced')")
    # The legend names the explorer's bound on a target, not the CI bound of fence check.
    assert "proved: the explorer exhausted 1 unit(s), 1 job(s), 2 attempt(s) per job, lease 2 ticks" in message
    command = f"fence replay {tmp_path / DESK_FILE} --redis {redis_url}"
    assert f"replay it on the real system: {command}" in message
    replayed = _fence(*command.split()[1:], cwd=outside)
    assert replayed.returncode == 0 and "BROKEN on the real system" in replayed.stdout, replayed.stdout + replayed.stderr
    # The public replay, with no private module: the same system, the same break.
    again = replay_target(checked.replay_file(BROKEN), redis_url)
    assert again.violation and again.broke_at == sum(1 for s in again.steps if not s.drain) and "redis" in again.system


@pytest.mark.redis
def test_check_target_on_the_target_object_records_where_it_is_found_again(redis_url, tmp_path):
    """A Target passed as an object is recorded by the module attribute it is found at, so replay finds it."""
    from fence.targets.loading import load_target

    desk = load_target(f"{DESK}:FORGETFUL_DESK")
    checked = check_target(desk, redis_url, out=tmp_path)
    recorded = json.loads(checked.replay_file(BROKEN).read_text())["target"]
    assert recorded["spec"] == f"{DESK}:FORGETFUL_DESK"
    assert replay_target(checked.replay_file(BROKEN), redis_url).violation


def test_rows_and_targets_are_chosen_as_the_options_say():
    """--target alone runs only the targets; with --row the named built-ins too; neither, every built-in row."""
    from fence.cli.targets_command import chosen_targets
    from fence.targets import TARGETS

    def rows(row=None, target=None):
        return [t.row for t, _ in chosen_targets(argparse.Namespace(row=row, target=target))]

    spec = f"{DESK}:FORGETFUL_DESK"
    try:
        assert rows(target=[spec]) == ["forgetful-desk"]
        assert rows(row=["celery"], target=[spec, spec]) == ["celery", "forgetful-desk"]
        assert rows() == list(TARGETS)
    except BadInput as error:  # a built-in row's library is missing here
        pytest.skip(str(error))


@pytest.mark.redis
def test_a_target_built_inside_a_function_is_checked_but_its_files_say_they_cannot_be_replayed(redis_url, tmp_path):
    """A Target found at no module's top level: check_target judges it; its file and failure say why replay cannot."""
    from dataclasses import replace

    from fence.targets.loading import load_target

    local = replace(load_target(f"{DESK}:FORGETFUL_DESK"), row="local-desk")
    checked = check_target(local, redis_url, out=tmp_path)
    with pytest.raises(AssertionError, match="fence replay cannot run these files: the target"):
        checked.assert_not_found(BROKEN)
    with pytest.raises(BadInput, match="cannot find again"):
        replay_target(checked.replay_file(BROKEN), redis_url)


@pytest.mark.parametrize("row", [pytest.param("procrastinate", marks=pytest.mark.postgres),
                                 pytest.param("celery", marks=pytest.mark.redis)])
def test_a_shipped_rows_tick_is_heard_from_its_ledgers_time(row, request):
    """The shipped rows state no tick: the run clock takes it from each fresh ledger's time (its TICK_SECONDS)."""
    import importlib

    from fence.targets import TARGETS, RunClock

    target = TARGETS[row]
    try:
        module = importlib.import_module(target.storage.rpartition(":")[0])
    except ImportError as error:
        pytest.skip(f"{row} is not installed ({error})")
    assert target.tick_seconds is None
    storage = target.open(request.getfixturevalue("postgres_url" if row == "procrastinate" else "redis_url"))
    try:
        clock = RunClock()
        storage.destination_factory(target.policy.guards)
        clock.timed(storage.ledger_factory)(1)
    finally:
        storage.close()
    assert clock.tick == module.TICK_SECONDS


def test_a_storage_named_as_a_module_beside_the_targets_file_imports(tmp_path, monkeypatch):
    """A target file's storage given as MODULE:ATTR is found beside the file, as Python runs a script."""
    from fence.targets.loading import load_storage, load_target

    (tmp_path / "queue_beside_the_row.py").write_text("class Storage:\n    pass\n")
    (tmp_path / "row.py").write_text(
        "from fence.targets import Target\n"
        "ROW = Target(row='beside', system='x', policy='naive', storage='queue_beside_the_row:Storage')\n")
    monkeypatch.chdir(Path(__file__).parent)  # anywhere but the target's directory
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert load_storage(load_target(f"{tmp_path / 'row.py'}:ROW")).__name__ == "Storage"
