"""Jobs symmetric for a user's destination and ledger: the same verdicts in fewer states, or a refusal.

``fence explore --symmetry`` keys a world with plug-ins by the least renaming
of its jobs, renaming names inside the plug-ins' snapshots too
(``fence.explore.state_key.symmetric_form``). That rests on the plug-ins treating a
job's name as a label; the faithfulness check replays sampled merges across a
renaming with the jobs renamed. So each plug-in here, written against the
public protocols and named by ``FILE.py:ATTR`` as a user would, must either
reach the verdicts and shortest counterexamples it reaches without symmetry
(in fewer states, with renamed merges really checked), or be reported
unfaithful; never proved where it is not.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FENCE = [sys.executable, "-m", "fence.cli.main"]
TWO_JOBS = ["--capacity", "2", "--jobs", "2", "--attempts", "1", "--horizon", "1"]

# (policy, the plug-in's option, its spec); the slow ones run with --run-slow.
PLUGINS = {
    "plain subclass": ("abandon-fenced", "--destination", "user_plugins/plain.py:PlainSubclass"),
    "deadline witness": ("abandon-fenced", "--destination", "seeded/deadline_witness.py:DeadlineWitness"),
    "ledger frees twice": ("abandon-fenced", "--ledger", "seeded/ledger_frees_twice.py:LedgerFreesTwice"),
    "lagging guards": ("abandon-fenced", "--destination", "seeded/lagging_reads.py:LaggingGuards"),
    "lookup skips fence": ("fenced", "--destination", "seeded/lookup_skips_fence.py:LookupSkipsFence"),
    "fence after append": ("fenced", "--destination", "seeded/fence_after_append.py:FenceAfterAppend"),
    "confirm without owner": ("naive", "--ledger", "seeded/confirm_without_owner.py:ConfirmWithoutOwner"),
}
# A destination in every run (9 s); the others, a ledger among them, with --run-slow: CI's ten minutes hold no
# more on this machine.
IN_EVERY_RUN = {"plain subclass"}


def explore(policy: str, option: str, spec: str, *extra: str) -> dict:
    command = [*FENCE, "explore", "--policy", policy, option, str(TESTS / spec), *TWO_JOBS, *extra, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", [
    name if name in IN_EVERY_RUN else pytest.param(name, marks=pytest.mark.slow) for name in PLUGINS
])
def test_symmetry_keeps_a_plugins_verdicts_in_fewer_states(name):
    plain = explore(*PLUGINS[name])
    symmetric = explore(*PLUGINS[name], "--symmetry")
    assert plain["exhausted"] and plain["unfaithful"] is None
    assert symmetric["exhausted"] and symmetric["unfaithful"] is None, symmetric["unfaithful"]
    assert symmetric["symmetry"] is True
    assert symmetric["verdicts"] == plain["verdicts"]
    assert symmetric["shortest_steps"] == plain["shortest_steps"]
    assert symmetric["states"] < plain["states"]
    # Tested, not trusted: merges of renamed states were replayed with the jobs renamed.
    assert symmetric["renamings_checked"] > 0


def test_a_plugin_that_decides_by_a_jobs_name_is_refused_with_symmetry_never_proved():
    spec = ("fenced", "--destination", "user_plugins/name_dependent.py:WritesJob2Twice")
    plain = explore(*spec)
    assert plain["exhausted"] and plain["verdicts"]["no_duplicate_writes"] == "violated"
    symmetric = explore(*spec, "--symmetry")
    assert symmetric["unfaithful"] and "--symmetry" in symmetric["unfaithful"]
    assert "renamed" in symmetric["unfaithful"]
    assert "proved" not in symmetric["verdicts"].values()


def test_answers_a_policy_keeps_as_objects_are_renamed_with_the_jobs():
    """Renamed paths reach one key, also where one janitor holds a user's answer objects for two jobs.

    ``LookupThenAbandon`` answers a probe with its own ``Evidence`` subclass,
    which the key holds by janitor and reservation. Those were once listed
    sorted by reservation, an order a renaming of the jobs does not keep, and
    its walk at 2 units x 2 jobs with --symmetry was refused as unfaithful.
    """
    from fence.model.plugins import load_policy
    from fence.explore.state_key import generic_state_key
    from fence.model.world import ModelConfig, World

    policy = load_policy(str(TESTS / "seeded/decide_writes.py:LookupThenAbandon"))

    def world_where(written: str, other: str) -> World:
        world = World(policy, ModelConfig(capacity=2, jobs=2, max_attempts=1, horizon=2))
        path = [("reserve", {"job": "job1"}), ("reserve", {"job": "job2"})]
        path += [(kind, {"attempt": f"{written}#1"}) for kind in ("start", "send_commit")]
        path += [("deliver", {"message": "commit", "attempt": f"{written}#1"}), ("tick", {"by": 2})]
        for job in (written, other):  # janitor 0 holds an answer for each: "exists" and "absent"
            path += [("scan", {"janitor": 0, "reservation": f"{job}/r1"}),
                     ("probe", {"janitor": 0, "reservation": f"{job}/r1"})]
        for kind, fields in path:
            [action] = [a for a in world.enabled_actions()
                        if a.kind == kind and fields.items() <= a.to_dict().items()][:1]
            world.apply(action)
        assert len(world.evidence[0]) == 2
        return world

    one, renamed = world_where("job1", "job2"), world_where("job2", "job1")
    assert generic_state_key(one) != generic_state_key(renamed)
    assert generic_state_key(one, symmetry=True) == generic_state_key(renamed, symmetry=True)


def _conclusions(found) -> dict:
    """What a walk concludes, step for step: counts, dangers reached and each verdict with its counterexample."""
    return {
        "states": found.states, "transitions": found.transitions, "depth": found.depth,
        "exhausted": found.exhausted, "unsettled": found.drains_unsettled, "reached": dict(found.reached),
        "results": {
            name: (item.outcome, item.depth,
                   [step.sentence for step in item.counterexample.steps] if item.counterexample else None)
            for name, item in found.results.items()
        },
    }


@pytest.mark.parametrize("config, symmetry", [  # two jobs (4 s each) with --run-slow; renamed above in every run
    (dict(capacity=1, jobs=1, max_attempts=3, horizon=3), False),
    pytest.param(dict(capacity=2, jobs=2, max_attempts=1, horizon=1), False, marks=pytest.mark.slow),
    pytest.param(dict(capacity=2, jobs=2, max_attempts=1, horizon=1), True, marks=pytest.mark.slow),
], ids=["1x1x3 h3", "2x2x1 h1", "2x2x1 h1 symmetric"])
def test_a_plain_subclass_on_the_generic_path_concludes_what_the_builtin_does(config, symmetry):
    """The generic path (whole worlds, the subclass's snapshot()) walks a subclass that changes
    nothing as the built-in's keyed engine walks fence's own destination: the same states,
    transitions, depth, dangers and verdicts. A change to the generic key, copy or walk that
    merges or splits states differently, or steps differently, shows here first."""
    from fence.explore.walk import explore
    from fence.model.plugins import load_destination
    from fence.model.policies import POLICIES
    from fence.model.world import ModelConfig

    bound = ModelConfig(**config)
    subclass = load_destination(str(TESTS / "user_plugins/plain.py:PlainSubclass"))
    builtin = explore(POLICIES["abandon-fenced"], bound, symmetry=symmetry)
    generic = explore(POLICIES["abandon-fenced"], bound, symmetry=symmetry, destination_factory=subclass)
    # Walked the generic way, tested by replays, and found faithful.
    assert builtin.faithfulness_checks == 0 and generic.faithfulness_checks > 0
    assert generic.unfaithful is None
    assert _conclusions(generic) == _conclusions(builtin)
    assert generic.exhausted and "proved" in {item.outcome.value for item in generic.results.values()}


# -- the generic path's step memo (fence.explore.plugin_memo) ------------------------------------------------


def _memo_walks(monkeypatch) -> list:
    """Every ``PluginStepMemo`` the walks of this test make, to read how often it answered."""
    from fence.explore import walk
    from fence.explore.plugin_memo import PluginStepMemo

    made = []

    class Recorded(PluginStepMemo):
        def __init__(self, *arguments, **options) -> None:
            super().__init__(*arguments, **options)
            made.append(self)

    monkeypatch.setattr(walk, "PluginStepMemo", Recorded)
    return made


def _plugin_walk(plugin: str, config: dict, symmetry: bool, **options):
    from fence.explore.walk import explore
    from fence.model.plugins import load_destination, load_ledger, load_policy
    from fence.model.policies import POLICIES
    from fence.model.world import ModelConfig

    policy, option, spec = PLUGINS.get(plugin) or MEMO_PLUGINS[plugin]
    factories = {}
    if option == "--destination":
        factories["destination_factory"] = load_destination(str(TESTS / spec))
    elif option == "--ledger":
        factories["ledger_factory"] = load_ledger(str(TESTS / spec))
    chosen = POLICIES[policy] if policy in POLICIES else load_policy(str(TESTS / policy))
    return explore(chosen, ModelConfig(**config), symmetry=symmetry, **factories, **options)


MEMO_PLUGINS = {
    "decide writes": ("seeded/decide_writes.py:LookupThenAbandon", "--policy", None),
}


TWO_BY_ONE = dict(capacity=2, jobs=2, max_attempts=1, horizon=1)


# In every run a destination (renamed); the other five, a ledger and one walk each of every plug-in kind, with
# --run-slow (three walks a case, 11-12 s each on this machine).
@pytest.mark.parametrize("plugin, config, symmetry", [
    ("plain subclass", dict(capacity=2, jobs=2, max_attempts=2, horizon=1), True),
    pytest.param("plain subclass", TWO_BY_ONE, False, marks=pytest.mark.slow),
    pytest.param("deadline witness", TWO_BY_ONE, True, marks=pytest.mark.slow),
    pytest.param("ledger frees twice", TWO_BY_ONE, True, marks=pytest.mark.slow),
    pytest.param("confirm without owner", TWO_BY_ONE, False, marks=pytest.mark.slow),
    pytest.param("decide writes", TWO_BY_ONE, True, marks=pytest.mark.slow),
], ids=lambda value: value if isinstance(value, str) else None)
def test_the_generic_step_memo_changes_no_count_verdict_or_counterexample(monkeypatch, plugin, config, symmetry):
    """A walk of users' plug-ins whose steps into states seen before are answered by the step memo concludes
    exactly what the walk that takes every step does: states, transitions, depth, dangers, verdicts and
    counterexamples. Every answer is also taken for real and compared (``check_memo=1``), and the memo
    really answered: most transitions were not stepped."""
    memos = _memo_walks(monkeypatch)
    every_step = _plugin_walk(plugin, config, symmetry, memo=False)
    assert memos == []  # with the memo off, none is made
    remembered = _plugin_walk(plugin, config, symmetry, check_memo=1)
    assert every_step.unfaithful is None and remembered.unfaithful is None, remembered.unfaithful
    assert _conclusions(remembered) == _conclusions(every_step)
    [memo] = memos
    assert memo.checks == memo.hits > remembered.transitions // 2
    # The default spot checks, every CHECK_EVERY-th answer, conclude the same.
    assert _conclusions(_plugin_walk(plugin, config, symmetry)) == _conclusions(every_step)


@pytest.mark.parametrize("plugin, symmetry", [  # the ledger (9 s) with --run-slow
    ("plain subclass", True), pytest.param("ledger frees twice", False, marks=pytest.mark.slow)])
def test_a_new_state_keyed_by_a_memo_answer_is_keyed_as_its_real_step_would_be(monkeypatch, plugin, symmetry):
    """A new state the step memo answered is keyed (and split by job) from the answer, not read off its World;
    with every other answer also taken for real, the children of such states are compared with their
    real steps (every job's records, the snapshots, the whole generic parts), and the walk concludes what
    the walk that takes every step does. A split or key put together wrongly fails here."""
    memos = _memo_walks(monkeypatch)
    config = dict(capacity=2, jobs=2, max_attempts=2, horizon=1)
    every_step = _plugin_walk(plugin, config, symmetry, memo=False)
    remembered = _plugin_walk(plugin, config, symmetry, check_memo=2)
    assert remembered.unfaithful is None, remembered.unfaithful
    assert _conclusions(remembered) == _conclusions(every_step)
    [memo] = memos
    assert memo.new_by_answer > 100 and memo.checks > 100


def test_the_generic_step_memo_catches_a_snapshot_that_leaves_state_out(monkeypatch):
    """A destination that answers by what its snapshot() leaves out (the order of writes across keys) gets two
    different answers to one memo key; with the replays of the faithfulness check switched off, the memo's own
    comparison with the real step says so, and the walk proves nothing."""
    from fence.explore.faithfulness import Unfaithful
    from fence.explore.plugin_memo import PluginMemoMismatch

    memos = _memo_walks(monkeypatch)
    spec = ("fenced", "--destination", "user_plugins/remembers_last_key.py:RemembersLastKey")
    MEMO_PLUGINS["remembers last key"] = spec
    try:
        # A lease of one tick: janitors look the keys up within the horizon.
        config = dict(TWO_BY_ONE, lease=1)
        found = _plugin_walk("remembers last key", config, False, check_memo=1, faithfulness=(0, 0))
    finally:
        del MEMO_PLUGINS["remembers last key"]
    assert found.unfaithful and "step memo" in found.unfaithful and "snapshot()" in found.unfaithful
    assert "proved" not in {item.outcome.value for item in found.results.values()}
    assert "probe" in found.unfaithful  # a janitor's lookup, answered by the order the snapshot leaves out
    assert memos[0].checks > 0 and issubclass(PluginMemoMismatch, Unfaithful)


def test_a_plugin_without_a_snapshot_or_that_declines_is_walked_without_the_memo():
    """The memo stands on the plug-ins' snapshots: a destination with none, or one that says
    ``STEP_MEMO = False``, is walked with every step taken, as is a user's own step invariant."""
    from fence import TicketService
    from fence.explore.plugin_memo import unsuitable
    from fence.model.invariants import INVARIANTS, Invariant
    from fence.model.policies import POLICIES
    from fence.model.world import ModelConfig, World

    class Declines(TicketService):
        STEP_MEMO = False

    class NoSnapshot(TicketService):
        snapshot = None

    policy, bound = POLICIES["abandon-fenced"], ModelConfig(capacity=2, jobs=2, max_attempts=1, horizon=1)
    steps = [inv for inv in INVARIANTS if not inv.at_teardown]
    assert unsuitable(World(policy, bound, TicketService), steps) is None
    assert "STEP_MEMO" in unsuitable(World(policy, bound, Declines), steps)
    assert "snapshot" in unsuitable(World(policy, bound, NoSnapshot), steps)
    mine = Invariant(8, "mine", "a user's own", lambda world: None)
    assert "invariant" in unsuitable(World(policy, bound, TicketService), [*steps, mine])


@pytest.mark.parametrize("snapshot_part, look_alike", [
    (frozenset({"job1", "job2"}), ("set", ("job1", "job2"))),
    ({"job1": 1}, ("dict", (("job1", 1),))),
])
def test_a_plugins_tuple_never_takes_the_key_of_a_set_or_dict_it_spells(snapshot_part, look_alike):
    """Two snapshots a plug-in tells apart (a set, and a tuple that spells the set's written form) get two keys.

    The generic key writes a set or a dict as a tagged tuple; with a plain string tag, a
    plug-in's own tuple could take the same form and the walk would merge two states it
    must keep apart.
    """
    from fence.explore.state_key import canonical_renaming, symmetric_form

    assert canonical_renaming((snapshot_part,), {}) != canonical_renaming((look_alike,), {})
    if isinstance(snapshot_part, frozenset):  # a key part is hashable: a dict is only ever inside a snapshot's value
        jobs = ["job1", "job2"]
        assert symmetric_form((snapshot_part,), jobs)[0] != symmetric_form((look_alike,), jobs)[0]


def test_a_walk_of_plugins_keeps_the_collector_on_with_a_young_pass_rarer_and_restores_it():
    """A user's plug-ins may hold reference cycles, so the collector is never switched off for their walk;
    only its youngest pass is made rarer (``_LongLived.PLUGIN_THRESHOLD``), and the thresholds the
    caller had are back when the walk ends."""
    import gc

    from fence import TicketService
    from fence.explore.walk import _LongLived, explore
    from fence.model.policies import POLICIES
    from fence.model.world import ModelConfig

    seen = set()

    class Watching(TicketService):
        def snapshot(self):
            seen.add((gc.isenabled(), gc.get_threshold()))
            return super().snapshot()

    before = gc.get_threshold()
    found = explore(POLICIES["abandon-fenced"], ModelConfig(capacity=1, jobs=1, max_attempts=1, horizon=1),
                    destination_factory=Watching)
    assert found.exhausted and gc.isenabled() and gc.get_threshold() == before
    assert (True, _LongLived.PLUGIN_THRESHOLD) in seen


@pytest.mark.slow  # 9 s: how the walk spends its memory, not what it concludes (the walks above conclude)
def test_a_plugin_walk_freezes_each_level_only_while_no_cyclic_garbage_is_found_and_unfreezes_at_its_end(monkeypatch):
    """The survivors of each level are frozen (``LongLived.next_level``) so the older passes scan one level's,
    while no pass has found cyclic garbage; a plug-in that leaves cycles behind is not frozen from its first
    found cycle on (a frozen cycle is never freed before the walk ends). Nothing stays frozen after the walk."""
    import gc

    from fence import TicketService
    from fence.explore import long_lived
    from fence.explore.walk import _LongLived, explore
    from fence.model.policies import POLICIES
    from fence.model.world import ModelConfig

    frozen_after_levels = []
    next_level = long_lived.LongLived.next_level

    def watched(self):
        next_level(self)
        frozen_after_levels.append(gc.get_freeze_count())  # counts the frozen objects one by one: per level only

    monkeypatch.setattr(long_lived.LongLived, "next_level", watched)

    class Cyclic(TicketService):
        snapshots = 0

        def snapshot(self):
            Cyclic.snapshots += 1
            if Cyclic.snapshots == 50:  # well into the walk's first level
                loop = []
                loop.append(loop)  # a cycle only the cyclic collector frees
                del loop
                gc.collect(0)
            return super().snapshot()

    config = ModelConfig(capacity=1, jobs=1, max_attempts=2, horizon=2)
    assert gc.get_freeze_count() == 0
    found = explore(POLICIES["abandon-fenced"], config, destination_factory=type("Plain", (TicketService,), {}))
    assert found.exhausted and gc.get_freeze_count() == 0 and max(frozen_after_levels) > 0

    frozen_after_levels.clear()
    found = explore(POLICIES["abandon-fenced"], config, destination_factory=Cyclic)
    assert found.exhausted and gc.get_freeze_count() == 0 and Cyclic.snapshots > 50
    assert frozen_after_levels and max(frozen_after_levels) == 0

    monkeypatch.undo()
    long_lived_walk = _LongLived(fence_parts_only=False)  # a caller's own frozen objects: a walk leaves them be
    long_lived_walk.close()
    gc.freeze()
    try:
        long_lived_walk = _LongLived(fence_parts_only=False)
        long_lived_walk.next_level()
        long_lived_walk.close()
        assert not long_lived_walk.freezes and gc.get_freeze_count() > 0  # still the caller's
    finally:
        gc.unfreeze()
