"""The end of a run: the model's own fault-free drain, as every engine runs it after its chosen steps.

``Drain`` is the part of ``World`` that delivers everything, lets live workers
finish and runs the janitors to a fixed point (``World`` inherits it: the drain
reads and moves the world's own fields). Its orders are functions of what the
world holds, never of the order things were sent in: the explorer's key and
drain judge rely on it.
"""

from __future__ import annotations

import heapq

from fence.model import protocol
from fence.model.actions import Step, drain_order
from fence.model.ledger import ReservationState
from fence.model.network_actions import Deliver, Tick
from fence.model.janitor_actions import Settle
from fence.model.policies import Evidence


def snapshot_is_complete(part) -> bool:
    """Does ``part`` (a ledger or destination) say that its ``snapshot()`` holds all of its state?

    fence's own ledgers and destinations say so in their class body
    (``SNAPSHOT_IS_COMPLETE = True``). Only the part's own class counts, not an
    inherited flag: a user's subclass may add state its parent's snapshot leaves out.
    """
    return vars(type(part)).get("SNAPSHOT_IS_COMPLETE", False) is True


class Drain:
    """A world's drain (mixed into ``World``)."""

    def start_draining(self) -> None:
        """From here on no faults happen and retries are not bounded (what ``drain`` runs under)."""
        self.draining = True
        # What is enabled changes with draining (retries are no longer bounded):
        # an enabled list cached before the drain would hide them.
        self._enabled_cache = None

    def drain(self, max_rounds: int = 12) -> bool:
        """Deliver everything, let live workers finish, run the janitor to a fixed point.

        No faults happen here: messages arrive, workers do not crash, janitor 0 does
        its whole job each round, retries are not bounded. Returns True if a fixed
        point was reached within ``max_rounds``.
        """
        self.start_draining()
        after = None
        for _ in range(max_rounds):
            # A round starts where the last one ended: its fingerprint is the last one's ``after``.
            before, steps = after if after is not None else self.fingerprint(), len(self.trace)
            self._drain_round()
            after = self.fingerprint()
            if self.reached_fixed_point(before, steps, after):
                return True
        return False

    def reached_fixed_point(self, before: tuple, steps_before: int, after: tuple | None = None) -> bool:
        """Did the drain round that started at ``before`` (fingerprint, trace length) change nothing?

        ``after`` is the fingerprint now, if the caller has it already.

        A round that only re-asks and holds leaves the fingerprint as it was. That
        is a fixed point only if the fingerprint sees everything that decides the
        next answers, which fence knows of its own ledger and destination only; a
        plug-in may keep state outside its ``snapshot()`` (a witness that gives up
        after some questions), so with one the drain stops only at a round that
        took no step at all, or at ``max_rounds``.
        """
        if (self.fingerprint() if after is None else after) != before:
            return False
        return self.snapshots_complete() or len(self.trace) == steps_before

    def snapshots_complete(self) -> bool:
        """Are the ledger and destination fence's own, whose snapshots hold all of their state?"""
        return snapshot_is_complete(self.destination) and snapshot_is_complete(self.ledger)

    def _drain_round(self) -> None:
        # Every order in a drain round is a function of what the world holds, never
        # of the order in which messages were sent, reservations made or evidence
        # gathered: two worlds that differ only in such orders drain alike. The
        # explorer's state key leaves those orders out and relies on this.
        self._drain_workers()
        self._drain_clock_and_janitors()

    def _drain_workers(self) -> int:
        """A drain round's first half: every message delivered, every live worker's next step.

        Returns how many steps it took. A round in which this half took a step
        is never a fixed point: a delivered message cannot be in flight again by
        the round's end (a registration or commit is sent once per attempt, and
        an answer only on a commit's delivery, which happens here), and a
        worker's phase never goes back. The explorer's drain judge relies on it.
        """
        steps = len(self.trace)
        while self.network:
            self._drain_deliveries()
        self._drain_worker_steps()
        return len(self.trace) - steps

    def _drain_deliver_next(self) -> None:
        """Deliver the message a drain delivers next (one step of ``_drain_deliveries``, for the drain judge)."""
        message = min(self.network, key=drain_order)
        self.apply(Deliver(message.kind._value_, message.attempt))

    def _drain_deliveries(self) -> None:
        """Deliver what is in flight, always the least by ``drain_order``: what is in flight alone decides the order.

        A heap rather than a ``min`` over the network per delivery, which made a
        drain of a hundred jobs quadratic. A delivery removes its message and
        appends at most an answer, so the heap follows the network by pushing
        what was appended; the caller's loop catches anything else.
        """
        heap = [(drain_order(m), m) for m in self.network]  # the orders are unique: messages are never compared
        heapq.heapify(heap)
        network = self.network
        while heap:
            _, message = heapq.heappop(heap)
            before = len(network)
            self.apply(Deliver(message.kind._value_, message.attempt))
            for sent in network[before - 1:]:
                heapq.heappush(heap, (drain_order(sent), sent))

    def _drain_worker_steps(self) -> None:
        """Every live worker's next step, in the drain's order: confirms, then commits sent, then starts."""
        for kind in ("confirm", "send_commit", "start"):
            for action in sorted(self.enabled(kind), key=lambda a: a.attempt):
                self.apply(action)

    def _drain_clock_and_janitors(self) -> None:
        """A drain round's second half: the clock to the last deadline, the janitors, the retries."""
        unexpired = [
            r.deadline for r in protocol.ledger_reservations(self.ledger) if r.state is ReservationState.RESERVED
        ]
        if unexpired and max(unexpired) > self.now and not self.network:
            self.apply_unbounded_tick(int(max(unexpired) - self.now))
        # Janitors first finish what they were doing (act on the answers they hold,
        # stale or not), then janitor 0 makes a whole pass. Which janitor held which
        # answer does not change the order: janitors are interchangeable.
        pending = sorted(self.enabled("settle"), key=self._settle_order)
        for action in pending:
            self.apply(action)
        for action in sorted(self.enabled("scan"), key=lambda a: a.reservation):
            if action.janitor == 0 and action in self.enabled("scan"):
                self.apply(action)
        for action in sorted(self.enabled("probe"), key=lambda a: a.reservation):
            if action.janitor == 0:
                self.apply(action)
        for action in sorted(self.enabled("settle"), key=self._settle_order):
            self.apply(action)
        retries = sorted(self.enabled("retry"), key=lambda a: (a.job, a.revised))
        for action in self.enabled("reserve") + retries:
            if self.is_enabled(action):
                self.apply(action)
        # A write no commit reported (a destination that writes on its own) still counts at the end.
        self.observer.writes_no_worker_made(self.destination.effects())

    def _settle_order(self, action: Settle) -> tuple:
        """The drain's order of settles: by reservation, then by the answer held, then janitor.

        The policy is never asked here (its ``decide`` runs only when a settle is
        taken). Ordering by fence's own ``Evidence`` value, before the janitor,
        keeps the order independent of which janitor holds which answer, which the
        explorer's key relies on; any other evidence object is ordered by janitor.
        """
        if action.follow_up:
            return (action.reservation, 1, "", action.janitor)
        held = self.evidence[action.janitor][action.reservation]
        answer = repr(held) if type(held) is Evidence else ""
        return (action.reservation, 0, answer, action.janitor)

    def apply_unbounded_tick(self, by: int) -> Step:
        """A tick the drain may take past the horizon, to let every lease expire."""
        self._enabled_cache = None
        self.job_memo = {}
        sentence, actor, target = Tick(by).take(self)
        step = Step(Tick(by), sentence, self.now, actor, target, self.draining)
        self.trace.append(step)
        return step
