"""The ledger and the destination on SQL: one implementation, two dialects.

Theory of operation
-------------------
The in-memory ``Ledger`` and ``TicketService`` are the specification. The SQL
classes here keep their state in tables and make every decision through the
same pure functions of the core (``next_state``, ``check_reserve``,
``check_owner``, ``judge_commit``), inside one write transaction per call, so a
refusal is the same exception with the same words and changes nothing.

What the database adds is what one process cannot give: several workers,
janitors and machines sharing one ledger.

* Writes serialise. SQLite: every write is ``BEGIN IMMEDIATE`` (the write lock
  is taken before anything is read, so a read never goes stale inside the
  transaction), in WAL mode with a busy timeout so readers never block and a
  second writer waits instead of failing. PostgreSQL: the rows a write decides
  on are locked (``FOR UPDATE``; a reserve locks the capacity row, which
  serialises reserves, so two workers cannot both take the last unit).
* The fence is the database's own UNIQUE constraint: with the fence guard on,
  an effect's ``fence_key`` is its key, and a second insert for the key does
  nothing (``ON CONFLICT DO NOTHING``) and is answered as a refusal, never as an
  error a retry would repeat. Without the fence ``fence_key`` is NULL, which a
  UNIQUE column allows any number of times.
* "Abandon this attempt unless it committed" is one upsert statement on the
  attempts table (the witness), so no commit can slip between the question and
  the tombstone; a commit takes the attempt's row first, so the two serialise.
* Round trips are the guard's price per job on PostgreSQL: an attempt's
  registration and an abandon are one statement each, run as their own
  transaction (no BEGIN, no COMMIT); a commit with the fence and the witness on
  first tries the one statement that writes, and only when that writes nothing
  (the attempt not in flight, or the fence refusing) runs the judged
  transaction that reads the key's first payload.
* One clock. Every method keeps the core's ``now`` argument (the models pass
  logical ticks); ``now=None`` means the database's clock, read inside the same
  transaction that writes the deadline or judges the expiry, so workers whose
  own clocks are skewed cannot disagree about a lease.
* Janitors claim. ``claim_expired`` moves expired leases in one statement
  (PostgreSQL ``FOR UPDATE SKIP LOCKED``; SQLite inside its immediate
  transaction) and tags each with the janitor that claimed it, so two janitors
  never scan the same lease; every move is a conditional UPDATE on the state it
  was decided from, so a stale settle is refused, never applied twice.

The store under both (dialects, schema, connection, transactions) is
``fence.backends._store``.
"""

from __future__ import annotations


from fence.model.destination import AttemptState, CommitResult, Effect, Guards, judge_commit, payloads_by_key
from fence.base.errors import BackendError, WitnessRequired
from fence.model.ledger import (
    TRANSITIONS,
    Move,
    Reservation,
    ReservationState,
    check_owner,
    check_reserve,
    next_state,
    reservations_picture,
)
from fence.backends._store import POSTGRES, SqlStore

EXPIRY_MOVES = frozenset({Move.EXPIRE_AND_HOLD, Move.EXPIRE_AND_RELEASE})
RESERVED = ReservationState.RESERVED.value
UNUSED = ReservationState.UNUSED


# -- the ledger ------------------------------------------------------------------------
_COLUMNS = "reservation_id, key, owner, deadline, whole_ticks, state"
_R_COLUMNS = ", ".join(f"r.{name}" for name in _COLUMNS.split(", "))


def _reservation(row: tuple) -> Reservation:
    reservation_id, key, owner, deadline, whole_ticks, state = row
    # The models' ticks are ints; keep them ints so sentences read "t=2", not "t=2.0".
    return Reservation(reservation_id, key, owner, int(deadline) if whole_ticks else deadline, ReservationState(state))


