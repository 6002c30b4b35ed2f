"""The state table (``fence.model.state_table.WORLD_STATE``) declares every field of a World, and what it derives holds.

A World's copy, its worker side, its fingerprint, the whole state's
declarations, the explorer's per-job key parts and the step memo's details are
written from the table, so a field is one edit there; these tests pin that no
World attribute escapes the table (an undeclared one would not be copied), that
a per-job field cannot be declared without saying what it adds to a job's key
part (or why the key need not read it), and that the per-job projection the
table declares is what the explorer's per-job key memo assumes: a step of one
job leaves every other job's entries as they were, and a job's key part is a
function of its entries and the clock.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from fence.explore import state_key as keys
from fence.explore.state_key import job_parts, state_key
from fence.explore.whole_state import NOT_STATE, whole_state
from fence.model.ledger import Ledger
from fence.model.policies import FENCE_POLICY_TYPES, POLICIES
from fence.model.key_pieces import DETAIL_SLOTS, KEY_SLOTS, PerJob, Slot, generic_key_code, per_job_code
from fence.model.state_table import DECLARED, WORLD_STATE, Field, job_projection, undeclared_fields, world_code
from fence.model.world import ModelConfig, Reserve, World

sys.path.insert(0, str(Path(__file__).parent / "seeded"))
from free_then_abandon import FreeThenAbandon  # noqa: E402  (a user's policy with a follow-up step)

TWO_JOBS = ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=1)
WITH_FAILURES = ModelConfig(capacity=2, jobs=2, max_attempts=1, lease=2, horizon=1, failures=True)


class _UsersLedger(Ledger):
    """A user's ledger (a subclass): its world is copied by ``_generic_clone``."""


def _reachable(root: World, most: int) -> list[World]:
    """Up to ``most`` distinct states (by ``whole_state``) reachable from ``root``, breadth first."""
    seen = {whole_state(root)}
    found, frontier = [root], [root]
    while frontier and len(found) < most:
        following = []
        for world in frontier:
            for action in world.enabled_actions():
                child = world.clone(history=False)
                child.apply(action)
                whole = whole_state(child)
                if whole not in seen and len(found) < most:
                    seen.add(whole)
                    found.append(child)
                    following.append(child)
        frontier = following
    return found


def _stepped(world: World, steps: int) -> World:
    """``world`` after ``steps`` enabled actions, each the last one offered (any path will do)."""
    world = world.clone()
    for _ in range(steps):
        actions = world.enabled_actions()
        if not actions:
            break
        world.apply(actions[-1])
    return world


def _worlds_of_every_kind() -> list[World]:
    """Fresh, stepped, cloned both ways, keyed for a user's policy, drained: every way fence makes a World."""
    worlds = []
    for name in ("naive", "abandon-fenced-shared"):
        root = World(POLICIES[name], TWO_JOBS)
        stepped = _reachable(root, 60)[-1]
        worlds += [root, stepped, stepped.clone(), stepped.clone(history=False)]
        drained = stepped.clone()
        drained.drain()
        worlds.append(drained)
    users = World(POLICIES["abandon-fenced"], TWO_JOBS, ledger_factory=_UsersLedger)
    assert not users.fast_copy_is_faithful()
    worlds += [users, _stepped(users, 12).clone(), users.clone(history=False)]
    keyed = World(FreeThenAbandon(), TWO_JOBS)
    keyed.key_users_policy()
    worlds += [keyed, _reachable(keyed, 30)[-1].clone()]
    return worlds


def test_every_field_of_every_world_is_declared_in_the_table():
    """Every World fence makes holds exactly the fields ``WORLD_STATE`` declares, on both copies' paths."""
    for world in _worlds_of_every_kind():
        assert set(vars(world)) == DECLARED, undeclared_fields(world) or sorted(DECLARED - set(vars(world)))


def test_a_world_with_a_field_the_table_does_not_declare_is_refused(monkeypatch):
    """The check can fail: a field added in ``World.__init__`` and not declared stops the world being made."""
    made = World._make_janitors

    def with_a_new_field(world):
        world.a_new_field = 0
        made(world)

    monkeypatch.setattr(World, "_make_janitors", with_a_new_field)
    with pytest.raises(TypeError, match="a_new_field not declared in WORLD_STATE"):
        World(POLICIES["naive"], TWO_JOBS)


def test_the_copies_and_the_fingerprint_are_written_from_the_table():
    """The copy assigns every declared field; the worker side all but the generic clone's own; each state field is
    fingerprinted or says why not (a declaration that says neither is refused)."""
    code = world_code()
    copy_fields, rest = code.split("def copy_worker_side", 1)
    worker_side, fingerprint = rest.split("def fingerprint", 1)
    for field in WORLD_STATE:
        assert f"other.{field.name} = " in copy_fields
        assert (f"other.{field.name} = " in worker_side) is not field.generic
        assert (f"self.{field.name}" in fingerprint) is bool(field.fingerprint)
    with pytest.raises(ValueError, match="fingerprinted, or says why not"):
        Field("a_new_field", "{v}")
    assert NOT_STATE["World"] == {field.name: field.not_state for field in WORLD_STATE if field.not_state}


