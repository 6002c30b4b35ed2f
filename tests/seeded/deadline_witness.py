"""A witness whose abandonment holds only until a deadline: two more writes, then it forgets.

Bug: the tombstone of an abandoned attempt expires. The janitor abandoned the
attempt and freed its unit; once two other writes have happened, the old
attempt's late commit is let through.

Breaks: 3 no_early_release.   Check: fence check abandon-fenced --destination deadline_witness.py:DeadlineWitness
"""

from fence import AttemptState, TicketService

DEADLINE_WRITES = 2


class DeadlineWitness(TicketService):
    def __init__(self, guards):
        super().__init__(guards)
        self.writes_since_abandon: dict[str, int] = {}

    def _count_a_write(self):
        for attempt in self.writes_since_abandon:
            self.writes_since_abandon[attempt] += 1

    def abandon_unless_committed(self, attempt_id):
        answer = super().abandon_unless_committed(attempt_id)
        self._count_a_write()
        if answer is AttemptState.ABANDONED:
            self.writes_since_abandon.setdefault(attempt_id, 0)
        return answer

    def register(self, attempt_id, key):
        self._count_a_write()
        return super().register(attempt_id, key)

    def commit(self, attempt_id, key, payload):
        expired = self.writes_since_abandon.get(attempt_id, 0) >= DEADLINE_WRITES
        self._count_a_write()
        if not expired:
            return super().commit(attempt_id, key, payload)
        guards = self.guards
        self.guards = type(guards)(fence=guards.fence, fingerprint=guards.fingerprint)  # the witness has forgotten
        try:
            return super().commit(attempt_id, key, payload)
        finally:
            self.guards = guards

    def snapshot(self):
        return (super().snapshot(), tuple(sorted(self.writes_since_abandon.items())))
