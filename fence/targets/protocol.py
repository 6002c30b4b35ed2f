"""Writing a target: the ledger protocol a real job system implements, and what it inherits.

Theory of operation
-------------------
A *target* drives a real job system, on its real library and server, through
fence's ledger protocol; the world, both engines and the one observer do the
rest. A target is three pieces:

* a **ledger** (subclass ``TargetLedger``): fence's ledger protocol on the
  system's own calls. Every member of the protocol is required
  (``fence.model.protocol.LEDGER_METHODS`` and ``LEDGER_PROPERTIES``, listed once
  there; a ledger without one gets the one-line protocol error from every
  engine):

  ``reserve(key, owner, now, lease) -> Reservation``
      a worker taking the key's job (publishing it first when there is none);
      refuse with ``IllegalMove`` or ``CapacityExhausted``.
  ``get(reservation_id)``, ``reservations()``, ``current(key)``
      each reservation it made, in its present state as the system tells it.
  ``expired(now) -> [Reservation]``
      those still reserved whose lease the system considers run out at ``now``.
  ``apply(reservation_id, move)``
      a janitor's move (``Move.EXPIRE_AND_RELEASE``, ``EXPIRE_AND_HOLD``,
      ``SETTLE_EXISTING``, ``SETTLE_UNUSED``) made with the system's recovery;
      ``IllegalMove`` to refuse it.
  ``owner_move(key, owner, move)``
      a worker's confirm (``Move.CONFIRM``, ``CONFIRM_EXISTING``); a worker that
      never held the key gets ``StaleAttempt``.
  ``fail(key, owner) -> Reservation``
      a worker's task raised (before its effect, after it, or on a refused
      commit): the system's own failure handler for that worker's job (retry
      it now, delete its idempotency record, mark it failed), as the library's
      worker runs it. Accepted (a returned reservation) when the handler ran on
      the job this worker holds; refused with ``StaleAttempt`` (the worker never
      held the key) or ``IllegalMove`` (the system no longer lets this worker's
      job fail: its lease was taken back, the job is finished). fence's model
      moves an accepted report to ``outcome_unknown``, for the janitor to
      settle like an expired lease it holds; a handler that frees the job at
      once answers otherwise, and the lockstep reports that as a finding about
      the system. ``fence targets`` and ``check_target`` model failures on
      every row.
  ``snapshot()``
      everything that decides its next answers, for the explorer.
  ``free``, ``held``
      units not held and held (properties).

  ``TargetLedger`` gives every member from methods of the subclass that each
  make one of the system's calls: ``_take(key, owner, reservation_id,
  deadline)`` (a worker taking the key's job: the record of it, anything with
  ``reservation_id``, ``key``, ``owner``, ``deadline``, such as a subclass of
  the frozen dataclass ``Taken``; the ledger keeps them by id, in order, in
  ``_records()``), ``_state(record)`` (what the system
  says of one), ``_past_lease(record)`` (does the system's own expiry query
  list it), ``_confirm(record, move)`` (the worker's completion call),
  ``_fail(record)`` (the worker's failure handler; there is no default: a
  target states what its system does when a task raises, or refuses every
  report with ``IllegalMove`` in its own words), and the janitor's
  ``_release(record)`` (as shipped: the system's recovery), ``_hold(record)``
  and ``_settle(record, move)`` (guarded: the guard's recovery). ``JOB`` names
  the record's field for the system's job, so that a reservation whose job a
  newer one took reads ``unused`` and a stale worker's call that reaches the
  newer one reports it. ``_finished(job, move)`` keeps which move finished a
  job where the system does not. Its ``time`` (a ``ModelTime``, the
  session's by default) maps model time onto the server's, and
  ``_move_clock(ticks)`` moves the system's stored times (the session's
  ``move_time`` by default). Its constructor adopts the server as the session
  holds it ("Restorable" below); a subclass with state of its own names it
  in ``STATE`` (as ``{name: type}``, made empty by the constructor), and
  the default ``snapshot()`` holds the records, the
  session's snapshot of the image and that state. Two helpers save
  the plumbing: ``_answered(question, read)`` reads the server once until the
  next write (states that need a query per reservation ask it once a step),
  and ``_moved(read, call, why)`` makes a write accepted only if it changed
  what ``read`` answers ("accepted" below).

* a **storage** (subclass ``TargetStorage``): ``url -> storage`` with
  ``destination_factory``, ``ledger_factory`` and ``close``; each world it makes
  starts on an emptied server. It opens one *session* on the server (with
  ``empty()``, ``versions()``, ``close()``): naming its ledger, session and
  URL schemes (``LEDGER``, ``SESSION``, ``URL_SCHEMES``) is the whole storage.
  ``images.RedisSession`` and ``images.PostgresSession`` are such sessions;
  a Redis one names its library's distributions in ``LIBRARIES`` for
  ``versions()``.

* a **row** (``fence.targets.Target``) naming the storage, the model policy the
  system claims and how its recovery and time work.

What the protocol asks of a target beyond its members:

**Accepted.** The world records a move the ledger returns as accepted, and one
it refuses (``IllegalMove``) as refused; the lockstep and invariants 4 and 5
hang on that. Many systems refuse nothing: a stale ack, or a completion of a
row that is gone, returns as quietly as a good one. For them a write counts as
accepted only if it changed the system's state: ``only_if_it_moves(read, call,
why)`` makes the call and refuses unless ``read()`` answers differently after
it, and ``refused_unless(moved, why)`` says the same where the adapter knows.
A system that refuses by raising (a conflict error, a database's exception)
is wrapped in ``refused_by(errors, why)``, which makes its error the
``IllegalMove``, in the library's words.
The same holds for a failure report (``fail``): it is accepted when the
system's failure handler changed the worker's job (retried it, deleted its
record, marked it failed), refused when the handler had nothing of this
worker's to act on.

**A guarded task's failure goes to its guard.** A library's own failure
handler (retry the job now, drop the message, mark the row failed) frees the
job while the effect may have landed or a commit may still be in flight: that
is the bug fence is about, on the failure path. A guarded task instead catches
its exception in the guard's wrapper and settles its own attempt through the
guard's recovery, with the same calls the janitor's settle makes (abandon the
attempt unless it committed, then complete the job, or give it back and run
it afresh). Until that settle the job is ``outcome_unknown`` and the worker's
memory is the only place the failure is kept, so a target records it itself:
``GUARD_CATCHES_FAILURES = True`` on the ledger makes the guarded row's
``fail`` ``self._fail_through_guard(record)`` (``_fail`` is then only the
shipped row's handler), which refuses unless
the reservation is still ``reserved`` (the recovery took the lease back
first), and from then on reports it ``outcome_unknown`` while the system
still shows it running. The janitor's ``SETTLE_EXISTING`` / ``SETTLE_UNUSED``
then make the settle, as the wrapper would, at whatever later step the
interleaving puts them (the worker may be slow between catching and settling).

**One reservation per janitor call.** ``apply(reservation_id, move)`` must touch
that one reservation. A library whose recovery sweeps a whole registry at once
(every stale job, every expired message) is driven with one queue, list or
registry per key, or paged to one entry per call, so that the machines can put
other events between two recoveries, as the model does.

**Model time.** The model's clock is whole ticks. A target maps one tick onto
``tick_seconds`` of the server's clock (``ModelTime``), and never sleeps:
moving the model on by n ticks moves every stored instant the system compares
with its clock (heartbeats, delivery times) back by n ticks, and shortens every
TTL by as much (``images.RedisImage.move_time`` does both on Redis). A lease
of L ticks is a timeout of (L - 1/2) ticks (``ModelTime.timeout``): the half
tick absorbs the milliseconds of real time between two calls, so a job is
stale from the tick its lease runs out, never a tick early or late; a walk
that takes longer than half a tick of real time breaks that assumption. An
image (``images``) keeps each stored instant and TTL as whole ticks before
(or after) the clock at the dump, never as an instant.

**Restorable.** For the explorer, the ledger inherits ``Restorable`` (through
``TargetLedger``): ``dump() -> image`` and ``load(image)`` of everything it
keeps on the server, ``SHARED`` naming its session, each server call marked
(``reads``/``writes``, or ``self._reading()``/``self._writing()``), and
``self._restoring(session.restorer)`` (``TargetLedger``'s constructor calls it). Its
``snapshot()`` holds its own records and its image, canonical only where equal
states differ (an id that depends on the path taken, an instant). The
explorer's ``FaithfulnessCheck`` tests all of that while it walks.
``fence.targets.images`` has the dump, load and snapshot of a Redis database
and of a list of PostgreSQL tables with their sequences.

This module is the protocol's one place to import from; its parts live in
``fence.targets.ledger`` (``TargetLedger`` and the "accepted" helpers),
``fence.targets.taken`` (a record, ``Taken``, and how its fields stand in a
snapshot: ``library_id()``, ``not_in_snapshot()``), ``fence.targets.storage``
(``TargetStorage``) and ``fence.targets.model_time``.
"""


from __future__ import annotations

from fence.base.errors import BackendError, CapacityExhausted, IllegalMove, StaleAttempt
from fence.model.ledger import Move, Reservation, ReservationState
from fence.model.protocol import LEDGER_METHODS, LEDGER_PROPERTIES
from fence.model.restore import Restorable, Restorer, reads, writes
from fence.targets.ledger import (
    CONFIRMS, EXISTING_MOVES, EXPIRIES, TargetLedger, only_if_it_moves, refused_by, refused_unless,
)
from fence.targets.model_time import ModelTime
from fence.targets.storage import TargetStorage
from fence.targets.taken import Taken, TakenReservation, library_id, not_in_snapshot

__all__ = [
    "CONFIRMS", "EXISTING_MOVES", "EXPIRIES", "LEDGER_METHODS", "LEDGER_PROPERTIES", "BackendError", "CapacityExhausted",
    "IllegalMove", "ModelTime", "Move", "Reservation", "ReservationState", "Restorable", "Restorer",
    "StaleAttempt", "Taken", "TakenReservation", "TargetLedger", "TargetStorage", "library_id", "not_in_snapshot",
    "only_if_it_moves", "reads", "refused_by", "refused_unless", "writes",
]
