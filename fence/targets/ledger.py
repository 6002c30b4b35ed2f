"""``TargetLedger``: fence's ledger protocol from a target's own calls, and the "accepted" helpers.

The protocol, what each member must do and why, is ``fence.targets.protocol``'s
documentation; this module holds the base class a target's ledger subclasses.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from fence.base.errors import IllegalMove, PluginBroken, StaleAttempt
from fence.model.ledger import HOLDING_STATES, Move, Reservation, ReservationState
from fence.model.restore import Restorable
from fence.targets.model_time import ModelTime
from fence.targets.taken import Taken, TakenReservation, declares_snapshot, ranked_ids, record_snapshot

T = TypeVar("T")
CONFIRMS = (Move.CONFIRM, Move.CONFIRM_EXISTING)
"""The owner's moves: a worker's completion, reporting a new effect or one that existed."""
EXPIRIES = (Move.EXPIRE_AND_RELEASE, Move.EXPIRE_AND_HOLD)
"""The janitor's moves on an expired lease: the system's own recovery, or the guard's hold."""
EXISTING_MOVES = frozenset({Move.CONFIRM_EXISTING, Move.SETTLE_EXISTING})
"""The moves after which a reservation is ``confirmed_existing`` (a system keeps no such result)."""


# -- accepted -------------------------------------------------------------------------------
def refused_unless(moved: bool, why: str) -> None:
    """A system that refuses nothing: the call is accepted only if it ``moved`` the system's state."""
    if not moved:
        raise IllegalMove(why)


def only_if_it_moves(read: Callable[[], object], call: Callable[[], T], why: str) -> T:
    """Make ``call``; ``IllegalMove(why)`` unless ``read()`` answers differently after it than before.

    For a library whose stale ack or completion returns as quietly as a good
    one: what it changed is the only word on whether it was accepted.
    """
    before = read()
    result = call()
    refused_unless(read() != before, why)
    return result


@contextmanager
def refused_by(errors: type[Exception] | tuple[type[Exception], ...], why: str,
               words: Callable[[Exception], str] = str) -> Iterator[None]:
    """A system that refuses by raising: one of its ``errors`` in the block is ``IllegalMove`` saying ``why``,
    then the library's own ``words`` for it (by default the error's text)."""
    try:
        yield
    except errors as error:
        raise IllegalMove(f"{why}: {words(error)}") from None