class SqlLedger:
    """fence.Ledger's interface on a SQL store (quota semantics; no ``slots``)."""

    SNAPSHOT_IS_COMPLETE = True
    """Its ``snapshot()`` holds everything that decides its next answers (``fence.model.drain.snapshot_is_complete``)."""

    slots = False

    def __init__(self, store: SqlStore, capacity: int) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a whole number of units >= 1, got {capacity!r}")
        store.setting("capacity", str(capacity))
        self.store = store
        self.capacity = capacity

    # -- reading ---------------------------------------------------------------
    def get(self, reservation_id: str) -> Reservation:
        row = self.store.one(f"SELECT {_COLUMNS} FROM fence_reservations WHERE reservation_id = ?", (reservation_id,))
        if row is None:
            raise KeyError(reservation_id)
        return _reservation(row)

    def reservations(self) -> list[Reservation]:
        return [_reservation(row) for row in self.store.rows(f"SELECT {_COLUMNS} FROM fence_reservations ORDER BY seq")]

    def current(self, key: str, *, lock: bool = False) -> Reservation | None:
        row = self.store.one(
            f"SELECT {_R_COLUMNS} FROM fence_keys k "
            "JOIN fence_reservations r ON r.reservation_id = k.current_id WHERE k.key = ?"
            + (self.store.dialect.lock_row if lock else ""),
            (key,),
        )
        return None if row is None else _reservation(row)

    def holds(self, reservation: Reservation) -> bool:
        return reservation.holds_unit

    @property
    def held(self) -> int:
        return self.store.one("SELECT COUNT(*) FROM fence_reservations WHERE state <> ?", (UNUSED.value,))[0]

    @property
    def free(self) -> int:
        return self.capacity - self.held

    @property
    def units_freed(self) -> dict[str, int]:
        """How many times each reservation returned its unit (must stay <= 1)."""
        return dict(self.store.rows("SELECT reservation_id, freed FROM fence_reservations WHERE freed > 0 ORDER BY seq"))

    def _now(self, now: float | None) -> tuple[str, tuple]:
        """A SQL expression for ``now``: the value given, or the database's clock."""
        return (self.store.dialect.clock, ()) if now is None else ("?", (now,))

    def expired(self, now: float | None = None) -> list[Reservation]:
        clock, params = self._now(now)
        return [
            _reservation(row)
            for row in self.store.rows(
                f"SELECT {_COLUMNS} FROM fence_reservations WHERE state = ? AND deadline <= {clock} ORDER BY seq",
                (RESERVED, *params),
            )
        ]

    # -- moving ----------------------------------------------------------------
    def reserve(self, key: str, owner: str, now: float | None, lease: float) -> Reservation:
        store = self.store
        with store.write():
            # Serialises reserves on PostgreSQL (SQLite's immediate transaction already does).
            store.one(f"SELECT value FROM fence_settings WHERE name = 'capacity'{store.dialect.lock_row}")
            check_reserve(key, owner, lease, self.capacity, self.free, self.current(key))
            if now is None:
                now = store.clock()  # inside the transaction that writes the deadline
            row = store.one("SELECT attempts FROM fence_keys WHERE key = ?", (key,))
            count = (row[0] if row else 0) + 1
            reservation = Reservation(f"{key}/r{count}", key, owner, now + lease)
            store.run(
                "INSERT INTO fence_keys (key, current_id, attempts) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET current_id = excluded.current_id, attempts = excluded.attempts",
                (key, reservation.reservation_id, count),
            )
            store.run(
                "INSERT INTO fence_reservations (reservation_id, key, owner, deadline, whole_ticks, state) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (reservation.reservation_id, key, owner, reservation.deadline,
                 isinstance(reservation.deadline, int), RESERVED),
            )
        return reservation

    def _move(self, reservation: Reservation, move: Move, claimed_by: str | None = None) -> Reservation:
        """Inside a write transaction: make ``move`` on the row as it was read, or refuse."""
        target = next_state(reservation, move)
        changed = self.store.run(
            "UPDATE fence_reservations SET state = ?, freed = freed + ?, claimed_by = COALESCE(?, claimed_by) "
            "WHERE reservation_id = ? AND state = ?",
            (target.value, int(target is UNUSED), claimed_by, reservation.reservation_id, reservation.state.value),
        )
        if changed != 1:  # the row moved after it was read: never expected under the locks taken
            raise BackendError(f"{move.value} on {reservation.reservation_id}: the row changed under a lock; report this")
        return Reservation(reservation.reservation_id, reservation.key, reservation.owner, reservation.deadline, target)

    def apply(self, reservation_id: str, move: Move) -> Reservation:
        """Make one move from the table on one reservation, or raise and change nothing."""
        with self.store.write():
            row = self.store.one(
                f"SELECT {_COLUMNS} FROM fence_reservations WHERE reservation_id = ?{self.store.dialect.lock_row}",
                (reservation_id,),
            )
            if row is None:
                raise KeyError(reservation_id)
            return self._move(_reservation(row), move)

    def owner_move(self, key: str, owner: str, move: Move) -> Reservation:
        """A worker's move, addressed by key: only the current owner may make it."""
        with self.store.write():
            current = self.current(key, lock=True)
            check_owner(key, owner, move, current)
            return self._move(current, move)

    def confirm(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM)

    def confirm_existing(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM_EXISTING)

    def fail(self, key: str, owner: str) -> Reservation:
        """The owner raised (``fence.Ledger.fail``): reserved -> outcome_unknown, owner-checked."""
        return self.owner_move(key, owner, Move.FAIL)

    def claim_expired(
        self, now: float | None, janitor: str, move: Move = Move.EXPIRE_AND_HOLD, limit: int = 100
    ) -> list[Reservation]:
        """Atomically make ``move`` on up to ``limit`` expired leases no other janitor claimed.

        Each returned reservation was moved by this call alone: a lease another
        janitor is claiming at the same moment is skipped (PostgreSQL: SKIP
        LOCKED; SQLite: the immediate transaction), one it already claimed is no
        longer reserved. ``now=None``: expiry judged on the database's clock.
        """
        if move not in EXPIRY_MOVES:
            raise ValueError(f"claim_expired makes an expiry move, not {move.value}")
        target = TRANSITIONS[ReservationState.RESERVED][move]
        clock, params = self._now(now)
        store = self.store
        # The leases are picked in a CTE evaluated once. Written as ``seq IN (SELECT ...
        # LIMIT ? FOR UPDATE SKIP LOCKED)``, PostgreSQL may run the subquery again per
        # row of a nested loop, locking and claiming more than ``limit`` (a known trap
        # of queue claims, and the likeliest cause of a test run that once ended with one
        # janitor holding all 200 leases and the other none).
        dialect = store.dialect
        with store.write():
            rows = store.rows(
                f"WITH picked AS{dialect.materialized} (SELECT seq FROM fence_reservations WHERE state = ? "
                f"AND deadline <= {clock} ORDER BY seq LIMIT ?{dialect.skip_locked}) "
                f"UPDATE fence_reservations SET state = ?, freed = freed + ?, claimed_by = ? "
                f"WHERE state = ? AND seq IN (SELECT seq FROM picked) "
                f"RETURNING seq, {_COLUMNS}",
                (RESERVED, *params, limit, target.value, int(target is UNUSED), janitor, RESERVED),
            )
        return [_reservation(row[1:]) for row in sorted(rows)]

    def claimed_by(self, reservation_id: str) -> str | None:
        """Which janitor claimed this lease (None: none did)."""
        return self.store.one("SELECT claimed_by FROM fence_reservations WHERE reservation_id = ?", (reservation_id,))[0]

    def snapshot(self) -> frozenset:
        """A hashable picture of the whole ledger, equal to fence.Ledger's for the same history."""
        return reservations_picture(self.reservations())


