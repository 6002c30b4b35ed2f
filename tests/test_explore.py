"""The exhaustive explorer: verdicts, proofs within bounds, shortest counterexamples, the CLI.

The CI bound is 1 unit x 1 job x 3 attempts, lease 2, horizon 3 (``CI_BOUND``):
its state space is exhausted for every policy in a few seconds each (655 to
2,588 distinct states), so the default run explores every policy's row. At
horizon 3 a lease of 2 expires at most once per attempt, so the third attempt
is never started by the chosen steps (only by the drain); ``HORIZON_4`` lets
all three start. 2 units x 2 jobs x 2 attempts (``TWO_BY_TWO``) took minutes
before issue 16 and now about 8 s in one process: its proof runs in every run.
"""

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from fence.checking.checking import PROFILES
from fence.model.destination import TicketService
from fence.explore.drain_judge import DrainJudge
from fence.explore.congruence import key_congruence
from fence.explore.report import report_text
from fence.explore.results import Outcome
from fence.explore.walk import explore, shortest
from fence.explore.workers import ONE_PROCESS_FASTER, explore_with_workers
from fence.model.invariants import BY_NAME, INVARIANTS, Invariant, required_dangers
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES
from fence.explore.state_key import state_key
from fence.checking.verdicts import Verdict, profile_settings, survey_config
from fence.checking.expected import load_expected
from fence.model.world import ModelConfig, World

CI_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=3)
HORIZON_4 = ModelConfig(capacity=1, jobs=1, max_attempts=3, lease=2, horizon=4)
TWO_BY_TWO = ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2)
EXPECTED = load_expected()
FENCE = [sys.executable, "-m", "fence.cli.main"]
ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("explorer_results", ROOT / "tools" / "explorer_results.py")
explorer_results = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(explorer_results)
_CACHE: dict[object, object] = {}


def explored_at(name: str, config: ModelConfig):
    if (name, config) not in _CACHE:
        _CACHE[(name, config)] = explore(POLICIES[name], config)
    return _CACHE[(name, config)]


def explored(name: str):
    return explored_at(name, CI_BOUND)


def _expected_outcome(verdict: Verdict) -> Outcome:
    return Outcome.VIOLATED if verdict is Verdict.VIOLATED else Outcome.PROVED


def _check_row(name: str) -> None:
    found = explored(name)
    assert found.exhausted, f"{name}: the state space under {CI_BOUND} was not exhausted"
    observed = {inv: item.outcome for inv, item in found.results.items()}
    wanted = {inv: _expected_outcome(v) for inv, v in EXPECTED[name].items()}
    assert observed == wanted


@pytest.mark.parametrize("name", list(POLICIES))
def test_explorer_row_equals_the_expected_matrix(name):
    """Exhausting the CI bound gives the committed row: violated cells violated, holds cells proved."""
    _check_row(name)


def test_abandon_fenced_is_proved_at_one_unit_one_job_three_attempts():
    """The safe policy is PROVED for every invariant, with the state space exhausted."""
    found = explored("abandon-fenced")
    assert found.exhausted and found.stopped_by is None
    assert all(item.outcome is Outcome.PROVED for item in found.results.values())
    assert found.outcome() is Outcome.PROVED
    assert found.drains_unsettled == 0


def test_abandon_fenced_is_proved_with_all_three_attempts_reachable():
    """At horizon 4 a third attempt starts within the chosen steps; abandon-fenced is still PROVED."""
    found = explore(POLICIES["abandon-fenced"], HORIZON_4)
    assert found.exhausted and found.outcome() is Outcome.PROVED
    assert not found.missing_dangers()
    assert any(a.endswith("#3") for a in _attempts_started(POLICIES["abandon-fenced"], HORIZON_4))


def _attempts_started(policy, config) -> set[str]:
    """Every attempt some chosen step of a random walk starts (a cheap reachability witness)."""
    rng = random.Random(3)
    started: set[str] = set()
    for _ in range(400):
        world = World(policy, config)
        for _ in range(60):
            actions = world.enabled_actions()
            if not actions:
                break
            world.apply(rng.choice(actions))
        started |= set(world.attempts)
    return started


# 20 s, with --run-slow: in every run the abstract walk at 2x2x2 h2 is held to its recorded figures on naive
# (tests/test_visited.py) and on a copy of naive (tests/test_user_policies.py); this proof's figures are in
# tools/explorer-results.json (the exactness compare) and evidence/explorer-one-and-two-processes.txt.
@pytest.mark.slow
def test_abandon_fenced_is_proved_at_two_units_two_jobs_two_attempts():
    """2 units x 2 jobs x 2 attempts (horizon 2, jobs symmetric) is exhausted and every invariant PROVED."""
    found = explore(POLICIES["abandon-fenced"], TWO_BY_TWO, symmetry=True)
    print(f"{found.states} states, {found.transitions} transitions, {found.seconds:.0f}s")
    assert found.exhausted and found.outcome() is Outcome.PROVED
    assert not found.missing_dangers()
    assert found.drains_unsettled == 0


