"""What every target's ledger and storage do alike, kept once.

A target's ledger keeps its own record of each reservation it took (which
row or message, taken by which worker, for which attempt, with which
deadline) and reads each reservation's state back from the job system
(``_state``). Everything else on the reading side of fence's ``Ledger``
protocol (one reservation, all of them, a key's latest, units held and free)
follows from those two, and is the same for procrastinate, pgqueuer and
celery. A target's storage holds one session on the server and hands out
fresh ledgers on it; emptying, versions and closing go through that session.
"""

from __future__ import annotations

from typing import Callable, Protocol

from fence._ledger import HOLDING_STATES, Reservation, ReservationState
from fence._restore import Restorable
from fence.backends import ModelStorage


class TakenReservation(Protocol):
    """A target's own record of one reservation it took (``_Fetch``, ``_Pick``, ``_Delivery``)."""

    reservation_id: str
    key: str
    owner: str
    deadline: float


class TargetLedger(Restorable):
    """The reading side of fence's ``Ledger`` protocol, from a target's records and its ``_state``.

    A subclass gives ``_records`` (its records by reservation id, in the
    order it took them) and ``_state`` (what the job system says of one).
    """

    capacity: int

    def _records(self) -> dict[str, TakenReservation]:
        raise NotImplementedError

    def _state(self, record: TakenReservation) -> ReservationState:
        raise NotImplementedError

    def _reservation(self, record: TakenReservation) -> Reservation:
        return Reservation(record.reservation_id, record.key, record.owner, record.deadline, self._state(record))

    def get(self, reservation_id: str) -> Reservation:
        return self._reservation(self._records()[reservation_id])

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


class TargetStorage(ModelStorage):
    """A target's storage: fence's destination tables (``ModelStorage``) beside one session on the job system.

    A subclass sets ``guarded`` and opens its session (with ``empty``,
    ``versions`` and ``close``) through ``_open_session`` in its constructor,
    after ``ModelStorage``'s own, and names its ledger
    class (``LEDGER``, made as ``LEDGER(session, capacity, guarded=...)``) and
    itself (``WHAT``, for the one error a pickling attempt gets).
    """

    LEDGER: type[TargetLedger]
    WHAT: str

    def _open_session(self, open_session: Callable[[], object]) -> None:
        try:
            self.session = open_session()
        except BaseException:
            ModelStorage.close(self)  # the destination's store is open already
            raise

    def __reduce__(self):
        # The session's connections and the server's state live in this process.
        raise TypeError(f"{self.WHAT}'s storage lives in the process that opened it")

    def _fresh(self) -> None:
        if not self._half_given:
            self.session.empty()
        super()._fresh()

    def ledger_factory(self, capacity: int) -> TargetLedger:
        self._fresh()
        return self.LEDGER(self.session, capacity, guarded=self.guarded)

    def versions(self) -> dict[str, str]:
        return self.session.versions()

    def close(self) -> None:
        try:
            self.session.close()
        finally:
            super().close()
