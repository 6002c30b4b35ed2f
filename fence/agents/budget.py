"""TokenBudget: capacity counted in tokens, reserved up front and settled with actual usage.

Theory of operation
-------------------
fence's ``Ledger`` counts whole units and treats a confirmed unit as spent. An
agent fleet often shares a token budget instead, and a token reservation is an
estimate: the worker reserves the most its call may use, passes per-call
``limits`` to the Agent so the call cannot use more, and settles with the
actual usage from the AgentResult; the difference goes back to the pool.

Rules of this module, the same as the ledger's:

* Pure: ``now`` is passed in; no clock, no sleep, no threads. The fleet shell
  serialises calls with its own lock.
* Every move is one row of ``TOKEN_TRANSITIONS``; anything else raises
  ``IllegalMove`` and changes nothing.
* ``held + spent <= budget`` always: a reservation that does not fit is
  refused with ``CapacityExhausted``.
* A lease that expires without a settle is charged in full. The lease says the
  worker stopped reporting, not how much it spent, so no tokens come back
  without the owner's own report of its usage.
* A settle that reports more than was reserved is still charged (the tokens
  are gone) and recorded in ``overruns``; with correct ``limits`` it never
  happens, and the tests check that it does not.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from fence.base.errors import CapacityExhausted, IllegalMove, StaleAttempt


class TokenState(enum.Enum):
    RESERVED = "reserved"
    """Holding its whole estimate; the call may be running."""
    SETTLED = "settled"
    """The owner reported actual usage: that much is spent, the rest returned."""
    CHARGED_IN_FULL = "charged_in_full"
    """The lease expired without a report: the whole estimate is spent."""


class TokenMove(enum.Enum):
    SETTLE = "settle"
    EXPIRE = "expire"


TOKEN_TRANSITIONS: dict[TokenState, dict[TokenMove, TokenState]] = {
    TokenState.RESERVED: {TokenMove.SETTLE: TokenState.SETTLED, TokenMove.EXPIRE: TokenState.CHARGED_IN_FULL},
    TokenState.SETTLED: {},
    TokenState.CHARGED_IN_FULL: {},
}


@dataclass(frozen=True)
class TokenReservation:
    reservation_id: str
    key: str
    owner: str
    reserved: int
    deadline: float
    state: TokenState = TokenState.RESERVED
    actual: int | None = None

    @property
    def held(self) -> int:
        return self.reserved if self.state is TokenState.RESERVED else 0

    @property
    def spent(self) -> int:
        if self.state is TokenState.SETTLED:
            return self.actual or 0
        if self.state is TokenState.CHARGED_IN_FULL:
            return self.reserved
        return 0


class TokenBudget:
    """A budget of tokens shared by a fleet, and every reservation made against it."""

    def __init__(self, budget: int) -> None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise ValueError(f"budget must be a whole number of tokens >= 1, got {budget!r}")
        self.budget = budget
        self._reservations: dict[str, TokenReservation] = {}
        self._count = 0
        self.overruns: list[TokenReservation] = []

    # -- reading ---------------------------------------------------------------
    def reservations(self) -> list[TokenReservation]:
        return list(self._reservations.values())

    def get(self, reservation_id: str) -> TokenReservation:
        return self._reservations[reservation_id]

    @property
    def held(self) -> int:
        return sum(r.held for r in self._reservations.values())

    @property
    def spent(self) -> int:
        return sum(r.spent for r in self._reservations.values())

    @property
    def free(self) -> int:
        return self.budget - self.held - self.spent

    # -- moving ----------------------------------------------------------------
    def reserve(self, key: str, owner: str, tokens: int, now: float, lease: float) -> TokenReservation:
        if not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"reserve {key!r}: tokens must be a whole number >= 1, got {tokens!r}")
        if not lease >= 0:
            raise ValueError(f"lease must be >= 0 seconds, got {lease!r}")
        if tokens > self.free:
            raise CapacityExhausted(
                f"reserve {tokens} tokens for {key!r} by {owner!r}: only {self.free} of {self.budget} "
                f"are free ({self.held} held, {self.spent} spent); wait for a settle, or reserve less"
            )
        self._count += 1
        reservation = TokenReservation(f"{key}/t{self._count}", key, owner, tokens, now + lease)
        self._reservations[reservation.reservation_id] = reservation
        return reservation

    def settle(self, reservation_id: str, owner: str, actual: int) -> TokenReservation:
        """The owner's report of what its call really used."""
        reservation = self._reservations[reservation_id]
        if reservation.owner != owner:
            raise StaleAttempt(
                f"settle {reservation_id} by {owner!r}: it belongs to {reservation.owner!r}"
            )
        if not isinstance(actual, int) or actual < 0:
            raise ValueError(f"settle {reservation_id}: actual usage must be a whole number >= 0, got {actual!r}")
        moved = self._apply(reservation_id, TokenMove.SETTLE, actual=actual)
        if actual > reservation.reserved:
            self.overruns.append(moved)
        return moved

    def expire(self, now: float) -> list[TokenReservation]:
        """Charge in full every reserved lease that has run out; return them."""
        expired = [
            r.reservation_id
            for r in self._reservations.values()
            if r.state is TokenState.RESERVED and now >= r.deadline
        ]
        return [self._apply(reservation_id, TokenMove.EXPIRE) for reservation_id in expired]

    def _apply(self, reservation_id: str, move: TokenMove, actual: int | None = None) -> TokenReservation:
        reservation = self._reservations[reservation_id]
        target = TOKEN_TRANSITIONS[reservation.state].get(move)
        if target is None:
            raise IllegalMove(
                f"{move.value} on {reservation_id}: it is {reservation.state.value}, which allows: "
                + (", ".join(m.value for m in TOKEN_TRANSITIONS[reservation.state]) or "none")
            )
        moved = replace(reservation, state=target, actual=actual if actual is not None else reservation.actual)
        self._reservations[reservation_id] = moved
        return moved


def call_limit(reserved: int, max_turn_tokens: int) -> int:
    """The ``total_tokens`` limit that keeps one Agent call within ``reserved`` tokens.

    strands checks token caps at turn boundaries (a turn starts only while the
    running total is below the cap), so a call can overshoot its cap by up to one
    turn. With a cap of ``reserved - max_turn_tokens + 1`` the last turn starts at
    most at ``reserved - max_turn_tokens`` and ends at most at ``reserved``.
    """
    if max_turn_tokens < 1 or reserved < max_turn_tokens:
        raise ValueError(
            f"a reservation of {reserved} tokens cannot hold one turn of up to {max_turn_tokens}; "
            "reserve at least max_turn_tokens"
        )
    return reserved - max_turn_tokens + 1