@pytest.mark.parametrize("name", list(POLICIES))
def test_the_dangerous_states_are_reached(name):
    """Every danger the policy must face is reached by some explored transition."""
    found = explored(name)
    assert not found.missing_dangers()
    for danger in required_dangers(POLICIES[name]):
        assert found.reached[danger.name] > 0


# Hypothesis samples; the explorer does not. At the CI bound the hardest cell
# for sampling is witness-fenced / no_silent_replay: its shortest run is 12
# chosen steps that must all fit under horizon 3 (a probe racing the
# registration, the commit, a settle, a revised retry and its commit). With the
# default profile, random seeds find it about 7 times in 10 (seeds 1-10: 7).
# This test once asserted that the derandomised run finds it, and it did, but
# only because Hypothesis mixed integer constants read from fence's own source
# into its draws: adding a string literal to the CLI made it miss. The draws
# are now independent of source text (fence/search/draws.py), and the derandomised
# run misses it, so that expectation was wrong. It is pinned as a known miss,
# exactly: if the draw starts finding it, this test fails and the list shrinks.
# The judged verdict stays violated, because the explorer finds the cell; the
# replay test below shows the run is one Hypothesis' machine can make.
HARDEST_CELL = {"witness-fenced": "no_silent_replay"}


def _every_run_or_slow(names):
    return [name if name in names else pytest.param(name, marks=pytest.mark.slow) for name in POLICIES]


# One policy in every run, the one with the cell Hypothesis is known to miss (its other cells violated
# and proved); every policy with --run-slow. The verdict gate (tests/test_gate.py) and the explorer's own
# rows hold every policy in every run; this adds that the two engines agree at one bound (8 s each).
HYPOTHESIS_AGREEMENT_IN_EVERY_RUN = ("witness-fenced",)


@pytest.mark.parametrize("name", _every_run_or_slow(HYPOTHESIS_AGREEMENT_IN_EVERY_RUN))
def test_explorer_and_hypothesis_agree_at_the_same_bound(name):
    """At the CI bound, Hypothesis violates only cells the explorer violates, and misses exactly the known one."""
    examples, steps, _shrink = PROFILES["default"]
    hypothesis = survey_config(POLICIES[name], CI_BOUND, run_settings=profile_settings(examples, steps))
    found = explored(name)
    violated = {inv for inv, item in found.results.items() if item.outcome is Outcome.VIOLATED}
    assert set(hypothesis.counterexamples) <= violated, "Hypothesis broke a cell the explorer proved"
    missed = violated - set(hypothesis.counterexamples)
    known = {HARDEST_CELL[name]} if name in HARDEST_CELL else set()
    assert missed == known, f"Hypothesis missed {sorted(missed)}; known misses {sorted(known)}"
    for inv, example in hypothesis.counterexamples.items():
        assert found.results[inv].depth <= example.rule_steps


# Small enough for the reference walk (3,159 to 14,036 whole states, 1 to 7 s each), big
# enough that every policy has violated and proved cells and reaches every danger.
WHOLE_STATE_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2)


# A janitor's settle on an answer gone stale is refused and changes nothing the key
# holds: the hand-kept key drops such answers (fence.explore.state_key), so it may never
# take that step, which the reference, keeping every answer, does.
MERGED_AWAY_BY_DESIGN = {"settle_on_stale_evidence_refused"}


def _conclusions(found) -> tuple:
    """What a walk concludes, whatever key it merged states by: verdicts, shortest lengths, situations reached."""
    return (
        found.exhausted,
        {name: (item.outcome, item.depth) for name, item in found.results.items()},
        sorted(name for name, count in found.reached.items() if count and name not in MERGED_AWAY_BY_DESIGN),
    )


# Each walk by the whole state costs 6 to 16 s of CPU at WHOLE_STATE_BOUND on this machine. naive runs in
# every run; all eight, the fence, abandon promises, follow-ups, shared identities and the witness
# policies, with --run-slow (run it before changing the explorer's key: CI's ten minutes hold no more).
WHOLE_STATE_IN_EVERY_RUN = ("naive",)


@pytest.mark.parametrize("name", _every_run_or_slow(WHOLE_STATE_IN_EVERY_RUN))
def test_the_hand_kept_key_merges_only_states_with_the_same_future(name):
    """Every state the key merges at WHOLE_STATE_BOUND has the same steps, findings and drain as the others.

    ``key_congruence`` walks every reachable state by ``whole_state`` (read
    mechanically from the objects' fields) and groups them by ``state_key``.
    """
    states, differences = key_congruence(POLICIES[name], WHOLE_STATE_BOUND)
    assert states > explored_at(name, WHOLE_STATE_BOUND).states
    assert differences == []


