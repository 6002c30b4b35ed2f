"""A ledger whose confirm does not check that the caller owns the key's current reservation.

Bug: a stale attempt's late confirm lands on the retry's reservation.

Base: naive, whose old attempts do confirm late (abandon-fenced's never get that far).
Breaks: 5 stale_attempt_cannot_change_newer.
Check: fence check naive --ledger confirm_without_owner.py:ConfirmWithoutOwner
"""

from fence import Ledger, StaleAttempt


class ConfirmWithoutOwner(Ledger):
    def owner_move(self, key, owner, move):
        current = self.current(key)
        if current is None:
            raise StaleAttempt(f"{key!r} has no reservation")
        return self.apply(current.reservation_id, move)  # whoever asks