def test_a_per_job_field_that_does_not_say_how_it_is_keyed_is_refused():
    """A per-job field declared without a key piece or a reason for none (or without a detail or generic key
    piece) cannot be written into the table: ``Field`` refuses it when the module is imported."""
    adds = PerJob(adds="for job in {v}:\n    parts[job][{retries}] += 1")
    generic = "key[{retries}] = len({v})"
    new_field = dict(name="a_new_field", copy="list({v})", per_job=True, fingerprint="tuple({v})")
    with pytest.raises(ValueError, match="a per-job field says what it adds to a job's key part"):
        Field(**new_field, detail=adds, generic_key=generic)
    with pytest.raises(ValueError, match="a per-job field says what it adds to a job's key part"):
        Field(**new_field, detail=adds, generic_key=generic, key=adds, unkeyed="both at once")
    with pytest.raises(ValueError, match="what it sets of the generic key"):
        Field(**new_field, key=adds, detail=adds)
    with pytest.raises(ValueError, match="what it adds to a job's memo detail"):
        Field(**new_field, key=adds, generic_key=generic)
    with pytest.raises(ValueError, match="neither per job, fingerprinted nor keyed"):
        Field("a_cache", "None", not_state="a cache", key=adds)
    # Declared either way, it is accepted.
    Field(**new_field, key=adds, detail=adds, generic_key=generic)
    Field(**new_field, unkeyed="a function of what the key holds", detail=adds)


def field_of(name: str) -> Field:
    return next(field for field in WORLD_STATE if field.name == name)


def test_the_key_parts_memo_details_and_generic_key_are_written_from_the_table():
    """Every field's key, detail and generic pieces are in ``job_parts``, ``job_details`` and ``generic_parts``;
    a slot no field writes, or a piece naming no slot, is refused when the functions are written."""
    key_code = per_job_code(WORLD_STATE, "job_parts", KEY_SLOTS, "key")
    detail_code = per_job_code(WORLD_STATE, "job_details", DETAIL_SLOTS, "detail")
    generic_code = generic_key_code(WORLD_STATE)
    for field in WORLD_STATE:
        assert (f"# {field.name}\n" in key_code) is (field.key is not None)
        assert (f"# {field.name}\n" in detail_code) is (field.detail is not None)
        assert (f"# {field.name}\n" in generic_code) is bool(field.generic_key)
        assert field.key is not None or not field.per_job or field.unkeyed
    with pytest.raises(ValueError, match="no field's key writes slot"):
        per_job_code(WORLD_STATE, "job_parts", (*KEY_SLOTS, Slot("new_slot", "sorted")), "key")
    with pytest.raises(ValueError, match="no field's generic_key sets slot"):
        generic_key_code(tuple(field for field in WORLD_STATE if field.name != "network"))
    retries = field_of("retry_queue")
    misnamed = dataclasses.replace(retries, key=PerJob(adds=f"{retries.key.adds}\nparts[{{v}}][{{no_such_slot}}] = 0"))
    with pytest.raises(ValueError, match="retry_queue's key names 'no_such_slot', not a slot of job_parts"):
        per_job_code(tuple(misnamed if f is retries else f for f in WORLD_STATE), "job_parts", KEY_SLOTS, "key")


def test_a_new_per_job_field_is_one_edit():
    """A per-job field declared once in the table is read by the key parts, the memo details and the generic key,
    for its own job only."""
    marks = Field(
        "marks", "list({v})", per_job=True, fingerprint="tuple({v})",
        key=PerJob(adds="for job in {v}:\n    part = parts.get(job)\n    if part is not None:\n"
                        "        part[{retries}] += 10"),
        detail=PerJob(per_job="part[{retries}] += 10 * {v}.count(job)"),
        generic_key="key[{retries}] = (key[{retries}], tuple({v}))",
    )
    parts, details, generic = keys._derive_key_code((*WORLD_STATE, marks))
    world = World(POLICIES["naive"], TWO_JOBS)
    world.marks = ["job1"]
    before_parts, before_details = job_parts(world, world.jobs), keys.job_details(world, world.jobs)
    after_parts, after_details = parts(world, world.jobs), details(world, world.jobs)
    retries = [slot.name for slot in KEY_SLOTS].index("retries")
    assert after_parts["job1"][retries] == before_parts["job1"][retries] + 10
    assert after_parts["job2"] == before_parts["job2"]
    retries = [slot.name for slot in DETAIL_SLOTS].index("retries")
    assert after_details["job1"][retries] == before_details["job1"][retries] + 10
    assert after_details["job2"] == before_details["job2"]
    retries = keys.GENERIC_SLOTS.index("retries")
    assert generic(world)[retries] == (keys.generic_parts(world)[retries], ("job1",))


