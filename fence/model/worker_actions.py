"""A worker's actions: reserve, retry, start, send its commit, confirm, crash, fail.

Each class is one rule of the models and carries its precondition, its
effect, its job and its relative form (``fence.model.actions`` lists what
each answers). The phases an attempt moves through are ``fence.model.worker``'s
one table; an effect asks it for the next phase, never decides it here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from fence.base.errors import FenceError, IllegalMove, StaleAttempt
from fence.model import protocol
from fence.model.actions import Action, HeldAnswer, Message, MessageKind
from fence.model.worker import ALIVE_PHASES, FAILABLE_PHASES, UNSENT_PHASES, Phase, WorkerMove, confirm_move, next_phase

if TYPE_CHECKING:
    from fence.model.world import World


class _AttemptInPhase(Action):
    """A worker's step, enabled for each attempt in one of ``PHASES``."""

    PHASES: ClassVar[tuple[Phase, ...]]
    CHEAP_ENABLED_TEST = True

    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        return [cls(a.handle) for a in world.attempts_in(*cls.PHASES)]

    def is_enabled_in(self, world: World) -> bool:
        attempt = world.attempts.get(self.attempt)
        return attempt is not None and attempt.phase in self.PHASES


class _JobStep(Action):
    """A reserve or a retry: a step on a job, which makes its next attempt."""

    def job_in(self, world: World) -> str | None:
        return self.job

    def actor(self, handles: Counter) -> str:
        handles[self.job] += 1
        return f"worker:{self.job}#{handles[self.job]}"


# The ledger is asked for its free units once per list, not once per job: the
# answer is the same for every job, and asking it per job made a state with a
# hundred jobs cost a hundred scans of the ledger.
@dataclass(frozen=True)
class Reserve(_JobStep):
    kind: ClassVar[str] = "reserve"
    CHEAP_ENABLED_TEST = True
    job: str

    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        if protocol.ledger_free(world.ledger) < 1:
            return []
        return [Reserve(j) for j in world.jobs if world.attempts_used[j] == 0 and world.within_attempts(j)]

    def is_enabled_in(self, world: World) -> bool:
        if protocol.ledger_free(world.ledger) < 1:  # asked first and always, as the list asks it
            return False
        used = world.attempts_used.get(self.job)
        return used == 0 and world.within_attempts(self.job)

    def take(self, world: World) -> tuple[str, str, str]:
        attempt = world.new_attempt(self.job)
        if isinstance(attempt, FenceError):
            return f"a worker asks for a unit for {self.job}; the ledger refuses: {attempt}", "worker", "ledger"
        deadline = world.observer.reservations[attempt.reservation_id].deadline
        return (
            f"a worker reserves a unit for {self.job} as attempt {attempt.handle} "
            f"(lease until t={deadline})",
            f"worker:{attempt.handle}",
            "ledger",
        )

    def relative(self, world: World, job: str, held_answer: HeldAnswer) -> tuple:
        return ("reserve",)

    @classmethod
    def from_relative(cls, job: str, relative: tuple, janitor: int) -> Action:
        return Reserve(job)


@dataclass(frozen=True)
class Retry(_JobStep):
    kind: ClassVar[str] = "retry"
    job: str
    revised: bool = False
    """The retry carries a new payload (an agent that rewrote the ticket, say)."""

    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        if not world.retry_queue or protocol.ledger_free(world.ledger) < 1:
            return []
        return [
            Retry(j, revised)
            for j in dict.fromkeys(world.retry_queue)
            if world.within_attempts(j)
            for revised in (False, True)
        ]

    def take(self, world: World) -> tuple[str, str, str]:
        world.retry_queue.remove(self.job)
        attempt = world.new_attempt(self.job, self.revised)
        if isinstance(attempt, FenceError):
            return f"{self.job} is retried, but the ledger refuses a unit: {attempt}", "worker", "ledger"
        world.observer.reach("retry_after_release")
        if self.revised:
            world.observer.reach("revised_retry")
        deadline = world.observer.reservations[attempt.reservation_id].deadline
        revised = f" with a revised payload '{attempt.payload}'" if self.revised else ""
        return (
            f"{self.job} is retried{revised}: a worker reserves a unit as attempt {attempt.handle} "
            f"(lease until t={deadline})",
            f"worker:{attempt.handle}",
            "ledger",
        )

    def relative(self, world: World, job: str, held_answer: HeldAnswer) -> tuple:
        return ("retry", self.revised)

    @classmethod
    def from_relative(cls, job: str, relative: tuple, janitor: int) -> Action:
        return Retry(job, relative[1])


class _SendsAMessage(_AttemptInPhase):
    """A worker's step that moves its phase on and puts one message on the network."""

    MOVE: ClassVar[WorkerMove]
    MESSAGE: ClassVar[MessageKind]
    SAYS: ClassVar[str]
    """The step's sentence, with ``{handle}`` for the attempt."""

    def take(self, world: World) -> tuple[str, str, str]:
        attempt = world.attempts[self.attempt]
        attempt.phase = next_phase(attempt.phase, self.MOVE)
        world.network.append(Message(self.MESSAGE, attempt.handle))
        return self.SAYS.format(handle=attempt.handle), f"worker:{attempt.handle}", "network"