@pytest.mark.parametrize("name", _every_run_or_slow(()))  # about 10 s each: all with --run-slow
def test_the_symmetric_key_merges_only_states_with_the_same_future(name):
    """With jobs symmetric (2 units x 2 jobs x 1 attempt, horizon 1), renamed states merged by the key agree too.

    Their drains included: the drain visits jobs in name order, and the walk
    judges invariant 6 on one state of each renamed group for all of them.
    """
    config = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=1)
    states, differences = key_congruence(POLICIES[name], config, symmetry=True)
    assert states > explore(POLICIES[name], config, symmetry=True).states
    assert differences == []


@pytest.mark.parametrize("left_out", ["the clock", "the job's attempts"])
def test_the_congruence_check_catches_a_key_that_forgets_a_field(left_out):
    """The check can fail: a key without the clock, or without the job's attempts, merges states it must not."""

    def forgetful(world, symmetry=False):
        now, parts, abandoned = state_key(world, symmetry)
        if left_out == "the clock":
            return 0, parts, abandoned
        return now, tuple(part[:3] + part[4:] for part in parts), abandoned

    _states, differences = key_congruence(POLICIES["naive"], WHOLE_STATE_BOUND, key=forgetful, most=1)
    assert differences and "one key merges states that differ" in differences[0]


@pytest.mark.parametrize("name", _every_run_or_slow(("naive",)))
def test_the_hand_kept_key_concludes_what_the_whole_state_does(name):
    """The explorer's walk (abstract walk, memos, reductions) and the walk by every field of the world agree.

    The reference (``by_whole_state``) keys each state by ``whole_state`` and
    takes every janitor's step: it merges only states equal in every field.
    Verdicts, shortest lengths and the situations reached must be the same
    (counts differ by design: the reference has 5 to 20 times the states).
    """
    reference = explore(POLICIES[name], WHOLE_STATE_BOUND, by_whole_state=True)
    fast = explored_at(name, WHOLE_STATE_BOUND)
    assert reference.states > fast.states
    assert _conclusions(reference) == _conclusions(fast)
    assert not fast.missing_dangers()


def test_a_walk_by_a_key_that_forgets_a_field_concludes_otherwise(monkeypatch):
    """The comparison can fail: a key whose job parts forget the reservations concludes otherwise.

    (The walk without memos, ``fence.explore.world_walk.WorldWalk``, takes ``state_key``.)
    """
    from fence.explore import world_walk

    whole_key = world_walk.state_key

    def without_reservations(world, symmetry=False):
        now, parts, abandoned = whole_key(world, symmetry)
        return now, tuple(part[1:] for part in parts), abandoned

    monkeypatch.setattr(world_walk, "state_key", without_reservations)
    forgetful = explore(POLICIES["abandon-fenced-shared"], WHOLE_STATE_BOUND, memo=False)
    reference = explore(POLICIES["abandon-fenced-shared"], WHOLE_STATE_BOUND, by_whole_state=True)
    assert _conclusions(forgetful) != _conclusions(reference)


def test_the_whole_state_reads_every_field_but_those_declared_not_state():
    """A new field is in the whole state without a word; one it cannot read raises; no declaration is stale."""
    from fence.explore.whole_state import NOT_STATE, whole_state

    world = World(POLICIES["abandon-fenced"], WHOLE_STATE_BOUND)
    before = whole_state(world)
    world.ledger.a_new_field = 1
    assert whole_state(world) != before
    world.ledger.a_new_field = object()
    with pytest.raises(TypeError, match="declare it in NOT_STATE"):
        whole_state(world)
    del world.ledger.a_new_field
    parts = {"World": world, "Ledger": world.ledger, "TicketService": world.destination, "Observer": world.observer}
    for kind, fields in NOT_STATE.items():
        assert all(hasattr(parts[kind], field) for field in fields), kind


@pytest.mark.parametrize("name", list(HARDEST_CELL))
def test_the_hardest_cell_is_a_run_of_the_machine_hypothesis_drives(name):
    """The explorer's counterexample for the hardest cell replays through the same World and breaks it."""
    inv = BY_NAME[HARDEST_CELL[name]]
    found = explored(name).results[inv.name]
    assert found.outcome is Outcome.VIOLATED
    actions = [step.action for step in found.counterexample.steps if not step.drain]
    replayed = replay_actions(POLICIES[name], CI_BOUND, actions, inv)
    assert replayed is not None and len(replayed.actions) == found.depth == 12


# 12 s, with --run-slow. In every run the CI-bound rows pin each counterexample step for step
# (test_the_explorer_concludes_at_the_ci_bound_what_was_recorded) and the gate holds the minimised find to 12 steps.
@pytest.mark.slow
def test_explorer_shortest_naive_duplicate_is_no_longer_than_the_minimised_one():
    """On the default model, the explorer's shortest naive double write is <= fence's minimised one."""
    examples, steps, _shrink = PROFILES["default"]
    result = survey_config(POLICIES["naive"], ModelConfig(), run_settings=profile_settings(examples, steps))
    minimised = result.counterexamples["no_duplicate_writes"]
    best = shortest(
        POLICIES["naive"], ModelConfig(), BY_NAME["no_duplicate_writes"],
        max_depth=minimised.rule_steps, max_states=None, time_budget=60,
    )
    assert best is not None
    print(f"minimised {minimised.rule_steps} steps, explorer's shortest {best.rule_steps}")
    assert best.rule_steps <= minimised.rule_steps
    assert best.shortest_steps == best.rule_steps


