"""A guarded target whose failure handler deletes the retry's idempotency record is found violated (issue 25).

``tests/user_targets/idempotency_records.py`` is a user's target on the public
API: an idempotency decorator on Redis, guarded by fence's abandon-fenced
recovery, whose delete-on-exception deletes the key's record whoever's it
is. An attempt the recovery gave up on raises, its handler deletes the
retry's in-progress record, and the key is free for a third attempt while the
second still runs. ``fence targets --target FILE.py:ROW`` and
``fence.testing.check_target`` find it (invariant 5: the stale attempt's
failure report changed the retry's reservation), and ``fence replay`` breaks it
again on Redis. The same file with the handler fixed (it deletes only the
failing attempt's own record) is the control: no stale report is accepted.

Every test needs Redis (the session's server, see conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fence.testing import check_target

pytestmark = pytest.mark.redis

RECORDS = Path(__file__).resolve().parent / "user_targets" / "idempotency_records.py"
FENCE = [sys.executable, "-m", "fence.cli.main"]
STALE = "stale_attempt_cannot_change_newer"
FILE = f"idempotency-records__abandon-fenced__{STALE}.json"


def _fence(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCE, *args], capture_output=True, text=True, cwd=cwd, timeout=280)


# Both tests with --run-slow (22-25 s each): a user's target from a file is found and replayed in every run by
# tests/test_targets_user.py, and the shipped rows' failure handlers by tests/test_targets_rows.py.
@pytest.mark.slow
def test_fence_targets_finds_the_stale_failure_deleting_the_retrys_record_and_replay_breaks_it_on_redis(
        tmp_path, redis_url):
    """fence targets --target FILE.py:ROW: violated on 5 in the class's order; fence replay breaks it again on Redis.

    One test, so that the run is made once whichever worker takes it.
    """
    out = tmp_path / "found"
    result = _fence("targets", "--profile", "quick", "--target", f"{RECORDS}:ROW", "--redis", redis_url,
                    "--out", str(out), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr  # it claims abandon-fenced and breaks it
    assert "Traceback" not in result.stderr
    cells = result.stdout.splitlines()[1].split()
    assert cells[0] == "idempotency-records" and cells[5].startswith("violated"), result.stdout
    assert "DID NOT REPLAY" not in result.stdout
    assert (out / "targets.txt").read_text().startswith("# command: fence targets")  # --out alone: the report too
    assert "failure_after_effect" in result.stdout.split("dangers reached:")[1].splitlines()[0]
    steps = json.loads((out / FILE).read_text())["steps"]
    chosen = [step["sentence"] for step in steps if not step["drain"]]
    # The order that makes the class: the recovery gives the first attempt up, the retry starts, then the
    # first attempt's failure report lands and deletes the retry's record.
    settled = next(i for i, s in enumerate(chosen) if "settles job1/r1 as unused" in s)
    retried = next(i for i, s in enumerate(chosen) if "job1 is retried" in s)
    failed = next(i for i, s in enumerate(chosen) if s.startswith("job1#1 fails"))
    assert settled < retried < failed == len(chosen) - 1, chosen
    # On the real library, never on fence's model.
    replayed = _fence("replay", str(out / FILE), "--redis", redis_url, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "target idempotency-records" in replayed.stdout and "BROKEN on the real system" in replayed.stdout
    assert "job1#1's fail changed job1/r2, which belongs to job1#2" in replayed.stdout


@pytest.mark.slow
def test_check_target_finds_it_and_the_owner_checked_handler_does_not(redis_url, tmp_path):
    """check_target on the spec: violated on 5; with delete-on-exception checking the owner, 5 is proved."""
    checked = check_target(f"{RECORDS}:ROW", redis_url, out=tmp_path / "as-written")
    checked.assert_violated(STALE)
    assert checked.replay_file(STALE) == tmp_path / "as-written" / FILE
    control = check_target(f"{RECORDS}:OWNER_CHECKED", redis_url, out=tmp_path / "owner-checked")
    control.assert_proved(STALE)
