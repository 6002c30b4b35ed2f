"""Plug-ins that treat one job's name as more than a label.

Jobs are then not interchangeable: a walk with jobs symmetric keys a state and
its renaming as one, and would judge job2's states by job1's. fence must never
call such a plug-in safe for that reason: with --symmetry each is either
violated, as without, or reported unfaithful (``tests/test_plugin_symmetry.py``).
"""

from fence import Guards, TicketService

SPECIAL_KEY = "job2"


class WritesJob2Twice(TicketService):
    """Every commit for the key "job2" is sent twice, the second time past the guards (a retrying client)."""

    def commit(self, attempt_id, key, payload):
        answer = super().commit(attempt_id, key, payload)
        if key == SPECIAL_KEY:
            guards = self.guards
            self.guards = Guards()
            try:
                super().commit(attempt_id, key, payload)
            finally:
                self.guards = guards
        return answer
