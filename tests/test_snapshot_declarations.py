"""What a snapshot leaves out merges states: a plug-in that answers by it is refused, never proved.

fence's own ``TicketService.snapshot()`` holds each key's payloads but not the
order of writes across keys (it decides none of fence's answers). A user's
subclass that answers by that order without adding it to its snapshot is
walked with states merged that it tells apart. Two guards stop such a walk,
with or without symmetry: the plug-in step memo's spot check (a memoised step
taken again for real answers differently), and the faithfulness check, which
replays sampled merges from scratch and compares what both worlds answer.
Which fires first depends on the walk's order; without the step memo
(``STEP_MEMO = False``) the faithfulness check alone must stop it.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parent / "user_plugins/remembers_last_key.py"
PLUGIN = f"{PLUGINS}:RemembersLastKey"
WITHOUT_STEP_MEMO = f"{PLUGINS}:RemembersLastKeyWithoutStepMemo"
# What each guard says when it refuses (fence/explore/faithfulness.py, fence/explore/plugin_memo.py).
FAITHFULNESS_REFUSAL = "two states with one key"
STEP_MEMO_REFUSAL = "the step memo answered"
FENCE = [sys.executable, "-m", "fence.cli.main"]


# Renamed states (--symmetry) with --run-slow: the refusal comes from the same checks, and a renamed plug-in's
# faithfulness is in every run in tests/test_plugin_symmetry.py.
@pytest.mark.parametrize("symmetry", [[], pytest.param(["--symmetry"], marks=pytest.mark.slow)],
                         ids=["plain", "symmetric"])
# With --run-slow (11-17 s each): in every run tests/test_plugin_symmetry.py has the step memo's own catch, and
# tests/test_observer.py the faithfulness check's (state outside the snapshot, and a fault deep in the walk).
@pytest.mark.slow
@pytest.mark.parametrize("plugin, refusals", [(PLUGIN, (FAITHFULNESS_REFUSAL, STEP_MEMO_REFUSAL)),
                                               (WITHOUT_STEP_MEMO, (FAITHFULNESS_REFUSAL,))],
                         ids=["any-guard", "faithfulness-alone"])
def test_a_destination_answering_by_what_its_snapshot_leaves_out_is_refused(plugin, refusals, symmetry, tmp_path):
    """(Until session 41 only the faithfulness check was asked for: since new states the step memo answered are
    keyed from its answer, its spot check may see the difference first; the second case keeps the faithfulness
    check's own catch pinned.)"""
    command = [*FENCE, "explore", "--policy", "fenced", "--destination", plugin, "--capacity", "2", "--jobs", "2",
               "--attempts", "1", "--horizon", "2", *symmetry, "--json", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["unfaithful"] and any(refusal in report["unfaithful"] for refusal in refusals), report["unfaithful"]
    assert "lookup" in report["unfaithful"] or "answer" in report["unfaithful"]
    assert not report["exhausted"] and "proved" not in report["verdicts"].values()
