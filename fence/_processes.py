"""Real OS processes, real SIGKILLs, one shared database: the shell for process runs.

Theory of operation
-------------------
``_realclock`` runs the article's experiments on threads around one in-memory
ledger. This module runs them, and a fleet benchmark, with every worker and
janitor an OS process that opens the backend URL itself (SQLite file or
PostgreSQL), and with crashes that are ``os.kill(pid, SIGKILL)`` sent by the
parent. It owns no policy logic: a janitor process is ``fence.Janitor`` with a
policy from ``fence.POLICIES`` over the backend's ledger and destination, and
the workers make the same calls as ``_realclock.Fleet``'s threads.

* Children are started by a forkserver that has fence imported, so a child is
  ready in milliseconds and inherits no database connection. Each child talks to
  the parent over one pipe: it reports what it did (with its CLOCK_MONOTONIC
  time, which Linux shares between processes) and the parent sends it orders.
* A crash point is reached, reported, and then the worker blocks reading its
  pipe; the parent kills it there. ``before-effect``: work done, no commit sent.
  ``in-flight``: the commit's statements ran inside its open transaction and
  COMMIT was not sent. ``after-effect``: the commit returned, the confirm not sent.
* A SIGKILL inside an open transaction is not the thread model's "message still
  on the wire": the database rolls the transaction back (PostgreSQL when the
  dead connection's socket closes, SQLite because an uncommitted WAL frame is
  never read), so that effect never lands. What still lands late is a commit
  from an attempt that is slow, not dead: the delayed-commit experiment.
* Lease deadlines and expiry are judged on the database's clock (``now=None``)
  in every process; the janitors claim expired leases (``Janitor.claim``), so
  two janitors never settle the same reservation.
* A database error (a dropped connection, a server restart) is never taken for
  a refusal: the process reopens the backend with backoff. If the error hit a
  commit, the worker cannot know whether it landed, so it stops the attempt and
  leaves it to the janitor, exactly as if it had crashed there.
* After every run an audit reads the database: effects per job, units held,
  reservations stuck; a drain is what the run itself does (every release is
  retried, the janitor settles every expired lease) until nothing moves.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from fence._destination import AttemptState, CommitResult
from fence._errors import BackendError, BadInput, CapacityExhausted, IllegalMove, StaleAttempt
from fence._janitor import Janitor
from fence._ledger import ReservationState
from fence._live import LiveRun
from fence._observer import ObservedDestination, ReleaseJudgement
from fence._policies import POLICIES, Decision
from fence._worker import ALIVE_PHASES, CONFIRM_MOVES
from fence._realclock import (
    CRASH_POLICIES,
    DELAYED_POLICIES,
    Event,
    Progress,
    TrialResult,
    VariantResult,
    _at,
    _quiet,
    close_crash_variant,
    close_delayed_variant,
)
from fence.backends import POSTGRES_SCRIPT, open_backend, private_postgres

JANITOR_POLL = 0.005
"""Seconds between a janitor's claims in the experiments (the fleet polls at 0.02)."""
READY_TIMEOUT = 30.0
SCRIPT = POSTGRES_SCRIPT
CRASH_POINTS = ("after-effect", "in-flight", "before-effect")
"""Where a worker is SIGKILLed in the crash-boundary experiment."""
SETTLED = frozenset({ReservationState.CONFIRMED, ReservationState.CONFIRMED_EXISTING})
OPEN = frozenset({ReservationState.RESERVED, ReservationState.OUTCOME_UNKNOWN})

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["fence._processes"])


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


# -- the child side ---------------------------------------------------------------------
class Link:
    """A child's end of its pipe: report with a timestamp, wait for orders."""

    def __init__(self, connection) -> None:
        self.connection = connection

    def send(self, kind: str, **data: Any) -> None:
        self.connection.send((kind, time.monotonic(), data))

    def order(self) -> tuple:
        return self.connection.recv()

    def stop_asked(self) -> bool:
        return self.connection.poll() and self.connection.recv()[0] == "stop"


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
            link.send("point", point="in-flight")
            link.order()  # the parent kills us here, inside the transaction

    store.write = write
    try:
        yield
    finally:
        del store.write


def attempt(db: Reconnecting, link: Link, key: str, attempt_id: str, lease: float, work: float,
            crash: str | None = None) -> None:
    """One attempt, as _realclock.Fleet runs it on a thread: reserve, register, work, commit, confirm.

    Reports ``reserved``, ``committing``, ``committed``, then ``done`` with what
    the confirm did (or ``point`` at a crash point, and waits to be killed).
    """
    asked = time.monotonic()
    while True:
        began = time.monotonic()
        try:
            reservation = db.backend.ledger.reserve(key, attempt_id, None, lease)
            break
        except CapacityExhausted:
            time.sleep(0.005)
        except IllegalMove as refusal:  # the key is still held by an older attempt
            link.send("done", outcome="reserve refused", reason=str(refusal))
            return
        except DATABASE_ERRORS:
            db.reopen()
            current = db.retry(lambda b: b.ledger.current(key))
            if current is not None and current.owner == attempt_id:
                reservation = current
                break  # the reserve landed before the connection dropped
    link.send("reserved", latency=time.monotonic() - began, waited=time.monotonic() - asked,
              key=key, reservation=reservation.reservation_id, deadline=reservation.deadline)
    db.retry(lambda b: b.destination.register(attempt_id, key))
    link.send("registered")
    time.sleep(work)
    if crash == "before-effect":
        link.send("point", point=crash)
        link.order()
    payload = f"ticket for {key}"
    link.send("committing", payload=payload)
    try:
        if crash == "in-flight":
            with _held_open(db.backend.store, link):
                result = db.backend.destination.commit(attempt_id, key, payload)
        else:
            result = db.backend.destination.commit(attempt_id, key, payload)
    except DATABASE_ERRORS as error:
        # Did it land? Nobody here can know: stop, and leave the lease to the janitor.
        link.send("done", outcome="commit unknown", reason=type(error).__name__)
        db.reopen()
        return
    link.send("committed", result=result.value)
    if crash == "after-effect":
        link.send("point", point=crash)
        link.order()
    move = CONFIRM_MOVES.get(result)
    if move is None:  # a refusal: give up (fence._worker's answer-to-confirm rule)
        link.send("done", outcome="gave up", reason=result.value)
        return
    link.send("confirming")  # if we are killed before the answer, the parent knows a confirm may have landed
    while True:
        try:
            moved = db.backend.ledger.owner_move(key, attempt_id, move)
            link.send("done", outcome=moved.state.value)
            return
        except (StaleAttempt, IllegalMove) as refusal:
            link.send("done", outcome="confirm refused", reason=str(refusal))
            return
        except DATABASE_ERRORS:
            db.reopen()
            current = db.retry(lambda b: b.ledger.current(key))
            if current is not None and current.owner == attempt_id and current.state in SETTLED:
                # Settled, by our confirm or by a janitor's settle: the parent tells which.
                link.send("done", outcome=current.state.value, reconnected=True)
                return


