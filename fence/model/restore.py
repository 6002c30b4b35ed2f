"""Plug-ins whose state lives on a server, copied by dumping it and restored by loading it.

Theory of operation
-------------------
The explorer copies worlds (``copy.deepcopy`` on its generic path) and keys
them by the plug-ins' ``snapshot()``. A ledger whose rows live in PostgreSQL
cannot be copied, but it can be *restored*. A plug-in that keeps its state on
a server implements two methods:

``dump() -> image``
    everything it keeps on the server (rows, the sequences that decide the
    next ids, clock offsets), read back as one immutable in-memory value;
``load(image)``
    make the server hold exactly that, whatever it held before.

and inherits ``Restorable``. Its copies are then its Python fields plus its
image, sharing the connection; before any call that reaches the server a copy
makes sure the server holds *its* image (``Restorer.claim`` loads it when
another copy used the server last), and a call that may change the server
marks the copy changed, so its image is dumped again when it is next needed (a
deep copy, a snapshot, or another copy claiming the server). The server thus
holds one copy's state at a time, and any number of copies live in memory:
the explorer's walk, its ``FaithfulnessCheck`` replays on fresh plug-ins, and
the minimiser all take turns on one connection.

Which part of the server a ``Restorer`` stands for is the plug-in's business
(procrastinate's four tables; fence's own destination tables): one restorer
per part per connection, shared by every copy, so two plug-ins on one server
(a target's ledger and fence's destination beside it) are restored apart.

What this does not do is trust itself. Whether ``dump`` and ``load`` carry
everything that decides the next answers, and whether ``snapshot()`` (which a
restorable plug-in computes from its image) canonicalises only what decides
nothing, is what the explorer's ``FaithfulnessCheck`` tests on the run, by
replaying paths from scratch on an emptied server and comparing answers.
"""

from __future__ import annotations

import copy
import functools
import weakref
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Restorer:
    """Which copy's state one part of a server holds now; one per part per connection."""

    def __init__(self) -> None:
        self._holder: weakref.ref | None = None
        """The copy whose state the server holds (possibly changed since its last dump)."""
        self._loaded: object = None
        """The image the server holds, while no call has changed it since (None: unknown)."""
        self.loads = 0
        self.dumps = 0

    def _current_holder(self) -> Restorable | None:
        return self._holder() if self._holder is not None else None

    def claim(self, plugin: Restorable) -> None:
        """Before ``plugin`` reaches the server: make the server hold its image."""
        holder = self._current_holder()
        if holder is plugin:
            return
        if holder is not None:
            holder._save()  # what the last user changed is kept in its image first
        if not _same(self._loaded, plugin._image):
            plugin.load(plugin._image)
            self.loads += 1
            self._loaded = plugin._image
        self._holder = weakref.ref(plugin)

    def changing(self, plugin: Restorable) -> None:
        """``plugin`` (which holds the server) is about to make a call that may change it."""
        plugin._changed = True
        self._loaded = None

    def release(self) -> None:
        """Before the server is emptied (a fresh world): the copy that holds it keeps its state."""
        holder = self._current_holder()
        if holder is not None:
            holder._save()
        self._holder = None
        self._loaded = None

    def adopt(self, plugin: Restorable) -> None:
        """A plug-in made on the server as it is now (a fresh world's): its image is what is there."""
        self.release()
        plugin._changed = False
        plugin._image = plugin.dump()
        self.dumps += 1
        self._loaded = plugin._image
        self._holder = weakref.ref(plugin)


def _same(loaded: object, image: object) -> bool:
    """Does the server hold ``image``? The same object, or an equal value (a write that changed nothing)."""
    return loaded is not None and (loaded is image or loaded == image)


class Restorable:
    """A plug-in copied as its fields and its server image, restored before each call (see the module doc).

    Subclasses implement ``dump()`` and ``load(image)``, call ``_restoring(restorer)``
    once the server holds their starting state, and mark each method that reaches
    the server with ``reads`` or ``writes``. ``SHARED`` names the attributes every
    copy shares as they are (the connection); everything else is deep-copied.
    """

    SHARED: tuple[str, ...] = ()
    _restorer: Restorer
    _image: object
    _changed: bool

    def dump(self) -> object:  # pragma: no cover - the protocol
        raise NotImplementedError

    def load(self, image: object) -> None:  # pragma: no cover - the protocol
        raise NotImplementedError

    def _restoring(self, restorer: Restorer) -> None:
        self._restorer = restorer
        restorer.adopt(self)

    def _save(self) -> None:
        if self._changed:
            self._image = self.dump()
            self._restorer.dumps += 1
            self._restorer._loaded = self._image
            self._changed = False

    def image(self) -> object:
        """This copy's image, dumped first if a call changed the server since."""
        self._save()  # only the holder can be changed, and then the server holds its state
        return self._image

    def __deepcopy__(self, memo: dict) -> Restorable:
        self._save()
        cls = type(self)
        other = cls.__new__(cls)
        memo[id(self)] = other
        shared = ("_restorer", "_image", *self.SHARED)
        for name, value in self.__dict__.items():
            other.__dict__[name] = value if name in shared else copy.deepcopy(value, memo)
        other._changed = False
        return other

    def __reduce_ex__(self, protocol):
        raise TypeError(f"a {type(self).__name__} lives on the connection that made it; it cannot be pickled")


def reads(method: F) -> F:
    """A method that reaches the server without changing it."""

    @functools.wraps(method)
    def claimed(self: Restorable, *args, **kwargs):
        self._restorer.claim(self)
        return method(self, *args, **kwargs)

    return claimed  # type: ignore[return-value]


def writes(method: F) -> F:
    """A method that may change what the server holds (even when it raises)."""

    @functools.wraps(method)
    def claimed(self: Restorable, *args, **kwargs):
        restorer = self._restorer
        restorer.claim(self)
        restorer.changing(self)
        return method(self, *args, **kwargs)

    return claimed  # type: ignore[return-value]
