"""Our janitors: what to do with a ticket job whose worker's lease ran out.

A lease running out says the worker stopped reporting, not that its ticket was
never created. Our first janitor looked the ticket up and, not finding it, gave
the unit back and retried; fence shows what that costs. The second cancels the
attempt at the help desk unless it already created its ticket, and decides on
that answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from fence import AttemptState, Decision, Evidence, Guards, Policy


@dataclass(frozen=True)
class LookUpThenRelease(Policy):
    name: str = "look-up-then-release"
    summary: str = "look the ticket up: found -> spent, not found -> give the unit back and retry"
    guards: Guards = Guards(fence=True)

    def probe(self, desk, reservation) -> Evidence:
        return Evidence(key_exists=desk.lookup(reservation.key))

    def decide(self, evidence: Evidence) -> Decision:
        return Decision.EXISTING if evidence.key_exists else Decision.UNUSED


@dataclass(frozen=True)
class CancelUnlessCreated(Policy):
    name: str = "cancel-unless-created"
    summary: str = "cancel the attempt unless it created its ticket, then decide on that answer"
    guards: Guards = Guards(fence=True, witness=True)

    def probe(self, desk, reservation) -> Evidence:
        return Evidence(abandon_result=desk.abandon_unless_committed(reservation.owner))

    def decide(self, evidence: Evidence) -> Decision:
        if evidence.abandon_result is AttemptState.COMMITTED:
            return Decision.EXISTING
        return Decision.UNUSED
