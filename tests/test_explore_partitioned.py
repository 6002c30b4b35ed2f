"""The partitioned explorer (issue 28): each state owned by one process or Ray actor, the same results as one process.

Every comparison is exact: states, transitions, depth, dangers reached, drains
that found no fixed point, each invariant's verdict, and each counterexample's
steps as replayed (``to_json`` of the counterexample), against ``explore`` in
one process. The Ray test starts its own local cluster (2 CPUs, this machine's
loopback address, no dashboard) and shuts it down, so two xdist workers never
share one; the 2x2x2 comparisons on Ray are slow (``--run-slow``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fence.search.counterexample import to_json as counterexample_json
from fence.model.destination import TicketService
from fence.explore.report import report_text
from fence.explore.walk import explore
from fence.model.invariants import INVARIANTS, Invariant
from fence.explore.partition import ContentNumbers, step_code
from fence.explore.partitioned import _least, explore_partitioned
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig, World

ROOT = Path(__file__).resolve().parent.parent
SMALL = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2)
"""2 units x 2 jobs x 1 attempt, horizon 2: about a thousand states, with violations for the weaker policies."""
ONE_JOB = ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2)
TWO_BY_TWO = ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2)
TWO_BY_TWO_H3 = ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=3)


def outcome_of(found) -> dict:
    """Everything a partitioned walk must give exactly as one process does."""
    return {
        "states": found.states,
        "transitions": found.transitions,
        "depth": found.depth,
        "exhausted": found.exhausted,
        "reached": dict(sorted(found.reached.items())),
        "drains_unsettled": found.drains_unsettled,
        "verdicts": {
            name: (item.outcome.value, item.depth,
                   counterexample_json(item.counterexample) if item.counterexample else None)
            for name, item in found.results.items()
        },
    }


# Every policy with jobs symmetric; without symmetry and with one job, a violated and a proved policy
# (abandon-fenced-shared once found its drains unsettled counted differently: one process stops draining
# once invariant 6 is found).
# Every policy with jobs symmetric on two processes with --run-slow; two in every run (violated, and the one
# whose unsettled drains once counted differently; abandon-fenced, 5 s, is proved on two processes at one job).
IN_EVERY_RUN = ("naive", "abandon-fenced-shared")
SHAPES = [(name, SMALL, True) for name in sorted(POLICIES)] + [
    ("naive", SMALL, False), ("abandon-fenced-shared", SMALL, False),
    ("naive", ONE_JOB, False), ("abandon-fenced", ONE_JOB, False),
]
CASES = [
    pytest.param(name, config, symmetry, id=f"{name}-{config.capacity}x{config.jobs}x{config.max_attempts}"
                 f"{'-symmetric' if symmetry else ''}",
                 marks=() if name in IN_EVERY_RUN or not symmetry else pytest.mark.slow)
    for name, config, symmetry in SHAPES
]


@pytest.mark.parametrize("name, config, symmetry", CASES)
def test_two_processes_give_exactly_what_one_does(name, config, symmetry):
    """Two processes owning states by fingerprint find the same states, verdicts and counterexamples as one."""
    policy = POLICIES[name]
    alone = explore(policy, config, symmetry=symmetry)
    shared = explore_partitioned(policy, config, partitions=2, symmetry=symmetry)
    assert shared.partitioned_on == "2 processes"
    assert outcome_of(shared) == outcome_of(alone)


def test_a_finding_reported_a_round_later_at_a_lesser_order_replaces_the_first():
    """Invariant 3's present on a new state is judged by its owner a round after the transition into it
    (``Partition._judge_entered``), so a finding can arrive after one at a greater order of the same level."""
    found: dict = {}
    _least(found, [{"no_early_release": ((6 << 16) + 3, ["a real step into a state seen by its owner"])}, {}])
    _least(found, [{}, {"no_early_release": ((5 << 16) + 1, ["the least transition into that state"])}])
    _least(found, [{"no_early_release": (7 << 32, ["a deeper level"])}])
    assert found == {"no_early_release": ((5 << 16) + 1, ["the least transition into that state"])}


def test_three_processes_and_a_depth_bound_agree_with_one():
    """Three owners and a bound on chosen steps: the same states, verdicts and remaining work as one process."""
    policy = POLICIES["naive"]
    alone = explore(policy, SMALL, symmetry=True, max_depth=6)
    shared = explore_partitioned(policy, SMALL, partitions=3, symmetry=True, max_depth=6)
    assert not shared.exhausted
    assert outcome_of(shared) == outcome_of(alone)


def test_a_time_budget_stops_the_partitioned_walk_undetermined():
    """A time budget that runs out leaves every invariant not violated undetermined, never proved."""
    found = explore_partitioned(POLICIES["abandon-fenced"], TWO_BY_TWO, partitions=2, symmetry=True,
                                time_budget=0.5)
    assert found.stopped_by == "time_budget" and not found.exhausted
    assert {item.outcome.value for item in found.results.values()} == {"undetermined"}


def test_user_parts_and_budgets_run_in_one_process_and_say_why():
    """A user's destination, a user's step invariant or a state budget: one process, and the result says why."""
    policy = POLICIES["naive"]
    with_destination = explore_partitioned(policy, ONE_JOB, destination_factory=TicketService)
    assert "destination" in with_destination.one_process_because
    mine = Invariant(8, "mine", "a step invariant of the user's", lambda world: None)
    with_invariant = explore_partitioned(policy, ONE_JOB, invariants=(*INVARIANTS, mine))
    assert "step invariant" in with_invariant.one_process_because
    budgeted = explore_partitioned(policy, ONE_JOB, max_states=50)
    assert "--max-states" in budgeted.one_process_because
    for found in (with_destination, with_invariant, budgeted):
        assert found.partitioned_on is None
        assert "in one process: " in report_text(found)


FINGERPRINTS = """
from fence.explore.partition import OwnedWalk, Partition, step_code
from fence.model.invariants import INVARIANTS
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig, Reserve
config = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2)
partition = Partition(0, 2, POLICIES["naive"], config, True, INVARIANTS)
keys = [partition.walk.root_key()]
keys += [key for _, _, key, _ in partition.walk.successors(partition.walk.root, set(), set(), __import__("collections").Counter())]
print(keys, step_code((Reserve("job1"), None)).hex())
"""


def test_owners_are_the_same_in_processes_with_different_string_hashes():
    """The fingerprints that pick a state's owner come from its content, not from Python's per-process hash()."""
    said = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", FINGERPRINTS], capture_output=True, text=True, env=env,
                              check=True, timeout=120)
        said.add(done.stdout)
    assert len(said) == 1, said


def test_content_numbers_are_one_per_part_and_repeatable():
    """A key part gets one number whatever else was numbered first: the number is its content's fingerprint."""
    one, other = ContentNumbers(), ContentNumbers()
    parts = [("job1", ("reserved", 2)), ("job2", ()), ("job1", ("reserved", 3))]
    numbers = [one(part) for part in parts]
    assert [other(part) for part in reversed(parts)] == numbers[::-1]
    assert len(set(numbers)) == 3 and one.parts[numbers[0]] == parts[0]
    root = World(POLICIES["naive"], SMALL)
    assert step_code((root.enabled_actions()[0], None)) == step_code((root.enabled_actions()[0], None))


