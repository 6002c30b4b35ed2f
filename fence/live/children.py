"""The child side of a process run: a worker or a janitor, as its own OS process on the database.

Theory of operation
-------------------
Every worker and janitor is an OS process that opens the backend URL itself
(SQLite file or PostgreSQL), started by a forkserver that has this module
imported (``fence.live.hands``), so a child is ready in milliseconds and
inherits no database connection. The entry points ``worker_main`` and
``janitor_main`` stay module-level functions for that reason. A child owns no
policy logic: a janitor is ``fence.Janitor`` with a policy from
``fence.POLICIES`` over the backend's ledger and destination, and a worker
makes the same calls as a ``fence.live.threads.ThreadRun`` thread.

* Each child talks to the parent over one pipe: it reports what it did as a
  record of ``fence.live.messages`` (with its CLOCK_MONOTONIC time) and the
  parent sends it orders (``RunAttempt``, ``Stop``).
* A crash point is reached, reported (``AtCrashPoint``), and then the worker
  blocks reading its pipe; the parent kills it there. ``before-effect``: work
  done, no commit sent. ``in-flight``: the commit's statements ran inside its
  open transaction and COMMIT was not sent. ``after-effect``: the commit
  returned, the confirm not sent.
* Lease deadlines and expiry are judged on the database's clock (``now=None``)
  in every process; the janitors claim expired leases (``Janitor.claim``), so
  two janitors never settle the same reservation.
* A database error (a dropped connection, a server restart) is never taken for
  a refusal: the process reopens the backend with backoff. If the error hit a
  commit, the worker cannot know whether it landed, so it stops the attempt and
  leaves it to the janitor, exactly as if it had crashed there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from typing import Any, Callable, Iterator

from fence.model.destination import AttemptState
from fence.base.errors import BackendError, CapacityExhausted, IllegalMove, StaleAttempt
from fence.model.janitor import Janitor
from fence.model.ledger import ReservationState
from fence.model.observer import ObservedDestination
from fence.model.policies import POLICIES, Decision
from fence.model.worker import CONFIRM_MOVES
from fence.backends import open_backend
from fence.live.facts import SETTLED
from fence.live.messages import (
    AbandonAnswered,
    Adopted,
    AtCrashPoint,
    Committed,
    Committing,
    Confirming,
    Done,
    Expiry,
    Hold,
    Ready,
    Registered,
    Report,
    Reserved,
    RunAttempt,
    Settle,
    Stop,
)


def _database_errors() -> tuple[type[BaseException], ...]:
    """What a lost connection or a restarting server raises (never a refusal)."""
    errors: list[type[BaseException]] = [sqlite3.OperationalError]
    try:
        import psycopg
    except ImportError:
        pass
    else:
        errors += [psycopg.OperationalError, psycopg.InterfaceError]
    return tuple(errors)


DATABASE_ERRORS = _database_errors()


class Link:
    """A child's end of its pipe: send reports, wait for orders."""

    def __init__(self, connection) -> None:
        self.connection = connection

    def send(self, report: Report) -> None:
        self.connection.send(report)

    def order(self):
        return self.connection.recv()

    def stop_asked(self) -> bool:
        return self.connection.poll() and isinstance(self.connection.recv(), Stop)

    def wait_at(self, point: str) -> None:
        """Report a crash point and wait there: the parent kills us before any ``Proceed``."""
        self.send(AtCrashPoint(point))
        self.order()


class Reconnecting:
    """A backend that is reopened, with backoff, after a database error."""

    def __init__(self, url: str, capacity: int, policy_name: str, *, reset: bool = False,
                 give_up_after: float = 60.0) -> None:
        self.url, self.capacity, self.guards = url, capacity, POLICIES[policy_name].guards
        self.give_up_after = give_up_after
        self.reconnects = 0
        self.backend = None
        if reset:  # the parent: first open fails fast, one line, if the URL is wrong
            self.backend = open_backend(url, capacity=capacity, guards=self.guards, reset=True)
        else:
            self.reopen()

    def reopen(self) -> None:
        if self.backend is not None:
            with contextlib.suppress(Exception):
                self.backend.close()
            self.reconnects += 1
        deadline, pause = time.monotonic() + self.give_up_after, 0.02
        while True:
            try:
                self.backend = open_backend(self.url, capacity=self.capacity, guards=self.guards)
                return
            except (*DATABASE_ERRORS, BackendError):  # BackendError here: cannot reach it (yet)
                if time.monotonic() > deadline:
                    raise
                time.sleep(pause)
                pause = min(0.5, pause * 2)

    def retry(self, call: Callable[[Any], Any]) -> Any:
        """``call(backend)``, reopening and calling again after a database error (idempotent calls only)."""
        while True:
            try:
                return call(self.backend)
            except DATABASE_ERRORS:
                self.reopen()

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()


@contextlib.contextmanager
def _held_open(store, link: Link) -> Iterator[None]:
    """Make the next write transaction stop after its statements, before COMMIT, and report."""
    original = store.write

    @contextlib.contextmanager
    def write():
        with original():
            yield
            link.wait_at("in-flight")  # the parent kills us here, inside the transaction

    store.write = write
    try:
        yield
    finally:
        del store.write