def worker_main(connection, url: str, capacity: int, policy_name: str) -> None:
    """A worker process: open the backend, then run the attempts it is sent until told to stop."""
    link = Link(connection)
    db = Reconnecting(url, capacity, policy_name)
    link.send("ready", pid=os.getpid())
    try:
        while True:
            order = link.order()
            if order[0] == "stop":
                return
            _, key, attempt_id, lease, work, crash = order
            attempt(db, link, key, attempt_id, lease, work, crash)
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
    link.send("ready", pid=os.getpid())

    def adopt() -> None:
        """After a reconnect: the leases this janitor claimed and has not settled.

        Each is reported again: a claim made just before the connection dropped
        may never have reached the parent, which then learns of it here.
        """
        ledger = db.backend.ledger
        for r in ledger.reservations():
            if r.state is ReservationState.OUTCOME_UNKNOWN and ledger.claimed_by(r.reservation_id) == name:
                if r.reservation_id not in pending:
                    link.send("adopted", reservation=r.reservation_id)
                pending.add(r.reservation_id)

    try:
        while not link.stop_asked():
            try:
                destination = ObservedDestination(db.backend.destination, reporter)
                janitor = Janitor(db.backend.ledger, destination, policy)
                for reservation in janitor.claim(None, name):
                    link.send("expiry", reservation=reservation.reservation_id, state=reservation.state.value)
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
                            link.send("hold", reservation=rid, evidence=settlement.evidence.describe())
                        continue
                    pending.discard(rid)
                    link.send("settle", reservation=rid, state=settlement.reservation.state.value,
                              evidence=settlement.evidence.describe())
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
        self.link.send("abandon", identity=identity, answer=None if answer is None else answer.value)

    def writes_no_worker_made(self, record) -> list:
        return []  # the parent reads every write from the database record itself (LiveRun.sync_writes)


# -- the parent side --------------------------------------------------------------------
@dataclass
class Child:
    name: str
    process: Any
    connection: Any
    pid: int = 0
    alive: bool = True
    busy: str | None = None
    """The attempt it is running, if any."""

    def send(self, *order) -> None:
        self.connection.send(order)


def _child(target, *args) -> None:
    """A child's life: ``target``, deaf to SIGINT (a terminal's Ctrl-C reaches the whole process group;
    the parent hears it and kills its children, which must not each print a traceback)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    target(*args)


class Hands:
    """The parent's children: started, listened to, killed, and always reaped."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def spawn(self, name: str, target, *args) -> Child:
        mine, theirs = _CONTEXT.Pipe()
        process = _CONTEXT.Process(target=_child, args=(target, theirs, *args), name=name, daemon=True)
        process.start()
        theirs.close()
        child = Child(name, process, mine)
        self.children.append(child)
        return child

    def ready(self, children: list[Child], timeout: float = READY_TIMEOUT) -> None:
        """Wait until each child opened its backend; BackendError if one cannot."""
        deadline = time.monotonic() + timeout
        for child in children:
            left = deadline - time.monotonic()
            if left <= 0 or not child.connection.poll(left):
                raise BackendError(f"{child.name} did not open the backend within {timeout:.0f}s")
            try:
                kind, _, data = child.connection.recv()
            except EOFError:
                raise BackendError(f"{child.name} exited before opening the backend (exit code {child.process.exitcode})") from None
            child.pid = data["pid"]

    def messages(self, timeout: float) -> Iterator[tuple[Child, str, float, dict]]:
        """Every report that arrives within ``timeout``; a child that exits reports ``exited``."""
        by_connection = {c.connection: c for c in self.children if c.alive}
        for connection in multiprocessing.connection.wait(list(by_connection), timeout):
            child = by_connection[connection]
            try:
                kind, t, data = connection.recv()
            except (EOFError, OSError):
                child.alive = False
                child.process.join(5)
                yield child, "exited", time.monotonic(), {"exitcode": child.process.exitcode}
                continue
            yield child, kind, t, data

    def kill(self, child: Child) -> tuple[float, list[tuple[str, float, dict]]]:
        """SIGKILL, and reap: the moment it was sent, and what the child reported before it died.

        Those last reports are facts too (a reserve or a commit that landed just
        before the kill); the pipe keeps them after the process is gone.
        """
        t = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        child.process.join(10)
        child.alive = False
        last_words = []
        with contextlib.suppress(EOFError, OSError):
            while child.connection.poll():
                last_words.append(child.connection.recv())
        child.connection.close()
        return t, last_words

    def close(self) -> None:
        for child in self.children:
            if child.alive and child.process.is_alive():
                with contextlib.suppress(OSError, BrokenPipeError):
                    child.send("stop")
        for child in self.children:
            child.process.join(5)
            if child.process.is_alive():
                os.kill(child.process.pid, signal.SIGKILL)
                child.process.join(5)
            with contextlib.suppress(OSError):
                child.connection.close()
            child.process.close()
        self.children = []


