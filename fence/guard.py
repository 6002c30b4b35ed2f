"""fence's guard: what a task adds around its side effect so that a queue's retry is safe.

A job system that re-runs a job whose lease (heartbeat, visibility timeout) ran
out cannot know whether the first run's side effect happened: fence's naive
policy, and its duplicate writes. The guard is the abandon-fenced policy of
fence's model (proved there, see docs/explanation/policies.md), in a form a task can use:

* **per-attempt registration**: each run of a job is its own attempt, with an
  identity of its own, announced to the destination before it works
  (``Guard.attempt``);
* **the fence and the fingerprint at the destination**: the write is
  put-if-absent on the job's idempotency key, and a second write with another
  payload is refused as a conflict, never answered "already exists"
  (``GuardedAttempt.commit``);
* **abandon unless committed, on the recovery side, before a retry**
  (``Guard.recover``): one atomic step at the destination that either finds
  the attempt committed (the job is done: never run it again) or makes sure it
  never will (a tombstone: its late registration or commit is refused), and
  only then may the job run again.

The destination is fence's ``SqlDestination`` (``Guard.open(url)``: its tables
in a PostgreSQL schema of their own, ``fence_guard``) or any
``fence.Destination`` with the three guards on. The effect the guard protects
is the guarded commit itself: a row written in that transaction. An effect
somewhere else (an HTTP call) is protected only if that service honours the
same key and the same refusal; the guard cannot make a call that is not
idempotent safe.

Queue-specific recovery (which job to retry, and how) lives with each target:
``fence.targets.procrastinate.recover_stalled_jobs`` for procrastinate,
``fence.targets.pgqueuer.guarded_attempt`` for pgqueuer (whose stale re-pick
runs the recovery).
"""

from __future__ import annotations

from dataclasses import dataclass

from fence.model.destination import AttemptState, CommitResult, Destination, Guards
from fence.base.errors import BadInput, FenceError
from fence.model.ledger import Reservation
from fence.model.policies import POLICIES, Decision

__all__ = ["GUARDS", "Guard", "GuardedAttempt", "Refused"]

POLICY = POLICIES["abandon-fenced"]
"""The model policy the guard is: its probe and decide are the guard's recovery."""
GUARDS: Guards = POLICY.guards
"""fence, fingerprint and witness: what the guard needs at the destination."""


class Refused(FenceError, RuntimeError):
    """The destination refused this attempt: abandoned by a recovery, or another payload holds the key.

    The task must not write anything else for this job: a newer attempt owns it.
    """

    def __init__(self, message: str, result: CommitResult | AttemptState) -> None:
        super().__init__(message)
        self.result = result


class Guard:
    """The guard at one destination: attempts on the worker side, ``recover`` on the janitor side.

    ``Guard.open`` keeps one connection: open a guard per worker (process, or
    thread when the worker runs jobs on threads) and keep it, rather than one
    per job. On PostgreSQL a job's attempt is then two round trips: the
    registration and the commit, one statement each.
    """

    def __init__(self, destination: Destination, *, owns: object = None) -> None:
        missing = [name for name in ("fence", "fingerprint", "witness") if not getattr(destination.guards, name)]
        if missing:
            raise BadInput(
                f"fence.guard needs a destination with the fence, fingerprint and witness guards on; "
                f"this one lacks {', '.join(missing)} (make it with fence.guard.GUARDS)"
            )
        self.destination = destination
        self._owns = owns

    @classmethod
    def open(cls, url: str, *, namespace: str = "fence_guard") -> Guard:
        """A guard whose destination is fence's tables at ``url`` (PostgreSQL), in schema ``namespace``."""
        from fence.backends import SqlDestination, open_store

        store = open_store(url, namespace=namespace)
        if store is None:
            raise BadInput(f"fence.guard needs a database URL, not {url!r}")
        return cls(SqlDestination(store, GUARDS), owns=store)

    def close(self) -> None:
        if self._owns is not None:
            self._owns.close()

    # -- the worker's side -------------------------------------------------------------
    def attempt(self, key: str, attempt_id: str) -> GuardedAttempt:
        """``with guard.attempt(key, attempt_id) as attempt: ... attempt.commit(payload)``."""
        return GuardedAttempt(self.destination, key, attempt_id)

    def attempt_if(self, key: str, attempt_id: str, query: str, params: tuple = ()) -> tuple[tuple, GuardedAttempt | None]:
        """A read of the queue's own tables and this attempt's registration, in one round trip.

        For a queue whose tables are in the guard's database and that names an
        attempt by what they hold (pgqueuer: which pick of its row a run is).
        ``query`` is one SELECT of one row on the guard's connection (``?``
        placeholders, ``params``; name the queue's tables with their schema)
        whose first column, named ``register``, says whether this run is an
        attempt. Returns the row, and the attempt, registered already (entering
        it refuses an abandoned one as ``attempt`` does), or None when the read
        said no. Needs fence's SQL destination (``Guard.open``).
        """
        register_if = getattr(self.destination, "register_if", None)
        if register_if is None:
            raise BadInput(f"Guard.attempt_if needs fence's SQL destination (Guard.open), not {type(self.destination).__name__}")
        row, state = register_if(attempt_id, query, params)
        return row, None if state is None else GuardedAttempt(self.destination, key, attempt_id, registered=state)

    def read(self, query: str, params: tuple = ()) -> tuple | None:
        """One row of a read on the guard's own connection (``?`` placeholders): what a recipe checks once before it
        hands ``attempt_if`` a read of its queue's tables (that they are in this database). Fence's SQL destination only."""
        store = getattr(self.destination, "store", None)
        if store is None:
            raise BadInput(f"Guard.read needs fence's SQL destination (Guard.open), not {type(self.destination).__name__}")
        return store.one(query, params)

    # -- the recovery side -------------------------------------------------------------
    def recover(self, key: str, attempt_id: str) -> Decision:
        """Before a job whose lease ran out is retried: EXISTING (it is done) or UNUSED (retry it).

        One atomic abandon-unless-committed at the destination, then a lookup of
        the key: abandon-fenced's own probe and decide, the steps the models
        check. After UNUSED, ``attempt_id`` can never write.
        """
        evidence = POLICY.probe(self.destination, Reservation(f"{key}/recover", key, attempt_id, 0.0))
        return POLICY.decide(evidence)


@dataclass
class GuardedAttempt:
    """One attempt at one job: registered on entry, its one write through ``commit``."""

    destination: Destination
    key: str
    attempt_id: str
    result: CommitResult | None = None
    registered: AttemptState | None = None
    """The registration's answer when it was made already (``Guard.attempt_if``): entering does not register again."""

    def __enter__(self) -> GuardedAttempt:
        state, self.registered = self.registered, None
        if state is None:
            state = self.destination.register(self.attempt_id, self.key)
        if state is AttemptState.ABANDONED:
            raise Refused(
                f"attempt {self.attempt_id} at {self.key!r} was abandoned by a recovery before it "
                "started: a newer attempt owns the job", state,
            )
        return self

    def commit(self, payload: str) -> CommitResult:
        """Write the effect for the key: WRITTEN, or ALREADY_EXISTS (the same payload is there).

        Raises ``Refused`` if the attempt was abandoned or the key holds another payload.
        """
        result = self.destination.commit(self.attempt_id, self.key, payload)
        self.result = result
        if result in (CommitResult.ABANDONED, CommitResult.CONFLICT):
            raise Refused(f"attempt {self.attempt_id} at {self.key!r}: the destination answered {result.value}", result)
        return result

    def __exit__(self, *exc) -> None:
        return None
