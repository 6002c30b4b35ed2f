"""What a plug-in's answer must be, checked at the moment fence receives it.

fence reaches a user's policy, destination and ledger only through their
protocols (docs/reference/protocols.md). An answer of the wrong kind would
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

A ledger's answers are checked too, where the world or a janitor receives them
(``ledger_get`` and its siblings below): a lookup that raises for a reservation
the ledger made, an ``expired()`` that lists a lease a janitor already claimed,
an answer that is not a ``fence.Reservation``. fence's own ledgers are not
checked: a wrong answer from one is a bug in fence, and keeps its traceback
rather than blaming a plug-in (``fences_own``). The same holds for copies: a
plug-in that ``copy.deepcopy`` cannot copy is named in one line (``deepcopy``).
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any, Callable

from fence.base.errors import FenceError, PluginBroken, WitnessRequired


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
    return _guarded(plugin, kind, f"{method}()", must, function, *args)


def _guarded(plugin: object, kind: str, shown: str, must: str, function: Callable[..., Any], *args: Any) -> Any:
    """``call``, naming the call as ``shown`` (a property is read, not called)."""
    try:
        return function(*args)
    except FenceError:
        raise
    except Exception as error:
        raise PluginBroken(
            f"{describe(plugin, kind)}: {shown} raised {type(error).__name__}: {error}; it must return {must}"
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
    from fence.model.destination import CommitResult

    if not fences_own(destination):
        complete(destination, "destination")
    result = call(destination, "destination", "commit", COMMIT_MUST, destination.commit, identity, key, payload)
    return returned(destination, "destination", "commit", result, CommitResult, COMMIT_MUST)


def register(destination: object, identity: str, key: str) -> Any:
    """``destination.register(...)``, whose answer must be a ``fence.AttemptState`` or None."""
    from fence.model.destination import AttemptState

    if not fences_own(destination):
        complete(destination, "destination")
    state = call(destination, "destination", "register", REGISTER_MUST, destination.register, identity, key)
    return returned(destination, "destination", "register", state, (AttemptState, type(None)), REGISTER_MUST)


_OWN: dict[type, bool] = {}


def fences_own(part: object) -> bool:
    """Is ``part`` made by fence's own code (its ledgers, destinations, policies), not a plug-in?"""
    cls = type(part)
    own = _OWN.get(cls)
    if own is None:
        module = cls.__module__
        own = _OWN[cls] = module == "fence" or module.startswith("fence.")
    return own


# -- the members each protocol requires -----------------------------------------------------
# Listed once, here: the loaders (fence.model.plugins) check a factory's product against them, the
# helpers below check each plug-in class the first time fence asks it anything, and
# docs/reference/protocols.md lists the same names.
LEDGER_METHODS = ("reserve", "get", "reservations", "expired", "current", "apply", "owner_move", "snapshot")
LEDGER_PROPERTIES = ("free", "held")
"""What a ledger reads as attributes (properties on fence.Ledger): units not held, units held."""
DESTINATION_METHODS = ("register", "commit", "lookup", "attempt_state", "abandon_unless_committed", "effects",
                       "snapshot")
DESTINATION_PROPERTIES: tuple[str, ...] = ()
MEMBERS = {
    "ledger": (LEDGER_METHODS, LEDGER_PROPERTIES),
    "destination": (DESTINATION_METHODS, DESTINATION_PROPERTIES),
}


def missing_members(part: object, kind: str) -> list[str]:
    """The members of ``kind``'s protocol (``ledger``, ``destination``) that ``part`` lacks.

    Read without calling anything: a property is looked up on the class, never
    evaluated (a target's ``held`` reaches its server).
    """
    methods, properties = MEMBERS[kind]
    absent = object()
    missing = [name for name in methods if not callable(inspect.getattr_static(part, name, None))]
    return missing + [name for name in properties if inspect.getattr_static(part, name, absent) is absent]


def members_problem(part: object, kind: str) -> PluginBroken | None:
    """The one-line error for a plug-in that lacks members of its protocol, or None."""
    missing = missing_members(part, kind)
    if not missing:
        return None
    methods, properties = MEMBERS[kind]
    listed = ", ".join([f"{name}()" for name in methods] + list(properties))
    return PluginBroken(
        f"{describe(part, kind)} has no {', '.join(missing)}; a {kind} must have every member of its "
        f"protocol ({listed}): see docs/reference/protocols.md, or subclass "
        f"{'fence.Ledger or fence.targets.TargetLedger' if kind == 'ledger' else 'fence.Destination'}"
    )


