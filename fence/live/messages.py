"""What a child process and its parent say to each other, as typed records.

A child (``fence.live.children``) reports what it did, the parent
(``fence.live.hands``, ``fence.live.causal``) sends it orders; both ends
dispatch with ``match`` on the record's type. The records travel pickled over
``multiprocessing`` pipes, so they are module-level frozen dataclasses that a
forkserver child and its parent both import from here.

Every report carries ``t``: the CLOCK_MONOTONIC reading when it was made, which
Linux shares between processes, so the parent can put one child's report and
another's on one timeline. ``Killed`` and ``Exited`` are the parent's own
records of a child's end, in the same stream as the child's reports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fence.model.destination import AttemptState, CommitResult
from fence.model.ledger import ReservationState


@dataclass(frozen=True)
class Report:
    """Something a child did (or, for Killed and Exited, what became of it)."""

    t: float = field(default_factory=time.monotonic, kw_only=True)
    """When, on CLOCK_MONOTONIC."""


# -- a worker's reports: one attempt, in the order it makes them -------------------------
@dataclass(frozen=True)
class Ready(Report):
    """The child opened the backend and waits for orders."""

    pid: int


@dataclass(frozen=True)
class Reserved(Report):
    key: str
    reservation: str
    deadline: float
    latency: float
    """Seconds of the reserve call that succeeded."""
    waited: float
    """Seconds from the first ask to the unit (the calls turned away included)."""


@dataclass(frozen=True)
class Registered(Report):
    """The attempt registered at the destination and starts its work."""


@dataclass(frozen=True)
class Committing(Report):
    """The commit is being sent: from here it may land."""

    payload: str


@dataclass(frozen=True)
class Committed(Report):
    """The destination answered the commit."""

    result: CommitResult


@dataclass(frozen=True)
class Confirming(Report):
    """The confirm is being sent: if the worker dies before its answer, it may still have landed."""


@dataclass(frozen=True)
class Done(Report):
    """The attempt is over: ``outcome`` is the state its confirm left, or why it stopped."""

    outcome: str
    """A ``ReservationState`` value, ``reserve refused``, ``commit unknown``, ``gave up`` or ``confirm refused``."""
    reason: str = ""
    reconnected: bool = False
    """It found its reservation settled after a reconnect: by its own confirm, or by a janitor."""


@dataclass(frozen=True)
class AtCrashPoint(Report):
    """The worker reached its crash point and waits there to be killed."""

    point: str


# -- a janitor's reports ------------------------------------------------------------------
@dataclass(frozen=True)
class Expiry(Report):
    """The janitor claimed an expired lease; ``state`` is where the ledger took it."""

    reservation: str
    state: ReservationState


@dataclass(frozen=True)
class Adopted(Report):
    """After a reconnect, a lease this janitor had claimed and not settled (its claim may never have been heard)."""

    reservation: str


@dataclass(frozen=True)
class Hold(Report):
    """The janitor holds a reservation: its evidence does not allow a settle yet (reported once)."""

    reservation: str
    evidence: str


@dataclass(frozen=True)
class Settle(Report):
    reservation: str
    state: ReservationState
    evidence: str


@dataclass(frozen=True)
class AbandonAnswered(Report):
    """The destination answered the janitor's abandon for ``identity``."""

    identity: str
    answer: AttemptState | None


# -- the parent's own records ---------------------------------------------------------------
@dataclass(frozen=True)
class Killed(Report):
    """The parent SIGKILLed the child (after whatever it reported before it died)."""


@dataclass(frozen=True)
class Exited(Report):
    """The child's pipe closed without the parent killing it."""

    exitcode: int | None


# -- the parent's orders ---------------------------------------------------------------------
@dataclass(frozen=True)
class RunAttempt:
    key: str
    attempt_id: str
    lease: float
    work: float
    """Seconds of work between registering and committing."""
    crash: str | None = None
    """None, or the crash point where the worker stops and waits to be killed."""


@dataclass(frozen=True)
class Proceed:
    """Go on from a crash point (the experiments send a SIGKILL instead)."""


@dataclass(frozen=True)
class Stop:
    """Finish: a worker between attempts, a janitor between its polls."""
