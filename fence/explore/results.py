"""What an exploration concludes: a verdict per invariant, with the figures behind it."""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from fence.search.counterexample import Counterexample
from fence.model.invariants import Invariant, required_dangers
from fence.model.policies import JanitorPolicy
from fence.explore.visited import FINGERPRINT_BITS, collision_probability
from fence.model.world import ModelConfig


# The explorer's default clock horizon: small enough that 2 units x 2 jobs is
# exhausted in seconds, long enough for a lease to expire twice and for a retry
# to expire again (docs/status.md has the measured figures).
EXPLORER_HORIZON = 6


class Outcome(enum.Enum):
    PROVED = "proved"
    VIOLATED = "violated"
    UNDETERMINED = "undetermined"


@dataclass
class InvariantResult:
    invariant: Invariant
    outcome: Outcome
    counterexample: Counterexample | None = None
    depth: int | None = None
    """Chosen steps of the shortest counterexample."""


@dataclass
class Exploration:
    policy: JanitorPolicy
    config: ModelConfig
    max_depth: int | None
    symmetry: bool
    results: dict[str, InvariantResult] = field(default_factory=dict)
    states: int = 0
    transitions: int = 0
    depth: int = 0
    """The deepest level of chosen steps expanded."""
    seconds: float = 0.0
    exhausted: bool = False
    """True when no unexplored state is left under the config (and depth) bounds."""
    stopped_by: str | None = None
    """'max_states' or 'time_budget' when a budget ran out."""
    reached: Counter = field(default_factory=Counter)
    """Per danger: how many transitions reached it."""
    drains_unsettled: int = 0
    unfaithful: str | None = None
    """Why the plug-ins could not be explored faithfully (nothing is proved then)."""
    queued: int = 0
    """States found but not yet expanded, at the last progress report."""
    faithfulness_checks: int = 0
    """How many times the generic path's copies and merges were tested against fresh replays."""
    renamings_checked: int = 0
    """Of those, merges of two states that are renamings of each other (jobs symmetric): each replayed
    with the jobs renamed, and compared with the original and with the merged state."""
    processes: int = 1
    """How many processes shared the breadth-first levels."""
    one_process_because: str | None = None
    """Why a walk asked to share its levels between processes ran in one (``explore_with_workers``)."""
    policy_calls_checked: int = 0
    """A user's policy on the keyed engine: how many of its calls were made twice and agreed (``fence.model.policy_twins``)."""
    whole_worlds_because: str | None = None
    """Why a user's policy was walked as whole worlds rather than keyed like fence's own (``explore``)."""
    fingerprint_bits: int = FINGERPRINT_BITS
    """Each visited state is kept as a fingerprint of its key of this many bits (``fence.explore.visited``)."""
    visited_bytes: int = 0
    """What the visited set (fingerprints and state numbers) and the parent pointers held at the end."""
    spilled: int = 0
    """States the one-process walk's frontier wrote to a file, its level outgrowing ``frontier_budget``."""
    rebuilt: int = 0
    """Worlds the one-process walk rebuilt by replaying their path from the root (``AbstractWalk.replay``,
    ``WorldWalk.replay``): a frontier keeps states as numbers, and Worlds only while they are few."""

    partitioned_on: str | None = None
    """Where a partitioned walk's owners ran (``fence.explore.partitioned``): "2 processes", "2 Ray actors (ADDRESS)"."""
    peak_bytes: int = 0
    """A partitioned walk (``fence.explore.partitioned``): the peak resident memory of its partitions, summed."""

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0

    @property
    def collision_probability(self) -> float:
        """The chance that two distinct states shared a fingerprint and were merged: about n^2 / 2^(b+1)."""
        return collision_probability(self.states, self.fingerprint_bits)

    def missing_dangers(self) -> list[str]:
        return [d.name for d in required_dangers(self.policy, self.config) if self.reached[d.name] == 0]

    def outcome(self) -> Outcome:
        """The policy's overall outcome: violated beats undetermined beats proved.

        A walk that never reached a danger the policy must face proves nothing
        about it: undetermined, however exhausted the space was.
        """
        outcomes = {r.outcome for r in self.results.values()}
        for worst in (Outcome.VIOLATED, Outcome.UNDETERMINED):
            if worst in outcomes:
                return worst
        return Outcome.UNDETERMINED if self.missing_dangers() else Outcome.PROVED
