"""The Destination protocol's contract under every combination of Guards, on every implementation.

Each test that takes ``open_implementation`` runs on the in-memory TicketService, on
SQLite and on PostgreSQL (conftest.py).
"""

from __future__ import annotations

import itertools

import pytest

from fence.model.destination import (
    NO_GUARDS,
    AttemptState,
    CommitResult,
    Destination,
    Effect,
    Guards,
)
from fence.base.errors import WitnessRequired

ALL_GUARDS = [Guards(f, p, w) for f, p, w in itertools.product([False, True], repeat=3)]
WITH_FENCE = [g for g in ALL_GUARDS if g.fence]
WITH_FINGERPRINT = [g for g in ALL_GUARDS if g.fingerprint]
WITH_WITNESS = [g for g in ALL_GUARDS if g.witness]
WITHOUT_WITNESS = [g for g in ALL_GUARDS if not g.witness]
WITHOUT_FENCE = [g for g in ALL_GUARDS if not g.fence]


def _gid(guards: Guards) -> str:
    return guards.describe()


def test_guard_combinations_are_all_eight():
    """The parametrization covers all eight on/off combinations of the three guards."""
    assert len(set(ALL_GUARDS)) == 8
    assert [g.describe() for g in ALL_GUARDS] == [
        "none",
        "witness",
        "fingerprint",
        "fingerprint+witness",
        "fence",
        "fence+witness",
        "fence+fingerprint",
        "fence+fingerprint+witness",
    ]


def test_guards_union_turns_on_either_sides_guards():
    """Guards.union is the per-guard OR of both sides."""
    assert Guards(fence=True).union(Guards(witness=True)) == Guards(True, False, True)
    assert NO_GUARDS.union(NO_GUARDS) == NO_GUARDS


@pytest.mark.parametrize("guards", ALL_GUARDS, ids=_gid)
def test_ticket_service_satisfies_the_destination_protocol(open_implementation, guards):
    """TicketService is a Destination and keeps the guards it was given."""
    service = open_implementation(guards=guards).destination
    assert isinstance(service, Destination)
    assert service.guards == guards


@pytest.mark.parametrize("guards", ALL_GUARDS, ids=_gid)
def test_first_write_lands_under_every_guard(open_implementation, guards):
    """The first commit for a key is WRITTEN, recorded as effect 1 and visible to lookup."""
    service = open_implementation(guards=guards).destination
    assert service.lookup("job1") is False
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.WRITTEN
    assert service.lookup("job1") is True
    assert service.effects() == [Effect("job1", "job1#1", "ticket", 1)]


def test_no_guards_writes_the_same_key_twice(open_implementation):
    """Without guards two attempts' commits for one key both land as separate effects."""
    service = open_implementation(guards=NO_GUARDS).destination
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.WRITTEN
    assert service.commit("job1#2", "job1", "ticket") is CommitResult.WRITTEN
    assert service.effects() == [
        Effect("job1", "job1#1", "ticket", 1),
        Effect("job1", "job1#2", "ticket", 2),
    ]


def test_no_guards_writes_even_a_different_payload(open_implementation):
    """Without guards a second commit with another payload also lands."""
    service = open_implementation(guards=NO_GUARDS).destination
    service.commit("job1#1", "job1", "ticket A")
    assert service.commit("job1#2", "job1", "ticket B") is CommitResult.WRITTEN
    assert len(service.effects()) == 2


@pytest.mark.parametrize("guards", WITH_FENCE, ids=_gid)
@pytest.mark.parametrize("first, second", [("job1#1", "job1#2"), ("job1#2", "job1#1")], ids=["old-first", "new-first"])
def test_fence_refuses_the_second_write_whichever_attempt_sends_it(open_implementation, guards, first, second):
    """With the fence on, whichever attempt's commit arrives second is refused as ALREADY_EXISTS."""
    service = open_implementation(guards=guards).destination
    assert service.commit(first, "job1", "ticket") is CommitResult.WRITTEN
    assert service.commit(second, "job1", "ticket") is CommitResult.ALREADY_EXISTS
    assert service.effects() == [Effect("job1", first, "ticket", 1)]


