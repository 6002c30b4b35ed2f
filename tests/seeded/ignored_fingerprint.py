"""A destination that ignores the fingerprint guard it was asked for.

Bug: a retry with a revised payload meets the fence and is told "already
exists", as if its own ticket were on record: a silent replay.

Base: reconcile with fence and fingerprint (``FencedWithFingerprint``), which holds 7.
Breaks: 7 no_silent_replay.
Check: fence check ignored_fingerprint.py:FencedWithFingerprint --destination ignored_fingerprint.py:IgnoresFingerprint
"""

from dataclasses import replace

from fence import Reconcile, TicketService, fenced

FencedWithFingerprint = fenced(Reconcile(), fingerprint=True, name="reconcile-fence-fingerprint")


class IgnoresFingerprint(TicketService):
    def __init__(self, guards):
        super().__init__(replace(guards, fingerprint=False))
