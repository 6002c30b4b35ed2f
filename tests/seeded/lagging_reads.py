"""Destinations whose reads lag one write.

``LaggingReads``: lookup() and attempt_state() answer as of before the latest
write; the guards themselves are exact. With abandon-fenced this breaks
nothing: the abandon is a write, and its own answer is what the policy trusts.
fence must not report it (its invariants never take a plug-in's reads for facts).

``LaggingGuards``: the guards read the same lagging view (a put-if-absent and a
witness checked against a replica one write behind). An abandoned attempt's
commit that arrives right after the abandon still sees it in flight and writes.

Breaks (LaggingGuards): 3 no_early_release.
Check: fence check abandon-fenced --destination lagging_reads.py:LaggingGuards
"""

from fence import AttemptState, CommitResult, TicketService


class LaggingReads(TicketService):
    """Reads show the state before the latest write (register, commit or abandon)."""

    def __init__(self, guards):
        super().__init__(guards)
        self.ids: list[str] = []
        self.shown_keys: frozenset[str] = frozenset()
        self.shown_attempts: dict[str, AttemptState | None] = {}

    def _before_write(self, attempt_id):
        if attempt_id not in self.ids:
            self.ids.append(attempt_id)
        self.shown_keys = frozenset(effect.key for effect in self.effects())
        self.shown_attempts = {i: TicketService.attempt_state(self, i) for i in self.ids}

    def register(self, attempt_id, key):
        self._before_write(attempt_id)
        return super().register(attempt_id, key)

    def commit(self, attempt_id, key, payload):
        self._before_write(attempt_id)
        return super().commit(attempt_id, key, payload)

    def abandon_unless_committed(self, attempt_id):
        self._before_write(attempt_id)
        return super().abandon_unless_committed(attempt_id)

    def lookup(self, key):
        return key in self.shown_keys

    def attempt_state(self, attempt_id):
        return self.shown_attempts.get(attempt_id) if self.guards.witness else None

    def snapshot(self):
        return (super().snapshot(), tuple(self.ids), tuple(sorted(self.shown_keys)),
                tuple(sorted((i, s.value if s else "") for i, s in self.shown_attempts.items())))


class LaggingGuards(LaggingReads):
    """The guards too judge a commit on the lagging view."""

    def commit(self, attempt_id, key, payload):
        lagging_state = self.shown_attempts.get(attempt_id)
        lagging_key = key in self.shown_keys
        self._before_write(attempt_id)
        if self.guards.witness and lagging_state is AttemptState.ABANDONED:
            return CommitResult.ABANDONED
        if self.guards.fence and lagging_key:
            return CommitResult.ALREADY_EXISTS
        # Past the lagging checks: write whatever the exact state says.
        guards = self.guards
        self.guards = type(guards)()
        try:
            return TicketService.commit(self, attempt_id, key, payload)
        finally:
            self.guards = guards
