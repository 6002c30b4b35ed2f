"""A TicketService subclass with state of its own: a key a lookup saw absent skips the fence.

Bug: an optimisation kept in an extra attribute. After a lookup answered
"absent", commits for that key skip the put-if-absent check until a lookup
finds the key, so an old attempt and its retry can both write.

Breaks: 1 no_duplicate_writes (with the fenced policy, whose fence is what stops duplicates).
Check: fence check fenced --destination lookup_skips_fence.py:LookupSkipsFence
"""

from dataclasses import replace

from fence import TicketService


class LookupSkipsFence(TicketService):
    def __init__(self, guards):
        super().__init__(guards)
        self.seen_absent: set[str] = set()

    def lookup(self, key):
        found = super().lookup(key)
        if found:
            self.seen_absent.discard(key)
        else:
            self.seen_absent.add(key)
        return found

    def commit(self, attempt_id, key, payload):
        if key not in self.seen_absent:
            return super().commit(attempt_id, key, payload)
        guards = self.guards
        self.guards = replace(guards, fence=False)  # "the janitor just saw it absent"
        try:
            return super().commit(attempt_id, key, payload)
        finally:
            self.guards = guards

    def snapshot(self):
        return (super().snapshot(), tuple(sorted(self.seen_absent)))