# -- the parent's record of facts, and the audit after the drain ---------------------------
def record_fact(run: LiveRun, handle: str | None, kind: str, data: dict, ledger_and_effects) -> ReleaseJudgement | None:
    """One child's report, written down as a fact of the run (fence._live); a release comes back judged.

    ``ledger_and_effects()`` gives the parent's (ledger, destination): the
    destination's effects record is read before every fact that is judged
    against the writes (a commit's answer, a janitor's move), because a child
    reports a commit only after it landed.
    """
    if kind == "reserved":
        if handle not in run.attempts:  # else already learned from the ledger (CausalFacts)
            run.reserved(handle, data["key"], data["reservation"], data["deadline"])
    elif kind == "registered":
        run.started(handle)
    elif kind == "committing":
        run.commit_sent(handle, data["payload"])
    elif kind == "committed":
        # The writes go to their attempts by the identity each carries (sync_writes);
        # the answer itself adds none, so a write is never credited to the wrong commit.
        run.sync_writes(ledger_and_effects()[1].effects())
        run.commit_answered(handle, CommitResult(data["result"]), list(run.observer.effects))
    elif kind == "done" and handle in run.attempts:
        _record_done(run, handle, data)
    elif kind == "killed":
        _killed(run, handle)
    elif kind == "abandon":
        answer = None if data["answer"] is None else AttemptState(data["answer"])
        run.observer.abandon_answered(data["identity"], answer)
    elif kind in ("expiry", "adopted", "settle"):
        ledger, destination = ledger_and_effects()
        run.sync_writes(destination.effects())
        rid = data["reservation"]
        if rid not in run.owner_of:
            learn_reserve(run, ledger.get(rid), dead=True)
        if kind == "expiry":
            return run.expired(rid, freed=data["state"] == ReservationState.UNUSED.value)
        if kind == "settle":
            return run.settled(rid, ReservationState(data["state"]))
        if run.observer.reservations[rid].state is ReservationState.RESERVED:
            run.expired(rid, freed=False)  # adopted after a reconnect: its claim never reached us
    return None


def _record_done(run: LiveRun, handle: str, data: dict) -> None:
    outcome = data["outcome"]
    if outcome in {state.value for state in SETTLED}:
        attempt = run.attempts[handle]
        mirror = run.observer.reservations[attempt.reservation_id]
        # After a reconnect the worker found its reservation settled, by its own
        # confirm or by a janitor: a janitor only settles as confirmed_existing,
        # and a janitor's settle the parent heard of has already moved the mirror.
        janitors = data.get("reconnected") and (
            mirror.state not in OPEN
            or (outcome == ReservationState.CONFIRMED_EXISTING.value and attempt.answer is CommitResult.WRITTEN)
        )
        if janitors:
            run.confirm_refused(handle)
        else:
            run.confirmed(handle)
    elif outcome == "confirm refused":
        run.confirm_refused(handle)
    elif outcome == "commit unknown":
        run.commit_unknown(handle)
    # "gave up": the refusal it heard already ended it; "reserve refused": it never held a unit


def learn_reserve(run: LiveRun, reservation, dead: bool) -> None:
    """A reserve whose report has not arrived (and, if its worker was killed just after, never will).

    Only the ledger can say that it exists and who made it. A worker fence
    killed is recorded as crashed; a live one's own reports follow (its
    "reserved", when it comes, is then not recorded twice).
    """
    run.reserved(reservation.owner, reservation.key, reservation.reservation_id, reservation.deadline)
    if dead:
        run.crashed(reservation.owner)


