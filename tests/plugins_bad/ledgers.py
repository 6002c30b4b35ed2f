"""Ledger factories that break the ledger protocol."""

from fence import Ledger


def forgets_to_return(capacity):
    Ledger(capacity)


class ReserveRaises(Ledger):
    def reserve(self, key, owner, now, lease):
        raise KeyError(key)
