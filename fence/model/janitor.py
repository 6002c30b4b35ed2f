"""The janitor: takes back expired leases, one policy-driven step at a time.

Its three steps (scan, probe, settle) are separate methods because in a real
fleet they are separate moments: the world moves on between a lookup and the
decision made from it. The models call them one by one with other events in
between; ``run_once`` chains them for the real-clock loop of the experiments.
"""

from __future__ import annotations

from dataclasses import dataclass

from fence.model.destination import Destination
from fence.model import protocol
from fence.base.errors import FenceError, IllegalMove, PluginBroken
from fence.model.ledger import Ledger, Move, Reservation, ReservationState
from fence.model.policies import Decision, Evidence, JanitorPolicy

DECISION_MUST = "a fence.Decision (EXISTING, UNUSED or HOLD)"
EVIDENCE_MUST = "a fence.Evidence (or a subclass) holding what the destination answered"
SETTLE_MOVES = {Decision.EXISTING: Move.SETTLE_EXISTING, Decision.UNUSED: Move.SETTLE_UNUSED}


@dataclass(frozen=True)
class Settlement:
    reservation: Reservation
    decision: Decision
    evidence: Evidence

    @property
    def released(self) -> bool:
        return self.reservation.state is ReservationState.UNUSED


class Janitor:
    def __init__(self, ledger: Ledger, destination: Destination, policy: JanitorPolicy, twins=None) -> None:
        self.ledger = ledger
        self.destination = destination
        self.policy = policy
        self.twins = twins
        """``fence.model.policy_twins.PolicyTwins`` while the explorer keys a user's policy: each call made twice."""

    def scan(self, reservation_id: str, now: float) -> Reservation:
        """Act on one expired lease: hold it for evidence, or (naive) free it."""
        reservation = protocol.ledger_get(self.ledger, reservation_id)
        if reservation.state is not ReservationState.RESERVED or not reservation.expired(now):
            raise IllegalMove(
                f"scan {reservation_id} at {now}: it is {reservation.state.value} with "
                f"deadline {reservation.deadline}; only an expired reserved lease is scanned"
            )
        return protocol.ledger_apply(self.ledger, reservation_id, self.expiry_move)

    @property
    def expiry_move(self) -> Move:
        """What this policy does to an expired lease: hold it for evidence, or (naive) free it."""
        return Move.EXPIRE_AND_HOLD if self.policy.hold_on_expiry else Move.EXPIRE_AND_RELEASE

    def claim(self, now: float | None, janitor: str, limit: int = 100) -> list[Reservation]:
        """Scan for a fleet of janitors: claim up to ``limit`` expired leases atomically.

        Needs a backend ledger (``fence.backends``): ``claim_expired`` makes the
        policy's expiry move on each lease in one statement, so two janitors
        never scan the same lease. Each claimed reservation is then probed and
        settled like a scanned one.
        """
        return self.ledger.claim_expired(now, janitor, self.expiry_move, limit)

    def probe(self, reservation_id: str) -> Evidence:
        """Ask the destination what the policy wants to know about this reservation."""
        policy = self.policy
        if self.twins is not None:
            return self.twins.probe(self, protocol.ledger_get(self.ledger, reservation_id))
        evidence = protocol.call(
            policy, "policy", "probe", EVIDENCE_MUST, policy.probe, self.destination,
            protocol.ledger_get(self.ledger, reservation_id),
        )
        return protocol.returned(policy, "policy", "probe", evidence, Evidence, EVIDENCE_MUST)

    def settle(self, reservation_id: str, evidence: Evidence) -> Settlement:
        """Apply the policy's decision; raises IllegalMove if the reservation moved on."""
        policy = self.policy
        try:
            if self.twins is not None:
                decision = self.twins.decide(self, protocol.ledger_get(self.ledger, reservation_id).key, evidence)
            else:
                decision = protocol.call(policy, "policy", "decide", DECISION_MUST, policy.decide, evidence)
                protocol.returned(policy, "policy", "decide", decision, Decision, DECISION_MUST)
        except PluginBroken:
            raise
        except FenceError as error:
            # Only the ledger's refusal of the move below is an answer here (the world takes
            # it as stale evidence); the same error from decide() would pass for one.
            raise PluginBroken(
                f"{protocol.describe(policy, 'policy')}: decide() raised {type(error).__name__}: {error}; it must "
                f"return {DECISION_MUST} (fence's errors are answers only where a protocol lists them)"
            ) from error
        if decision is Decision.HOLD:
            return Settlement(protocol.ledger_get(self.ledger, reservation_id), decision, evidence)
        moved = protocol.ledger_apply(self.ledger, reservation_id, SETTLE_MOVES[decision])
        return Settlement(moved, decision, evidence)

    @property
    def has_follow_up(self) -> bool:
        """Does the policy take a second step after it freed a unit (``after_release``)?"""
        return callable(getattr(self.policy, "after_release", None))

    def follow_up(self, reservation_id: str) -> None:
        """The policy's second step after a release, taken on its own (other events may come first)."""
        policy = self.policy
        if self.twins is not None:
            self.twins.follow_up(self, protocol.ledger_get(self.ledger, reservation_id))
            return
        protocol.call(policy, "policy", "after_release", "None (it acts on the destination)",
                       policy.after_release, self.destination, protocol.ledger_get(self.ledger, reservation_id))

    def run_once(self, now: float) -> list[Settlement | Reservation]:
        """One full pass, for the real-clock loop: scan, then probe and settle each."""
        results: list[Settlement | Reservation] = []
        for reservation in protocol.ledger_expired(self.ledger, now):
            scanned = self.scan(reservation.reservation_id, now)
            results.append(scanned)
        for reservation in protocol.ledger_reservations(self.ledger):
            if reservation.state is ReservationState.OUTCOME_UNKNOWN:
                evidence = self.probe(reservation.reservation_id)
                try:
                    results.append(self.settle(reservation.reservation_id, evidence))
                except IllegalMove:
                    # A confirm raced in between probe and settle: the ledger
                    # kept the newer state, which is what we want.
                    pass
        return results
