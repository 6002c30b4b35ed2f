"""The one observer: invariants judge facts fence recorded, plug-ins are reached only through their protocols.

Each test pins one way a verdict went wrong before the observer: the explorer
asked decide() while keying, invariant 3 believed the destination's reads, a
ledger's own accounting was believed, an inherited clone() dropped a
subclass's state.
"""

from dataclasses import dataclass, field

import pytest

from fence import AttemptState, CommitResult, Decision, Evidence, Guards, Policy, TicketService
from fence.explore.walk import explore
from fence.model.invariants import BY_NAME
from fence.model.ledger import Move
from fence.explore.state_key import generic_state_key, state_key, up_to_janitors
from fence.model.policies import POLICIES
from fence.checking.verdicts import EXPLORER_BOUND
from fence.model.world import Crash, Probe, Reserve, Scan, Start, Tick, World
from fence.model.worker import WORKER_TRANSITIONS, Phase, WorkerMove, next_phase, worker_mermaid
from fence.base.errors import IllegalMove


class DecideMustNotBeCalled(Policy):
    def decide(self, evidence):
        raise AssertionError("decide() was called outside a settle")


def _world_holding_answers(policy) -> World:
    world = World(policy, EXPLORER_BOUND)
    for action in (Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Probe(0, "job1/r1"), Probe(1, "job1/r1")):
        world.apply(action)
    return world


@pytest.mark.parametrize("policy", [DecideMustNotBeCalled(), POLICIES["abandon-fenced"]], ids=["user", "fence"])
def test_keying_and_ordering_never_ask_the_policy_to_decide(policy, monkeypatch):
    """The explorer's keys, its janitor de-duplication and the drain's order read the answers, not decide()."""
    world = _world_holding_answers(policy)
    if type(policy) is not DecideMustNotBeCalled:
        monkeypatch.setattr(type(policy), "decide", DecideMustNotBeCalled.decide)
    state_key(world)
    generic_state_key(world)
    up_to_janitors(world, world.enabled_actions())
    sorted(world.enabled("settle"), key=world._settle_order)


class LyingReads(TicketService):
    """attempt_state always says in flight: a read the judge must not believe."""

    def attempt_state(self, attempt_id):
        from fence import AttemptState

        return AttemptState.IN_FLIGHT if self.guards.witness else None

    def snapshot(self):
        return super().snapshot()


def test_a_destination_reads_are_evidence_for_the_policy_never_for_the_judge():
    """abandon-fenced with a destination whose attempt_state lies is proved: abandon's own answer is the fact."""
    found = explore(POLICIES["abandon-fenced"], EXPLORER_BOUND, destination_factory=LyingReads)
    assert found.exhausted and found.unfaithful is None
    assert found.results["no_early_release"].outcome.value == "proved"


def test_a_ledger_accepting_a_move_the_table_forbids_is_caught_by_the_mirror():
    """The observer follows TRANSITIONS itself: an accepted second settle_unused is a unit freed twice."""
    world = World(POLICIES["abandon-fenced"], EXPLORER_BOUND)
    world.apply(Reserve("job1"))
    world.observer.moved("job1/r1", Move.EXPIRE_AND_HOLD, by="janitor:0")
    world.observer.moved("job1/r1", Move.SETTLE_UNUSED, by="janitor:0")
    assert BY_NAME["capacity_conserved"].check(world) is None
    world.observer.moved("job1/r1", Move.SETTLE_UNUSED, by="janitor:1")
    assert "freed its unit again" in BY_NAME["capacity_conserved"].check(world)


class ExtraState(TicketService):
    """A subclass that inherits clone() and adds an attribute the base class does not copy."""

    def __init__(self, guards):
        super().__init__(guards)
        self.asked = 0

    def lookup(self, key):
        self.asked += 1
        return super().lookup(key)


def test_a_subclass_is_copied_whole_not_through_its_inherited_clone():
    """The copy of a world keeps the subclass and its extra attribute."""
    world = World(POLICIES["reconcile"], EXPLORER_BOUND, destination_factory=ExtraState)
    world.destination.asked = 5
    copy = world.clone(history=False)
    assert type(copy.destination) is ExtraState and copy.destination.asked == 5
    assert copy.destination is not world.destination


@dataclass(frozen=True)
class AnswerKeepsTheDestination(Evidence):
    """A user's answer that keeps the destination it was asked at, to act on it later."""

    destination: object = None
    register: object = None
    """The destination's own bound method (the proxy hands it out): a reference past the proxy."""


@dataclass(frozen=True)
class ActsInDecide(Policy):
    name: str = "acts-in-decide"
    guards: Guards = field(default_factory=lambda: Guards(fence=True, witness=True))

    def probe(self, destination, reservation):
        return AnswerKeepsTheDestination(
            key_exists=destination.lookup(reservation.key),
            destination=destination,
            register=destination.register,
        )


