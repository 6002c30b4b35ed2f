"""The explorer's compact visited states (issue 28): fingerprints of keys, parent pointers, and unchanged results.

The results are pinned against tools/explorer-results.json, recorded by the
explorer that kept full keys (before fingerprints): a fingerprint walk must
reach the same states, transitions, depth, verdicts and counterexamples, for
fence's own parts and for a user's plug-ins loaded from files.
"""

import dataclasses
import gc
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fence.explore.walk import explore
from fence.model.policies import POLICIES
from fence.explore.visited import FINGERPRINT_BITS, Fingerprints, KeySums, Parents, collision_probability, of_plain
from fence.model.world import ModelConfig, Reserve, Tick

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("explorer_results", ROOT / "tools" / "explorer_results.py")
explorer_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(explorer_results)
RECORDED = json.loads((ROOT / "tools" / "explorer-results.json").read_text())
CI_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=3)
ROWS = {row["name"]: row for row in explorer_results.rows("all")}


@pytest.mark.parametrize("name", [
    "naive 1x1x3 h3",
    "abandon-fenced 1x1x3 h3",
    "naive 2x2x2 h2 sym",
    pytest.param("abandon-fenced 2x2x2 h2 sym", marks=pytest.mark.slow),
    # a user's plug-ins from files (tests/seeded/): the generic key, fingerprinted on the same path; a
    # destination in every run, a ledger and a policy walked as whole worlds (11 s each) with --run-slow
    pytest.param("abandon-fenced ledger=ledger_frees_twice.py:LedgerFreesTwice 1x1x3 h3", marks=pytest.mark.slow),
    "fenced destination=lookup_skips_fence.py:LookupSkipsFence 1x1x3 h3",
    pytest.param("decide_writes.py:LookupThenAbandon 1x1x3 h3", marks=pytest.mark.slow),
])
def test_a_fingerprint_walk_concludes_what_the_full_key_walk_recorded(name):
    """States, transitions, depth, verdicts, dangers and every counterexample step equal the full-key explorer's."""
    walked, figures = explorer_results.walk(ROWS[name])
    assert walked == name and name in RECORDED
    assert explorer_results.differences(RECORDED, {name: figures}) == []


def test_equal_keys_share_a_fingerprint_whatever_order_their_sets_were_built_in():
    """A generic key's frozensets are written sorted: equal keys, one fingerprint, in any walk."""
    colliding = [1, 9, 17, 25]  # one slot of a small table: the order they went in is the order they come out
    one = (3, frozenset(colliding), frozenset({("a", 1), ("b", (2, "x"))}), None)
    other = (3, frozenset(reversed(colliding)), frozenset([("b", (2, "x")), ("a", 1)]), None)
    assert one == other and list(one[1]) != list(other[1])
    assert Fingerprints()(one) == Fingerprints()(other)
    assert Fingerprints()(one) != Fingerprints()((3, frozenset(colliding[1:]), one[2], None))


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    held: tuple


class _Opaque:
    """An object a plug-in might hold: equal only to itself."""


def test_values_that_are_not_plain_are_merged_exactly_when_they_are_equal():
    """A plug-in's value is fingerprinted by what it equals: equal dataclasses merge, distinct objects never do,
    even once the first is gone (the walk keeps what it numbered, so no address is reused)."""
    fingerprint = Fingerprints()
    assert fingerprint(("s", _Snapshot((1, 2)))) == fingerprint(("s", _Snapshot((1, 2))))
    assert fingerprint(("s", _Snapshot((1, 2)))) != fingerprint(("s", _Snapshot((2, 1))))
    seen = {fingerprint(("held", _Opaque())) for _ in range(50)}
    gc.collect()
    assert len(seen) == 50


def test_a_plain_key_is_fingerprinted_alike_by_both_encodings_rules():
    """fence's own keys (tuples of strings and numbers) get one fingerprint per key, 64 bits wide."""
    key = (3, (("1", "reserved", 5), ("2", "done")), ("job1#1",))
    assert of_plain(key) == of_plain(tuple(list(key)))
    assert of_plain(key) != of_plain((3, (("1", "reserved", 5), ("2", "done")), ()))
    assert 0 <= of_plain(key) < 2**FINGERPRINT_BITS


def test_the_abstract_walk_s_sums_tell_keys_apart_as_the_keys_do():
    """KeySums: equal keys, equal fingerprints below 2^64; with symmetry the parts are a multiset, without a sequence."""
    symmetric, ordered = KeySums(True, 3), KeySums(False, 3)
    keys = [(now, parts, promises) for now in (0, 1) for promises in ((), ("job1#1",))
            for parts in ((0, 1, 1), (1, 0, 1), (1, 1, 0), (0, 0, 1), (2, 1, 0))]
    for sums, same in ((symmetric, lambda key: (key[0], tuple(sorted(key[1])), key[2])), (ordered, lambda key: key)):
        fingerprints = {key: sums(*key) for key in keys}
        assert all(0 <= fingerprint < 2**FINGERPRINT_BITS for fingerprint in fingerprints.values())
        for one in keys:
            for other in keys:
                assert (fingerprints[one] == fingerprints[other]) == (same(one) == same(other))
        assert sums(*keys[0]) == fingerprints[keys[0]]  # drawn once, kept for the walk


def test_parents_give_back_the_path_to_every_state():
    """Two arrays of numbers stand for the list of (parent, step) pairs: indexing and paths alike."""
    parents = Parents()
    first = parents.add(0, Reserve("job1"))
    second = parents.add(first, Tick(1))
    third = parents.add(first, Reserve("job1"))
    assert parents[0] is None and parents[second] == (first, Tick(1))
    assert parents.path_to(second) == [Reserve("job1"), Tick(1)]
    assert parents.path_to(third) == [Reserve("job1"), Reserve("job1")]
    assert len(parents) == 4 and len(parents.steps) == 2


