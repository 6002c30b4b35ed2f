"""The named invariants the models judge every policy on, and the "sometimes" checks.

Each invariant is a pure function of a ``World`` that returns ``None`` when it
holds and a sentence saying what broke when it does not. Invariants 1-5 and 7
are checked after every step; 6 only at the end of a run, after ``World.drain``.

A safe verdict is only as good as the interleavings the run visited, so each
"always" is paired with ``DANGERS``: counts of the dangerous situations a run
must have reached before fence will call a policy safe rather than undetermined.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from fence._ledger import ReservationState
from fence._policies import JanitorPolicy
from fence._world import World


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


def _no_duplicate_writes(world: World) -> str | None:
    keys = [effect.key for effect in world.destination.effects()]
    if len(set(keys)) == len(keys):  # the common case, cheaply (the explorer asks on every step)
        return None
    counts = Counter(keys)
    twice = {key: n for key, n in counts.items() if n > 1}
    if twice:
        return "; ".join(f"{key} was written {n} times" for key, n in sorted(twice.items()))
    return None


def _no_release_while_effect_exists(world: World) -> str | None:
    for record in world.releases:
        if record.unaccounted_effects:
            return (
                f"{record.reservation_id}'s unit went back to the pool while an effect for "
                f"{record.key} existed that no other reservation paid for"
            )
    return None


def _no_early_release(world: World) -> str | None:
    for record in world.releases:
        if record.owner_could_still_write:
            return (
                f"{record.reservation_id}'s unit went back to the pool while its attempt "
                f"{record.owner_attempt} could still write"
            )
    if world.late_effects:
        return world.late_effects[0]
    live = world.live_attempts()
    if len(live) > world.config.capacity:
        names = ", ".join(a.handle for a in live)
        return f"{len(live)} attempts can write at once ({names}) with {world.config.capacity} unit(s)"
    return None


def _capacity_conserved(world: World) -> str | None:
    ledger = world.ledger
    if ledger.held > ledger.capacity:
        return f"{ledger.held} units are held out of {ledger.capacity}"
    twice = [rid for rid, n in ledger.units_freed.items() if n > 1]
    if twice:
        return f"{twice[0]}'s unit was freed {ledger.units_freed[twice[0]]} times"
    holding = [r.key for r in ledger.reservations() if r.holds_unit]
    if len(set(holding)) == len(holding):
        return None
    holders = Counter(holding)
    doubled = [key for key, n in holders.items() if n > 1]
    if doubled:
        return f"{doubled[0]} holds {holders[doubled[0]]} units at once"
    return None


def _stale_attempt_cannot_change_newer(world: World) -> str | None:
    return world.stale_changes[0] if world.stale_changes else None


def _no_silent_replay(world: World) -> str | None:
    return world.silent_replays[0] if world.silent_replays else None


def _everything_settles(world: World) -> str | None:
    stuck = [r.reservation_id for r in world.ledger.reservations() if r.state is ReservationState.OUTCOME_UNKNOWN]
    if stuck:
        return f"{', '.join(stuck)} stayed outcome_unknown after the drain, though no attempt was left running"
    unsettled = [r.reservation_id for r in world.ledger.reservations() if r.state is ReservationState.RESERVED]
    if unsettled:
        return f"{', '.join(unsettled)} stayed reserved after the drain"
    counts = Counter(effect.key for effect in world.destination.effects())
    for job in world.jobs:
        if counts[job] != 1:
            return f"{job} ended with {counts[job]} effects, not exactly one"
    return None


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(1, "no_duplicate_writes", "at most one effect per idempotency key", _no_duplicate_writes),
    Invariant(
        2,
        "no_release_while_effect_exists",
        "capacity never returns to the pool while an effect for that reservation's key exists",
        _no_release_while_effect_exists,
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
        _capacity_conserved,
    ),
    Invariant(
        5,
        "stale_attempt_cannot_change_newer",
        "a late confirm from a stale attempt never changes a newer reservation",
        _stale_attempt_cannot_change_newer,
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
        _no_silent_replay,
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


def required_dangers(policy: JanitorPolicy) -> list[Danger]:
    """The dangerous situations a run must reach before ``policy`` may be called safe."""
    return [danger for danger in DANGERS if danger.applies(policy)]
