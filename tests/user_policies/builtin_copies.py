"""fence's eight built-in policies, copied line for line into a user's plug-in file.

Written through the public API alone (``fence.Policy`` and the types it
answers with), as a user would, and loaded as ``FILE.py:ATTR``, never as
fence's own objects. Each is named ``<built-in> copy``, so ``fence bench
explorer`` sets its row beside the built-in's. The explorer must walk each
exactly as it walks the built-in (the same states, transitions and verdicts,
in about the same time): what a user brings gets fence's own engine
(``tests/test_user_policies.py``).
"""

from dataclasses import dataclass, field

from fence import AttemptState, Decision, Evidence, Guards, Policy


@dataclass(frozen=True)
class Naive(Policy):
    name: str = "naive copy"
    summary: str = "expiry frees the unit and the job is retried"
    hold_on_expiry: bool = False

    def decide(self, evidence):
        return Decision.UNUSED


@dataclass(frozen=True)
class Reconcile(Policy):
    name: str = "reconcile copy"
    summary: str = "look the key up: found -> confirmed_existing, absent -> unused"

    def probe(self, destination, reservation):
        return Evidence(key_exists=destination.lookup(reservation.key))

    def decide(self, evidence):
        return Decision.EXISTING if evidence.key_exists else Decision.UNUSED


@dataclass(frozen=True)
class Fenced(Reconcile):
    name: str = "fenced copy"
    guards: Guards = field(default_factory=lambda: Guards(fence=True))


@dataclass(frozen=True)
class Witness(Policy):
    name: str = "witness copy"
    summary: str = "look up key and attempt: found -> existing, in flight -> hold, else unused"
    guards: Guards = field(default_factory=lambda: Guards(witness=True))

    def probe(self, destination, reservation):
        attempt = destination.attempt_state(reservation.owner)
        return Evidence(
            key_exists=destination.lookup(reservation.key), attempt_state=attempt, attempt_asked=True
        )

    def decide(self, evidence):
        if evidence.key_exists:
            return Decision.EXISTING
        if evidence.attempt_state is AttemptState.IN_FLIGHT:
            return Decision.HOLD
        return Decision.UNUSED


@dataclass(frozen=True)
class WitnessFenced(Witness):
    name: str = "witness-fenced copy"
    guards: Guards = field(default_factory=lambda: Guards(witness=True, fence=True))


@dataclass(frozen=True)
class Abandon(Policy):
    name: str = "abandon copy"
    summary: str = "abandon the attempt at the destination unless it committed, then free"
    guards: Guards = field(default_factory=lambda: Guards(witness=True))

    def probe(self, destination, reservation):
        result = destination.abandon_unless_committed(reservation.owner)
        return Evidence(key_exists=destination.lookup(reservation.key), abandon_result=result)

    def decide(self, evidence):
        if evidence.abandon_result is AttemptState.COMMITTED or evidence.key_exists:
            return Decision.EXISTING
        return Decision.UNUSED


@dataclass(frozen=True)
class AbandonFenced(Abandon):
    name: str = "abandon-fenced copy"
    guards: Guards = field(default_factory=lambda: Guards(witness=True, fence=True, fingerprint=True))


@dataclass(frozen=True)
class AbandonFencedShared(AbandonFenced):
    name: str = "abandon-fenced-shared copy"
    shared_identity: bool = True


COPIES = {
    "naive": "Naive", "reconcile": "Reconcile", "fenced": "Fenced", "witness": "Witness",
    "witness-fenced": "WitnessFenced", "abandon": "Abandon", "abandon-fenced": "AbandonFenced",
    "abandon-fenced-shared": "AbandonFencedShared",
}
"""Each built-in policy's name -> the class here that copies it."""