def test_a_violation_found_under_a_budget_is_still_violated_and_the_rest_undetermined():
    """A tiny state budget leaves unbroken invariants UNDETERMINED, never PROVED."""
    found = explore(POLICIES["naive"], CI_BOUND, max_states=50)
    assert found.stopped_by == "max_states" and not found.exhausted
    assert found.results["no_early_release"].outcome is Outcome.VIOLATED
    assert found.results["capacity_conserved"].outcome is Outcome.UNDETERMINED
    assert found.outcome() is Outcome.VIOLATED


def test_a_state_budget_stops_inside_one_expansion_not_after_it():
    """A wide bound's first state has a successor per job: the budget is asked after each new one.

    With 40 jobs the root alone has 40 successors; a budget asked only between
    expansions stopped with all of them (and at a hundred jobs, after minutes of
    drains), not at the states asked for.
    """
    wide = ModelConfig(capacity=40, jobs=40, max_attempts=2, horizon=3)
    found = explore(POLICIES["naive"], wide, max_states=10)
    assert found.stopped_by == "max_states" and not found.exhausted
    assert found.states == 10
    assert all(result.outcome is not Outcome.PROVED for result in found.results.values())


@pytest.mark.parametrize("name", list(POLICIES))
def test_the_explorer_concludes_at_the_ci_bound_what_was_recorded(name):
    """Every figure of the CI-bound row equals tools/explorer-results.json: states, transitions, depth,
    outcomes, dangers and each counterexample's every step (a speed-up must change none of them).

    After an intended change to the model, re-record with
    ``python tools/explorer_results.py record tools/explorer-results.json --rows all``.
    """
    recorded = json.loads((ROOT / "tools" / "explorer-results.json").read_text())
    row = next(r for r in explorer_results.rows("quick") if r["policy"] == name)
    walked, figures = explorer_results.walk(row)
    assert explorer_results.differences(recorded, {walked: figures}) == []


class _SameService(TicketService):
    """fence's own destination under another name: the explorer's fast path does not know it, so the
    walk takes the generic path (deep copies, the generic key, the faithfulness check)."""


# Two policies in the default run (violated and proved cells, one with shared identities);
# the other six (about 40 s of CPU on the generic path) with --run-slow, to keep CI under ten minutes.
GENERIC_PATH_IN_EVERY_RUN = ("naive", "abandon-fenced-shared")


@pytest.mark.parametrize("name", _every_run_or_slow(GENERIC_PATH_IN_EVERY_RUN))
def test_the_fast_and_the_generic_path_agree(name):
    """Every built-in policy at the CI bound: the generic path gives the fast path's verdicts, shortest
    counterexample lengths and reached dangers (it merges fewer states, so it counts more of them)."""
    fast = explored(name)
    generic = explore(POLICIES[name], CI_BOUND, destination_factory=_SameService)
    assert generic.exhausted and generic.unfaithful is None and generic.faithfulness_checks > 0
    assert {k: (v.outcome, v.depth) for k, v in generic.results.items()} == {
        k: (v.outcome, v.depth) for k, v in fast.results.items()}
    assert generic.missing_dangers() == fast.missing_dangers() == []
    assert generic.states >= fast.states


def test_symmetry_gives_the_same_verdicts_with_fewer_states():
    """Treating jobs as interchangeable keeps every verdict and shrinks the explored space."""
    config = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2)
    plain = explore(POLICIES["naive"], config, max_depth=9)
    reduced = explore(POLICIES["naive"], config, max_depth=9, symmetry=True)
    assert {k: v.outcome for k, v in plain.results.items()} == {k: v.outcome for k, v in reduced.results.items()}
    assert reduced.states < plain.states


def _walk_figures(found) -> tuple:
    verdicts = {name: (item.outcome, item.depth) for name, item in found.results.items()}
    return (found.states, found.transitions, found.depth, found.exhausted, dict(found.reached), verdicts)


@pytest.mark.parametrize("name", list(POLICIES))
def test_two_workers_walk_the_same_graph_as_one(name):
    """Sharing each level between two processes gives the same states, transitions, dangers and verdicts."""
    together = explore_with_workers(POLICIES[name], CI_BOUND, workers=2, share_levels="always")
    assert _walk_figures(together) == _walk_figures(explored(name))
    for item in together.results.values():
        if item.counterexample:  # replayed through the one World by _counterexample
            assert item.counterexample.shortest_steps == item.depth


