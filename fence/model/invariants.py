"""The named invariants the models judge every policy on, and the "sometimes" checks.

Each invariant is a pure function of a run (a ``World``, or any engine's run
with the same three readings: ``observer``, ``jobs`` and ``live_writers()``)
that returns ``None`` when it holds and a sentence saying what broke when it
does not. It reads only what
fence itself recorded: the observer's facts and findings (``fence.model.observer``)
and fence's own model of the workers, never a plug-in's answers. Invariants
1-5 and 7 are checked after every step; 6 only at the end of a run, after
``World.drain``.

A safe verdict is only as good as the interleavings the run visited, so each
"always" is paired with ``DANGERS``: counts of the dangerous situations a run
must have reached before fence will call a policy safe rather than undetermined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fence.model.ledger import ReservationState
from fence.model.policies import JanitorPolicy
from fence.model.world import World


@dataclass(frozen=True)
class Invariant:
    number: int
    name: str
    statement: str
    check: Callable[[World], str | None]
    at_teardown: bool = False

    @property
    def label(self) -> str:
        return f"{self.number}. {self.name}"


@dataclass(frozen=True)
class ObserverFinding:
    """An invariant judged on what the observer recorded while the run went (see fence.model.observer).

    A class, not a closure, so that results carrying an invariant pickle to and
    from worker processes.
    """

    name: str

    def __call__(self, world: World) -> str | None:
        return world.observer.findings.first(self.name)


def _found(name: str) -> ObserverFinding:
    return ObserverFinding(name)


def _no_early_release(world: World) -> str | None:
    found = world.observer.findings.first("no_early_release")
    if found:
        return found
    # The present: attempts that can still write, judged from facts (fence.model.worker.can_still_write).
    writers = world.live_writers()
    capacity = world.observer.capacity
    if len(writers) > capacity:
        return f"{len(writers)} attempts can write at once ({', '.join(writers)}) with {capacity} unit(s)"
    return None


def _everything_settles(world: World) -> str | None:
    observer = world.observer
    stuck = [m.reservation_id for m in observer.unsettled() if m.state is ReservationState.OUTCOME_UNKNOWN]
    if stuck:
        return f"{', '.join(stuck)} stayed outcome_unknown after the drain, though no attempt was left running"
    unsettled = [m.reservation_id for m in observer.unsettled() if m.state is ReservationState.RESERVED]
    if unsettled:
        return f"{', '.join(unsettled)} stayed reserved after the drain"
    for job in world.jobs:
        written = observer.effects_per_key[job]
        if written != 1:
            return f"{job} ended with {written} effects, not exactly one"
    return None


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(1, "no_duplicate_writes", "at most one effect per idempotency key", _found("no_duplicate_writes")),
    Invariant(
        2,
        "no_release_while_effect_exists",
        "capacity never returns to the pool while an effect for that reservation's key exists",
        _found("no_release_while_effect_exists"),
    ),
    Invariant(
        3,
        "no_early_release",
        "no unit returns while its attempt can still write, no effect lands after its "
        "reservation was given back, live attempts never exceed capacity",
        _no_early_release,
    ),
    Invariant(
        4,
        "capacity_conserved",
        "no unit freed twice, never more held than exist",
        _found("capacity_conserved"),
    ),
    Invariant(
        5,
        "stale_attempt_cannot_change_newer",
        "a late confirm from a stale attempt never changes a newer reservation",
        _found("stale_attempt_cannot_change_newer"),
    ),
    Invariant(
        6,
        "everything_settles",
        "after draining and running the janitor to a fixed point, no reservation is "
        "stuck and every job has exactly one effect",
        _everything_settles,
        at_teardown=True,
    ),
    Invariant(
        7,
        "no_silent_replay",
        "a worker is never told 'already exists' for a ticket that was written with another payload",
        _found("no_silent_replay"),
    ),
)
BY_NAME: dict[str, Invariant] = {inv.name: inv for inv in INVARIANTS}


@dataclass(frozen=True)
class Danger:
    name: str
    description: str
    applies: Callable[[JanitorPolicy], bool] = lambda policy: True


DANGERS: tuple[Danger, ...] = (
    Danger("crash_after_effect", "a worker crashed after its effect landed, before confirming"),
    Danger("commit_after_expiry", "a commit reached the destination after its lease expired"),
    Danger(
        "probe_while_commit_in_flight",
        "the janitor asked the destination while the owner's commit was still on its way",
        applies=lambda policy: policy.hold_on_expiry,
    ),
    Danger("retry_after_release", "a job was retried after its unit was given back"),
    Danger("revised_retry", "a job was retried with a revised payload"),
)


FAILURE_DANGERS: tuple[Danger, ...] = (
    Danger(
        "failure_after_effect",
        "a worker reported failure after its effect landed, and the ledger accepted the report",
    ),
)
"""Dangers of the worker's failure path, required only where failures are modelled (``ModelConfig.failures``)."""


class StepJudge:
    """What one transition did, read off the child World it made: the dangers it reached, the invariants it broke.

    Every walk that steps a World (``fence.explore.walk``'s successors, the memo
    walk's real steps in ``fence.explore.abstract``) judges its child here, so a new
    state is judged one way. The child is a clone without history, so what it
    recorded is what the transition alone did. An invariant judged on the
    observer's findings alone (``ObserverFinding``) holds while the transition recorded
    none: only the others are asked then.
    """

    def __init__(self, step_invariants) -> None:
        self.step_invariants = list(step_invariants)
        self.judged_on_more = [inv for inv in self.step_invariants if not isinstance(inv.check, ObserverFinding)]
        self.judged_on_more_seen = [inv for inv in self.judged_on_more if inv.check is not _no_early_release]
        """What a transition that recorded no finding is asked when its key was seen before: the built-in
        invariant 3's present (more live writers than units) is a function of the state key, so the
        transition that first reached the key judged it (see ``__call__``)."""

    def __call__(self, child: World, known, reached, seen_before: bool = False) -> list[str]:
        """Add the child's dangers to ``reached`` (a Counter) and return the invariants not in ``known`` it broke.

        ``seen_before``: the child's state key (``fence.explore.state_key.state_key``) is one the walk
        has reached before. Invariant 3's present reading (attempts' phases, commits in flight,
        abandon promises) is then what it was at that first transition, which judged it: if
        it was broken, it is in ``known``. So with no finding recorded it is not asked again;
        every other invariant (a user's too) is asked as always.
        """
        if child.reached:
            reached.update(child.reached)
            child.reached.clear()
        if child.observer.findings.by_invariant:
            asked = self.step_invariants
        else:
            asked = self.judged_on_more_seen if seen_before else self.judged_on_more
        return [inv.name for inv in asked if inv.name not in known and inv.check(child)]


def required_dangers(policy: JanitorPolicy, config=None) -> list[Danger]:
    """The dangerous situations a run must reach before ``policy`` may be called safe.

    ``config`` (a ``ModelConfig``) adds the failure path's dangers when its workers may fail.
    """
    dangers = DANGERS + FAILURE_DANGERS if config is not None and config.failures else DANGERS
    return [danger for danger in dangers if danger.applies(policy)]