@dataclass(frozen=True)
class Start(_SendsAMessage):
    kind: ClassVar[str] = "start"
    PHASES = (Phase.RESERVED,)
    MOVE = WorkerMove.START
    MESSAGE = MessageKind.REGISTER
    SAYS = "{handle} starts working and sends its registration to the destination"
    attempt: str


@dataclass(frozen=True)
class SendCommit(_SendsAMessage):
    kind: ClassVar[str] = "send_commit"
    PHASES = (Phase.WORKING,)
    MOVE = WorkerMove.SEND_COMMIT
    MESSAGE = MessageKind.COMMIT
    SAYS = "{handle} finishes its work and sends its commit"
    attempt: str


@dataclass(frozen=True)
class Confirm(_AttemptInPhase):
    kind: ClassVar[str] = "confirm"
    PHASES = (Phase.ACKED,)
    attempt: str

    def take(self, world: World) -> tuple[str, str, str]:
        attempt = world.attempts[self.attempt]
        attempt.phase = next_phase(attempt.phase, WorkerMove.CONFIRM)
        move = confirm_move(attempt.ack)
        try:
            changed = protocol.ledger_owner_move(world.ledger, attempt.key, attempt.identity, move)
        except (StaleAttempt, IllegalMove) as refusal:
            return f"{attempt.handle} tries to {move.value}; the ledger refuses: {refusal}", f"worker:{attempt.handle}", "ledger"
        world.observer.owner_move_accepted(attempt.handle, attempt.reservation_id, attempt.key, move)
        return (
            f"{attempt.handle} {move.value}s: {changed.reservation_id} is {changed.state.value}",
            f"worker:{attempt.handle}",
            "ledger",
        )


@dataclass(frozen=True)
class Crash(_AttemptInPhase):
    kind: ClassVar[str] = "crash"
    PHASES = ALIVE_PHASES
    attempt: str

    def take(self, world: World) -> tuple[str, str, str]:
        attempt = world.attempts[self.attempt]
        if attempt.phase in UNSENT_PHASES:
            point = "before its effect"
        elif world.in_network(MessageKind.COMMIT, attempt.handle):
            point = "while its commit is in flight"
            world.observer.reach("crash_while_commit_in_flight")
        elif attempt.wrote:
            point = "after its effect landed, before confirming"
            world.observer.reach("crash_after_effect")
        else:
            point = "after its commit was refused, before hearing of it"
        attempt.phase = next_phase(attempt.phase, WorkerMove.CRASH)
        return f"{attempt.handle} crashes {point}", f"worker:{attempt.handle}", f"worker:{attempt.handle}"


@dataclass(frozen=True)
class Fail(_AttemptInPhase):
    """The worker raises and reports the failure to the ledger (only with ``ModelConfig.failures``).

    The report says no more than an expiry would: a worker that raised after
    sending cannot know whether its effect landed. fence's own ledger moves the
    reservation to outcome_unknown, for the janitor's policy to settle as if
    the lease had expired; it refuses the report (a fact the observer records)
    if the worker no longer owns the key's reservation or the janitor took the
    lease back first. Its kind comes last in ``rules.ACTION_KINDS``: without
    failures every engine's order of kinds (and Hypothesis' draws) is the old one.
    """

    kind: ClassVar[str] = "fail"
    PHASES = FAILABLE_PHASES
    attempt: str

    # A failure is a fault, like a crash: none in the drain, whose workers finish.
    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        if not world.config.failures or world.draining:
            return []
        return super().enabled_in(world)

    def is_enabled_in(self, world: World) -> bool:
        return bool(world.config.failures) and not world.draining and super().is_enabled_in(world)

    def take(self, world: World) -> tuple[str, str, str]:
        attempt = world.attempts[self.attempt]
        actor = f"worker:{attempt.handle}"
        if attempt.phase in UNSENT_PHASES:
            point = "before its effect"
        elif world.in_network(MessageKind.COMMIT, attempt.handle):
            point = "while its commit is in flight"
            world.observer.reach("failure_while_commit_in_flight")
        elif attempt.wrote:
            point = "after its effect landed"
        elif attempt.phase is Phase.ACKED:
            point = f"after hearing '{attempt.ack.value}'"
        elif attempt.phase is Phase.REFUSED:
            point = f"after its commit was refused ('{attempt.ack.value}')"
        else:
            point = "after its commit was refused, before hearing of it"
        attempt.phase = next_phase(attempt.phase, WorkerMove.FAIL)
        try:
            changed = protocol.ledger_fail(world.ledger, attempt.key, attempt.identity)
        except (StaleAttempt, IllegalMove) as refusal:
            world.observer.failure_refused(attempt.handle, attempt.reservation_id)
            return f"{attempt.handle} fails {point} and reports it; the ledger refuses: {refusal}", actor, "ledger"
        world.observer.failure_accepted(attempt.handle, attempt.reservation_id, attempt.key, attempt.wrote)
        return (
            f"{attempt.handle} fails {point} and reports it: {changed.reservation_id} is {changed.state.value}",
            actor,
            "ledger",
        )