def test_two_workers_keep_a_depth_bound_and_symmetry():
    """With jobs symmetric and a depth bound, both engines stop at the same level, not exhausted."""
    config = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2)
    alone = explore(POLICIES["witness"], config, max_depth=8, symmetry=True)
    together = explore_with_workers(
        POLICIES["witness"], config, workers=2, max_depth=8, symmetry=True, share_levels="always"
    )
    assert not alone.exhausted
    assert _walk_figures(together) == _walk_figures(alone)


def users_step_check(world) -> None:
    """A step invariant of a user's: the memos cannot judge it (module level, so it pickles to workers)."""
    return None


def test_levels_are_shared_only_where_that_pays():
    """Asked for two processes, the built-in invariants take the abstract walk in one; a user's step check shares.

    The memos cannot judge a step invariant of the user's, so every new state is
    built for real and sharing levels pays; the report says which happened and why.
    """
    config = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=1)
    alone = explore_with_workers(POLICIES["abandon-fenced"], config, workers=2, symmetry=True)
    assert alone.processes == 1 and alone.one_process_because == ONE_PROCESS_FASTER
    assert "in one process: the abstract walk" in report_text(alone)
    theirs = INVARIANTS + (Invariant(8, "users_step_check", "a user's own step invariant", users_step_check),)
    shared = explore_with_workers(POLICIES["abandon-fenced"], config, workers=2, symmetry=True, invariants=theirs)
    assert shared.processes == 2 and shared.one_process_because is None
    assert "each level shared between 2 processes" in report_text(shared)
    assert _walk_figures(shared)[:5] == _walk_figures(alone)[:5]
    with pytest.raises(ValueError, match="share_levels"):
        explore_with_workers(POLICIES["naive"], config, workers=2, share_levels="sometimes")


def test_two_workers_out_of_time_are_undetermined():
    """A time budget that runs out on two workers leaves the unbroken invariants UNDETERMINED."""
    found = explore_with_workers(
        POLICIES["abandon-fenced"], TWO_BY_TWO, workers=2, time_budget=0.5, symmetry=True, share_levels="always"
    )
    assert found.processes == 2
    assert found.stopped_by == "time_budget" and not found.exhausted
    assert found.outcome() is Outcome.UNDETERMINED


@pytest.mark.parametrize("name", _every_run_or_slow(GENERIC_PATH_IN_EVERY_RUN))
def test_the_step_memo_answers_as_the_model_does(name):
    """Every answer of the step, tick and drain memos, made again by the model itself, is the same.

    ``check_memo=1`` takes every memoised step for real as well and compares the
    key part, detail, abandon promises, findings, dangers and context after
    (fence.explore.transitions), and drains again without memo each state the drain judge
    answered from its memos; the abstract walk's memos (fence.explore.abstract: enabled
    actions, readings, the judgement of a new state, the drain judge asked on readings)
    are compared with the World too; the walk's figures equal those of a walk without
    the memos.
    """
    for config, symmetry in ((CI_BOUND, False), (ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=1), True)):
        checked = explore(POLICIES[name], config, symmetry=symmetry, check_memo=1)
        plain = explore(POLICIES[name], config, symmetry=symmetry, memo=False)
        assert _walk_figures(checked) == _walk_figures(plain)


def test_a_walk_of_fence_s_own_parts_leaves_no_cyclic_garbage():
    """The walk switches the cyclic collector off (_LongLived): it must leave nothing only that collector frees.

    Two policies, one that stops at a violation and one proved: what the walk keeps is the same for every policy.
    """
    import gc

    for name in ("naive", "abandon-fenced"):
        gc.collect()
        gc.disable()  # from before the walk, so nothing it makes is collected before the count
        try:
            found = explore(POLICIES[name], ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=1),
                            symmetry=True)
            assert found.exhausted
            del found
            assert gc.collect() == 0, name
        finally:
            gc.enable()


@pytest.mark.parametrize("left_out", ["messages in flight", "attempts", "clock"])
def test_the_memo_check_catches_a_memo_key_that_leaves_something_out(monkeypatch, left_out):
    """The check of the step memo can fail: a detail or context missing a reading is caught."""
    from fence.explore import transitions
    from fence.explore.transitions import MemoMismatch

    if left_out == "clock":
        whole_context = transitions.context
        monkeypatch.setattr(transitions, "context", lambda world: (0,) + whole_context(world)[1:])
    else:
        index = {"messages in flight": 8, "attempts": 6}[left_out]
        whole = transitions.job_details

        def leaves_out(world, wanted):
            return {job: d[:index] + d[index + 1:] for job, d in whole(world, wanted).items()}

        monkeypatch.setattr(transitions, "job_details", leaves_out)
    with pytest.raises(MemoMismatch):
        explore(POLICIES["abandon-fenced"], ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2),
                symmetry=True, check_memo=1, max_depth=12)


@pytest.mark.parametrize("broken", ["enabled actions without the context", "live writers without the detail",
                                    "context after a step left unchanged", "drain asked with job1's detail for all"])