def test_a_copy_shares_nothing_a_step_changes():
    """A step on a copy leaves the original's whole state and fingerprint as they were, on every state of a walk."""
    for world in _reachable(World(POLICIES["abandon-fenced"], TWO_JOBS), 400):
        before, fingerprint = whole_state(world), world.fingerprint()
        for action in world.enabled_actions():
            world.clone().apply(action)
        assert (whole_state(world), world.fingerprint()) == (before, fingerprint)


def _per_job_problems(policy, config: ModelConfig, most: int, parts=job_parts) -> list[str]:
    """Where the per-job projection breaks what the key memo assumes, over up to ``most`` reachable states."""
    problems = []
    part_of: dict[tuple, tuple] = {}
    root = World(policy, config)
    if type(policy) not in FENCE_POLICY_TYPES:
        root.key_users_policy()
    for world in _reachable(root, most):
        projections = {job: job_projection(world, job) for job in world.jobs}
        for job in world.jobs:
            part = parts(world, [job])[job]
            if part_of.setdefault((world.now, job, projections[job]), part) != part:
                problems.append(f"{job}'s key part is not a function of its entries at t={world.now}")
        for action in world.enabled_actions():
            moved = action.job_in(world)
            if moved is None:
                continue
            child = world.clone(history=False)
            child.apply(action)
            for other in world.jobs:
                if other != moved and job_projection(child, other) != projections[other]:
                    problems.append(f"{action.to_dict()}, a step of {moved}, changed {other}'s entries")
    return problems


@pytest.mark.parametrize("policy, config", [
    pytest.param(POLICIES["naive"], TWO_JOBS, id="naive"),
    pytest.param(POLICIES["abandon-fenced-shared"], TWO_JOBS, id="abandon-fenced-shared"),
    pytest.param(POLICIES["witness-fenced"], TWO_JOBS, id="witness-fenced"),
    pytest.param(POLICIES["reconcile"], WITH_FAILURES, id="reconcile-failures"),
    pytest.param(FreeThenAbandon(), TWO_JOBS, id="users-follow-up"),
])
def test_a_step_of_one_job_leaves_every_other_jobs_entries_and_a_key_part_follows_its_entries(policy, config):
    """The table's per-job fields split by job as the key memo assumes (``World.job_memo``), on every state reached."""
    assert _per_job_problems(policy, config, most=600) == []


def test_the_per_job_checks_can_fail(monkeypatch):
    """A step that names the wrong job, and a key part that reads another job's entries, are both caught."""

    def other_job(action, world):
        return next(job for job in world.jobs if job != action.job)

    monkeypatch.setattr(Reserve, "job_in", other_job)
    problems = _per_job_problems(POLICIES["naive"], TWO_JOBS, most=40)
    assert any("a step of job2, changed job1's entries" in problem for problem in problems)
    monkeypatch.undo()

    def nosy(world, wanted):
        return {job: (job_parts(world, [job])[job], len(world.attempts)) for job in wanted}

    problems = _per_job_problems(POLICIES["naive"], TWO_JOBS, most=200, parts=nosy)
    assert any("not a function of its entries" in problem for problem in problems)


def test_an_entry_of_a_per_job_field_that_names_no_job_is_refused():
    """A per-job field whose entries do not each name one job contradicts the table, and the projection says so."""
    world = World(POLICIES["naive"], TWO_JOBS)
    world.retry_queue.append("everyone")
    with pytest.raises(ValueError, match="retry_queue is declared per job, but its entry 'everyone' names no job"):
        job_projection(world, "job1")


def test_a_follow_up_a_users_policy_has_pending_is_in_the_key():
    """Regression: ``follow_ups`` is per-job state the key's job parts once left out, merging states that differ.

    A user's policy keyed by the twins (``key_users_policy``) with an
    ``after_release`` leaves a follow-up pending after a release; taken at once
    it may do nothing (the attempt committed already), taken later it may act.
    The two states differ only in the pending follow-up and must not share a key.
    """
    root = World(FreeThenAbandon(), ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2))
    root.key_users_policy()
    inert = 0
    for world in _reachable(root, 400):
        for action in world.enabled("settle"):
            if not action.follow_up:
                continue
            child = world.clone(history=False)
            child.apply(action)
            assert state_key(child) != state_key(world)
            without = [(name, value) for name, value in whole_state(world)[1] if name != "follow_ups"]
            inert += without == [(name, value) for name, value in whole_state(child)[1] if name != "follow_ups"]
    assert inert  # the walk reached a follow-up that changed nothing else
