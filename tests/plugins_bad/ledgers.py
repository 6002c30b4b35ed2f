"""Ledger factories that break the ledger protocol."""

from fence import Ledger


def forgets_to_return(capacity):
    Ledger(capacity)


class ReserveRaises(Ledger):
    def reserve(self, key, owner, now, lease):
        raise KeyError(key)


class ExpiredListsClaimed(Ledger):
    """expired() lists every lease past its deadline, also those a janitor already claimed."""

    def expired(self, now):
        return [r for r in self.reservations() if r.expired(now)]


class ExpiredFromStaleCache(Ledger):
    """expired() answers from a cache that only reserve() fills: a claimed lease still shows as reserved there."""

    def __init__(self, capacity):
        super().__init__(capacity)
        self.cache = {}

    def reserve(self, key, owner, now, lease):
        reservation = super().reserve(key, owner, now, lease)
        self.cache[reservation.reservation_id] = reservation
        return reservation

    def expired(self, now):
        return [r for r in self.cache.values() if r.expired(now)]


class GetByJob(Ledger):
    """get() looks a reservation up by its job's key, not by its id: KeyError for one it made."""

    def get(self, reservation_id):
        return self._reservations[reservation_id.partition("/")[0]]