class CausalFacts:
    """Many children's reports, recorded in an order the database's causality allows.

    Each child's pipe keeps its own reports in order, but the parent reads the
    pipes one after another, so a retry's "reserved" can be read before the
    janitor's report of the release that made it possible, and a janitor's
    expiry before the "reserved" of the lease it expired (a worker killed
    between its reserve and its report never sends one). Timestamps cannot fix
    that soundly on a busy machine; causality can:

    * each child's reports stay in their order (one waits, the rest of that
      child's wait behind it);
    * a "reserved" for a key waits while fence still sees the key held: the
      ledger gave the unit only after the release, whose report is on its way.
      Before that, every earlier attempt the parent sent for the key that has
      not reported its reserve is looked up in the ledger (``learn_reserve``),
      so a reserve whose report was lost still holds the key in fence's mirror;
    * a janitor's report on a reservation fence has not heard of is preceded
      by that reservation, learned from the ledger the same way.
    """

    def __init__(self, db: Reconnecting, run: LiveRun, sent_for: Callable[[str], list[str]]) -> None:
        self.db = db
        self.run = run
        self.sent_for = sent_for
        """The attempts the parent has sent for a key, oldest first."""
        self.dead: set[str] = set()
        """Attempts whose worker fence killed (or that exited)."""
        self.looked_up: set[str] = set()
        self.confirming: set[str] = set()
        """Attempts that sent their confirm and have not reported its answer."""
        self.waiting: list[tuple[str, str | None, str, dict]] = []

    def add(self, source: str, handle: str | None, kind: str, data: dict) -> None:
        """One report from child ``source`` (about attempt ``handle``); recorded as soon as causality allows."""
        if kind == "killed" and handle is not None:
            self.dead.add(handle)
        self.waiting.append((source, handle, kind, data))
        self._flush()

    def finish(self) -> None:
        """The end of the run, once every janitor's pipe was read to its end.

        A worker killed between sending its confirm and reporting the answer
        leaves only the ledger knowing whether the confirm landed; with every
        janitor report in, a reservation fence still sees open that the ledger
        shows settled was settled by that confirm. Whatever still waits is then
        recorded as is, and the observer judges it.
        """
        self._flush()
        for handle in sorted(self.confirming):
            attempt = self.run.attempts.get(handle)
            if attempt is None or self.run.observer.reservations[attempt.reservation_id].state not in OPEN:
                continue
            state = self._read(lambda ledger: ledger.get(attempt.reservation_id).state)
            if state in SETTLED:
                self.run.confirm_landed_unreported(handle)
        for _, handle, kind, data in self.waiting:
            self._record(handle, kind, data)
        self.waiting = []

    def _ready(self, handle: str | None, kind: str, data: dict) -> bool:
        if kind == "reserved" and handle not in self.run.attempts:
            self._learn_earlier_attempts(data["key"], handle)
            return not self.run.observer.holding_for(data["key"])
        if kind in ("expiry", "settle", "adopted") and data["reservation"] not in self.run.owner_of:
            reservation = self._read(lambda ledger: ledger.get(data["reservation"]))
            learn_reserve(self.run, reservation, dead=reservation.owner in self.dead)
        return True

    def _learn_earlier_attempts(self, key: str, handle: str) -> None:
        earlier = self.sent_for(key)
        earlier = earlier[: earlier.index(handle)] if handle in earlier else earlier
        unknown = [h for h in earlier if h not in self.run.attempts and h not in self.looked_up]
        if not unknown:
            return
        self.looked_up.update(unknown)
        for reservation in self._read(lambda ledger: ledger.reservations()):
            if reservation.owner in unknown and reservation.reservation_id not in self.run.owner_of:
                learn_reserve(self.run, reservation, dead=reservation.owner in self.dead)

    def _flush(self) -> None:
        progress = True
        while progress:
            progress = False
            blocked: set[str] = set()
            for item in list(self.waiting):
                source, handle, kind, data = item
                if source in blocked or not self._ready(handle, kind, data):
                    blocked.add(source)
                    continue
                self.waiting.remove(item)
                if kind == "confirming":
                    self.confirming.add(handle)
                elif kind == "done":
                    self.confirming.discard(handle)
                self._record(handle, kind, data)
                progress = True

    def _record(self, handle: str | None, kind: str, data: dict) -> ReleaseJudgement | None:
        # record_fact reads before it writes a fact down: after a dropped
        # connection the second try records it once.
        while True:
            try:
                return record_fact(self.run, handle, kind, data, lambda: (self.db.backend.ledger, self.db.backend.destination))
            except DATABASE_ERRORS:
                self.db.reopen()

    def _read(self, call):
        return self.db.retry(lambda backend: call(backend.ledger))


def _killed(run: LiveRun, handle: str | None) -> None:
    """A SIGKILL: an open commit transaction is rolled back, so nothing of it can land later."""
    attempt = run.attempts.get(handle) if handle else None
    if attempt is not None and attempt.phase in ALIVE_PHASES:
        run.crashed(handle)


@dataclass
class Audit:
    """What fence's facts say once nothing is running (judged on the run, never read from the database)."""

    effects: dict[str, int]
    duplicates: int
    lost: list[str]
    stuck: list[str]
    """Reservations still reserved or outcome_unknown."""
    leaked: int
    """Units held by no job's confirmed reservation."""
    held: int
    capacity: int
    freed_twice: list[str]
    broken: dict[str, str] = field(default_factory=dict)
    """Every invariant the run's facts broke (fence._invariants), with how."""

    @property
    def problems(self) -> list[str]:
        """What a drained run must never show, whatever the policy: lost jobs, stuck or leaked units."""
        found = []
        if self.lost:
            found.append(f"lost jobs (no effect): {', '.join(self.lost[:5])}")
        if self.stuck:
            found.append(f"reservations stuck: {', '.join(self.stuck[:5])}")
        if self.leaked:
            found.append(f"{self.leaked} unit(s) leaked")
        if self.freed_twice:
            found.append(f"units freed twice: {', '.join(self.freed_twice[:5])}")
        return found

    def line(self) -> str:
        broken = ",".join(self.broken) or "none"
        return (f"drain: duplicates={self.duplicates} lost={len(self.lost)} leaked={self.leaked} "
                f"stuck={len(self.stuck)} held={self.held}/{self.capacity} invariants_broken={broken}")


def audit(run: LiveRun, final_effects: list) -> Audit:
    """The end of a run: take in any write nobody reported, then count and judge from the facts."""
    run.sync_writes(final_effects, final=True)
    observer = run.observer
    effects = {job: observer.effects_per_key[job] for job in run.jobs}
    settled_jobs = {m.key for m in observer.reservations.values() if m.state in SETTLED}
    return Audit(
        effects=effects,
        duplicates=sum(max(0, n - 1) for n in effects.values()),
        lost=[job for job in run.jobs if effects[job] == 0],
        stuck=[m.reservation_id for m in observer.unsettled()],
        leaked=observer.held - len(settled_jobs),
        held=observer.held,
        capacity=observer.capacity,
        freed_twice=[m.reservation_id for m in observer.reservations.values() if m.times_freed > 1],
        broken=run.judge(),
    )


