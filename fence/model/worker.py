"""The worker's life: its phases and legal moves, as one table every engine uses.

Theory of operation
-------------------
A worker attempt reserves a unit, starts (announcing itself to the
destination), sends its commit, hears the destination's answer and confirms at
the ledger. It may crash at any point while it lives. With failures modelled
(``ModelConfig.failures``) it may also *fail*: raise, and report the failure to
the ledger for its reservation, before its effect, after it, or after giving
up on a refused commit (a real queue's failure handler: retry now, delete the
idempotency record, mark failed). A crash says nothing; a failure is a call. ``WORKER_TRANSITIONS`` is
that life as data, like the ledger's ``TRANSITIONS``: a move that is not in the
table raises ``IllegalMove`` naming the move and the phase, and the diagram
(``worker_mermaid``) is drawn from the table.

Two rules every engine shares live here too:

* the answer-to-confirm rule (``confirm_move``): "written" is confirmed,
  "already exists" is confirmed as existing, any other answer is a refusal and
  the worker gives up;
* could this attempt still write (``can_still_write``): it has not sent its
  commit yet, or the commit is on its way, and the destination has not
  answered "abandoned" to an abandon of it. fence judges this from facts it
  holds, never from the destination's reads.

This module is pure: no clock, no threads, no I/O.
"""

from __future__ import annotations

import enum

from fence.model.destination import CommitResult
from fence.base.errors import IllegalMove
from fence.model.ledger import Move, table_mermaid


class Phase(enum.Enum):
    RESERVED = "reserved"  # holds a reservation, has not started
    WORKING = "working"  # registered (message sent), doing the work
    COMMIT_SENT = "commit_sent"  # commit on its way, or answered and the answer lost
    ACKED = "acked"  # the destination's answer arrived
    DONE = "done"  # confirmed
    REFUSED = "refused"  # heard a refusal and gave up; may still report the failure
    CRASHED = "crashed"
    FAILED = "failed"  # raised and reported the failure to the ledger


class WorkerMove(enum.Enum):
    START = "start"
    SEND_COMMIT = "send_commit"
    HEAR_ACCEPTED = "hear_accepted"  # written, or already exists
    HEAR_REFUSED = "hear_refused"  # conflict, abandoned: give up
    CONFIRM = "confirm"
    CRASH = "crash"
    FAIL = "fail"  # raise, and report the failure to the ledger


P, W = Phase, WorkerMove
WORKER_TRANSITIONS: dict[Phase, dict[WorkerMove, Phase]] = {
    P.RESERVED: {W.START: P.WORKING, W.CRASH: P.CRASHED, W.FAIL: P.FAILED},
    P.WORKING: {W.SEND_COMMIT: P.COMMIT_SENT, W.CRASH: P.CRASHED, W.FAIL: P.FAILED},
    P.COMMIT_SENT: {W.HEAR_ACCEPTED: P.ACKED, W.HEAR_REFUSED: P.REFUSED, W.CRASH: P.CRASHED, W.FAIL: P.FAILED},
    P.ACKED: {W.CONFIRM: P.DONE, W.CRASH: P.CRASHED, W.FAIL: P.FAILED},
    P.DONE: {},
    P.REFUSED: {W.FAIL: P.FAILED},
    P.CRASHED: {},
    P.FAILED: {},
}
del P, W

ALIVE_PHASES = frozenset(phase for phase, moves in WORKER_TRANSITIONS.items() if WorkerMove.CRASH in moves)
"""Phases a worker can still act from (and crash in). A worker that gave up on a refusal is not
alive: its one move left is to report the failure (``FAILABLE_PHASES``)."""
FAILABLE_PHASES = frozenset(phase for phase, moves in WORKER_TRANSITIONS.items() if WorkerMove.FAIL in moves)
"""Phases a worker can raise and report the failure from (when failures are modelled)."""
GONE_PHASES = frozenset({Phase.DONE, Phase.CRASHED, Phase.FAILED})
"""Phases a worker never moves from again."""
UNSENT_PHASES = frozenset({Phase.RESERVED, Phase.WORKING})
"""Phases before the commit was sent: the attempt can still write."""


def next_phase(phase: Phase, move: WorkerMove) -> Phase:
    """The phase ``move`` takes a worker in ``phase`` to, or IllegalMove naming what it allows."""
    target = WORKER_TRANSITIONS[phase].get(move)
    if target is None:
        allowed = ", ".join(m.value for m in WORKER_TRANSITIONS[phase]) or "nothing"
        raise IllegalMove(f"a worker that is {phase.value} cannot {move.value}; it may: {allowed}")
    return target


def hearing(result: CommitResult) -> WorkerMove:
    """What hearing the destination's answer is: accepted (confirm next) or a refusal (give up)."""
    return WorkerMove.HEAR_ACCEPTED if result in CONFIRM_MOVES else WorkerMove.HEAR_REFUSED


CONFIRM_MOVES: dict[CommitResult, Move] = {
    CommitResult.WRITTEN: Move.CONFIRM,
    CommitResult.ALREADY_EXISTS: Move.CONFIRM_EXISTING,
}
"""The answer-to-confirm rule: the ledger move a worker makes for each accepted answer."""


def confirm_move(result: CommitResult) -> Move:
    return CONFIRM_MOVES[result]


def can_still_write(phase: Phase, commit_in_flight: bool, abandoned: bool) -> bool:
    """Could this attempt still make an effect land? From fence's facts only (see the module)."""
    if abandoned:
        return False
    return phase in UNSENT_PHASES or commit_in_flight


def worker_mermaid() -> str:
    """The worker's life, drawn from ``WORKER_TRANSITIONS`` so it can never drift from it."""
    return table_mermaid(WORKER_TRANSITIONS, Phase.RESERVED)
