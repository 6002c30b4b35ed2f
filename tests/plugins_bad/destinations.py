"""Destination factories that break the destination protocol."""

import threading

from fence import CommitResult, TicketService


class CommitReturnsString(TicketService):
    def commit(self, attempt_id, key, payload):
        super().commit(attempt_id, key, payload)
        return "ok"


class CommitRaises(TicketService):
    def commit(self, attempt_id, key, payload):
        raise ConnectionError("the service hung up")


class RegisterReturnsText(TicketService):
    def register(self, attempt_id, key):
        super().register(attempt_id, key)
        return "in flight"


def forgets_to_return(guards):
    TicketService(guards)  # forgot the return


def needs_two_arguments(guards, region):
    return TicketService(guards)


class Incomplete:
    """Has commit only."""

    def __init__(self, guards):
        self.guards = guards

    def commit(self, attempt_id, key, payload):
        return CommitResult.WRITTEN


NOT_CALLABLE = 42


class CannotBeCopied(TicketService):
    """Holds a lock, which copy.deepcopy cannot copy (the explorer copies every state)."""

    def __init__(self, guards):
        super().__init__(guards)
        self.lock = threading.Lock()