@pytest.mark.parametrize("guards", WITH_FENCE, ids=_gid)
def test_fence_lets_an_old_write_that_arrives_first_win(open_implementation, guards):
    """The fence does not order attempts: a stale attempt's write that lands first is the one kept."""
    service = open_implementation(guards=guards).destination
    # job1#2 is the newer attempt, but job1#1's delayed commit reaches the service first.
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.WRITTEN
    assert service.commit("job1#2", "job1", "ticket") is CommitResult.ALREADY_EXISTS
    assert [e.attempt_id for e in service.effects()] == ["job1#1"]


@pytest.mark.parametrize("guards", WITH_FENCE, ids=_gid)
def test_fence_is_per_key(open_implementation, guards):
    """The fence refuses only a second write for the same key, not writes for other keys."""
    service = open_implementation(guards=guards).destination
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.WRITTEN
    assert service.commit("job2#1", "job2", "ticket") is CommitResult.WRITTEN
    assert len(service.effects()) == 2


@pytest.mark.parametrize("guards", WITH_FINGERPRINT, ids=_gid)
def test_fingerprint_refuses_a_different_payload_as_conflict(open_implementation, guards):
    """With the fingerprint on, a second write with another payload is CONFLICT and writes nothing."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "ticket A")
    result = service.commit("job1#2", "job1", "ticket B")
    assert result is CommitResult.CONFLICT
    assert result.refused is True
    assert result is not CommitResult.WRITTEN
    assert service.effects() == [Effect("job1", "job1#1", "ticket A", 1)]


@pytest.mark.parametrize("guards", [g for g in WITH_FINGERPRINT if not g.fence], ids=_gid)
def test_fingerprint_without_fence_writes_a_same_payload_again(open_implementation, guards):
    """The fingerprint alone only refuses a different payload; an identical one from a new attempt lands."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "ticket")
    assert service.commit("job1#2", "job1", "ticket") is CommitResult.WRITTEN
    assert len(service.effects()) == 2


@pytest.mark.parametrize("guards", [g for g in WITH_FINGERPRINT if g.fence], ids=_gid)
def test_fence_and_fingerprint_refuse_same_payload_as_already_exists(open_implementation, guards):
    """With fence and fingerprint, an identical second payload is ALREADY_EXISTS, a different one CONFLICT."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "ticket")
    assert service.commit("job1#2", "job1", "ticket") is CommitResult.ALREADY_EXISTS
    assert service.commit("job1#3", "job1", "other") is CommitResult.CONFLICT
    assert len(service.effects()) == 1


@pytest.mark.parametrize("guards", WITH_FINGERPRINT, ids=_gid)
def test_fingerprint_compares_against_the_first_payload(open_implementation, guards):
    """After a conflict the key's fingerprint is still the first payload, so the first payload is never a conflict."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "A")
    assert service.commit("job1#2", "job1", "B") is CommitResult.CONFLICT
    assert service.commit("job1#3", "job1", "B") is CommitResult.CONFLICT
    assert service.commit("job1#4", "job1", "A") is not CommitResult.CONFLICT


def test_commit_result_refused_is_everything_but_written():
    """Only WRITTEN counts as success; every other result is a refusal."""
    assert {r for r in CommitResult if r.refused} == {
        CommitResult.ALREADY_EXISTS,
        CommitResult.CONFLICT,
        CommitResult.ABANDONED,
    }


@pytest.mark.parametrize("guards", WITHOUT_WITNESS, ids=_gid)
def test_without_witness_register_and_attempt_state_know_nothing(open_implementation, guards):
    """Without the witness, register returns None and no attempt state is kept."""
    service = open_implementation(guards=guards).destination
    assert service.register("job1#1", "job1") is None
    service.commit("job1#1", "job1", "ticket")
    assert service.attempt_state("job1#1") is None


