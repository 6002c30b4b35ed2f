"""The tutorial's janitor policies (docs/tutorial.md): a first try, and the fix.

A janitor runs when a worker's lease has run out. It asks the destination
something (probe), then decides what the reservation becomes (decide).
"""

from dataclasses import dataclass

from fence import AttemptState, Decision, Evidence, Guards, Policy


@dataclass(frozen=True)
class LookUpThenFree(Policy):
    name: str = "look-up-then-free"
    summary: str = "look the ticket up: found -> spent, not found -> free the unit and retry"
    guards: Guards = Guards(fence=True)

    def probe(self, destination, reservation) -> Evidence:
        return Evidence(key_exists=destination.lookup(reservation.key))

    def decide(self, evidence: Evidence) -> Decision:
        return Decision.EXISTING if evidence.key_exists else Decision.UNUSED


@dataclass(frozen=True)
class AbandonThenFree(Policy):
    name: str = "abandon-then-free"
    summary: str = "abandon the attempt unless it committed, then decide on that answer"
    guards: Guards = Guards(fence=True, witness=True, fingerprint=True)

    def probe(self, destination, reservation) -> Evidence:
        return Evidence(abandon_result=destination.abandon_unless_committed(reservation.owner))

    def decide(self, evidence: Evidence) -> Decision:
        if evidence.abandon_result is AttemptState.COMMITTED:
            return Decision.EXISTING
        return Decision.UNUSED