# -- the experiments on processes ----------------------------------------------------------
@dataclass
class ProcessTrial:
    """The parent's record of one trial: events, attempts and releases, on one clock."""

    t0: float = field(default_factory=time.monotonic)
    events: list[Event] = field(default_factory=list)
    attempts: dict[str, dict] = field(default_factory=dict)
    releases: list[tuple[float, ReleaseJudgement]] = field(default_factory=list)
    """Each release: when the parent learned of it, and what fence's facts said was true then."""
    expiry: float | None = None
    run: LiveRun = field(default_factory=lambda: LiveRun(1, ["job1"]))

    def log(self, lane: str, kind: str, label: str, t: float) -> float:
        t -= self.t0
        self.events.append(Event(t, lane, kind, label))
        return t


def run_trial(url: str, policy_name: str, lease: float, work: float, retry_work: float,
              crash: str | None, timeout: float) -> tuple[ProcessTrial, Audit, bool]:
    """One unit, one job: a first attempt (crashing at ``crash`` if given), a retry on every release."""
    policy = POLICIES[policy_name]
    backend = open_backend(url, capacity=1, guards=policy.guards, reset=True)
    hands = Hands()
    trial = ProcessTrial()
    try:
        janitor = hands.spawn("janitor", janitor_main, url, 1, policy_name, "janitor-1", JANITOR_POLL)
        standby = [hands.spawn(f"worker-{n}", worker_main, url, 1, policy_name) for n in (1, 2)]
        hands.ready([janitor, *standby])
        trial.t0 = time.monotonic()

        def launch(attempt_id: str, work: float, crash: str | None) -> None:
            if not standby:
                standby.append(hands.spawn(f"worker-{len(hands.children)}", worker_main, url, 1, policy_name))
                hands.ready(standby[-1:])
            child = standby.pop(0)
            child.busy = attempt_id
            trial.attempts[attempt_id] = {"child": child, "crash": crash}
            child.send("attempt", "job1", attempt_id, lease, work, crash)

        launch("job1#1", work, crash)
        deadline = time.monotonic() + timeout
        settled = False

        def both():  # the parent's own reads of the ledger and the destination
            return backend.ledger, backend.destination

        while time.monotonic() < deadline:
            for child, kind, t, data in hands.messages(0.02):
                handle = child.busy if child is not janitor else None
                lane = "janitor" if child is janitor else f"worker {handle}"
                record = trial.attempts.get(handle, {}) if child is not janitor else {}
                if kind == "exited" and child is not janitor and not record.get("over"):
                    raise BackendError(f"{child.name} exited unexpectedly (exit code {data['exitcode']})")
                if kind == "exited":
                    raise BackendError(f"the janitor process exited unexpectedly (exit code {data['exitcode']})")
                if kind == "point":
                    killed_at, last_words = hands.kill(child)
                    for last_kind, _, last_data in last_words:
                        record_fact(trial.run, handle, last_kind, last_data, both)
                    _killed(trial.run, handle)
                    record["crashed_at"] = trial.log(lane, "crash", f"SIGKILL {data['point']}", killed_at)
                    record["over"] = True
                    continue
                judgement = record_fact(trial.run, handle, kind, data, both)
                if kind == "reserved":
                    record["reserved_at"] = trial.log(lane, "reserve", "reserves job1", t)
                elif kind == "committing":
                    record["committing_at"] = trial.log(lane, "work", "sends its commit", t)
                elif kind == "committed":
                    record["result"] = data["result"]
                    kind_ = "effect" if data["result"] == CommitResult.WRITTEN.value else "refused"
                    record["commit_at"] = trial.log("destination", kind_, f"{handle} {data['result']}", t)
                elif kind == "done":
                    record["over"], record["outcome"] = True, data["outcome"]
                    trial.log(lane, "confirm", data["outcome"], t)
                elif kind == "expiry":
                    at = trial.log("janitor", "expiry", f"{data['reservation']} -> {data['state']}", t)
                    trial.expiry = at if trial.expiry is None else trial.expiry
                elif kind in ("settle", "hold"):
                    trial.log("janitor", kind, f"{data['reservation']} ({data['evidence']})", t)
                if judgement is not None:
                    released_at = trial.log("janitor", "release", f"{judgement.reservation_id}'s unit returns", t)
                    trial.releases.append((released_at, judgement))
                    launch(f"job1#{len(trial.attempts) + 1}", retry_work, None)
            if all(a.get("over") for a in trial.attempts.values()) and not trial.run.observer.unsettled():
                settled = True  # by fence's facts: every attempt over, every reservation settled or freed
                break
        return trial, audit(trial.run, backend.destination.effects()), settled
    finally:
        hands.close()
        backend.close()


def crash_trial(url: str, policy_name: str, crash: str, lease: float, number: int) -> TrialResult:
    """One unit; the worker is SIGKILLed at ``crash`` after 0.2 leases of work; a release queues a retry."""
    trial, found, settled = run_trial(url, policy_name, lease, 0.2 * lease, 0.2 * lease, crash, 10 * lease + 10)
    first = trial.attempts["job1#1"]
    retry = trial.attempts.get("job1#2", {})
    released_at, release = trial.releases[0] if trial.releases else (None, None)
    effects = found.effects["job1"]
    counts = {
        "effects": effects,
        "duplicates": found.duplicates,
        "released": int(release is not None),
        "returned_with_effect": int(release is not None and release.effect_existed),
        "retried": int(bool(retry)),
        "drain_problems": len(found.problems),
    }
    times = {
        "expiry": trial.expiry,
        "effect": first.get("commit_at") if first.get("result") == CommitResult.WRITTEN.value else None,
        "crash": first.get("crashed_at"),
        "released": released_at,
        "retry": retry.get("commit_at"),
    }
    line = (
        f"POLICY={policy_name} CRASH={crash} trial {number}: expiry@{_at(times['expiry'])} "
        f"effect@{_at(times['effect'])} kill@{_at(times['crash'])} released@{_at(times['released'])} "
        f"retry@{_at(times['retry'])} effects={effects} duplicates={found.duplicates} {found.line()}"
        + "".join(f" PROBLEM: {p}" for p in found.problems)
    )
    return TrialResult(number, line, counts, times, trial.events, settled, found.broken)


