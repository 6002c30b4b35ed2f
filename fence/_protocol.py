"""What a plug-in's answer must be, checked at the moment fence receives it.

fence reaches a user's policy, destination and ledger only through their
protocols (README, "Bring your own"). An answer of the wrong kind would
otherwise fail later and elsewhere: a ``decide()`` that returns None became a
KeyError in the janitor's table of moves, a ``commit()`` that returns a string
an AttributeError in the world, and neither named the plug-in or the method.
So each answer is checked where it comes back, and a wrong one raises
``PluginBroken`` naming the plug-in, the method and what it must return; the
command line prints that as one line and exits 2.

A plug-in may raise fence's own errors (``IllegalMove``, ``StaleAttempt``,
``CapacityExhausted``, ``WitnessRequired``): they are part of the protocols
and pass through unchanged. Any other exception is the plug-in breaking its
protocol, and is reported the same way.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

from fence._errors import FenceError, PluginBroken


def describe(plugin: object, kind: str) -> str:
    """``policy 'mine' (MyPolicy in my_policy.py)``: enough for a user to find it."""
    cls = type(plugin)
    try:
        where = inspect.getsourcefile(cls) or cls.__module__
    except TypeError:  # a built-in type
        where = cls.__module__
    where = where.rsplit("/", 1)[-1]
    name = getattr(plugin, "name", None) if kind == "policy" else None
    named = f" {name!r}" if isinstance(name, str) else ""
    return f"{kind}{named} ({cls.__qualname__} in {where})"


def call(plugin: object, kind: str, method: str, must: str, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, with any exception other than fence's own turned into ``PluginBroken``."""
    try:
        return function(*args)
    except FenceError:
        raise
    except Exception as error:
        raise PluginBroken(
            f"{describe(plugin, kind)}: {method}() raised {type(error).__name__}: {error}; it must return {must}"
        ) from error


def returned(plugin: object, kind: str, method: str, value: Any, allowed: type | tuple[type, ...], must: str) -> Any:
    """``value`` if it is one of ``allowed``; otherwise ``PluginBroken`` saying what it must be."""
    if isinstance(value, allowed):
        return value
    got = "None" if value is None else f"{value!r} (a {type(value).__name__})"
    raise PluginBroken(f"{describe(plugin, kind)}: {method}() returned {got}; it must return {must}")


COMMIT_MUST = "a fence.CommitResult (WRITTEN, ALREADY_EXISTS, CONFLICT or ABANDONED)"
REGISTER_MUST = "a fence.AttemptState, or None when it keeps no witness"


def commit(destination: object, identity: str, key: str, payload: str) -> Any:
    """``destination.commit(...)``, whose answer must be a ``fence.CommitResult``."""
    from fence._destination import CommitResult

    result = call(destination, "destination", "commit", COMMIT_MUST, destination.commit, identity, key, payload)
    return returned(destination, "destination", "commit", result, CommitResult, COMMIT_MUST)


def register(destination: object, identity: str, key: str) -> Any:
    """``destination.register(...)``, whose answer must be a ``fence.AttemptState`` or None."""
    from fence._destination import AttemptState

    state = call(destination, "destination", "register", REGISTER_MUST, destination.register, identity, key)
    return returned(destination, "destination", "register", state, (AttemptState, type(None)), REGISTER_MUST)


_FENCE = str(Path(__file__).resolve().parent)


def _plugin_frame(error: BaseException):
    """The frame of the plug-in method fence called when ``error`` was raised, or None.

    That is the frame just after the last frame of fence's own code on the way
    in; if the innermost frame is fence's, fence itself raised.
    """
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    inside = [tb.tb_frame.f_code.co_filename.startswith(_FENCE) for tb in frames]
    if not frames or inside[-1] or True not in inside:
        return None
    last_fence = len(inside) - 1 - inside[::-1].index(True)
    return frames[last_fence + 1]


def broken_in(error: BaseException) -> PluginBroken | None:
    """The ``PluginBroken`` that ``error`` is or holds (Hypothesis may group what a run raised).

    An exception raised inside a plug-in's own code that no check above caught
    (a ledger's method, say) is one too, naming the method it came from. None
    when fence's own code raised it.
    """
    if isinstance(error, BaseExceptionGroup):
        for leaf in _leaves(error):
            found = broken_in(leaf)
            if found is not None:
                return found
        return None
    if isinstance(error, PluginBroken):
        return error
    if isinstance(error, FenceError):
        return None
    frame = _plugin_frame(error)
    if frame is None:
        return None
    code = frame.tb_frame.f_code
    where = f"{Path(code.co_filename).name}:{frame.tb_lineno}"
    return PluginBroken(
        f"a plug-in's {code.co_qualname}() ({where}) raised {type(error).__name__}: {error}; "
        "see its protocol in the README (\"Bring your own\")"
    )


def _leaves(group: BaseExceptionGroup):
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            yield from _leaves(inner)
        else:
            yield inner