def test_a_copied_answer_acts_on_the_copys_destination_and_observer():
    """A user's answer pointing at the destination points, in a copy, at the copy's.

    The generic copy deep-copies only the user's parts, with fence's parts mapped
    to their copies: acting through a copied answer must change the copy's
    destination and observer, never the original's (nor a detached third one).
    """
    world = World(ActsInDecide(), EXPLORER_BOUND)
    for action in (Reserve("job1"), Start("job1#1"), Crash("job1#1"), Tick(2), Scan(0, "job1/r1"), Probe(0, "job1/r1")):
        world.apply(action)
    copy = world.clone(history=False)
    answer = copy.evidence[0]["job1/r1"]
    answer.destination.abandon_unless_committed("job1#1")
    assert copy.destination.attempt_state("job1#1") is AttemptState.ABANDONED
    assert "job1#1" in copy.observer.abandoned
    assert world.destination.attempt_state("job1#1") is not AttemptState.ABANDONED
    assert "job1#1" not in world.observer.abandoned
    assert answer.destination is copy.janitors[0].destination  # the copy's proxy, not a third one
    answer.register("job9#1", "job9")  # past the proxy, straight at the destination
    assert copy.destination.attempt_state("job9#1") is not None
    assert world.destination.attempt_state("job9#1") is None


class KeepsMoreThanValues(TicketService):
    """A subclass with a mutable attribute of its own, and a mutable object in fence's own records."""

    def __init__(self, guards):
        super().__init__(guards)
        self.calls: list[str] = []

    def register(self, attempt_id, key):
        self.calls.append(attempt_id)
        return super().register(attempt_id, key)


def test_a_deep_copy_of_a_subclass_shares_nothing_it_could_change():
    """fence's records are copied one level only while they hold immutable values; the rest deep."""
    import copy

    original = KeepsMoreThanValues(POLICIES["abandon-fenced"].guards)
    original.register("job1#1", "job1")
    original._first_payload["job1"] = ["a", "mutable", "payload"]  # not a value: copied deep
    copied = copy.deepcopy(original)
    copied.register("job1#2", "job1")
    copied._first_payload["job1"].append("changed")
    copied.abandon_unless_committed("job1#1")
    assert original.calls == ["job1#1"] and copied.calls == ["job1#1", "job1#2"]
    assert original._first_payload["job1"] == ["a", "mutable", "payload"]
    assert original.attempt_state("job1#1") is AttemptState.IN_FLIGHT
    assert type(copied) is KeepsMoreThanValues


class ForgetsAfterTwoLookups(TicketService):
    """Keeps a counter outside its snapshot(): two states with one key answer differently later."""

    def __init__(self, guards):
        super().__init__(guards)
        self.lookups = 0

    def lookup(self, key):
        self.lookups += 1
        return False if self.lookups > 2 else super().lookup(key)


def test_state_outside_the_snapshot_is_detected_not_trusted():
    """The faithfulness check stops the walk and says why; nothing is proved."""
    found = explore(POLICIES["reconcile"], EXPLORER_BOUND, destination_factory=ForgetsAfterTwoLookups)
    assert found.unfaithful and "snapshot()" in found.unfaithful
    assert all(item.outcome.value != "proved" for item in found.results.values())


class CountsRefusals(TicketService):
    """Stops finding tickets once it has refused a commit: a counter outside snapshot().

    A refused commit leaves no trace fence keys on once its worker has crashed,
    so the state after "second attempt's commit refused, then it crashed" and
    after "second attempt crashed before committing" share one key yet answer a
    lookup differently. Such merges are ten or more steps deep: a check of the
    walk's first 600 transitions alone (as the check once was) never meets one.
    """

    def __init__(self, guards):
        super().__init__(guards)
        self.refusals = 0

    def commit(self, attempt_id, key, payload):
        result = super().commit(attempt_id, key, payload)
        if result is not CommitResult.WRITTEN:
            self.refusals += 1
        return result

    def lookup(self, key):
        return False if self.refusals else super().lookup(key)


def test_a_snapshot_fault_deep_in_the_walk_is_sampled_and_caught():
    """The faithfulness check samples the whole walk, not just its shallow start."""
    found = explore(POLICIES["fenced"], EXPLORER_BOUND, destination_factory=CountsRefusals)
    assert found.unfaithful and found.unfaithful.startswith("two states with one key"), found.unfaithful
    assert all(item.outcome.value != "proved" for item in found.results.values())


class CopiesPlainly(TicketService):
    """fence's own destination under another name: the walk takes the generic path, and every check passes."""


