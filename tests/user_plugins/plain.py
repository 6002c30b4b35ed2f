"""A destination written as a user's subclass of fence's own, with nothing changed.

It behaves exactly as ``TicketService``, but fence walks it the generic way
(whole worlds, the plug-in's snapshot()), as it does every user's destination.
"""

from fence import TicketService


class PlainSubclass(TicketService):
    pass