def test_the_collision_chance_is_reported_as_tlc_estimates_it():
    """n^2 / 2^(b+1): 2^32 states of 64-bit fingerprints collide with chance one half."""
    assert collision_probability(2**32) == 0.5
    assert collision_probability(0) == 0.0 and collision_probability(2**40) == 1.0


def test_the_summary_and_the_json_give_the_fingerprints_and_their_collision_chance(tmp_path):
    """``fence explore`` says how states were kept and the chance of a merge, in words and in JSON."""
    command = [sys.executable, "-m", "fence.cli.main", "explore", "--policy", "naive", "--attempts", "1",
               "--horizon", "3", "--out", str(tmp_path)]
    text = subprocess.run(command, capture_output=True, text=True)
    as_json = subprocess.run(command + ["--json"], capture_output=True, text=True)
    assert "64-bit fingerprints" in text.stdout and "n^2/2^65" in text.stdout
    found = json.loads(as_json.stdout)
    assert found["fingerprint_bits"] == 64
    assert found["collision_probability"] == collision_probability(found["states"])
    assert 0 < found["visited_bytes"]


@pytest.mark.slow  # 12 s (the generic walk of a ledger plug-in); the figures per state are in evidence/
def test_a_user_s_plug_ins_keep_their_visited_states_as_compactly_as_fence_s_own():
    """The same compact path for a plug-in from a file: flat arrays of fingerprints and parent numbers, at most
    64 bytes a state (issue 28) for fence's own parts and a user's alike."""
    from fence.model import plugins

    seeded = ROOT / "tests" / "seeded"
    builtin = explore(POLICIES["abandon-fenced"], CI_BOUND)
    users = explore(POLICIES["abandon-fenced"], CI_BOUND,
                    ledger_factory=plugins.load_ledger(f"{seeded / 'ledger_frees_twice.py'}:LedgerFreesTwice"))
    per_state = [found.visited_bytes / found.states for found in (builtin, users)]
    assert all(14 < each <= 64 for each in per_state), per_state


def test_the_visited_table_finds_every_state_it_was_given_and_no_other():
    """Fingerprints by number, an open-addressing index that grows: each added state is found by its fingerprint
    with its own number and parent, through several doublings; fingerprints sharing low bits probe on."""
    from fence.explore.visited import VisitedTable

    crowded = [(n << 40) | 7 for n in range(1, 300)]  # one slot for all of them in any index under 2^40
    spread = [of_plain(("state", n)) for n in range(20_000)]
    table = VisitedTable(of_plain("root"), slots=16)
    for number, fingerprint in enumerate(crowded + spread, start=1):
        assert fingerprint not in table
        assert table.add(fingerprint, number // 2, Tick(number % 3 + 1)) == number
    assert len(table) == 1 + len(crowded) + len(spread)
    for number, fingerprint in enumerate(crowded + spread, start=1):
        assert table.get(fingerprint) == number and table.fingerprint_of(number) == fingerprint
        assert table.parent_of(number) == (number // 2, Tick(number % 3 + 1))
    assert table.get(of_plain("root")) == 0 and table.parent_of(0) is None
    assert of_plain(("state", -1)) not in table and (8 << 40 | 7) + 1 not in table
    assert table.bytes_used() / len(table) <= 32


def test_the_frontier_gives_back_its_rows_in_order_after_spilling_them_to_a_file():
    from fence.explore.visited import Frontier

    level = Frontier(width=3, budget=40)  # a few rows in memory, the rest in the level's file
    rows = [(n, n * 7 % 11, 2**32 - 1 - n) for n in range(1000)]
    for row in rows:
        level.append(row)
    assert level.spilled > 900 and len(level) == 1000
    assert [tuple(row) for row in level] == rows == [tuple(row) for row in level]  # read twice alike
    level.close()


@pytest.mark.parametrize("name", [
    "naive 1x1x3 h3",  # one job: the walk over Worlds
    "naive 2x2x1 h2 sym",  # the abstract walk, with counterexamples
    # a user's plug-in (8 s) with --run-slow; it spills by the same frontier code as the two above
    pytest.param("fenced destination=lookup_skips_fence.py:LookupSkipsFence 1x1x3 h3", marks=pytest.mark.slow),
])
def test_a_walk_that_spills_its_frontier_and_rebuilds_its_worlds_concludes_the_same(name, monkeypatch):
    """Every level in a file and almost no World kept: the same states, verdicts and counterexamples."""
    from fence.explore import visited
    from fence.explore import walk as walk_module

    monkeypatch.setattr(visited, "FRONTIER_BUDGET", 16)
    monkeypatch.setattr(walk_module.WorldWalk, "WORLDS_KEPT", 2)
    monkeypatch.setattr(walk_module.AbstractWalk, "kept_worlds", 2)  # the abstract walk's cap (KEPT_WORLDS)
    walks = []
    walk = walk_module.walk

    def counted(*args, **options):
        walks.append(walk(*args, **options))
        return walks[-1]

    monkeypatch.setattr(walk_module, "walk", counted)
    walked, figures = explorer_results.walk(ROWS[name])
    assert explorer_results.differences(RECORDED, {name: figures}) == []
    assert walks and walks[-1].spilled > 0.9 * walks[-1].states
    if "2x2x1" not in name:
        assert walks[-1].rebuilt > 0.9 * walks[-1].states
    else:  # the abstract walk builds Worlds on its memos' misses only: two kept, the rest replayed when asked for
        assert walks[-1].rebuilt > 100  # 19 with every World kept