def test_a_world_replayed_from_a_kept_prefix_is_the_world_replayed_from_the_root(monkeypatch):
    """A row's World rebuilt from the World kept for a prefix of its path (``OwnedWalk.kept``) is the one rebuilt
    from the root, and most rebuilds start there; past the cap the oldest kept World goes first."""
    from fence.explore import partition as partition_module
    from fence.explore.abstract_state import Entry
    from fence.explore.whole_state import whole_state

    owner = partition_module.Partition(0, 1, POLICIES["abandon-fenced"], TWO_BY_TWO, True, INVARIANTS)
    for _level in range(5):
        owner.advance([], True, frozenset(), None)
    walk = owner.walk
    deepest = [entry for _order, entry in sorted(owner.candidates.values(), key=lambda held: held[0])][:60]
    depth = len(deepest[0].path) // partition_module.CODE_BYTES
    assert depth == 5

    def rebuilt(entry):
        """``entry`` as a row brings it: no parent, no World, its path."""
        row = Entry(entry.details, entry.parts, entry.abandoned, entry.shared, None, None, None, None, None)
        row.path = entry.path
        return whole_state(walk.world_of(row))

    from_the_root = []
    for entry in deepest:
        walk.kept.clear()
        from_the_root.append(rebuilt(entry))
    walk.kept.clear()
    steps_before = walk.replayed_steps
    assert [rebuilt(entry) for entry in deepest] == from_the_root
    assert walk.replayed_steps - steps_before < len(deepest) * depth  # fewer than from the root: prefixes were kept

    monkeypatch.setattr(partition_module, "KEPT_WORLDS", 2)
    walk.kept.clear()
    for code in (b"a", b"b", b"c"):
        walk.keep(code * partition_module.CODE_BYTES, walk.root.world)
    assert list(walk.kept) == [b"b" * 8, b"c" * 8]