def test_a_walk_cut_short_is_checked_at_every_depth_it_finished(monkeypatch):
    """A walk stopped by a budget (as on a real server at 2 units x 2 jobs) never reaches the check's end.

    Its checks once all fell on its first transitions (depths 1 to 4 here);
    each depth it finished now has some of its own.
    """
    from fence.explore.faithfulness import FaithfulnessCheck

    depths: list[int] = []
    for name in ("_check_new", "_check_merge"):
        checked = getattr(FaithfulnessCheck, name)

        def spy(self, node, action, reached, checked=checked):
            depths.append(len(self._path_to(node)) + 1)
            return checked(self, node, action, reached)

        monkeypatch.setattr(FaithfulnessCheck, name, spy)
    found = explore(POLICIES["abandon-fenced"], EXPLORER_BOUND, destination_factory=CopiesPlainly,
                    faithfulness=(20, 40), max_states=1000)  # of 1,727 states at this bound
    assert found.stopped_by == "max_states" and found.unfaithful is None and found.depth > 6
    assert sorted(set(depths)) == list(range(1, found.depth + 1))
    assert found.faithfulness_checks == len(depths) <= 20 + 40


class ForgetsItsWitnessWhenCopied(TicketService):
    """A deep copy keeps the tickets but loses every attempt's witness entry (abandoned ones too)."""

    def __deepcopy__(self, memo):
        other = ForgetsItsWitnessWhenCopied(self.guards)
        other._effects = list(self._effects)
        return other


def test_a_violation_that_does_not_replay_is_not_reported_as_one():
    """A walk on copies that lose state finds a duplicate that never happens from scratch.

    With the faithfulness check turned off, nothing else stands in the way: the
    replay of each violation's path must, and the walk says it stands behind
    nothing (it used to stop with an AssertionError).
    """
    found = explore(POLICIES["abandon-fenced"], EXPLORER_BOUND, destination_factory=ForgetsItsWitnessWhenCopied,
                    faithfulness=(0, 0))
    assert found.unfaithful and "does not break it when replayed from scratch" in found.unfaithful
    assert {item.outcome.value for item in found.results.values()} == {"undetermined"}


def test_the_worker_table_refuses_a_move_it_does_not_list_and_draws_itself():
    """Every phase's moves come from WORKER_TRANSITIONS; anything else is an IllegalMove naming the phase."""
    assert next_phase(Phase.COMMIT_SENT, WorkerMove.HEAR_ACCEPTED) is Phase.ACKED
    with pytest.raises(IllegalMove, match="done cannot crash"):
        next_phase(Phase.DONE, WorkerMove.CRASH)
    drawn = worker_mermaid()
    for source, moves in WORKER_TRANSITIONS.items():
        for move, target in moves.items():
            assert f"{source.value} --> {target.value}: {move.value}" in drawn


def test_the_model_pages_diagrams_are_the_tables():
    """The two state diagrams in docs/explanation/model.md are what the tables draw today."""
    from pathlib import Path

    from fence.model.ledger import transitions_mermaid

    page = (Path(__file__).resolve().parent.parent / "docs" / "explanation" / "model.md").read_text()
    assert f"```mermaid\n{transitions_mermaid()}\n```" in page
    assert f"```mermaid\n{worker_mermaid()}\n```" in page


class ProbeWritesPlaceholder(Policy):
    """A policy whose probe() commits a placeholder ticket (tests/seeded/probe_writes.py, in short)."""

    def probe(self, destination, reservation):
        destination.commit(reservation.owner, reservation.key, "placeholder")
        return Evidence(key_exists=True)

    def decide(self, evidence):
        return Decision.EXISTING


def test_a_write_a_policy_makes_is_counted_when_it_is_made():
    """A commit from a policy's probe is a fact at once, not credited to the next worker's commit.

    Before, such a write was seen only when some worker committed next; with no
    later commit the job was judged to end with no effect (everything_settles
    violated) while the destination held its ticket.
    """
    world = World(ProbeWritesPlaceholder(), EXPLORER_BOUND)
    for action in (Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Probe(0, "job1/r1")):
        world.apply(action)
    assert world.observer.effects_per_key["job1"] == 1
    assert [e.payload for e in world.observer.effects] == ["placeholder"]


class WritesOnRegister(TicketService):
    """A destination that writes a ticket when an attempt registers: a write no commit makes."""

    def register(self, attempt_id, key):
        answer = super().register(attempt_id, key)
        super().commit(attempt_id, key, "from register")
        return answer


def test_a_write_no_commit_reported_counts_at_the_drain():
    """The drain reads the destination's record once more: a write nobody reported still counts."""
    world = World(POLICIES["reconcile"], EXPLORER_BOUND, destination_factory=WritesOnRegister)
    for action in (Reserve("job1"), Start("job1#1"), Crash("job1#1")):  # it never commits
        world.apply(action)
    world.drain()
    assert world.observer.effects_per_key["job1"] == len(world.destination.effects()) == 1
