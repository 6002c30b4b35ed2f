"""A destination whose lookup() knows only the key written last, keeping fence's snapshot().

``TicketService.snapshot()`` declares each key's payloads, not the order of
writes across keys; this subclass answers by that order and does not add it
to its snapshot. Two states the snapshot calls equal (job1 then job2 written,
or job2 then job1) answer lookup() differently: the explorer must say it
cannot walk this faithfully, never prove anything of it.
"""

from fence import TicketService


class RemembersLastKey(TicketService):
    def lookup(self, key):
        return bool(self._effects) and self._effects[-1].key == key


class RemembersLastKeyWithoutStepMemo(RemembersLastKey):
    """The same, walked without the plug-in step memo: the faithfulness check alone must catch it."""

    STEP_MEMO = False