CRASH_EXPECTED = {
    # crash point: what the article's (thread) count it must equal
    "after-effect": "after-effect",
    "before-effect": "before-effect",
    "in-flight": "before-effect",  # SIGKILL inside the open transaction: rolled back, no effect
}


def crash_boundary(url: str, trials: int, lease: float, progress: Progress = _quiet) -> list[VariantResult]:
    variants = []
    for name in CRASH_POLICIES:
        for crash in CRASH_POINTS:
            variant = VariantResult("crash-boundary", f"POLICY={name} CRASH={crash}", lease=lease)
            for number in range(1, trials + 1):
                progress(f"processes crash-boundary {name} {crash} trial {number}/{trials}")
                variant.trials.append(crash_trial(url, name, crash, lease, number))
            close_crash_variant(variant, name, CRASH_EXPECTED[crash] == "after-effect", trials, clean=("drain_problems",))
            variants.append(variant)
    return variants


def delayed_trial(url: str, policy_name: str, lease: float, number: int) -> TrialResult:
    """One unit; the old attempt works 2.4 leases and is not killed; the retry works 0.4 leases."""
    trial, found, settled = run_trial(url, policy_name, lease, 2.4 * lease, 0.4 * lease, None, 10 * lease + 10)
    old = trial.attempts["job1#1"]
    retry = trial.attempts.get("job1#2", {})
    released_at, release = trial.releases[0] if trial.releases else (None, None)
    losers = [a for a in trial.attempts.values() if a.get("result") not in (None, CommitResult.WRITTEN.value)]
    wasted = [a["commit_at"] - a["reserved_at"] for a in losers]
    early = release is not None and release.owner_could_still_write
    counts = {
        "effects": found.effects["job1"],
        "duplicates": found.duplicates,
        "released": int(release is not None),
        "early_release": int(early),
        "retried": int(bool(retry)),
        "drain_problems": len(found.problems),
    }
    times = {
        "expiry": trial.expiry,
        "released": released_at,
        "old_commit": old.get("commit_at"),
        "retry": retry.get("commit_at"),
        "wasted": sum(wasted) if wasted else None,
    }
    line = (
        f"MODE={policy_name} trial {number}: expiry@{_at(trial.expiry)} released@{_at(times['released'])} "
        f"old_commit@{_at(times['old_commit'])}({old.get('result')}) retry@{_at(times['retry'])} "
        f"effects={counts['effects']} duplicates={found.duplicates} early_release={'yes' if early else 'no'} "
        f"loser_wasted={_at(times['wasted']).replace('never', 'none')} {found.line()}"
        + "".join(f" PROBLEM: {p}" for p in found.problems)
    )
    return TrialResult(number, line, counts, times, trial.events, settled, found.broken)


def delayed_commit(url: str, trials: int, lease: float, progress: Progress = _quiet) -> list[VariantResult]:
    variants = []
    for name in DELAYED_POLICIES:
        variant = VariantResult("delayed-commit", f"MODE={name}", lease=lease)
        for number in range(1, trials + 1):
            progress(f"processes delayed-commit {name} trial {number}/{trials}")
            variant.trials.append(delayed_trial(url, name, lease, number))
        close_delayed_variant(variant, name, trials, clean=("drain_problems",))
        variants.append(variant)
    return variants


EXPERIMENTS: dict[str, Callable[..., list[VariantResult]]] = {
    "crash-boundary": crash_boundary,
    "delayed-commit": delayed_commit,
}
"""The experiments that run on processes (contention stays on threads: it measures waiting, not crashes)."""


# -- choosing a backend -------------------------------------------------------------------
@contextlib.contextmanager
def backend_url(kind: str, url: str | None = None) -> Iterator[tuple[str, bool]]:
    """A URL for ``kind`` (sqlite|postgres), and whether this run owns a restartable cluster.

    sqlite: ``url`` or a file in a temporary directory. postgres: ``url``,
    $FENCE_POSTGRES_URL, or a private cluster started (and stopped) here with
    scripts/postgres.sh. The URL is opened once, so a bad one fails here.
    """
    if kind not in ("sqlite", "postgres"):
        raise BadInput(f"unknown backend {kind!r}: use sqlite or postgres")
    if url is not None:
        if kind == "sqlite" and not url.startswith("sqlite://"):
            raise BadInput(f"--backend sqlite needs a sqlite:///PATH.db URL, got {url!r}")
        if kind == "postgres" and not url.startswith(("postgresql://", "postgres://")):
            raise BadInput(f"--backend postgres needs a postgresql:// URL, got {url!r}")
        _check(url)
        yield url, kind == "postgres" and _ours(url)
        return
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="fence-processes-") as directory:
            yield f"sqlite://{directory}/fence.db", False
        return
    env = os.environ.get("FENCE_POSTGRES_URL")
    if env:
        _check(env)
        yield env, _ours(env)
        return
    with private_postgres() as url:
        yield url, True


def _check(url: str) -> None:
    store_backend = open_backend(url, capacity=1, guards=POLICIES["naive"].guards, reset=True)
    store_backend.close()


def _ours(url: str) -> bool:
    """Is this a cluster scripts/postgres.sh started (so that it may restart it)?"""
    return subprocess.run(["bash", str(SCRIPT), "status", url], capture_output=True, timeout=60).returncode == 0


