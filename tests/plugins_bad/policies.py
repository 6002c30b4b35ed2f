"""Janitor policies that break the policy protocol (docs/reference/protocols.md)."""

import threading
from dataclasses import dataclass, field

from fence import Decision, Evidence, Guards, IllegalMove, Policy, StaleAttempt


@dataclass(frozen=True)
class DecideReturnsNone(Policy):
    name: str = "decide-returns-none"

    def decide(self, evidence):
        pass  # forgot the return


@dataclass(frozen=True)
class DecideRaises(Policy):
    name: str = "decide-raises"

    def decide(self, evidence):
        raise RuntimeError("no idea")


@dataclass(frozen=True)
class DecideReturnsString(Policy):
    name: str = "decide-returns-string"

    def decide(self, evidence):
        return "unused"


@dataclass(frozen=True)
class ProbeReturnsDict(Policy):
    name: str = "probe-returns-dict"

    def probe(self, destination, reservation):
        return {"key_exists": destination.lookup(reservation.key)}


@dataclass(frozen=True)
class ProbeRaises(Policy):
    name: str = "probe-raises"

    def probe(self, destination, reservation):
        return Evidence(key_exists=destination.lookup(reservation.kye))  # a typo


@dataclass(frozen=True)
class AfterReleaseRaises(Policy):
    name: str = "after-release-raises"
    hold_on_expiry: bool = True

    def decide(self, evidence):
        return Decision.UNUSED

    def after_release(self, destination, reservation):
        raise ValueError("cannot abandon")


@dataclass(frozen=True)
class ProbeRaisesStaleAttempt(Policy):
    """Raises one of fence's own errors where no protocol takes it as an answer."""

    name: str = "probe-raises-stale-attempt"

    def probe(self, destination, reservation):
        raise StaleAttempt(f"{reservation.reservation_id} is not mine to ask about")


@dataclass(frozen=True)
class DecideRaisesIllegalMove(Policy):
    """Raises the ledger's refusal from decide(): once taken for the ledger refusing the settle."""

    name: str = "decide-raises-illegal-move"

    def decide(self, evidence):
        raise IllegalMove("this policy refuses to decide")


@dataclass(frozen=True)
class AbandonsWithoutWitness(Policy):
    """Abandons at the destination, but its guards keep no witness to abandon in."""

    name: str = "abandons-without-witness"
    guards: Guards = field(default_factory=lambda: Guards(fence=True))

    def probe(self, destination, reservation):
        return Evidence(abandon_result=destination.abandon_unless_committed(reservation.owner))


@dataclass(frozen=True)
class CannotBeCopied(Policy):
    """Holds a lock, which copy.deepcopy cannot copy (fence copies a user's policy for every run)."""

    name: str = "cannot-be-copied"
    lock: object = field(default_factory=threading.Lock)


class ForgotDataclass(Policy):
    name = "forgot-dataclass"

    def decide(self, evidence):
        return Decision.UNUSED


@dataclass(frozen=True)
class NameNotText(Policy):
    name: int = 7


@dataclass(frozen=True)
class NeedsArguments(Policy):
    threshold: int = 0

    def __init__(self, threshold):
        pass


class NoFields:
    """Forgot to subclass fence.Policy: no name, guards or flags."""

    def decide(self, evidence):
        return Decision.UNUSED


def make_policy():
    """A function where the policy class was meant."""
    return DecideRaises()
