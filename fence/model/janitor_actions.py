"""A janitor's actions: scan an expired lease, probe the destination, settle on the answer held.

Janitors scan, probe and settle as separate actions, so a lookup can be
answered and then go stale before it is acted on. Each class is one rule of
the models (``fence.model.actions`` lists what each answers); the steps
themselves are ``fence.model.janitor``'s, with the policy's decisions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from fence.base.errors import IllegalMove
from fence.model import protocol
from fence.model.actions import Action, HeldAnswer, MessageKind
from fence.model.janitor import SETTLE_MOVES
from fence.model.ledger import ReservationState
from fence.model.policies import Decision

if TYPE_CHECKING:
    from fence.model.world import World


class _JanitorStep(Action):
    """A janitor's step on one reservation: its job is the reservation's, its actor the janitor."""

    def job_in(self, world: World) -> str | None:
        return world.attempt_of(self.reservation).key

    def relative(self, world: World, job: str, held_answer: HeldAnswer) -> tuple:
        return (self.kind, self.reservation[len(job):])

    @classmethod
    def from_relative(cls, job: str, relative: tuple, janitor: int) -> Action:
        return cls(janitor, job + relative[1])

    # Janitors keep no state but the answers they hold: any janitor's scan of a
    # reservation, or probe of it by one that holds no answer for it, leads to
    # states with one key (``fence.explore.state_key.up_to_janitors``).
    def janitors_alike(self, world: World, held_answer: HeldAnswer) -> tuple | None:
        return (self.kind, self.reservation)

    def actor(self, handles: Counter) -> str:
        return f"janitor:{self.janitor}"


@dataclass(frozen=True)
class Scan(_JanitorStep):
    kind: ClassVar[str] = "scan"
    janitor: int
    reservation: str

    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        return [
            Scan(j, r.reservation_id)
            for r in protocol.ledger_expired(world.ledger, world.now)
            for j in range(world.config.janitors)
        ]

    def take(self, world: World) -> tuple[str, str, str]:
        janitor = world.janitors[self.janitor]
        try:
            janitor.scan(self.reservation, world.now)
        except IllegalMove as refusal:
            # A scan is taken only right after expired() listed the lease (apply() asks
            # enabled() anew): fence's own ledger never refuses it, a plug-in that does
            # contradicts itself.
            if protocol.fences_own(world.ledger):
                raise
            raise protocol.scan_refused(world.ledger, self.reservation, world.now, refusal) from refusal
        actor = f"janitor:{self.janitor}"
        mirror = world.observer.moved(self.reservation, janitor.expiry_move, by=actor)
        if mirror.state is ReservationState.UNUSED:
            world.record_release(self.reservation)
            return f"janitor {self.janitor} sees {self.reservation} expired and frees its unit", actor, "ledger"
        return (
            f"janitor {self.janitor} sees {self.reservation} expired and holds it as outcome_unknown",
            actor,
            "ledger",
        )


@dataclass(frozen=True)
class Probe(_JanitorStep):
    kind: ClassVar[str] = "probe"
    janitor: int
    reservation: str

    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        return [
            Probe(j, r.reservation_id)
            for r in protocol.ledger_reservations(world.ledger)
            if r.state is ReservationState.OUTCOME_UNKNOWN
            for j in range(world.config.janitors)
            if r.reservation_id not in world.evidence[j]
        ]

    def take(self, world: World) -> tuple[str, str, str]:
        owner = world.attempt_of(self.reservation)
        if world.in_network(MessageKind.COMMIT, owner.handle):
            world.observer.reach("probe_while_commit_in_flight")
        if world.in_network(MessageKind.REGISTER, owner.handle):
            world.observer.reach("probe_while_registration_in_flight")
        evidence = world.janitors[self.janitor].probe(self.reservation)
        world.evidence[self.janitor][self.reservation] = evidence
        return (
            f"janitor {self.janitor} asks the destination about {self.reservation}: {evidence.describe()}",
            f"janitor:{self.janitor}",
            "destination",
        )


@dataclass(frozen=True)
class Settle(_JanitorStep):
    kind: ClassVar[str] = "settle"
    janitor: int
    reservation: str
    follow_up: bool = False
    """The policy's second step after it freed the unit (``after_release``), not a decision."""

    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        settles = [Settle(j, r) for j in range(world.config.janitors) for r in world.evidence[j]]
        return settles + [Settle(j, r, follow_up=True) for j, r in world.follow_ups]

    def take(self, world: World) -> tuple[str, str, str]:
        actor = f"janitor:{self.janitor}"
        if self.follow_up:
            world.follow_ups.remove((self.janitor, self.reservation))
            world.janitors[self.janitor].follow_up(self.reservation)
            return (
                f"janitor {self.janitor} takes the policy's second step on {self.reservation}",
                actor,
                "destination",
            )
        evidence = world.evidence[self.janitor].pop(self.reservation)
        try:
            settlement = world.janitors[self.janitor].settle(self.reservation, evidence)
        except IllegalMove:
            world.observer.reach("settle_on_stale_evidence_refused")
            state = protocol.ledger_get(world.ledger, self.reservation).state.value
            return (
                f"janitor {self.janitor} acts on '{evidence.describe()}', but {self.reservation} "
                f"is already {state}: the ledger refuses",
                actor,
                "ledger",
            )
        if settlement.decision is Decision.HOLD:
            return f"janitor {self.janitor} holds {self.reservation} ({evidence.describe()})", actor, "ledger"
        mirror = world.observer.moved(self.reservation, SETTLE_MOVES[settlement.decision], by=actor)
        if mirror.state is ReservationState.UNUSED:
            world.record_release(self.reservation)
            if world.janitors[self.janitor].has_follow_up:
                world.follow_ups.append((self.janitor, self.reservation))
            return (
                f"janitor {self.janitor} settles {self.reservation} as unused ({evidence.describe()}): "
                "its unit returns and the job is queued for retry",
                actor,
                "ledger",
            )
        return (
            f"janitor {self.janitor} settles {self.reservation} as "
            f"{settlement.reservation.state.value} ({evidence.describe()})",
            actor,
            "ledger",
        )

    def relative(self, world: World, job: str, held_answer: HeldAnswer) -> tuple:
        if self.follow_up:
            return ("settle", self.reservation[len(job):], True)
        return ("settle", self.reservation[len(job):], False, held_answer(world.evidence[self.janitor][self.reservation]))

    @classmethod
    def from_relative(cls, job: str, relative: tuple, janitor: int) -> Action:
        return Settle(janitor, job + relative[1], relative[2])

    # Settles by janitors holding answers with the same decision lead to one key.
    def janitors_alike(self, world: World, held_answer: HeldAnswer) -> tuple | None:
        if self.follow_up:
            return ("settle", self.reservation, "follow_up")
        return ("settle", self.reservation, held_answer(world.evidence[self.janitor][self.reservation]))
