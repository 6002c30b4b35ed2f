"""What happens to workers from outside: the network delivers or loses a message, the clock moves.

The network delivers messages in any order, so a commit can land after its
lease expired, after the janitor released the unit, after a retry; an answer
can be lost on its way back. Each class is one rule of the models
(``fence.model.actions`` lists what each answers).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from fence.model import protocol
from fence.model.actions import Action, Attempt, HeldAnswer, Message, MessageKind, delivery_rank
from fence.model.destination import CommitResult
from fence.model.ledger import ReservationState
from fence.model.worker import Phase, WorkerMove, hearing, next_phase

if TYPE_CHECKING:
    from fence.model.world import World


@dataclass(frozen=True)
class Deliver(Action):
    kind: ClassVar[str] = "deliver"
    CHEAP_ENABLED_TEST = True
    message: str
    """register, commit or ack"""
    attempt: str

    # Commits first, registrations last: the Hypothesis rules pick by index, so
    # this order keeps "deliver the commit" at index 0 whatever else is queued,
    # which lets the shrinker delete unrelated deliveries without side effects.
    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        network = world.network
        ranked = sorted(network, key=delivery_rank) if len(network) > 1 else network
        return [Deliver(m.kind._value_, m.attempt) for m in ranked]

    def is_enabled_in(self, world: World) -> bool:
        wanted, attempt = self.message, self.attempt
        return any(m.attempt == attempt and m.kind._value_ == wanted for m in world.network)

    def take(self, world: World) -> tuple[str, str, str]:
        kind = MessageKind(self.message)
        message = world.take_message(kind, self.attempt)
        attempt = world.attempts[self.attempt]
        if kind is MessageKind.REGISTER:
            state = protocol.register(world.destination, attempt.identity, attempt.key)
            known = f" (witness: {state.value})" if state is not None else " (no witness kept)"
            return f"the destination receives {attempt.handle}'s registration{known}", "network", "destination"
        if kind is MessageKind.COMMIT:
            return _deliver_commit(world, attempt)
        # An answer reaching its worker.
        if attempt.phase is not Phase.COMMIT_SENT:
            gone = "failed" if attempt.phase is Phase.FAILED else "crashed"
            return f"{message.describe()} arrives, but {attempt.handle} has {gone}", "network", f"worker:{attempt.handle}"
        attempt.ack = message.result
        heard = hearing(message.result)
        attempt.phase = next_phase(attempt.phase, heard)
        if heard is WorkerMove.HEAR_ACCEPTED:
            return f"{attempt.handle} receives the answer '{message.result.value}'", "network", f"worker:{attempt.handle}"
        return (
            f"{attempt.handle} receives the refusal '{message.result.value}' and gives up",
            "network",
            f"worker:{attempt.handle}",
        )

    def relative(self, world: World, job: str, held_answer: HeldAnswer) -> tuple:
        return ("deliver", self.message, self.attempt[len(job):])

    @classmethod
    def from_relative(cls, job: str, relative: tuple, janitor: int) -> Action:
        return Deliver(relative[1], job + relative[2])

    def actor(self, handles: Counter) -> str:
        return "network"


def _deliver_commit(world: World, attempt: Attempt) -> tuple[str, str, str]:
    observer = world.observer
    mine = observer.reservations[attempt.reservation_id]
    if world.now >= mine.deadline or mine.state is not ReservationState.RESERVED:
        observer.reach("commit_after_expiry")
    if observer.released(attempt.reservation_id):
        observer.reach("commit_after_release")
    result = protocol.commit(world.destination, attempt.identity, attempt.key, attempt.payload)
    world.network.append(Message(MessageKind.ACK, attempt.handle, result))
    written = observer.commit_answered(
        attempt.handle, attempt.identity, attempt.reservation_id, attempt.key, attempt.payload,
        result, world.destination.effects(),
    )
    if written:
        attempt.wrote = True
    copies = observer.effects_per_key[attempt.key]
    what = "the ticket is written" if result is CommitResult.WRITTEN else f"refused: {result.value}"
    if written and result is not CommitResult.WRITTEN:
        what += f", yet the destination's record gained {len(written)} write(s)"
    if written and copies > 1:
        what += f" (copy {copies} for {attempt.key})"
    return f"the destination receives {attempt.handle}'s commit: {what}", "network", "destination"


@dataclass(frozen=True)
class LoseAck(Action):
    kind: ClassVar[str] = "lose_ack"
    attempt: str

    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        return [LoseAck(m.attempt) for m in world.network if m.kind is MessageKind.ACK]

    def take(self, world: World) -> tuple[str, str, str]:
        world.take_message(MessageKind.ACK, self.attempt)
        return f"the network loses the destination's answer to {self.attempt}", "network", "network"

    def actor(self, handles: Counter) -> str:
        return "network"


@dataclass(frozen=True)
class Tick(Action):
    """The clock moves on; a tick touches every job (every deadline's standing) and nothing else."""

    kind: ClassVar[str] = "tick"
    by: int

    # Longest tick first, so a shrunk counterexample jumps straight to expiry.
    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        room = world.config.horizon - world.now
        return [Tick(by) for by in range(min(world.config.lease, room), 0, -1)]

    def take(self, world: World) -> tuple[str, str, str]:
        world.now += self.by
        # Named in one order whatever order the ledger lists them in: the order they were
        # reserved in is not state (the explorer's key sorts it away).
        expired = sorted(r.reservation_id for r in protocol.ledger_expired(world.ledger, world.now))
        note = f"; lease of {', '.join(expired)} has expired" if expired else ""
        return f"the clock advances {self.by} tick(s) to t={world.now}{note}", "clock", "clock"

    def job_in(self, world: World) -> str | None:
        return None

    def relative(self, world: World, job: str, held_answer: HeldAnswer) -> tuple:
        raise AssertionError("a tick touches every job: it has no form relative to one")

    def actor(self, handles: Counter) -> str:
        return "clock"