def test_the_cli_explores_partitioned_and_says_so(capsys, tmp_path):
    """``fence explore --partitioned`` prints the report of the partitioned walk, naming its owners."""
    from fence.cli.main import main

    argv = ["explore", "--policy", "naive", "--capacity", "2", "--attempts", "1", "--horizon", "2", "--symmetry",
            "--out", str(tmp_path)]
    alone = main(argv), capsys.readouterr().out
    shared = main([*argv, "--partitioned", "--workers", "2"]), capsys.readouterr().out
    assert "each state owned by one of 2 processes, by its fingerprint" in shared[1]
    assert "each state owned" not in alone[1]
    timing = re.compile(r", [\d.]+s, \d+ states/s|each state owned by .+\n")
    assert shared[0] == alone[0] == 1  # violated
    assert timing.sub("", shared[1]) == timing.sub("", alone[1])


# -- Ray ------------------------------------------------------------------------------------------------
def _on_ray(policy, config, **options):
    """The walk on a local Ray cluster of its own (2 CPUs, loopback, no dashboard), shut down after."""
    pytest.importorskip("ray", reason="the Ray tests need pip install 'fence[ray]'")
    return explore_partitioned(policy, config, partitions=2, ray_address="local", **options)


def test_ray_on_a_local_cluster_gives_exactly_what_one_process_does():
    """Two Ray actors on a local cluster: the same states, verdicts and counterexamples as one process."""
    policy = POLICIES["naive"]
    alone = explore(policy, SMALL, symmetry=True)
    found = _on_ray(policy, SMALL, symmetry=True)
    assert found.partitioned_on == "2 Ray actors (local)"
    assert outcome_of(found) == outcome_of(alone)
    assert "violated" in {item.outcome.value for item in found.results.values()}


@pytest.mark.slow
@pytest.mark.timeout(1200)  # at horizon 3, a minute or two each way on a shared two-core machine
@pytest.mark.parametrize("config", [TWO_BY_TWO, TWO_BY_TWO_H3], ids=["2x2x2-h2", "2x2x2-h3"])
def test_ray_at_two_by_two_gives_exactly_what_one_process_does(config):
    """At 2x2x2, horizons 2 and 3 (224,621 and 832,186 states), Ray's walk is one process's, exactly."""
    policy = POLICIES["abandon-fenced"]
    alone = explore(policy, config, symmetry=True)
    found = _on_ray(policy, config, symmetry=True)
    assert outcome_of(found) == outcome_of(alone)


def test_bench_explorer_gives_a_row_per_engine_with_the_same_states(tmp_path, capsys):
    """``fence bench explorer --engines``: a row per engine, the same states and transitions, memory per state."""
    from fence.cli.main import main

    out = tmp_path / "explorer.txt"
    status = main(["bench", "explorer", "--policy", "naive", "--bound", "2x2x1:1", "--symmetry", "on",
                   "--engines", "one-process,partitioned", "--report", str(out)])
    assert status == 0, capsys.readouterr().err
    lines = out.read_text().splitlines()
    assert any(line.startswith("# load average") for line in lines)
    header = next(line for line in lines if line.startswith("policy "))
    assert all(column in header for column in ("engine", "states/s", "wall s", "peak MiB", "B/state"))
    rows = [line for line in lines if line.startswith("naive ")]
    assert [("2 processes" in row, "one process" in row) for row in rows] == [(False, True), (True, False)]
    figures = [row.split("yes", 1)[1].split() for row in rows]  # after the symmetry column
    one, two = figures[0], figures[1]
    assert one[2:5] == two[2:5]  # states, transitions, depth (after the engine's two words)
    assert "+" in two  # the coordinator's peak + the partitions'
