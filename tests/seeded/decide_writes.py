"""A janitor policy whose decide() writes: it looks the key up, and abandons the attempt later.

Bug: check-then-act. ``probe`` only looks; the abandon happens in ``decide``,
at settle time, and its answer is ignored. A commit that lands between the
lookup and the settle is abandoned too late: the unit goes back while the
effect exists.

Breaks: 2 no_release_while_effect_exists.   Check: fence check decide_writes.py:LookupThenAbandon
"""

from dataclasses import dataclass, field

from fence import Decision, Evidence, Guards, Policy


@dataclass(frozen=True)
class LookupAnswer(Evidence):
    """The lookup's answer, and where to abandon the attempt once decided."""

    destination: object = None
    owner: str = ""


@dataclass(frozen=True)
class LookupThenAbandon(Policy):
    name: str = "lookup-then-abandon"
    summary: str = "look the key up; absent -> abandon the attempt (in decide) and free"
    guards: Guards = field(default_factory=lambda: Guards(fence=True, fingerprint=True, witness=True))

    def probe(self, destination, reservation):
        return LookupAnswer(key_exists=destination.lookup(reservation.key), destination=destination,
                            owner=reservation.owner)

    def decide(self, evidence):
        if evidence.key_exists:
            return Decision.EXISTING
        evidence.destination.abandon_unless_committed(evidence.owner)  # the act, after the check
        return Decision.UNUSED