def test_the_memo_check_catches_an_abstract_walk_memo_that_leaves_something_out(monkeypatch, broken):
    """The abstract walk's own memos (fence.explore.abstract) are checked too: each, broken, is caught.

    The drain's is broken for witness-fenced, whose drains do not all settle (with
    every drain settling, a wrong key still gives the right answer).
    """
    from fence.explore import abstract
    from fence.explore import transitions
    from fence.explore.transitions import MemoMismatch

    policy = "abandon-fenced"
    if broken == "drain asked with job1's detail for all":
        policy = "witness-fenced"
        whole_lookup = DrainJudge.lookup

        def one_detail(self, details, *rest):
            return whole_lookup(self, details[:1] * len(details), *rest)

        monkeypatch.setattr(DrainJudge, "lookup", one_detail)
    elif broken == "enabled actions without the context":
        monkeypatch.setattr(abstract, "enabled_key", lambda detail, shared: detail)
    elif broken == "live writers without the detail":
        monkeypatch.setattr(abstract, "readings_key", lambda detail: 0)
    else:
        whole_learn = transitions.StepMemo.learn

        def keeps_the_parent_s_context(self, memo_key, job, parent, child, findings, reached):
            answer = whole_learn(self, memo_key, job, parent, child, findings, reached)
            answer = answer[:5] + (transitions.context(parent),)
            self.answers[memo_key] = answer
            return answer

        monkeypatch.setattr(transitions.StepMemo, "learn", keeps_the_parent_s_context)
    with pytest.raises(MemoMismatch):
        explore(POLICIES[policy], ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2),
                symmetry=True, check_memo=1, max_depth=12)


@pytest.mark.parametrize("config", [ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=2),
                                    ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2)])
def test_a_violation_found_by_the_abstract_walk_replays_with_its_janitors_translated(config):
    """The abstract walk records janitors' steps by what they do; its counterexamples replay from scratch.

    A recorded step may name a janitor that, on the replayed World, holds a
    different answer (or none): ``_judge`` translates it (fence.explore.abstract_state.replayable).
    The violations are those of the walk without memos, at the same depths.
    Both walks stop at depth 12: every violation of these two policies is
    found by then (at most 12 chosen steps), and the walk without memos to
    the end of 2x2x2 would take ten times as long for cells proved there.
    """
    for name in ("naive", "reconcile"):
        fast = explore(POLICIES[name], config, symmetry=True, stop_when_all_violated=True, max_depth=12)
        plain = explore(POLICIES[name], config, symmetry=True, stop_when_all_violated=True, memo=False, max_depth=12)
        assert fast.unfaithful is None
        assert {n: (i.outcome, i.depth) for n, i in fast.results.items()} == {
            n: (i.outcome, i.depth) for n, i in plain.results.items()}
        violated = [item for item in fast.results.values() if item.outcome is Outcome.VIOLATED]
        assert violated
        for item in violated:
            assert item.counterexample.shortest_steps == item.depth
            assert any(step.action.kind in ("scan", "probe", "settle") for step in item.counterexample.steps)


def test_a_janitor_s_step_is_given_to_a_janitor_that_can_take_it():
    """``translate`` gives a recorded janitor's step to one that can take it alike on another World.

    The abstract walk records the janitor of the World its memo learned from;
    in the walks the tests run, that janitor could always take the step again
    (checked when this test was written), so the translation is pinned here
    directly: janitor 0 holds an answer about job1/r1, so a probe recorded as
    janitor 0's goes to janitor 1, and a settle recorded as janitor 1's goes to
    janitor 0. A step nobody can take is a memo fault and raises.
    """
    from fence.explore.abstract_state import translate
    from fence.explore.transitions import MemoMismatch, relative_action
    from fence.model.world import Probe, Settle

    world = World(POLICIES["reconcile"], ModelConfig(capacity=1, jobs=1, max_attempts=2, horizon=3))
    for kind in ("reserve", "tick", "scan", "probe"):
        world.apply(world.enabled(kind)[0])  # job1 reserves, its lease expires, janitor 0 scans and probes
    probe, settle = Probe(1, "job1/r1"), Settle(0, "job1/r1")
    assert world.enabled("probe") == [probe] and world.enabled("settle") == [settle]
    assert translate(world, Probe(0, "job1/r1"), "job1", relative_action(world, probe, "job1")) == probe
    assert translate(world, Settle(1, "job1/r1"), "job1", relative_action(world, settle, "job1")) == settle
    with pytest.raises(MemoMismatch):
        translate(world, Settle(1, "job1/r1"), "job1", ("settle", "/r1", True))  # no second step is owed