def attempt(db: Reconnecting, link: Link, order: RunAttempt) -> None:
    """One attempt, as a ``ThreadRun`` runs it on a thread: reserve, register, work, commit, confirm.

    Reports ``Reserved``, ``Registered``, ``Committing``, ``Committed``, then
    ``Done`` with what the confirm did (or ``AtCrashPoint``, and waits to be killed).
    """
    key, attempt_id, crash = order.key, order.attempt_id, order.crash
    asked = time.monotonic()
    while True:
        began = time.monotonic()
        try:
            reservation = db.backend.ledger.reserve(key, attempt_id, None, order.lease)
            break
        except CapacityExhausted:
            time.sleep(0.005)
        except IllegalMove as refusal:  # the key is still held by an older attempt
            link.send(Done("reserve refused", reason=str(refusal)))
            return
        except DATABASE_ERRORS:
            db.reopen()
            current = db.retry(lambda b: b.ledger.current(key))
            if current is not None and current.owner == attempt_id:
                reservation = current
                break  # the reserve landed before the connection dropped
    link.send(Reserved(key, reservation.reservation_id, reservation.deadline,
                       latency=time.monotonic() - began, waited=time.monotonic() - asked))
    db.retry(lambda b: b.destination.register(attempt_id, key))
    link.send(Registered())
    time.sleep(order.work)
    if crash == "before-effect":
        link.wait_at(crash)
    payload = f"ticket for {key}"
    link.send(Committing(payload))
    try:
        if crash == "in-flight":
            with _held_open(db.backend.store, link):
                result = db.backend.destination.commit(attempt_id, key, payload)
        else:
            result = db.backend.destination.commit(attempt_id, key, payload)
    except DATABASE_ERRORS as error:
        # Did it land? Nobody here can know: stop, and leave the lease to the janitor.
        link.send(Done("commit unknown", reason=type(error).__name__))
        db.reopen()
        return
    link.send(Committed(result))
    if crash == "after-effect":
        link.wait_at(crash)
    move = CONFIRM_MOVES.get(result)
    if move is None:  # a refusal: give up (fence.model.worker's answer-to-confirm rule)
        link.send(Done("gave up", reason=result.value))
        return
    link.send(Confirming())  # if we are killed before the answer, the parent knows a confirm may have landed
    while True:
        try:
            moved = db.backend.ledger.owner_move(key, attempt_id, move)
            link.send(Done(moved.state.value))
            return
        except (StaleAttempt, IllegalMove) as refusal:
            link.send(Done("confirm refused", reason=str(refusal)))
            return
        except DATABASE_ERRORS:
            db.reopen()
            current = db.retry(lambda b: b.ledger.current(key))
            if current is not None and current.owner == attempt_id and current.state in SETTLED:
                # Settled, by our confirm or by a janitor's settle: the parent tells which.
                link.send(Done(current.state.value, reconnected=True))
                return


def child_life(target, *args) -> None:
    """A child's life: ``target``, deaf to SIGINT (a terminal's Ctrl-C reaches the whole process group;
    the parent hears it and kills its children, which must not each print a traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(*args)


def worker_main(connection, url: str, capacity: int, policy_name: str) -> None:
    """A worker process: open the backend, then run the attempts it is sent until told to stop."""
    link = Link(connection)
    db = Reconnecting(url, capacity, policy_name)
    link.send(Ready(os.getpid()))
    try:
        while True:
            match link.order():
                case Stop():
                    return
                case RunAttempt() as order:
                    attempt(db, link, order)
    finally:
        db.close()


def janitor_main(connection, url: str, capacity: int, policy_name: str, name: str, poll: float) -> None:
    """A janitor process: claim expired leases on the database's clock, probe and settle them."""
    link = Link(connection)
    db = Reconnecting(url, capacity, policy_name)
    policy = POLICIES[policy_name]
    pending: set[str] = set()
    held_reported: set[str] = set()
    reporter = _AbandonReporter(link)
    link.send(Ready(os.getpid()))

    def adopt() -> None:
        """After a reconnect: the leases this janitor claimed and has not settled.

        Each is reported again: a claim made just before the connection dropped
        may never have reached the parent, which then learns of it here.
        """
        ledger = db.backend.ledger
        for r in ledger.reservations():
            if r.state is ReservationState.OUTCOME_UNKNOWN and ledger.claimed_by(r.reservation_id) == name:
                if r.reservation_id not in pending:
                    link.send(Adopted(r.reservation_id))
                pending.add(r.reservation_id)

    try:
        while not link.stop_asked():
            try:
                destination = ObservedDestination(db.backend.destination, reporter)
                janitor = Janitor(db.backend.ledger, destination, policy)
                for reservation in janitor.claim(None, name):
                    link.send(Expiry(reservation.reservation_id, reservation.state))
                    if reservation.state is not ReservationState.UNUSED:
                        pending.add(reservation.reservation_id)
                for rid in sorted(pending):
                    try:
                        settlement = janitor.settle(rid, janitor.probe(rid))
                    except IllegalMove:  # the owner confirmed between probe and settle
                        pending.discard(rid)
                        continue
                    if settlement.decision is Decision.HOLD:
                        if rid not in held_reported:
                            held_reported.add(rid)
                            link.send(Hold(rid, settlement.evidence.describe()))
                        continue
                    pending.discard(rid)
                    link.send(Settle(rid, settlement.reservation.state, settlement.evidence.describe()))
            except DATABASE_ERRORS:
                db.reopen()
                db.retry(lambda _: adopt())
                continue
            time.sleep(poll)
    finally:
        db.close()


class _AbandonReporter:
    """The janitor process's end of ObservedDestination: each abandon answer goes to the parent as a fact."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def abandon_answered(self, identity: str, answer: AttemptState | None) -> None:
        self.link.send(AbandonAnswered(identity, answer))

    def writes_no_worker_made(self, record) -> list:
        return []  # the parent reads every write from the database record itself (LiveRun.sync_writes)
