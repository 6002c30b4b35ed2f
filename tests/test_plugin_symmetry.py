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
IN_EVERY_RUN = {"plain subclass", "deadline witness", "ledger frees twice"}


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


@pytest.mark.parametrize("config, symmetry", [
    (dict(capacity=1, jobs=1, max_attempts=3, horizon=3), False),
    (dict(capacity=2, jobs=2, max_attempts=1, horizon=1), False),
    (dict(capacity=2, jobs=2, max_attempts=1, horizon=1), True),
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
