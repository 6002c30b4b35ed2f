"""Janitor policies: what to do with a reservation whose lease expired.

A policy is a small object behind one protocol (``JanitorPolicy``). The janitor
calls it in three separate steps, so that the models can put other events
between them -- the check-then-act races live in those gaps:

1. on scan, ``hold_on_expiry`` decides between freeing the unit at once (naive)
   and holding it in ``outcome_unknown`` until there is evidence;
2. ``probe`` asks the destination whatever the policy wants to know and returns
   the answers as ``Evidence``;
3. ``decide`` turns that evidence, possibly stale by now, into a ``Decision``.

A lease says the worker stopped reporting, not that the operation did not
happen, so every policy here except ``naive`` looks for evidence at the
destination before a unit goes back. They differ in which evidence they trust.

To check a policy of your own, subclass ``Policy`` (or write any object with the
same attributes and methods) and run ``fence check yourmodule:YourPolicy``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from fence.base.copying import copy_frozen_value
from fence.model.destination import AttemptState, Destination, Guards
from fence.model.ledger import Reservation


class Decision(enum.Enum):
    EXISTING = "existing"
    """The effect exists: the unit is spent (``confirmed_existing``)."""
    UNUSED = "unused"
    """No effect, and none can still land: return the unit and retry the job."""
    HOLD = "hold"
    """Not enough evidence yet: stay in ``outcome_unknown`` and ask again later."""


@dataclass(frozen=True)
class Evidence:
    """What the destination answered, at the moment it answered."""

    key_exists: bool | None = None
    attempt_state: AttemptState | None = None
    attempt_asked: bool = False
    """True when the attempt's state was asked for (``attempt_state`` None = never heard of it)."""
    abandon_result: AttemptState | None = None

    def describe(self) -> str:
        parts = []
        if self.abandon_result is not None:
            parts.append(f"abandon -> {self.abandon_result.value}")
        if self.key_exists is not None:
            parts.append("key found" if self.key_exists else "key absent")
        if self.attempt_state is not None:
            parts.append(f"attempt {self.attempt_state.value}")
        elif self.attempt_asked:
            parts.append("attempt unknown to the destination")
        return ", ".join(parts) or "nothing asked"

    def __deepcopy__(self, memo):
        # A world with a user's plug-ins is deep-copied; fence's own value is its own copy.
        return copy_frozen_value(self, memo, Evidence)


@runtime_checkable
class JanitorPolicy(Protocol):
    name: str
    summary: str
    guards: Guards
    """Guards this policy expects the destination to enforce."""
    shared_identity: bool
    """True: every attempt at a job uses the job's one identity; False: one id per attempt."""
    hold_on_expiry: bool

    def probe(self, destination: Destination, reservation: Reservation) -> Evidence: ...

    def decide(self, evidence: Evidence) -> Decision: ...


@dataclass(frozen=True)
class Policy:
    """Base for policies: fill in ``probe`` and ``decide``."""

    name: str = "custom"
    summary: str = ""
    guards: Guards = field(default_factory=Guards)
    shared_identity: bool = False
    hold_on_expiry: bool = True

    def probe(self, destination: Destination, reservation: Reservation) -> Evidence:
        return Evidence()

    def decide(self, evidence: Evidence) -> Decision:
        return Decision.HOLD


@dataclass(frozen=True)
class Naive(Policy):
    """Expiry is taken as proof the effect never happened."""

    name: str = "naive"
    summary: str = "expiry frees the unit and the job is retried"
    hold_on_expiry: bool = False

    def decide(self, evidence: Evidence) -> Decision:
        return Decision.UNUSED


@dataclass(frozen=True)
class Reconcile(Policy):
    """Look the key up before freeing: found -> spent, absent -> unused."""

    name: str = "reconcile"
    summary: str = "look the key up: found -> confirmed_existing, absent -> unused"

    def probe(self, destination: Destination, reservation: Reservation) -> Evidence:
        return Evidence(key_exists=destination.lookup(reservation.key))

    def decide(self, evidence: Evidence) -> Decision:
        return Decision.EXISTING if evidence.key_exists else Decision.UNUSED


