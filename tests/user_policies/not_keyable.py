"""User policies that lack a property fence's keyed engine rests on, each in one way.

Each is abandon-fenced but for one habit. None breaks its protocol: each
is explored, on whole worlds (``fence.model.policy_twins`` says why each is
caught). ``FOR_JOB2_ONLY`` is the one whose habit changes a verdict: it
frees job2's units without abandoning the attempt, so a keyed walk that
took its job1 answers for job2's would prove what is false.
"""

import itertools
from dataclasses import dataclass, field

from fence import AttemptState, Decision, Evidence, Guards, Policy


@dataclass(frozen=True)
class AbandonFenced(Policy):
    name: str = "abandon-fenced, as a user wrote it"
    guards: Guards = field(default_factory=lambda: Guards(witness=True, fence=True, fingerprint=True))

    def probe(self, destination, reservation):
        result = destination.abandon_unless_committed(reservation.owner)
        return Evidence(key_exists=destination.lookup(reservation.key), abandon_result=result)

    def decide(self, evidence):
        if evidence.abandon_result is AttemptState.COMMITTED or evidence.key_exists:
            return Decision.EXISTING
        return Decision.UNUSED


@dataclass(frozen=True)
class ForJob2Only(AbandonFenced):
    """Branches on a job's name: job2's units are freed on a key lookup alone."""

    name: str = "abandons all but job2"

    def probe(self, destination, reservation):
        if reservation.key == "job2":
            return Evidence(key_exists=destination.lookup(reservation.key))
        return super().probe(destination, reservation)


@dataclass(frozen=True)
class AsksAboutJob1(AbandonFenced):
    """Reads another job: every probe also looks up job1's key."""

    name: str = "asks about job1"

    def probe(self, destination, reservation):
        found = super().probe(destination, reservation)
        return Evidence(key_exists=found.key_exists or destination.lookup("job1"),
                        abandon_result=found.abandon_result)


@dataclass(frozen=True)
class ReadsEveryEffect(AbandonFenced):
    """Reads every job's writes (``effects()``) to answer for one."""

    name: str = "reads every effect"

    def probe(self, destination, reservation):
        return Evidence(key_exists=any(e.key == reservation.key for e in destination.effects()))


class CountsItsProbes:
    """Keeps state: the number of probes it made (a plain class, not a frozen dataclass)."""

    name = "counts its probes"
    guards = Guards(witness=True, fence=True, fingerprint=True)
    shared_identity = False
    hold_on_expiry = True

    def __init__(self):
        self.probes = 0

    def probe(self, destination, reservation):
        self.probes += 1
        return AbandonFenced.probe(self, destination, reservation)

    def decide(self, evidence):
        return AbandonFenced.decide(self, evidence)


_COIN = itertools.cycle([Decision.EXISTING, Decision.UNUSED])
"""A coin kept outside the policy (as a clock or a random generator is), which lands the other
way at every throw: a random coin may agree with itself for every call a short walk makes
(it did, in about one run in five), and a test must not pass by luck."""


@dataclass(frozen=True)
class CoinFlip(AbandonFenced):
    """Not deterministic: its decision is a coin flip."""

    name: str = "coin flip"

    def decide(self, evidence):
        return next(_COIN)


@dataclass(frozen=True)
class MoreEvidence(Evidence):
    asked_at: int = 0


@dataclass(frozen=True)
class AnswersItsOwnEvidence(AbandonFenced):
    """Answers with an Evidence subclass carrying a field of its own."""

    name: str = "answers its own evidence"

    def probe(self, destination, reservation):
        found = super().probe(destination, reservation)
        return MoreEvidence(key_exists=found.key_exists, abandon_result=found.abandon_result, asked_at=1)


@dataclass(frozen=True)
class DeclaresState(AbandonFenced):
    """Declares state of its own with snapshot(): walked as whole worlds from the start."""

    name: str = "declares state"

    def snapshot(self):
        return ()