_COMPLETE: set[type] = set()


def complete(part: object, kind: str) -> None:
    """Raise the one-line ``PluginBroken`` if ``part`` (a plug-in) lacks a member of its protocol.

    Checked once per class, the first time fence asks a plug-in of it anything,
    in every engine (each asks through the helpers here).
    """
    cls = type(part)
    if cls in _COMPLETE:
        return
    broken = members_problem(part, kind)
    if broken is not None:
        raise broken
    _COMPLETE.add(cls)


# -- a ledger's answers ----------------------------------------------------------------
# Each helper asks fence's own ledgers directly (the explorer's hot path), and checks
# a plug-in's answer: one of fence's errors is a refusal and passes, anything else
# it raises, or an answer of the wrong kind, is its protocol broken.
def _asked(ledger: object, shown: str, must: str, function: Callable[..., Any], *args: Any) -> Any:
    return _guarded(ledger, "ledger", shown, must, function, *args)


def _method(ledger: object, name: str) -> Callable[..., Any]:
    """The plug-in ledger's ``name`` method, once the ledger is known to have every member."""
    complete(ledger, "ledger")
    return getattr(ledger, name)


def _wrong(ledger: object, shown: str, got: str, must: str) -> PluginBroken:
    return PluginBroken(f"{describe(ledger, 'ledger')}: {shown} returned {got}; it must return {must}")


def _shown(value: Any) -> str:
    return "None" if value is None else f"{value!r} (a {type(value).__name__})"


def _reservations(ledger: object, shown: str, listed: Any, must: str) -> list:
    from fence.model.ledger import Reservation

    try:
        listed = list(listed)
    except TypeError:
        raise _wrong(ledger, shown, _shown(listed), must) from None
    for reservation in listed:
        if not isinstance(reservation, Reservation):
            raise _wrong(ledger, shown, f"a list holding {_shown(reservation)}", must)
    return listed


def ledger_get(ledger: object, reservation_id: str) -> Any:
    """``ledger.get(reservation_id)`` for a reservation the ledger made: its ``fence.Reservation``."""
    if fences_own(ledger):
        return ledger.get(reservation_id)
    from fence.model.ledger import Reservation

    shown = f"get({reservation_id!r})"
    must = f"the fence.Reservation {reservation_id!r} that its reserve() made, in its present state"
    reservation = _asked(ledger, shown, must, _method(ledger, "get"), reservation_id)
    if not isinstance(reservation, Reservation) or reservation.reservation_id != reservation_id:
        raise _wrong(ledger, shown, _shown(reservation), must)
    return reservation


EXPIRED_MUST = "only reservations still reserved whose deadline has passed (a lease a janitor claimed is no longer expired)"


def ledger_expired(ledger: object, now: float) -> list:
    """``ledger.expired(now)``: the leases a janitor may scan, each reserved and past its deadline."""
    if fences_own(ledger):
        return ledger.expired(now)
    from fence.model.ledger import ReservationState

    shown = f"expired({now!r})"
    must = f"a list of fence.Reservation, {EXPIRED_MUST}"
    listed = _reservations(ledger, shown, _asked(ledger, shown, must, _method(ledger, "expired"), now), must)
    for reservation in listed:
        if reservation.state is not ReservationState.RESERVED or not reservation.expired(now):
            raise PluginBroken(
                f"{describe(ledger, 'ledger')}: {shown} listed {reservation.reservation_id}, which is "
                f"{reservation.state.value} with deadline {reservation.deadline!r}; it must list {EXPIRED_MUST}"
            )
    return listed


def ledger_reservations(ledger: object) -> list:
    """``ledger.reservations()``: every reservation it made, each a ``fence.Reservation``."""
    if fences_own(ledger):
        return ledger.reservations()
    must = "a list of every fence.Reservation it made"
    return _reservations(ledger, "reservations()", _asked(ledger, "reservations()", must, _method(ledger, "reservations")), must)


def ledger_free(ledger: object) -> int:
    """``ledger.free``: the units not held, a whole number."""
    if fences_own(ledger):
        return ledger.free
    return _units(ledger, "free", "the units not held")


