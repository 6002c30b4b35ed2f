"""What a snapshot leaves out merges states: a plug-in that answers by it is refused, never proved.

fence's own ``TicketService.snapshot()`` holds each key's payloads but not the
order of writes across keys (it decides none of fence's answers). A user's
subclass that answers by that order without adding it to its snapshot is
walked with states merged that it tells apart; the faithfulness check, which
replays sampled merges from scratch and compares what both worlds answer, must
stop the walk, with or without symmetry.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = str(Path(__file__).resolve().parent / "user_plugins/remembers_last_key.py:RemembersLastKey")
FENCE = [sys.executable, "-m", "fence.cli.main"]


@pytest.mark.parametrize("symmetry", [[], ["--symmetry"]], ids=["plain", "symmetric"])
def test_a_destination_answering_by_what_its_snapshot_leaves_out_is_refused(symmetry, tmp_path):
    command = [*FENCE, "explore", "--policy", "fenced", "--destination", PLUGIN, "--capacity", "2", "--jobs", "2",
               "--attempts", "1", "--horizon", "2", *symmetry, "--json", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["unfaithful"] and "two states with one key" in report["unfaithful"]
    assert "lookup" in report["unfaithful"] or "answer" in report["unfaithful"]
    assert not report["exhausted"] and "proved" not in report["verdicts"].values()
