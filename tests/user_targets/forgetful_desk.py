"""A user's target, written on fence's public names only: a ticket desk on Redis that forgets.

The desk keeps its tickets and its witness of attempts in Redis (through
redis-py, the real library). It claims fence's guarded policy
(``abandon-fenced``: put-if-absent on the key, and the witness's atomic
``abandon_unless_committed``), but it forgets: abandoning an attempt answers
"abandoned" without recording it, so that attempt's late commit still lands.
The job's own record is fence's in-memory ``Ledger``; the desk is what is
under test. ``tests/test_targets_user.py`` runs it through ``fence targets
--target``, ``fence.testing.check_target`` and ``fence replay``.
"""

from __future__ import annotations

import json

import redis

from fence import AttemptState, CommitResult, Effect, Guards, Ledger
from fence.targets import Target

PREFIX = "forgetful-desk:"


class ForgetfulDesk:
    """fence's destination protocol on Redis, with a witness that forgets abandonments."""

    def __init__(self, client: redis.Redis, guards: Guards) -> None:
        self.client = client
        self.guards = guards

    def register(self, attempt_id: str, key: str) -> AttemptState | None:
        if not self.guards.witness:
            return None
        self.client.hsetnx(PREFIX + "attempts", attempt_id, AttemptState.IN_FLIGHT.value)
        return self.attempt_state(attempt_id)

    def commit(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        known = self.attempt_state(attempt_id)
        if known is AttemptState.ABANDONED:
            return CommitResult.ABANDONED
        if known is AttemptState.COMMITTED:
            return CommitResult.ALREADY_EXISTS
        first = self.client.hget(PREFIX + "first", key)
        if first is not None and self.guards.fence:
            if self.guards.witness:
                self.client.hset(PREFIX + "attempts", attempt_id, AttemptState.REFUSED.value)
            return CommitResult.ALREADY_EXISTS
        self.client.hsetnx(PREFIX + "first", key, payload)
        self.client.rpush(PREFIX + "effects", json.dumps([key, attempt_id, payload]))
        if self.guards.witness:
            self.client.hset(PREFIX + "attempts", attempt_id, AttemptState.COMMITTED.value)
        return CommitResult.WRITTEN

    def lookup(self, key: str) -> bool:
        return bool(self.client.hexists(PREFIX + "first", key))

    def attempt_state(self, attempt_id: str) -> AttemptState | None:
        state = self.client.hget(PREFIX + "attempts", attempt_id)
        return AttemptState(state.decode()) if state is not None else None

    def abandon_unless_committed(self, attempt_id: str) -> AttemptState:
        if self.attempt_state(attempt_id) is AttemptState.COMMITTED:
            return AttemptState.COMMITTED
        return AttemptState.ABANDONED  # the bug: the abandonment is never written down

    def effects(self) -> list[Effect]:
        rows = [json.loads(raw) for raw in self.client.lrange(PREFIX + "effects", 0, -1)]
        return [Effect(key, attempt, payload, number) for number, (key, attempt, payload) in enumerate(rows, 1)]

    def snapshot(self) -> tuple:
        """What decides the desk's next answers, in the shape of fence's own desk: each key's payloads in the
        order they landed, and the witness's state of each attempt (the lockstep compares the two)."""
        payloads: dict[str, tuple[str, ...]] = {}
        for effect in self.effects():
            payloads[effect.key] = payloads.get(effect.key, ()) + (effect.payload,)
        attempts = self.client.hgetall(PREFIX + "attempts")
        return frozenset(payloads.items()), frozenset((a.decode(), s.decode()) for a, s in attempts.items())


class Ticks:
    """How long a model tick is on the server's clock: what a ledger's ``time`` says (a ``ModelTime`` has it)."""

    def __init__(self, tick_seconds: float) -> None:
        self.tick_seconds = tick_seconds


class ForgetfulDeskStorage:
    """The target's storage: one Redis connection; every world starts with the desk's keys deleted.

    ``tick_seconds``: the ledger states that a model tick is that long (its ``time``).
    """

    def __init__(self, url: str, tick_seconds: float | None = None) -> None:
        self.client = redis.Redis.from_url(url)
        self.client.ping()
        self.tick_seconds = tick_seconds

    def destination_factory(self, guards: Guards) -> ForgetfulDesk:
        keys = self.client.keys(PREFIX + "*")
        if keys:
            self.client.delete(*keys)
        return ForgetfulDesk(self.client, guards)

    def ledger_factory(self, capacity: int) -> Ledger:
        ledger = Ledger(capacity)
        if self.tick_seconds is not None:
            ledger.time = Ticks(self.tick_seconds)
        return ledger

    def versions(self) -> dict[str, str]:
        return {"redis-py": redis.__version__, "redis server": self.client.info()["redis_version"]}

    def close(self) -> None:
        self.client.close()


FORGETFUL_DESK = Target(
    row="forgetful-desk",
    system="redis",
    policy="abandon-fenced",
    storage=f"{__file__}:ForgetfulDeskStorage",
    server="redis",
    recovery="fence's abandon-fenced janitor; the desk answers 'abandoned' without recording it",
    time="fence's own ledger keeps the leases: no clock on the server",
)

IMPATIENT_DESK = Target(
    row="impatient-desk", system="redis", policy="abandon-fenced", storage=f"{__file__}:ForgetfulDeskStorage",
    server="redis", tick_seconds=1e-9,
    time="claims a tick is a nanosecond of real time: every run is longer (fence targets says so)",
)
"""The same desk, with an adapter assumption no run can keep: a tick of a nanosecond."""

HURRIED_LEDGER_DESK = Target(
    row="hurried-ledger-desk", system="redis", policy="abandon-fenced", storage=f"{__file__}:ForgetfulDeskStorage",
    server="redis", options={"tick_seconds": 1e-9},
)
"""The same, with the nanosecond tick stated by its ledger's ``time`` instead of the row."""

NOT_A_TARGET = "forgetful-desk"
"""Not a Target: ``fence targets --target`` refuses it in one line."""