@pytest.mark.parametrize("guards", WITHOUT_WITNESS, ids=_gid)
def test_abandon_without_witness_raises_witness_required(open_implementation, guards):
    """abandon_unless_committed on a destination without the witness raises WitnessRequired."""
    service = open_implementation(guards=guards).destination
    with pytest.raises(WitnessRequired):
        service.abandon_unless_committed("job1#1")
    with pytest.raises(TypeError):
        service.abandon_unless_committed("job1#1")
    assert service.attempt_state("job1#1") is None


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_witness_register_marks_in_flight(open_implementation, guards):
    """With the witness, registering an attempt records and returns IN_FLIGHT."""
    service = open_implementation(guards=guards).destination
    assert service.attempt_state("job1#1") is None
    assert service.register("job1#1", "job1") is AttemptState.IN_FLIGHT
    assert service.attempt_state("job1#1") is AttemptState.IN_FLIGHT


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_witness_commit_marks_committed(open_implementation, guards):
    """With the witness, a written commit moves the attempt to COMMITTED."""
    service = open_implementation(guards=guards).destination
    service.register("job1#1", "job1")
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.WRITTEN
    assert service.attempt_state("job1#1") is AttemptState.COMMITTED


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_witness_register_after_commit_keeps_committed(open_implementation, guards):
    """A registration that arrives after the commit does not turn COMMITTED back into IN_FLIGHT."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "ticket")
    assert service.register("job1#1", "job1") is AttemptState.COMMITTED
    assert service.attempt_state("job1#1") is AttemptState.COMMITTED


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_witness_replayed_commit_does_not_write_again(open_implementation, guards):
    """The same attempt committing twice is answered ALREADY_EXISTS and writes once."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "ticket")
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.ALREADY_EXISTS
    assert len(service.effects()) == 1


