"""A janitor policy whose probe() writes: it holds the key at the destination with a placeholder ticket.

Bug: to keep a late commit out, the probe writes a placeholder ticket for an
absent key (under the expired attempt's identity) before it frees the unit.
The placeholder is a real write with another payload: the fence then refuses
the retry as "already exists", and the retry is told its ticket exists when
the only ticket says "placeholder".

Breaks: 7 no_silent_replay.   Check: fence check probe_writes.py:PlaceholderThenFree
"""

from dataclasses import dataclass, field

from fence import Decision, Evidence, Guards, Policy


@dataclass(frozen=True)
class PlaceholderThenFree(Policy):
    name: str = "placeholder-then-free"
    summary: str = "key absent -> write a placeholder ticket in the probe, then free the unit"
    guards: Guards = field(default_factory=lambda: Guards(fence=True))

    def probe(self, destination, reservation):
        exists = destination.lookup(reservation.key)
        if not exists:
            destination.commit(reservation.owner, reservation.key, "placeholder")  # the write, in the probe
        return Evidence(key_exists=exists)

    def decide(self, evidence):
        return Decision.EXISTING if evidence.key_exists else Decision.UNUSED
