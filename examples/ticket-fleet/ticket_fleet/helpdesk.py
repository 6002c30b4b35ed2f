"""Our help desk, as fence sees it: an adapter with fence's Destination protocol.

The real help desk API has two things we rely on: a unique idempotency key on
tickets (a second create with the same key is refused) and a claims table, where
a worker registers its attempt before working and the janitor can cancel an
attempt unless it already created its ticket (one transaction). This in-memory
stand-in keeps both, always: our API has no switch to turn them off, so the
``guards`` fence passes in are only checked against what we have.
"""

from __future__ import annotations

from fence import AttemptState, CommitResult, Effect, Guards

WHAT_WE_HAVE = Guards(fence=True, witness=True)


class HelpDesk:
    def __init__(self, wanted: Guards = WHAT_WE_HAVE) -> None:
        if wanted.union(WHAT_WE_HAVE) != WHAT_WE_HAVE:
            raise ValueError(f"our help desk cannot enforce {wanted.describe()}; it has {WHAT_WE_HAVE.describe()}")
        self.guards = WHAT_WE_HAVE
        self._tickets: list[Effect] = []
        self._ticket_keys: set[str] = set()
        self._claims: dict[str, AttemptState] = {}

    def register(self, attempt_id: str, key: str) -> AttemptState:
        return self._claims.setdefault(attempt_id, AttemptState.IN_FLIGHT)

    def commit(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        claim = self._claims.get(attempt_id)
        if claim is AttemptState.ABANDONED:
            return CommitResult.ABANDONED  # cancelled by the janitor: the create is refused
        if claim is AttemptState.COMMITTED:
            return CommitResult.ALREADY_EXISTS  # the same attempt asking again gets its own ticket back
        if key in self._ticket_keys:
            self._claims[attempt_id] = AttemptState.REFUSED
            return CommitResult.ALREADY_EXISTS  # the unique key
        self._ticket_keys.add(key)
        self._tickets.append(Effect(key, attempt_id, payload, len(self._tickets) + 1))
        self._claims[attempt_id] = AttemptState.COMMITTED
        return CommitResult.WRITTEN

    def lookup(self, key: str) -> bool:
        return key in self._ticket_keys

    def attempt_state(self, attempt_id: str) -> AttemptState | None:
        return self._claims.get(attempt_id)

    def abandon_unless_committed(self, attempt_id: str) -> AttemptState:
        if self._claims.get(attempt_id) is AttemptState.COMMITTED:
            return AttemptState.COMMITTED
        self._claims[attempt_id] = AttemptState.ABANDONED  # also for an attempt we never heard of
        return AttemptState.ABANDONED

    def effects(self) -> list[Effect]:
        """Every ticket ever created, in order: what fence judges by."""
        return list(self._tickets)

    def snapshot(self) -> tuple:
        """Everything that decides our next answers (fence's explorer keys states by it)."""
        return (
            tuple((t.key, t.attempt_id, t.payload) for t in self._tickets),
            tuple(sorted((attempt, state.value) for attempt, state in self._claims.items())),
        )