@pytest.mark.parametrize("guards", [g for g in WITH_WITNESS if g.fence], ids=_gid)
def test_witness_marks_a_fenced_refusal_refused(open_implementation, guards):
    """With witness and fence, an attempt whose commit is refused is recorded as REFUSED."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "ticket")
    service.register("job1#2", "job1")
    assert service.commit("job1#2", "job1", "ticket") is CommitResult.ALREADY_EXISTS
    assert service.attempt_state("job1#2") is AttemptState.REFUSED


@pytest.mark.parametrize("guards", [g for g in WITH_WITNESS if g.fingerprint], ids=_gid)
def test_witness_marks_a_conflict_refused(open_implementation, guards):
    """With witness and fingerprint, an attempt whose payload conflicts is recorded as REFUSED."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "A")
    assert service.commit("job1#2", "job1", "B") is CommitResult.CONFLICT
    assert service.attempt_state("job1#2") is AttemptState.REFUSED


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_abandon_a_committed_attempt_returns_committed_and_keeps_it(open_implementation, guards):
    """abandon_unless_committed on a committed attempt answers COMMITTED and leaves it committed."""
    service = open_implementation(guards=guards).destination
    service.register("job1#1", "job1")
    service.commit("job1#1", "job1", "ticket")
    assert service.abandon_unless_committed("job1#1") is AttemptState.COMMITTED
    assert service.attempt_state("job1#1") is AttemptState.COMMITTED
    assert len(service.effects()) == 1


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_abandon_an_in_flight_attempt_refuses_its_later_commit(open_implementation, guards):
    """An abandoned in-flight attempt's commit is refused as ABANDONED and writes nothing."""
    service = open_implementation(guards=guards).destination
    service.register("job1#1", "job1")
    assert service.abandon_unless_committed("job1#1") is AttemptState.ABANDONED
    assert service.attempt_state("job1#1") is AttemptState.ABANDONED
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.ABANDONED
    assert service.effects() == []
    assert service.lookup("job1") is False
    assert service.attempt_state("job1#1") is AttemptState.ABANDONED


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_abandon_a_never_seen_attempt_leaves_a_tombstone(open_implementation, guards):
    """Abandoning an unknown attempt tombstones it: its late registration stays ABANDONED and its commit is refused."""
    service = open_implementation(guards=guards).destination
    assert service.abandon_unless_committed("job1#1") is AttemptState.ABANDONED
    assert service.register("job1#1", "job1") is AttemptState.ABANDONED
    assert service.attempt_state("job1#1") is AttemptState.ABANDONED
    assert service.commit("job1#1", "job1", "ticket") is CommitResult.ABANDONED
    assert service.effects() == []


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_abandon_a_refused_attempt_returns_abandoned(open_implementation, guards):
    """An attempt that is not committed (here: refused or merely in flight) is answered ABANDONED."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "A")
    service.register("job1#2", "job1")
    service.commit("job1#2", "job1", "B")  # refused if any of fence/fingerprint, else written
    expected = AttemptState.COMMITTED if not (guards.fence or guards.fingerprint) else AttemptState.ABANDONED
    assert service.abandon_unless_committed("job1#2") is expected


@pytest.mark.parametrize("guards", WITH_WITNESS, ids=_gid)
def test_abandon_is_per_attempt(open_implementation, guards):
    """Abandoning one attempt does not stop another attempt of the same key from writing."""
    service = open_implementation(guards=guards).destination
    service.abandon_unless_committed("job1#1")
    assert service.commit("job1#2", "job1", "ticket") is CommitResult.WRITTEN
    assert service.attempt_state("job1#2") is AttemptState.COMMITTED
    assert service.attempt_state("job1#1") is AttemptState.ABANDONED


@pytest.mark.parametrize("guards", ALL_GUARDS, ids=_gid)
def test_effects_lists_every_write_in_order(open_implementation, guards):
    """effects() reports every landed write in arrival order with sequence 1, 2, 3."""
    service = open_implementation(guards=guards).destination
    service.commit("job1#1", "job1", "t1")
    service.commit("job2#1", "job2", "t2")
    service.commit("job3#1", "job3", "t3")
    assert service.effects() == [
        Effect("job1", "job1#1", "t1", 1),
        Effect("job2", "job2#1", "t2", 2),
        Effect("job3", "job3#1", "t3", 3),
    ]


@pytest.mark.parametrize("guards", ALL_GUARDS, ids=_gid)
def test_effects_only_counts_writes_that_landed(open_implementation, guards):
    """effects() has exactly one entry per WRITTEN answer, whatever the guards refuse."""
    service = open_implementation(guards=guards).destination
    results = [
        service.commit("job1#1", "job1", "A"),
        service.commit("job1#2", "job1", "A"),
        service.commit("job1#3", "job1", "B"),
        service.commit("job2#1", "job2", "A"),
    ]
    written = [r for r in results if r is CommitResult.WRITTEN]
    assert len(service.effects()) == len(written)
    assert [e.sequence for e in service.effects()] == list(range(1, len(written) + 1))
    expected_refusals = 2 if guards.fence else (1 if guards.fingerprint else 0)
    assert len(results) - len(written) == expected_refusals


def test_effects_returns_a_copy(open_implementation):
    """Changing the list effects() returns does not change the service's record."""
    service = open_implementation(guards=NO_GUARDS).destination
    service.commit("job1#1", "job1", "ticket")
    service.effects().clear()
    assert len(service.effects()) == 1


def test_snapshot_captures_effects_and_attempts(open_implementation):
    """snapshot() is hashable and includes both effects and witness attempt states."""
    service = open_implementation(guards=Guards(witness=True)).destination
    service.register("job1#2", "job1")
    service.commit("job1#1", "job1", "ticket")
    snapshot = service.snapshot()
    hash(snapshot)
    assert snapshot == (
        {("job1", ("ticket",))},
        {("job1#1", "committed"), ("job1#2", "in_flight")},
    )


def test_snapshot_leaves_out_who_wrote_and_the_order_across_keys(open_implementation):
    """Two services with the same tickets per key are one state, whichever attempt wrote and in which order."""
    one = open_implementation().destination
    one.commit("job1#1", "job1", "ticket for job1")
    one.commit("job2#1", "job2", "ticket for job2")
    one_snapshot, one_effects = one.snapshot(), one.effects()
    other = open_implementation().destination  # one pair at a time: this empties the first
    other.commit("job2#2", "job2", "ticket for job2")
    other.commit("job1#3", "job1", "ticket for job1")
    assert other.snapshot() == one_snapshot
    assert other.effects() != one_effects  # the record itself keeps both
    other.commit("job1#4", "job1", "a revised ticket")
    assert other.snapshot() != one_snapshot