def test_the_memoised_drain_judges_as_drain_does():
    """Invariant 6 through the explorer's memoised drain equals World.drain() on random states."""
    inv = BY_NAME["everything_settles"]
    rng = random.Random(5)
    for name in ("naive", "witness-fenced", "abandon-fenced-shared"):
        judge = DrainJudge([inv])
        for _ in range(60):
            world = World(POLICIES[name], ModelConfig(capacity=2, jobs=2))
            for _ in range(rng.randrange(0, 25)):
                actions = world.enabled_actions()
                if not actions:
                    break
                world.apply(rng.choice(actions))
            broken, _settled = judge(world)
            plain = world.clone()
            plain.drain()
            assert (inv.name in broken) == bool(inv.check(plain))


def test_clone_is_independent_and_keeps_the_state():
    """A clone has the same fingerprint, and moving it leaves the original alone."""
    world = World(POLICIES["naive"], ModelConfig(capacity=2, jobs=2))
    for action in ["reserve", "start", "send_commit"]:
        world.apply(world.enabled(action)[0])
    copy = world.clone()
    assert copy.fingerprint() == world.fingerprint() and state_key(copy) == state_key(world)
    copy.apply(copy.enabled("deliver")[0])
    assert copy.fingerprint() != world.fingerprint()
    assert len(world.trace) == 3 and len(copy.trace) == 4
    assert world.clone(history=False).trace == []


@pytest.mark.parametrize("name", list(POLICIES))
def test_clones_share_nothing_that_a_step_or_a_drain_changes(name):
    """Copy-on-write clones: a step or a drain taken on a clone never shows in the world it came from.

    Pins the copy-on-write of World.clone's parts (ledger, destination, observer):
    every change to a shared part must copy it first.
    """
    rng = random.Random(11)
    for _ in range(40):
        world = World(POLICIES[name], ModelConfig(capacity=2, jobs=2, max_attempts=2))
        for _ in range(rng.randrange(1, 30)):
            actions = world.enabled_actions()
            if not actions:
                break
            before = (world.fingerprint(), state_key(world), _present(world))
            for action in actions:
                child = world.clone(history=False)
                child.apply(action)
            drained = world.clone(history=False)
            drained.drain()
            assert (world.fingerprint(), state_key(world), _present(world)) == before
            world = world.clone(history=False)
            world.apply(rng.choice(actions))


@pytest.mark.parametrize("name", list(POLICIES))
def test_the_key_kept_per_job_equals_the_key_made_afresh(name):
    """state_key through World.job_memo equals the key made with no memo, after every step and drain step.

    Pins Action.job_in: a step that changed a job's part without dropping its memo shows here.
    """
    rng = random.Random(13)
    for _ in range(40):
        world = World(POLICIES[name], ModelConfig(capacity=2, jobs=2, max_attempts=2))
        steps = rng.randrange(1, 30)
        for number in range(steps + 6):
            if number == steps:
                world.start_draining()
            if number >= steps:  # then whole drain rounds, the explorer's drain judge's steps
                world._drain_round()
            else:
                actions = world.enabled_actions()
                if not actions:
                    continue
                world = world.clone(history=False)
                world.apply(rng.choice(actions))
            for symmetry in (False, True):
                kept = state_key(world, symmetry)
                fresh = world.clone(history=False)
                fresh.job_memo = {}
                assert kept == state_key(fresh, symmetry)


def _present(world) -> tuple:
    """The observer's present and the attempts, as values."""
    observer = world.observer
    return (
        tuple((m.reservation_id, m.state, m.times_freed) for m in observer.reservations.values()),
        tuple(observer.effects), tuple(sorted(observer.effects_per_key.items())),
        tuple(sorted(observer.first_payload.items())), tuple(sorted(observer.abandoned)),
        tuple(sorted(observer.current_by_key.items())),
        tuple((a.handle, a.phase, a.ack, a.wrote) for a in world.attempts.values()),
        tuple(sorted(world.ledger.units_freed.items())),
    )