def ledger_held(ledger: object) -> int:
    """``ledger.held``: the units its reservations hold, a whole number (the lockstep compares it)."""
    if fences_own(ledger):
        return ledger.held
    return _units(ledger, "held", "the units its reservations hold")


def _units(ledger: object, name: str, what: str) -> int:
    complete(ledger, "ledger")
    must = f"{what}, a whole number (an int)"
    units = _asked(ledger, name, must, getattr, ledger, name)
    if not isinstance(units, int) or isinstance(units, bool):
        raise _wrong(ledger, name, _shown(units), must)
    return units


def ledger_reserve(ledger: object, key: str, owner: str, now: float, lease: float) -> Any:
    """``ledger.reserve(...)``: a new reservation for that key and owner (or a refusal: one of fence's errors)."""
    if fences_own(ledger):
        return ledger.reserve(key, owner, now, lease)
    from fence.model.ledger import Reservation, ReservationState

    shown = f"reserve({key!r}, {owner!r}, {now!r}, {lease!r})"
    must = (f"a new fence.Reservation for key {key!r} and owner {owner!r} in state reserved, "
            "or raise CapacityExhausted or IllegalMove to refuse")
    reservation = _asked(ledger, shown, must, _method(ledger, "reserve"), key, owner, now, lease)
    if (not isinstance(reservation, Reservation) or reservation.key != key or reservation.owner != owner
            or reservation.state is not ReservationState.RESERVED):
        raise _wrong(ledger, shown, _shown(reservation), must)
    return reservation


def ledger_apply(ledger: object, reservation_id: str, move: Any) -> Any:
    """``ledger.apply(reservation_id, move)``: that reservation after the move (or IllegalMove to refuse).

    The state it reports is not judged here: the observer's mirror judges every
    accepted move by ``TRANSITIONS``, so a ledger that accepts a forbidden move is
    a violation found, not a protocol broken.
    """
    if fences_own(ledger):
        return ledger.apply(reservation_id, move)
    from fence.model.ledger import Reservation

    shown = f"apply({reservation_id!r}, Move.{move.name})"
    must = f"the fence.Reservation {reservation_id!r} after the move, or raise IllegalMove to refuse it"
    moved = _asked(ledger, shown, must, _method(ledger, "apply"), reservation_id, move)
    if not isinstance(moved, Reservation) or moved.reservation_id != reservation_id:
        raise _wrong(ledger, shown, _shown(moved), must)
    return moved


def ledger_owner_move(ledger: object, key: str, owner: str, move: Any) -> Any:
    """``ledger.owner_move(key, owner, move)``: the key's reservation after the move (or a refusal)."""
    if fences_own(ledger):
        return ledger.owner_move(key, owner, move)
    from fence.model.ledger import Reservation

    shown = f"owner_move({key!r}, {owner!r}, Move.{move.name})"
    must = f"the fence.Reservation of key {key!r} after the move, or raise StaleAttempt or IllegalMove to refuse it"
    moved = _asked(ledger, shown, must, _method(ledger, "owner_move"), key, owner, move)
    if not isinstance(moved, Reservation) or moved.key != key:
        raise _wrong(ledger, shown, _shown(moved), must)
    return moved


def ledger_fail(ledger: object, key: str, owner: str) -> Any:
    """``ledger.fail(key, owner)``: the worker's failure report, the key's reservation after it (or a refusal).

    A ledger without ``fail`` is asked ``owner_move(key, owner, Move.FAIL)``, which a
    ledger that decides by ``TRANSITIONS`` (``check_owner``, ``next_state``) already makes.
    """
    if fences_own(ledger):
        return ledger.fail(key, owner)
    fail = getattr(ledger, "fail", None)
    if not callable(fail):
        from fence.model.ledger import Move

        return ledger_owner_move(ledger, key, owner, Move.FAIL)
    from fence.model.ledger import Reservation

    shown = f"fail({key!r}, {owner!r})"
    must = (
        f"the fence.Reservation of key {key!r} after the failure report, or raise StaleAttempt "
        "(not the owner) or IllegalMove (no longer reserved) to refuse it"
    )
    moved = _asked(ledger, shown, must, fail, key, owner)
    if not isinstance(moved, Reservation) or moved.key != key:
        raise _wrong(ledger, shown, _shown(moved), must)
    return moved