@dataclass(frozen=True)
class Witness(Policy):
    """Reconcile, and hold while the destination says the attempt is in flight."""

    name: str = "witness"
    summary: str = "look up key and attempt: found -> existing, in flight -> hold, else unused"
    guards: Guards = field(default_factory=lambda: Guards(witness=True))

    def probe(self, destination: Destination, reservation: Reservation) -> Evidence:
        # Attempt first, key second: a commit that lands between the two
        # questions is then seen by the key lookup rather than missed by both.
        attempt = destination.attempt_state(reservation.owner)
        return Evidence(
            key_exists=destination.lookup(reservation.key), attempt_state=attempt, attempt_asked=True
        )

    def decide(self, evidence: Evidence) -> Decision:
        if evidence.key_exists:
            return Decision.EXISTING
        if evidence.attempt_state is AttemptState.IN_FLIGHT:
            return Decision.HOLD
        return Decision.UNUSED


@dataclass(frozen=True)
class Abandon(Policy):
    """Atomically abandon the attempt unless it committed, then decide."""

    name: str = "abandon"
    summary: str = "abandon the attempt at the destination unless it committed, then free"
    guards: Guards = field(default_factory=lambda: Guards(witness=True))

    def probe(self, destination: Destination, reservation: Reservation) -> Evidence:
        result = destination.abandon_unless_committed(reservation.owner)
        return Evidence(key_exists=destination.lookup(reservation.key), abandon_result=result)

    def decide(self, evidence: Evidence) -> Decision:
        if evidence.abandon_result is AttemptState.COMMITTED or evidence.key_exists:
            return Decision.EXISTING
        return Decision.UNUSED


def fenced(policy: Policy, *, fingerprint: bool = False, name: str | None = None) -> Policy:
    """The same janitor, with the destination's put-if-absent fence switched on."""
    guards = policy.guards.union(Guards(fence=True, fingerprint=fingerprint))
    extra = "fence+fingerprint" if fingerprint else "fence"
    return replace(
        policy,
        name=name or f"{policy.name}-fenced",
        summary=f"{policy.summary}; destination {extra} on",
        guards=guards,
    )


def with_shared_identity(policy: Policy, *, name: str | None = None) -> Policy:
    """The same janitor, but every attempt at a job reports under the job's one id."""
    return replace(
        policy,
        name=name or f"{policy.name}-shared",
        summary=f"{policy.summary}; attempts share one identity",
        shared_identity=True,
    )


def _builtin() -> dict[str, Policy]:
    rows = [
        Naive(),
        Reconcile(),
        fenced(Reconcile(), name="fenced"),
        Witness(),
        fenced(Witness()),
        Abandon(),
        fenced(Abandon(), fingerprint=True),
        with_shared_identity(fenced(Abandon(), fingerprint=True)),
    ]
    return {policy.name: policy for policy in rows}


FENCE_POLICY_TYPES: frozenset[type] = frozenset({Policy, Naive, Reconcile, Witness, Abandon})
"""fence's own policy classes: pure, frozen, with fence's own Evidence (exact types only)."""

POLICIES: dict[str, Policy] = _builtin()
"""The built-in policies, in the order the verdict matrix lists them."""


def policy_problem(candidate: object) -> str | None:
    """Why ``candidate`` cannot be used as a janitor policy, or None if it can."""
    missing = [
        attribute
        for attribute in ("name", "guards", "shared_identity", "hold_on_expiry", "probe", "decide")
        if not hasattr(candidate, attribute)
    ]
    if missing:
        return "it lacks " + ", ".join(missing) + " (subclass fence.Policy to get them all)"
    if not isinstance(candidate.name, str) or not candidate.name.strip():
        return f"its name must be a non-empty string, not {candidate.name!r}"
    for flag in ("shared_identity", "hold_on_expiry"):
        if not isinstance(getattr(candidate, flag), bool):
            return f"its {flag} must be True or False, not {getattr(candidate, flag)!r}"
    if not isinstance(candidate.guards, Guards):
        return "its guards must be a fence.Guards"
    if not callable(candidate.probe) or not callable(candidate.decide):
        return "its probe and decide must be methods"
    return None
