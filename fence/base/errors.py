"""The exceptions fence raises.

One root, ``FenceError``, and a few leaves that also subclass the builtin they
resemble, so callers can catch either. Every message names the action, the state
it met and, where there is one, the fix.
"""

from __future__ import annotations


class FenceError(Exception):
    """Root of every error fence raises on purpose."""


class IllegalMove(FenceError, ValueError):
    """A reservation was asked to make a move its state does not allow.

    The ledger refuses the move and changes nothing.
    """


class StaleAttempt(FenceError, PermissionError):
    """An attempt that no longer owns a reservation tried to change it."""


class CapacityExhausted(FenceError, RuntimeError):
    """Every capacity unit is held; nothing can be reserved until one returns."""


class BadInput(FenceError, ValueError):
    """A user-supplied value (policy name, import path, capacity, file) is unusable.

    The command line turns this into one line on stderr and exit status 2.
    """


class BackendError(FenceError, RuntimeError):
    """A storage backend cannot be used: a URL that does not parse, a database that
    cannot be reached, a schema of another version.

    The message is one line naming the problem and the fix; the command line
    prints it and exits 2, as for bad input.
    """


class WitnessRequired(FenceError, TypeError):
    """A policy asked the destination for attempt state it does not keep."""


class PluginBroken(FenceError, TypeError):
    """A user's plug-in broke its protocol: a method returned the wrong thing, or raised.

    The message names the plug-in, the method and what it must return; the
    command line prints it as one line and exits 2, as for bad input.
    """