# -- the ledger -----------------------------------------------------------------------------
class TargetLedger(Restorable):
    """fence's ledger protocol from a target's records, its ``_state`` and its expiry query (see the module doc).

    It is made as ``Ledger(session, capacity, guarded=...)``: its ``time`` is the
    session's (``images.RedisSession`` and ``images.PostgresSession`` keep one),
    and it adopts the server as the session holds it (``session.restorer``), so a
    subclass needs no constructor for state of its own declared in ``STATE`` as
    ``{name: type}``; one with a constructor calls ``super().__init__(session,
    capacity, guarded=guarded)`` first and names that state in ``STATE``. A subclass implements ``_take``, ``_state``,
    ``_past_lease``, ``_confirm``, ``_fail``, the janitor's ``_release`` /
    ``_hold`` / ``_settle`` its rows make, and ``snapshot`` unless the default
    fits; ``reserve`` and ``apply`` (or ``_records`` and ``_move_clock``) only
    where the defaults do not fit. ``dump`` and ``load`` are the session's
    unless it overrides them.
    """

    SHARED = ("_session",)

    def __init__(self, session, capacity: int, *, guarded: bool, time: ModelTime | None = None) -> None:
        self.capacity = capacity
        self.guarded = guarded
        if time is None and getattr(session, "time", None) is None:
            raise PluginBroken(f"{type(self).__name__} has no model time: pass time=ModelTime(...) to "
                               "TargetLedger's constructor, or give its session a time (RedisSession's has one)")
        self.time = session.time if time is None else time
        self._session = session
        self._now = 0.0
        """The model time the system's stored instants stand at (moved only when asked)."""
        self._lease: float | None = None
        """The lease every reservation is judged by, in ticks (one per ledger)."""
        self._count_by_key: dict[str, int] = {}
        self._published_keys: set[str] = set()
        """The keys whose job a reserve published (``_publish_once``)."""
        self._taken_by_id: dict[str, TakenReservation] = {}
        """Each reservation taken, by id, in order (what ``_records()`` returns unless a subclass keeps its own)."""
        self._finished_by: dict[object, Move] = {}
        """Which move finished each job (``_finished``): many systems keep no word of it."""
        self._held: set[str] = set()
        """Reservations the guarded recovery took from their worker (``EXPIRE_AND_HOLD``), where the system
        itself shows them still running: reported ``outcome_unknown``."""
        self._failures_caught: set[str] = set()
        """Reservations whose task raised into its guard's wrapper, not yet settled (``_fail_through_guard``).

        Part of the ledger's state: a subclass's ``snapshot()`` includes ``failures_caught()``."""
        self._answers: dict[str, object] = {}
        """What the server answered since the last call that may change it (``_answered``)."""
        for name, empty in (self.STATE.items() if isinstance(self.STATE, dict) else ()):
            setattr(self, name, empty())
        if getattr(session, "restorer", None) is not None:  # the server as it is now: emptied for this world
            self._restoring(session.restorer)

    def _restoring(self, restorer) -> None:
        """Adopt the server's state as this ledger's image, once: the constructor does it (a subclass written
        before it did may call it again at the end of its own, to no effect)."""
        if getattr(self, "_restorer", None) is not restorer:
            super()._restoring(restorer)

    # -- what a subclass gives ------------------------------------------------------------
    JANITOR = "this row's janitor"
    """Who makes the janitor's moves, in refusals."""
    EITHER_RECOVERY = False
    """Does each row take both recoveries? By default the shipped row takes only the system's own
    (``EXPIRE_AND_RELEASE``) and the guarded row only the guard's (``EXPIRE_AND_HOLD`` and the settles);
    True where the system's calls serve both on either row (a test may drive the guard's policy on the
    shipped storage)."""
    GUARD_CATCHES_FAILURES = False
    """True where a guarded row's task catches its own failure in the guard's wrapper (every shipped row):
    ``fail`` on the guarded row is then ``_fail_through_guard`` and ``_fail`` is only the shipped row's
    handler. False: ``_fail`` answers on both rows (a guarded system whose own handler runs)."""
    JOB = "reservation_id"
    """The field of a record that names the system's job: a reservation whose job a newer one took is
    ``unused`` (``_newest``). By default each reservation is its own job."""
    UNEXPIRED_BECAUSE = "the system's expiry query does not list it"
    """Why an expiry is refused, in the system's words, formatted with the ``record`` (``"{record.worker_id}
    still beats"``); a message that needs more than the record is an ``_unexpired_because`` of your own."""
    EXPIRES_AT_DEADLINE = False
    """True for a system that keeps no instant its expiry compares, where whatever declares a worker dead
    decides (``_past_deadline``, at fence's clock): the default ``snapshot()`` then holds which records are
    past their deadline, since that decides ``expired`` and no image says it."""
    STATE: tuple[str, ...] | dict[str, Callable[[], object]] = ()
    """The names of the subclass's own attributes that decide its next answers (a dict or set of what it
    published, released, re-picked): the default ``snapshot()`` holds each as a sorted value. As a dict
    (``{"_released": set}``) the constructor makes each attribute too, empty, from its type."""

    def _records(self) -> dict[str, TakenReservation]:
        return self._taken_by_id

    def _take(self, key: str, owner: str, reservation_id: str, deadline: float) -> TakenReservation:
        """A worker taking the key's job with the system's own calls (publishing it first when there is none):
        the record of what it took. ``IllegalMove`` when the system gives it nothing."""
        raise NotImplementedError(f"{type(self).__name__} takes no job: implement _take, or reserve itself")

    def _release(self, record: TakenReservation) -> None:
        """As shipped: the system's own recovery of the expired ``record`` (``EXPIRE_AND_RELEASE``)."""
        raise IllegalMove(f"{type(self).__name__} has no release of an expired lease")

    def _hold(self, record: TakenReservation) -> None:
        """Guarded: the recovery taking the expired ``record`` from its worker (``EXPIRE_AND_HOLD``) with the
        system's calls. By default only fence's record (``_held``): the system has no such state."""

    def _settle(self, record: TakenReservation, move: Move) -> None:
        """Guarded: the recovery's settle of ``record`` (``SETTLE_EXISTING`` or ``SETTLE_UNUSED``) with the
        system's calls, for a job the recovery holds or its guard's wrapper caught; ``IllegalMove`` to refuse.
        A caught failure stays in ``failures_caught()`` unless the subclass discards it here."""
        raise IllegalMove(f"{type(self).__name__} has no settle")

    def _state(self, record: TakenReservation) -> ReservationState:
        raise NotImplementedError

    def _past_lease(self, record: TakenReservation) -> bool:
        """Does the system's own expiry query list this reservation's job (with its worker still on it)?"""
        raise NotImplementedError

    def _confirm(self, record: TakenReservation, move: Move) -> TakenReservation:
        """The worker's completion call for ``record``; returns the record whose state to report."""
        raise NotImplementedError

    def _fail(self, record: TakenReservation) -> TakenReservation:
        """The system's failure handler for ``record``'s job, as its worker runs it when the task raises.

        Returns the record whose state to report; ``IllegalMove`` to refuse. No
        default: a handler that silently succeeded would tell the world the
        system did something it never did.
        """
        raise NotImplementedError(
            f"{type(self).__name__} states no failure handler: implement _fail(record) with what the system does "
            "when a worker's task raises (retry the job, delete its record, mark it failed), or raise IllegalMove "
            "there if the system takes no failure reports"
        )

    def snapshot(self) -> tuple:
        """By default: the records (``records_snapshot``), the session's ``snapshot`` of the image (after
        ``_canonical``; a record's ``library_id`` fields and the image renamed alike, records first), each
        ``STATE`` attribute sorted, which records are past their deadline (``EXPIRES_AT_DEADLINE``) and
        ``bookkeeping()``. Override it where equal states differ in more than that or the session has none."""
        state = tuple(tuple(sorted(value.items() if isinstance(value, dict) else value))
                      for value in (getattr(self, name) for name in self.STATE))
        if self.EXPIRES_AT_DEADLINE:
            state += (tuple(self._past_deadline(record) for record in self._records().values()),)
        canonical = ranked_ids() if any(map(declares_snapshot, self._records().values())) else None
        records = self.records_snapshot(canonical)  # first: the ids' ranks follow fence's records
        renamed = {} if canonical is None else {"canonical": canonical}
        return (records, self._session.snapshot(self._canonical(self.image()), self._now, **renamed), state,
                self.bookkeeping())

    def records_snapshot(self, canonical: Callable[[object], object] | None = None) -> tuple:
        """The records as a snapshot holds them, in order (``taken.record_snapshot``): each record itself, or,
        where its class declares fields, their values with each ``library_id`` renamed by ``canonical``."""
        rename = canonical or (lambda value: value)
        return tuple(record_snapshot(record, rename) for record in self._records().values())

    def _canonical(self, image: object) -> object:
        """``image`` without what differs between equal states and the session's snapshot keeps (instants in
        values, say): what the default ``snapshot()`` hands the session. By default the image itself."""
        return image

    def _fail_through_guard(self, record: TakenReservation) -> TakenReservation:
        """A guarded task's failure, caught by the guard's wrapper instead of the library's handler.

        Refused (``IllegalMove``) unless the reservation is still ``reserved``:
        once the recovery holds it, or it is finished, the worker's report has
        nothing of its own to act on. Accepted, it is ``outcome_unknown`` until
        the janitor's settle (see the module doc); the system is not called.
        """
        state = self._reservation(record).state
        if state is not ReservationState.RESERVED:
            raise IllegalMove(
                f"fail on {record.reservation_id}: it is {state.value}; the guard's wrapper settles only a job "
                "its worker still holds"
            )
        self._failures_caught.add(record.reservation_id)
        return record

    def failures_caught(self) -> tuple[str, ...]:
        """The caught failures awaiting their settle, for ``snapshot()``."""
        return tuple(sorted(self._failures_caught))

    def _move_clock(self, ticks: float) -> None:
        """Move the system's stored instants ``ticks`` back (its clock moves on), marked as a write: by default
        the session's ``move_time`` (``images.RedisSession``'s and ``images.PostgresSession``'s have one); nothing
        where the session keeps no instant (``keeps_instants`` False: a ``PostgresTables`` with none ``timed``)."""
        if getattr(self._session, "keeps_instants", True):
            self._writing()
            self._session.move_time(ticks)

    # -- the server ----------------------------------------------------------------------------
    def dump(self) -> object:
        """Everything this ledger keeps on the server, as one value: the session's ``dump()`` by default."""
        return self._session.dump()

    def load(self, image: object) -> None:
        """Make the server hold exactly ``image``: the session's ``load(image)`` by default."""
        self._session.load(image)

    def _reading(self) -> None:
        """Before a call that reads the server: it holds this copy's image."""
        self._restorer.claim(self)

    def _writing(self) -> None:
        """Before a call that may change the server: it holds this copy's image, to be dumped again."""
        self._restorer.claim(self)
        self._restorer.changing(self)
        self._forget_reads()

    def _forget_reads(self) -> None:
        """Drop what the server answered before (``_answered``'s; a subclass that caches reads elsewhere
        clears them too)."""
        self._answers.clear()

    def _answered(self, question: str, read: Callable[[], object]) -> object:
        """``read()``'s answer, read once until the next write (``_writing`` forgets it): a target whose
        states take a query per reservation asks it once per world step."""
        if question not in self._answers:
            self._reading()
            self._answers[question] = read()
        return self._answers[question]

    def _moved(self, read: Callable[[], object], call: Callable[[], object], why: str,
               finishing: tuple[object, Move] | None = None) -> object:
        """The system's ``call`` as a write, accepted only if ``read()`` answers differently after it
        (``only_if_it_moves``): for a library whose stale call returns as quietly as a good one. With
        ``finishing=(job, move)``, an accepted call is the ``move`` that finished ``job`` (``_finished``)."""
        self._writing()

        def writing():
            try:
                return call()
            finally:
                self._forget_reads()

        result = only_if_it_moves(read, writing, why)
        if finishing is not None:
            self._finished(*finishing)
        return result

    # -- time ----------------------------------------------------------------------------------
    def _move_time(self, now: float | None) -> None:
        """The model's clock is at ``now`` (ticks): move the system's stored instants back to match."""
        if now is None or now <= self._now:
            return
        self._move_clock(now - self._now)
        self._now = now

    def _judged_by(self, lease: float) -> None:
        if self._lease is not None and lease != self._lease:
            raise ValueError(f"this ledger judges every lease as {self._lease} ticks, not {lease}")
        self._lease = lease

    def _publish_once(self, key: str, publish: Callable[[], object]) -> None:
        """The first reserve of ``key`` publishes its job (``publish()``, a write); a later one takes what the
        system gave back (a retry's message, a requeued job), and only a new job published again would not."""
        if key not in self._published_keys:
            self._writing()
            publish()
            self._published_keys.add(key)

    def _past_deadline(self, record: TakenReservation) -> bool:
        """Has ``record``'s lease run out at the ledger's clock (``ModelTime.timeout`` after it was taken)? For a
        system that keeps no instant to compare: the word of whatever declares its worker dead."""
        if self._lease is None:
            return False
        taken_at = record.deadline - self._lease
        return self._now - taken_at >= self.time.timeout(self._lease) / self.time.tick_seconds

    def _next_id(self, key: str) -> str:
        """The id the next reservation of ``key`` gets (``job1/r2``); counted once it is taken."""
        return f"{key}/r{self._count_by_key.get(key, 0) + 1}"

    def _taken(self, key: str) -> None:
        self._count_by_key[key] = self._count_by_key.get(key, 0) + 1

    def _finished(self, job: object, move: Move) -> None:
        """Remember that ``move`` finished ``job`` (see ``_confirmed`` and ``_finished_state``); the first
        such move stays (a system that refuses nothing may take a second one that changes nothing of it)."""
        self._finished_by.setdefault(job, move)

    def _confirmed(self, job: object) -> ReservationState:
        """A job the system reports done: ``confirmed_existing`` if the move that finished it said the effect
        existed (``EXISTING_MOVES``), else ``confirmed``."""
        existing = self._finished_by.get(job) in EXISTING_MOVES
        return ReservationState.CONFIRMED_EXISTING if existing else ReservationState.CONFIRMED

    def _finished_state(self, job: object) -> ReservationState:
        """A job the system reports finished without saying how: what fence's own record of the finishing move
        says (a confirm or an existing effect's settle: confirmed; a failure, an abandon, none: ``unused``)."""
        move = self._finished_by.get(job)
        if move in EXISTING_MOVES or move is Move.CONFIRM:
            return self._confirmed(job)
        return ReservationState.UNUSED

    def finished_moves(self) -> tuple[tuple[object, str], ...]:
        """``_finished_by`` as a value, for ``snapshot()``."""
        return tuple(sorted((job, move.value) for job, move in self._finished_by.items()))

    def published(self) -> tuple[str, ...]:
        """The keys whose job a reserve published (``_publish_once``), for ``snapshot()``."""
        return tuple(sorted(self._published_keys))

    def bookkeeping(self) -> tuple:
        """What of the ledger's state this class keeps, as a value for ``snapshot()``: the finishing moves,
        the held reservations, the caught failures, the reservations counted per key, the lease and the keys
        published."""
        return (self.finished_moves(), tuple(sorted(self._held)), self.failures_caught(),
                tuple(sorted(self._count_by_key.items())), self._lease, self.published())

    # -- reading ---------------------------------------------------------------------------
    def _newest(self, record: TakenReservation) -> TakenReservation:
        """The newest reservation of ``record``'s job (``JOB``): the one the system's answers about it concern."""
        job = getattr(record, self.JOB)
        return [r for r in self._records().values() if getattr(r, self.JOB) == job][-1]

    def _reservation(self, record: TakenReservation) -> Reservation:
        if self._newest(record) is not record:
            state = ReservationState.UNUSED  # its job was taken again by a newer reservation
        else:
            state = self._state(record)
            if state is ReservationState.RESERVED and (record.reservation_id in self._failures_caught
                                                      or record.reservation_id in self._held):
                state = ReservationState.OUTCOME_UNKNOWN  # the system still runs it; the recovery or the guard holds it
        return Reservation(record.reservation_id, record.key, record.owner, record.deadline, state)

    def get(self, reservation_id: str) -> Reservation:
        return self._reservation(self._records()[reservation_id])

    def record(self, reservation_id: str) -> TakenReservation:
        """fence's record of that reservation, as ``_take`` made it (which message, row or claim it took)."""
        return self._records()[reservation_id]

    def reservations(self) -> list[Reservation]:
        return [self._reservation(record) for record in self._records().values()]

    def current(self, key: str) -> Reservation | None:
        mine = [record for record in self._records().values() if record.key == key]
        return self._reservation(mine[-1]) if mine else None

    @property
    def held(self) -> int:
        return sum(1 for r in self.reservations() if r.state in HOLDING_STATES)

    @property
    def free(self) -> int:
        return self.capacity - self.held

    def expired(self, now: float | None = None) -> list[Reservation]:
        """The reservations the system's expiry query lists that are still reserved."""
        self._move_time(now)
        return [
            r for record in self._records().values()
            if self._lease is not None and self._past_lease(record)
            and (r := self._reservation(record)).state is ReservationState.RESERVED
        ]

    # -- the moves ---------------------------------------------------------------------------
    def reserve(self, key: str, owner: str, now: float | None, lease: float) -> Reservation:
        """A worker takes the key's job (``_take``) at ``now``, for a lease of ``lease`` ticks."""
        self._judged_by(lease)
        self._move_time(now)
        record = self._take(key, owner, self._next_id(key), (now or 0) + lease)
        self._taken(key)
        self._records()[record.reservation_id] = record
        return self._reservation(record)

    def apply(self, reservation_id: str, move: Move) -> Reservation:
        """A janitor's move with the system's recovery: the row's expiry (``_release`` as shipped, ``_hold``
        guarded) on a reserved lease the system's expiry query lists, or a guarded settle (``_settle``)."""
        record = self._records()[reservation_id]
        either = self.EITHER_RECOVERY
        if move in (EXPIRIES if either else (Move.EXPIRE_AND_HOLD,) if self.guarded else (Move.EXPIRE_AND_RELEASE,)):
            refused_unless(self._reservation(record).state is ReservationState.RESERVED and self._past_lease(record),
                           f"{move.value} on {reservation_id}: {self._unexpired_because(record)}")
            if move is Move.EXPIRE_AND_HOLD:
                self._hold(record)
                self._held.add(reservation_id)
            else:
                self._release(record)
        elif move in (Move.SETTLE_EXISTING, Move.SETTLE_UNUSED) and (self.guarded or either):
            self._settle(record, move)
        else:
            raise IllegalMove(f"{move.value} on {reservation_id}: not a move of {self.JANITOR} "
                              f"({'guarded' if self.guarded else 'as shipped'})")
        return self._reservation(self._newest(record))

    def _unexpired_because(self, record: TakenReservation) -> str:
        """Why an expiry of ``record`` is refused, in the system's words: ``UNEXPIRED_BECAUSE`` by default."""
        return self.UNEXPIRED_BECAUSE.format(record=record)

    def _given(self, key: str, owner: str, what: str) -> TakenReservation:
        """The newest reservation ``owner`` took of ``key``; StaleAttempt if it was never given the key's job."""
        mine = [r for r in self._records().values() if r.key == key and r.owner == owner]
        if not mine:
            raise StaleAttempt(f"{what} {key!r} by {owner!r}: it was never given a job for that key")
        return mine[-1]

    def owner_move(self, key: str, owner: str, move: Move) -> Reservation:
        """The worker's completion on the job it was given (``_confirm``); a stranger gets StaleAttempt.

        Reported is the newest reservation of the job the call reached: a stale
        worker's completion that lands on a retry's job reports the retry's.
        """
        if move is Move.FAIL:
            return self.fail(key, owner)
        if move not in CONFIRMS:
            raise IllegalMove(f"{move.value} is the janitor's move, not an owner's")
        record = self._given(key, owner, move.value)
        return self._reservation(self._newest(self._confirm(record, move) or record))

    def fail(self, key: str, owner: str) -> Reservation:
        """The worker's task raised: the system's failure handler on the job it was given (``_fail``).

        A worker that never held the key gets StaleAttempt; whether the system
        lets this worker's job fail is the handler's to say (``IllegalMove``).
        Reported as ``owner_move`` reports.
        """
        record = self._given(key, owner, "fail")
        if self.guarded and self.GUARD_CATCHES_FAILURES:
            return self._reservation(self._newest(self._fail_through_guard(record)))
        return self._reservation(self._newest(self._fail(record) or record))

    def confirm(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM)

    def confirm_existing(self, key: str, owner: str) -> Reservation:
        return self.owner_move(key, owner, Move.CONFIRM_EXISTING)



__all__ = ["CONFIRMS", "EXISTING_MOVES", "EXPIRIES", "Taken", "TakenReservation", "TargetLedger",
           "only_if_it_moves", "refused_by", "refused_unless"]
