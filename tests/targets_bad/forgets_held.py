"""A target written as a user might, whose ledger forgets ``held``: every other member is there.

fence's lockstep compares units held and free, so a ledger without ``held``
once failed every cell with ``AttributeError: ... no attribute 'held'``; it
must get the one-line protocol error instead, from every engine.
"""

from fence import Ledger, TicketService


class ForgetsHeld:
    """fence's in-memory ledger behind every member of the ledger protocol except ``held``."""

    def __init__(self, capacity):
        self._inner = Ledger(capacity)

    def reserve(self, key, owner, now, lease):
        return self._inner.reserve(key, owner, now, lease)

    def get(self, reservation_id):
        return self._inner.get(reservation_id)

    def reservations(self):
        return self._inner.reservations()

    def expired(self, now):
        return self._inner.expired(now)

    def current(self, key):
        return self._inner.current(key)

    def apply(self, reservation_id, move):
        return self._inner.apply(reservation_id, move)

    def owner_move(self, key, owner, move):
        return self._inner.owner_move(key, owner, move)

    def snapshot(self):
        return self._inner.snapshot()

    @property
    def free(self):
        return self._inner.free


class ForgetsHeldStorage:
    """A target's storage (url -> destination_factory, ledger_factory, close) needing no server."""

    def __init__(self, url):
        self.url = url

    def destination_factory(self, guards):
        return TicketService(guards)

    def ledger_factory(self, capacity):
        return ForgetsHeld(capacity)

    def close(self):
        pass