def restart_postgres(url: str) -> None:
    done = subprocess.run(["bash", str(SCRIPT), "restart", url], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BackendError(f"restarting PostgreSQL failed: {done.stderr.strip() or done.returncode}")


# -- the fleet benchmark --------------------------------------------------------------------
FLEET_JANITOR_POLL = 0.02
FLEET_WORK = (0.002, 0.010)
"""Seconds of work per job, drawn uniformly: short, so the database is what is measured."""


@dataclass
class FleetResult:
    policy: str
    url: str
    workers: int
    janitors: int
    jobs: int
    lease: float
    kill_every: float | None
    kill_every_attempts: int | None = None
    elapsed: float = 0.0
    finished: bool = False
    kills: int = 0
    unexpected_exits: int = 0
    attempts: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    janitor_events: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    restart_began: float | None = None
    restart_up: float | None = None
    first_confirm_after_up: float | None = None
    restart_error: str | None = None
    audit: Audit | None = None

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.elapsed if self.elapsed else 0.0

    @property
    def recovery(self) -> float | None:
        """Seconds from the restart's start to the first job confirmed after the server was back."""
        if self.restart_began is None or self.first_confirm_after_up is None:
            return None
        return self.first_confirm_after_up - self.restart_began

    def lines(self) -> list[str]:
        found = self.audit
        restart = "no"
        if self.restart_error:
            restart = f"FAILED ({self.restart_error})"
        elif self.restart_began is not None:
            down = None if self.restart_up is None else self.restart_up - self.restart_began
            after = (None if self.first_confirm_after_up is None or self.restart_up is None
                     else self.first_confirm_after_up - self.restart_up)
            restart = (f"yes: server down for {_at(down)}, first job confirmed {_at(after)} after it was back, "
                       f"recovery={_at(self.recovery)} from the restart's start")
        outcomes = " ".join(f"{name.replace(' ', '_')}={n}" for name, n in sorted(self.outcomes.items()))
        janitor = " ".join(f"{name}={n}" for name, n in sorted(self.janitor_events.items()))
        return [
            f"FLEET policy={self.policy} workers={self.workers} janitors={self.janitors} jobs={self.jobs} "
            f"capacity={self.jobs} lease={self.lease:g}s kill_every="
            + (f"{self.kill_every_attempts}_attempts" if self.kill_every_attempts
               else "none" if not self.kill_every else f"{self.kill_every:g}s"),
            f"  elapsed={self.elapsed:.2f}s jobs_per_s={self.jobs_per_second:.1f} finished={'yes' if self.finished else 'NO'}",
            f"  reservation latency (one reserve call) p50={_ms(self.latencies, 50)} p99={_ms(self.latencies, 99)}; "
            f"wait for a unit p50={_ms(self.waits, 50)} p99={_ms(self.waits, 99)}",
            f"  attempts={self.attempts} kills={self.kills} unexpected_exits={self.unexpected_exits} {outcomes}",
            f"  janitors: {janitor or 'nothing expired'}",
            f"  database restart: {restart}",
            f"SUMMARY policy={self.policy} duplicates={found.duplicates} lost={len(found.lost)} "
            f"leaked={found.leaked} stuck={len(found.stuck)} jobs_per_s={self.jobs_per_second:.1f} "
            f"reserve_p50={_ms(self.latencies, 50)} reserve_p99={_ms(self.latencies, 99)} "
            f"recovery={_at(self.recovery) if self.restart_began is not None else 'n/a'}",
            *(f"  PROBLEM: {p}" for p in found.problems),
        ]


def _ms(values: list[float], percentile: int) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(percentile / 100 * len(ordered)) - 1))
    return f"{1000 * ordered[index]:.1f}ms"


