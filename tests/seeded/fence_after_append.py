"""A destination that appends the ticket first and checks its fence after.

Bug: the put-if-absent is checked after the write: a second commit for a key
is answered "already exists", but its ticket was written anyway.

Breaks: 1 no_duplicate_writes (with the fenced policy, whose fence is what stops duplicates).
Check: fence check fenced --destination fence_after_append.py:FenceAfterAppend
"""

from fence import CommitResult, TicketService


class FenceAfterAppend(TicketService):
    def commit(self, attempt_id, key, payload):
        existed = self.lookup(key)
        guards = self.guards
        self.guards = type(guards)(fingerprint=guards.fingerprint, witness=guards.witness)
        try:
            result = super().commit(attempt_id, key, payload)  # the write, unfenced
        finally:
            self.guards = guards
        if guards.fence and existed and result is CommitResult.WRITTEN:
            return CommitResult.ALREADY_EXISTS  # ...and the fence, too late
        return result
