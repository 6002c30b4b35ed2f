"""``LibrarySession``: what every target's session keeps of the library under test, on either server.

A session (``images.RedisSession``, ``images.PostgresSession``) holds a job
library's handles beside the server's image. Every adapter needed the same
few things of them, so they are written once here: the handles closed with
the session (``closing``), the library's workers made once and kept across
worlds (``worker``), and an event loop for a library on asyncio (``loop``,
``run``, ``on_loop``).
"""

from __future__ import annotations

from functools import cached_property
from typing import Callable, TypeVar

T = TypeVar("T")


class LibrarySession:
    """The library's side of a session: its handles, its workers and its event loop."""

    def __init__(self) -> None:
        self._workers: dict[object, object] = {}
        self._on_close: list[Callable[[], object]] = []

    @cached_property
    def loop(self):
        """An event loop of the session's own, for a library on asyncio: made on first use."""
        import asyncio  # here: importing fence.targets (every fence command's parser) stays light

        return asyncio.new_event_loop()

    def run(self, coroutine):
        """``coroutine`` run to its end on the session's ``loop``."""
        return self.loop.run_until_complete(coroutine)

    def on_loop(self, make: Callable[[], T]) -> T:
        """``make()`` with the session's ``loop`` as the current one: for a library's object that takes the
        current event loop when it is made (arq's ``Worker``), so that ``run`` drives its calls."""
        import asyncio

        asyncio.set_event_loop(self.loop)
        return make()

    def closing(self, close: Callable[[], object]) -> None:
        """Call ``close()`` (a library's handle, just opened) when the session closes, before the server's own
        connection and the loop; also when the session fails to open after it."""
        self._on_close.append(close)

    def _close_library(self) -> None:
        """Every ``closing`` handle, the last opened first."""
        for close in reversed(self.__dict__.get("_on_close", [])):
            close()

    def new_worker(self) -> object:
        """One of the library's workers (a broker, a channel), for ``worker``."""
        raise NotImplementedError(f"{type(self).__name__} makes no workers: implement new_worker()")

    def worker(self, name: object, make: Callable[[], T] | None = None) -> T:
        """The worker named ``name``, made once by ``make()`` (by default ``new_worker()``): a reservation id's
        worker takes that reservation's job (a lease's, arq's, times its jobs out by it). The same in every world
        and every copy of one, so the library's worker must keep nothing beside its identity that decides what
        its calls do to the server."""
        if name not in self._workers:
            self._workers[name] = (make or self.new_worker)()
        return self._workers[name]


__all__ = ["LibrarySession"]