def fleet(url: str, policy_name: str, *, workers: int = 8, jobs: int = 2000, lease: float = 1.0,
          kill_every: float | None = 0.5, restart: Callable[[], None] | None = None, janitors: int = 2,
          seed: int = 0, time_limit: float = 300.0, progress: Progress = _quiet,
          kill_every_attempts: int | None = None) -> FleetResult:
    """Workers and janitors as processes over ``jobs`` jobs, random SIGKILLs, optionally one restart.

    ``kill_every_attempts`` kills a busy worker after every that many attempts
    sent, instead of every ``kill_every`` seconds: the kills then keep pace with
    the run however slow the machine is. (A test's kill every 0.05 s outran a
    starved fleet on PostgreSQL, which never finished its 200 jobs in 60 s.)

    The quota is exactly ``jobs`` units, so a leaked unit leaves a job that can
    never be reserved: it shows as a lost job, not only as a count. A job is
    dispatched again only when the ledger released its reservation (a killed,
    refused or unsure attempt leaves it to the janitors), never on a guess.
    """
    rng = random.Random(seed)
    result = FleetResult(policy_name, url, workers, janitors, jobs, lease, kill_every, kill_every_attempts)
    parent = Reconnecting(url, jobs, policy_name, reset=True)
    hands = Hands()
    keys = [f"job{n:05d}" for n in range(jobs)]
    pending = list(reversed(keys))
    tries = dict.fromkeys(keys, 0)
    in_doubt: set[str] = set()
    done: set[str] = set()
    job_of: dict[int, str] = {}
    outcomes: dict[str, int] = {}
    run = LiveRun(jobs, keys)
    facts = CausalFacts(parent, run, sent_for=lambda key: [f"{key}#{n}" for n in range(1, tries[key] + 1)])

    def record(child: Child, kind: str, data: dict) -> None:
        facts.add(child.name, child.busy if child not in team else None, kind, data)

    try:
        team = [hands.spawn(f"janitor-{n}", janitor_main, url, jobs, policy_name, f"janitor-{n}", FLEET_JANITOR_POLL)
                for n in range(1, janitors + 1)]
        crew = [hands.spawn(f"worker-{n}", worker_main, url, jobs, policy_name) for n in range(1, workers + 1)]
        hands.ready(team + crew)
        idle = list(crew)
        t0 = time.monotonic()
        next_kill = t0 + kill_every if kill_every and not kill_every_attempts else float("inf")
        kill_due = False
        next_doubt = t0
        restarter: threading.Thread | None = None

        def do_restart() -> None:
            result.restart_began = time.monotonic()
            try:
                restart()
            except BackendError as error:
                result.restart_error = str(error)
            result.restart_up = time.monotonic()

        def replace(child: Child) -> None:
            key = job_of.pop(id(child), None)
            if key is not None:
                in_doubt.add(key)
            facts.add(child.name, child.busy, "killed", {})  # after whatever it reported before dying
            crew.remove(child)
            crew.append(hands.spawn(f"worker-{len(hands.children) + 1}", worker_main, url, jobs, policy_name))

        while len(done) < jobs and time.monotonic() < t0 + time_limit:
            while idle and pending:
                child, key = idle.pop(), pending.pop()
                tries[key] += 1
                child.busy, job_of[id(child)] = f"{key}#{tries[key]}", key
                result.attempts += 1
                child.send("attempt", key, child.busy, lease, rng.uniform(*FLEET_WORK), None)
                kill_due = kill_due or bool(kill_every_attempts and result.attempts % kill_every_attempts == 0)
            for child, kind, t, data in hands.messages(0.01):
                if child in team:
                    if kind == "exited":
                        raise BackendError(f"{child.name} exited unexpectedly (exit code {data['exitcode']})")
                    record(child, kind, data)
                    name = f"settled_{data['state']}" if kind == "settle" else kind
                    result.janitor_events[name] = result.janitor_events.get(name, 0) + 1
                    continue
                if kind != "exited":
                    record(child, kind, data)
                if kind == "ready":
                    child.pid = data["pid"]
                    idle.append(child)
                elif kind == "reserved":
                    result.latencies.append(data["latency"])
                    result.waits.append(data["waited"])
                elif kind == "done":
                    key = job_of.pop(id(child))
                    outcomes[data["outcome"]] = outcomes.get(data["outcome"], 0) + 1
                    if data["outcome"] in {s.value for s in SETTLED}:
                        done.add(key)
                        if result.restart_up is not None and result.first_confirm_after_up is None and t > result.restart_up:
                            result.first_confirm_after_up = t
                    else:
                        in_doubt.add(key)
                    child.busy = None
                    idle.append(child)
                elif kind == "exited":
                    result.unexpected_exits += 1
                    replace(child)
            now = time.monotonic()
            if now >= next_kill or kill_due:
                next_kill = now + kill_every if next_kill != float("inf") else next_kill
                victims = [c for c in crew if c.alive and c.busy]
                if victims:
                    kill_due = False  # a due kill waits for a busy worker
                    victim = rng.choice(victims)
                    _, last_words = hands.kill(victim)
                    for last_kind, _, last_data in last_words:
                        record(victim, last_kind, last_data)
                    result.kills += 1
                    if victim in idle:
                        idle.remove(victim)
                    replace(victim)
            if restart is not None and restarter is None and len(done) >= jobs // 2:
                restarter = threading.Thread(target=do_restart, daemon=True)
                restarter.start()
            if now >= next_doubt and in_doubt:
                next_doubt = now + 0.05
                try:
                    for key in sorted(in_doubt):
                        current = parent.backend.ledger.current(key)
                        if current is None or current.state is ReservationState.UNUSED:
                            in_doubt.discard(key)
                            pending.append(key)  # released by the ledger (or never reserved): retry
                        elif current.state in SETTLED:
                            in_doubt.discard(key)
                            done.add(key)  # settled by a janitor as confirmed_existing
                except DATABASE_ERRORS:
                    parent.reopen()
            progress(f"fleet {policy_name}: {len(done)}/{jobs} jobs, {result.kills} kills")
        result.elapsed = time.monotonic() - t0
        result.finished = len(done) == jobs
        if restarter is not None:
            restarter.join(120)
        # The drain: every attempt still running finishes, then the janitors get a last pass.
        deadline = time.monotonic() + 3 * lease + 10
        while any(c.busy for c in crew if c.alive) and time.monotonic() < deadline:
            for child, kind, t, data in hands.messages(0.05):
                if kind != "exited":
                    record(child, kind, data)
                if kind == "done":
                    job_of.pop(id(child), None)
                    outcomes[data["outcome"]] = outcomes.get(data["outcome"], 0) + 1
                    child.busy = None
                elif kind == "exited":
                    child.busy = None
        time.sleep(FLEET_JANITOR_POLL * 3)
        # The janitors stop, and every report they sent is read up to the end of
        # their pipes: a settle the database already shows may still be on its
        # way, and the judgement needs it. A time is no substitute on a busy machine.
        for child in team:
            with contextlib.suppress(OSError, BrokenPipeError):
                child.send("stop")
        deadline = time.monotonic() + 30
        while any(c.alive for c in team) and time.monotonic() < deadline:
            for child, kind, t, data in hands.messages(0.1):
                if kind != "exited":
                    record(child, kind, data)
        facts.finish()
        result.outcomes = outcomes
        result.audit = audit(run, parent.retry(lambda backend: backend.destination.effects()))
        return result
    finally:
        hands.close()
        parent.close()


def describe_backend(url: str) -> str:
    """The database and its version, for evidence headers."""
    if url.startswith("sqlite://"):
        return f"SQLite {sqlite3.sqlite_version} (WAL), {url}"
    backend = open_backend(url, capacity=1, guards=POLICIES["naive"].guards, reset=True)
    try:
        version = backend.store.one("SHOW server_version")[0]
    finally:
        backend.close()
    return f"PostgreSQL {version}, {url}"