def scan_refused(ledger: object, reservation_id: str, now: float, refusal: Exception) -> PluginBroken:
    """The ledger refused to scan a lease its ``expired()`` had just listed: it contradicts itself."""
    return PluginBroken(
        f"{describe(ledger, 'ledger')}: expired({now!r}) listed {reservation_id}, then the scan of it was refused "
        f"({refusal}); get() and apply() must agree with expired(): a listed lease is reserved, past its "
        "deadline, and accepts the janitor's expiry move"
    )


# -- copies ----------------------------------------------------------------------------
COPY_FIX = (
    "fence copies a plug-in for every run and every state the explorer visits: keep only values "
    "copy.deepcopy can copy in it (no locks, sockets, open files or clients), or give its class a __deepcopy__"
)


def deepcopy(parts: dict[str, object], memo: dict | None = None) -> dict[str, object]:
    """``copy.deepcopy(parts, memo)`` of a user's parts (by kind: policy, destination, ledger, evidence).

    A part that cannot be copied is named in one line; to find which, each part
    is copied alone (only once the copy of all of them failed).
    """
    try:
        # Part by part with one memo: what one deep copy of the dict does, less its frames (one per explored step).
        memo = {} if memo is None else memo
        return {kind: copy.deepcopy(part, memo) for kind, part in parts.items()}
    except FenceError:
        raise
    except Exception as error:
        kind, part = next(
            ((kind, part) for kind, part in parts.items() if not _copies(part)), next(iter(parts.items()))
        )
        what = describe(part, kind) if kind != "evidence" else "the evidence a policy's probe() returned"
        raise PluginBroken(
            f"{what} cannot be copied: copy.deepcopy raised {type(error).__name__}: {error}; {COPY_FIX}"
        ) from error


def _copies(part: object) -> bool:
    try:
        copy.deepcopy(part)
    except Exception:
        return False
    return True


_FENCE = str(Path(__file__).resolve().parent.parent)


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


def _last_plugin_frame(error: BaseException):
    """The innermost frame of a plug-in's code on ``error``'s way, or None if none is a plug-in's."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_FENCE):
            found = tb
        tb = tb.tb_next
    return found


def broken_in(error: BaseException) -> PluginBroken | None:
    """The ``PluginBroken`` that ``error`` is or holds (Hypothesis may group what a run raised).

    An exception raised inside a plug-in's own code that no check above caught
    (a destination's lookup, say) is one too, naming the method it came from,
    and so is one of fence's own errors raised there, where no protocol took
    it as an answer. None when fence's own code raised it: a bug in fence, or
    a refusal fence should have taken, which keeps its traceback.
    """
    if isinstance(error, BaseExceptionGroup):
        for leaf in _leaves(error):
            found = broken_in(leaf)
            if found is not None:
                return found
        return None
    if isinstance(error, PluginBroken):
        return error
    if isinstance(error, WitnessRequired):
        # fence's destination raised it, but a plug-in asked: a policy that abandons or
        # reads attempt state without the witness guard it needs.
        caller = _last_plugin_frame(error)
        if caller is not None:
            code = caller.tb_frame.f_code
            return PluginBroken(
                f"a plug-in's {code.co_qualname}() ({Path(code.co_filename).name}:{caller.tb_lineno}) asked the "
                f"destination for what only its witness keeps: {error}; give the policy guards with witness=True"
            )
    frame = _plugin_frame(error)
    if frame is None:
        return None
    code = frame.tb_frame.f_code
    where = f"{Path(code.co_filename).name}:{frame.tb_lineno}"
    if isinstance(error, FenceError):
        # One of fence's errors that a plug-in raised where no protocol takes it as an
        # answer (the world would have taken a ledger's refusal): the plug-in's, not fence's.
        return PluginBroken(
            f"a plug-in's {code.co_qualname}() ({where}) raised {type(error).__name__}: {error}; fence's "
            "errors are answers only where a protocol lists them (a ledger's refusals): see "
            "docs/reference/protocols.md"
        )
    return PluginBroken(
        f"a plug-in's {code.co_qualname}() ({where}) raised {type(error).__name__}: {error}; "
        "see its protocol in docs/reference/protocols.md"
    )


def _leaves(group: BaseExceptionGroup):
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            yield from _leaves(inner)
        else:
            yield inner