def run(*args, cwd=None):
    return subprocess.run([*FENCE, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_cli_explore_exit_3_when_the_state_budget_runs_out(tmp_path):
    """``fence explore --max-states`` too small to finish exits 3 (undetermined), not 0."""
    result = run("explore", "--policy", "abandon-fenced", "--max-states", "20", "--out", str(tmp_path))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "UNDETERMINED" in result.stdout


def test_cli_explore_exit_0_when_proved_and_1_when_violated(tmp_path):
    """A tiny horizon: abandon-fenced is proved (exit 0), naive violated (exit 1, files written)."""
    proved = run("explore", "--policy", "abandon-fenced", "--horizon", "2", "--out", str(tmp_path))
    assert proved.returncode == 0, proved.stdout + proved.stderr
    violated = run("explore", "--policy", "naive", "--horizon", "2", "--out", str(tmp_path), "--json")
    assert violated.returncode == 1, violated.stdout + violated.stderr
    assert (tmp_path / "naive__no_early_release.json").exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--policy", "no-such-policy"], "unknown policy"),
        (["--capacity", "0"], "must be at least 1"),
        (["--horizon", "-1"], "cannot be negative"),
        (["--max-states", "-5"], "must be at least 1"),
        (["--time-budget", "0"], "more than 0 seconds"),
        (["--capacity", "1", "--jobs", "2"], "must not exceed capacity"),
    ],
)
def test_cli_explore_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    """Each bad explore argument is one line on stderr, exit 2, no traceback."""
    result = run("explore", *args, "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_cli_explore_says_how_many_processes_shared_the_levels(tmp_path):
    """``--workers 2`` runs fence's own parts in one process and says why; ``--share-levels always`` shares them."""
    common = ("explore", "--policy", "naive", "--horizon", "2", "--workers", "2", "--out", str(tmp_path))
    alone = run(*common)
    assert "in one process: the abstract walk" in alone.stdout, alone.stdout + alone.stderr
    shared = run(*common, "--share-levels", "always")
    assert "each level shared between 2 processes" in shared.stdout, shared.stdout + shared.stderr
    assert alone.returncode == shared.returncode == 1  # naive is violated either way


def test_cli_bench_explorer_writes_its_table_and_plot(tmp_path):
    """``fence bench explorer`` (once deleted by mistake while the CLI still offered it) writes its evidence."""
    out = tmp_path / "explorer.txt"
    result = run("bench", "explorer", "--policy", "naive", "--bound", "1x1x1:3", "--time-budget", "0.5", "--workers", "1",
                 "--report", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    text = out.read_text()
    assert text.startswith("# command: ") and "naive" in text and "1x1x1, horizon 3" in text
    assert (tmp_path / "explorer.png").exists()


def test_cli_bench_explorer_records_speed_and_peak_memory_per_row(tmp_path):
    """Each row of ``fence bench explorer`` has states/s, transitions/s, wall seconds and a peak memory figure."""
    out = tmp_path / "explorer.txt"
    result = run("bench", "explorer", "--policy", "naive", "--bound", "1x1x2:3", "--bound", "1x1x1:3",
                 "--workers", "1", "--report", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = out.read_text().splitlines()
    header = next(line for line in lines if line.startswith("policy "))
    assert all(column in header for column in ("states/s", "trans/s", "wall s", "peak MiB"))
    rows = [line.split() for line in lines if line.startswith("naive ")]
    assert [row[1] for row in rows] == ["1x1x2,", "1x1x1,"]
    for row in rows:
        states, transitions, per_second, per_transition, peak = (
            int(row[5]), int(row[6]), int(row[9]), int(row[10]), int(row[11]))
        assert transitions > states > 0 and 0 < per_second < per_transition
        assert 10 < peak < 1024  # MiB: a whole Python process, far under the 1 GB


def test_cli_bench_explorer_repeats_a_row_and_reports_its_median_run(tmp_path):
    """``--repeat 3``: three explorations of the row, each in its own process; the table quotes the median run."""
    out = tmp_path / "explorer.txt"
    result = run("bench", "explorer", "--policy", "naive", "--bound", "1x1x1:3", "--repeat", "3",
                 "--workers", "2", "--report", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split("]")[0] for line in result.stderr.splitlines() if line.startswith("[")] == [
        "[1/3", "[2/3", "[3/3"]
    text = out.read_text()
    assert "each row explored 3 times" in text
    (row,) = [line.split() for line in text.splitlines() if line.startswith("naive ")]
    median = float(row[8])
    fastest, slowest = (float(figure) for figure in row[-1].split("-"))
    assert fastest <= median <= slowest


def test_cli_bench_counterexamples_times_a_cell_to_its_proved_shortest(tmp_path):
    """``fence bench counterexamples`` finds, minimises and proves shortest a violated cell, per seed."""
    out = tmp_path / "counterexamples.txt"
    result = run("bench", "counterexamples", "--policy", "abandon-fenced-shared", "--seeds", "1", "--workers", "1",
                 "--report", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in out.read_text().splitlines() if "everything_settles" in line)
    assert "1/1" in row and row.split()[-1] == "1/1", row


@pytest.mark.parametrize("which", ["halfway", "own"])
def test_the_memo_check_catches_a_drain_key_that_lookup_passed_on_wrongly(monkeypatch, which):
    """A drain the memos missed is stored under the keys ``lookup`` just missed on, not made again: with the
    memo check on, each is compared with the key the drained World gives (a wrong one would be stored silently)."""
    from fence.explore.transitions import MemoMismatch

    whole_lookup = DrainJudge.lookup

    def passes_on_a_wrong_key(self, *args):
        answer, missed = whole_lookup(self, *args)
        if missed is not None and getattr(missed, which) is not None:
            missed = missed._replace(**{which: getattr(missed, which) + 1})
        return answer, missed

    monkeypatch.setattr(DrainJudge, "lookup", passes_on_a_wrong_key)
    with pytest.raises(MemoMismatch):
        explore(POLICIES["abandon-fenced"], ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2),
                symmetry=True, check_memo=1, max_depth=12)
