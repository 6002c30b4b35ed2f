"""A janitor that frees the unit first and abandons the attempt second, in two steps.

Bug: the order. Between the release and the abandon, the old attempt's commit
can still land: an effect after its reservation was given back.

Breaks: 3 no_early_release.   Check: fence check free_then_abandon.py:FreeThenAbandon
"""

from dataclasses import dataclass, field

from fence import Decision, Evidence, Guards, Policy


@dataclass(frozen=True)
class FreeThenAbandon(Policy):
    name: str = "free-then-abandon"
    summary: str = "key absent -> free the unit; then, as a second step, abandon the attempt"
    guards: Guards = field(default_factory=lambda: Guards(fence=True, fingerprint=True, witness=True))

    def probe(self, destination, reservation):
        return Evidence(key_exists=destination.lookup(reservation.key))

    def decide(self, evidence):
        return Decision.EXISTING if evidence.key_exists else Decision.UNUSED

    def after_release(self, destination, reservation):
        destination.abandon_unless_committed(reservation.owner)
