"""A ledger that frees a unit twice when two janitors settle the same reservation.

Bug: a settle of a reservation that is already unused is accepted (a missing
state check in a hand-written UPDATE), and the unit goes back to the pool again.

Breaks: 4 capacity_conserved.   Check: fence check abandon-fenced --ledger ledger_frees_twice.py:LedgerFreesTwice
"""

from fence import Ledger, Move, ReservationState


class LedgerFreesTwice(Ledger):
    def __init__(self, capacity):
        super().__init__(capacity)
        self.freed_again = 0

    def apply(self, reservation_id, move):
        reservation = self.get(reservation_id)
        if move is Move.SETTLE_UNUSED and reservation.state is ReservationState.UNUSED:
            self.freed_again += 1
            return reservation
        return super().apply(reservation_id, move)

    @property
    def free(self):
        return super().free + self.freed_again

    def snapshot(self):
        return (super().snapshot(), self.freed_again)