# -- the destination ---------------------------------------------------------------------
_REGISTER = ("INSERT INTO fence_attempts (attempt_id, state) VALUES (?, ?) ON CONFLICT (attempt_id) "
             "DO UPDATE SET state = fence_attempts.state RETURNING state")
"""An attempt's registration: in flight if unseen, else what is there, the state returned."""


class SqlDestination:
    """fence.Destination on a SQL store: effects with a UNIQUE fence, and an attempts witness."""

    SNAPSHOT_IS_COMPLETE = True
    """Its ``snapshot()`` holds everything that decides its next answers (``fence.model.drain.snapshot_is_complete``)."""

    def __init__(self, store: SqlStore, guards: Guards) -> None:
        store.setting("guards", guards.describe())
        self.store = store
        self.guards = guards

    def register(self, attempt_id: str, key: str) -> AttemptState | None:
        if not self.guards.witness:
            return None
        # Upsert that keeps what is there: one statement, and it returns the state.
        (state,) = self.store.one_alone(_REGISTER, (attempt_id, AttemptState.IN_FLIGHT.value))
        return AttemptState(state)

    def register_if(self, attempt_id: str, query: str, params: tuple = ()) -> tuple[tuple, AttemptState | None]:
        """A read of the caller's and ``register(attempt_id)``, made only if the read says so, in one round trip.

        ``query`` is one SELECT of one row on this database (``?`` placeholders
        for ``params``) whose first column, named ``register``, says whether to
        register. Returns the row and the registration's state (None: not
        registered). PostgreSQL: one statement, the registration a data-modifying
        CTE after the read (the same upsert as ``register``); SQLite: both in
        one write transaction. For a queue whose attempt is named by what its own
        tables hold (pgqueuer's picks of a row): no round trip of its own to read it.
        """
        if not self.guards.witness:
            raise WitnessRequired("register_if needs a destination with the witness guard on")
        if self.store.dialect is POSTGRES:
            row = self.store.one_alone(
                f"WITH asked AS ({query}), registered AS ("
                "INSERT INTO fence_attempts (attempt_id, state) SELECT ?, ? FROM asked WHERE asked.register "
                "ON CONFLICT (attempt_id) DO UPDATE SET state = fence_attempts.state RETURNING state) "
                "SELECT asked.*, (SELECT state FROM registered) FROM asked",
                (*params, attempt_id, AttemptState.IN_FLIGHT.value),
            )
            if row is None:
                raise BackendError(f"register_if: the read returned no row: {query}")
            return tuple(row[:-1]), None if row[-1] is None else AttemptState(row[-1])
        with self.store.write():
            row = self.store.one(query, params)
            if row is None:
                raise BackendError(f"register_if: the read returned no row: {query}")
            if not row[0]:
                return tuple(row), None
            (state,) = self.store.one(_REGISTER, (attempt_id, AttemptState.IN_FLIGHT.value))
            return tuple(row), AttemptState(state)

    def _first_payload(self, key: str) -> str | None:
        row = self.store.one("SELECT payload FROM fence_effects WHERE key = ? ORDER BY seq LIMIT 1", (key,))
        return None if row is None else row[0]

    def commit(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        if self._writes_in_one_statement():
            written = self._commit_in_one_statement(attempt_id, key, payload)
            if written is not None:
                return written
        return self._commit_judged(attempt_id, key, payload)

    def _writes_in_one_statement(self) -> bool:
        """PostgreSQL with the fence and the witness on, outside a caller's transaction: the one-statement commit."""
        store = self.store
        return (store.dialect is POSTGRES and self.guards.fence and self.guards.witness
                and not store.in_transaction())

    def _commit_in_one_statement(self, attempt_id: str, key: str, payload: str) -> CommitResult | None:
        """The commit that writes, in one round trip; None (nothing changed) for any other answer.

        One statement, so one transaction: the attempt's row goes in flight ->
        (the judge's) committed, or is created so if unseen, taking its lock as
        the full commit does; the effect goes in under the UNIQUE fence. When
        the attempt is not in flight (abandoned, committed, refused) the upsert
        changes nothing and no effect is written. When the key already holds an
        effect the fence raises a unique violation, which undoes the whole
        statement, the attempt's move included. Either way the full, judged
        commit runs next and gives the answer: the key's first payload is read
        only then. With the fence on, no effect for the key is exactly "no
        first payload", so what this writes is what ``judge_commit`` writes.
        """
        import psycopg

        result, witnessed = judge_commit(self.guards, AttemptState.IN_FLIGHT, None, payload)
        try:
            row = self.store.one(
                "WITH moved AS (INSERT INTO fence_attempts (attempt_id, state) VALUES (?, ?) "
                "ON CONFLICT (attempt_id) DO UPDATE SET state = excluded.state WHERE fence_attempts.state = ? "
                "RETURNING 1) "
                "INSERT INTO fence_effects (key, attempt_id, payload, fence_key) SELECT ?, ?, ?, ? FROM moved "
                "RETURNING seq",
                (attempt_id, witnessed.value, AttemptState.IN_FLIGHT.value, key, attempt_id, payload, key),
            )
        except psycopg.errors.UniqueViolation:
            return None  # another attempt's effect holds the key: nothing of this statement stayed
        return result if row is not None else None

    def _commit_judged(self, attempt_id: str, key: str, payload: str) -> CommitResult:
        """The commit as one transaction of several statements, every answer decided by ``judge_commit``."""
        store, guards = self.store, self.guards
        with store.write():
            known = None
            if guards.witness:
                # Take the attempt's row first (creating it in flight if unseen): on
                # PostgreSQL that locks it, so an abandon waits for this commit.
                (state,) = store.one(
                    "INSERT INTO fence_attempts (attempt_id, state) VALUES (?, ?) ON CONFLICT (attempt_id) "
                    "DO UPDATE SET state = fence_attempts.state RETURNING state",
                    (attempt_id, AttemptState.IN_FLIGHT.value),
                )
                known = AttemptState(state)
            if guards.fingerprint and not guards.fence and store.dialect is POSTGRES:
                # No constraint to lean on: serialise this key's commits so two
                # payloads cannot both pass the fingerprint check.
                store.run("SELECT pg_advisory_xact_lock(hashtext(?))", (key,))
            result, witnessed = judge_commit(guards, known, self._first_payload(key), payload)
            if result is CommitResult.WRITTEN:
                inserted = store.one(
                    "INSERT INTO fence_effects (key, attempt_id, payload, fence_key) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING RETURNING seq",
                    (key, attempt_id, payload, key if guards.fence else None),
                )
                if inserted is None:
                    # The UNIQUE fence refused: a concurrent commit for the key got in first.
                    result, witnessed = judge_commit(guards, known, self._first_payload(key), payload)
            if witnessed is not None:
                store.run("UPDATE fence_attempts SET state = ? WHERE attempt_id = ?", (witnessed.value, attempt_id))
        return result

    def lookup(self, key: str) -> bool:
        return self.store.one("SELECT 1 FROM fence_effects WHERE key = ? LIMIT 1", (key,)) is not None

    def attempt_state(self, attempt_id: str) -> AttemptState | None:
        if not self.guards.witness:
            return None
        row = self.store.one("SELECT state FROM fence_attempts WHERE attempt_id = ?", (attempt_id,))
        return None if row is None else AttemptState(row[0])

    def abandon_unless_committed(self, attempt_id: str) -> AttemptState:
        if not self.guards.witness:
            raise WitnessRequired("abandon_unless_committed needs a destination with the witness guard on")
        # One statement: a tombstone if unseen, ABANDONED unless COMMITTED, the result returned.
        (state,) = self.store.one_alone(
            "INSERT INTO fence_attempts (attempt_id, state) VALUES (?, ?) ON CONFLICT (attempt_id) "
            "DO UPDATE SET state = CASE WHEN fence_attempts.state = ? THEN fence_attempts.state "
            "ELSE excluded.state END RETURNING state",
            (attempt_id, AttemptState.ABANDONED.value, AttemptState.COMMITTED.value),
        )
        return AttemptState(state)

    def effects(self) -> list[Effect]:
        rows = self.store.rows("SELECT key, attempt_id, payload FROM fence_effects ORDER BY seq")
        # Numbered by landing order: a refused insert may have used up an id.
        return [Effect(key, attempt, payload, number) for number, (key, attempt, payload) in enumerate(rows, 1)]

    def snapshot(self) -> tuple:
        """The same picture as TicketService.snapshot() for the same history."""
        attempts = self.store.rows("SELECT attempt_id, state FROM fence_attempts")
        return (payloads_by_key(self.effects()), frozenset((attempt, state) for attempt, state in attempts))
