"""The parent's side of a process run: its children started, listened to, killed, and always reaped.

Children are started by a forkserver that has ``fence.live.children`` imported,
so a child is ready in milliseconds and inherits no database connection. A
child's reports arrive as records of ``fence.live.messages``; a child whose
pipe closes is reported as ``Exited``, and one the parent kills leaves its last
reports behind in the pipe, which ``kill`` hands back: they are facts too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Iterator

from fence.base.errors import BackendError
from fence.live.children import child_life
from fence.live.messages import Exited, Ready, Report, Stop

READY_TIMEOUT = 30.0

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["fence.live.children"])


@dataclass
class Child:
    name: str
    process: Any
    connection: Any
    pid: int = 0
    alive: bool = True
    busy: str | None = None
    """The attempt it is running, if any."""

    def send(self, order) -> None:
        self.connection.send(order)


class Hands:
    """The parent's children: started, listened to, killed, and always reaped."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def spawn(self, name: str, target, *args) -> Child:
        mine, theirs = _CONTEXT.Pipe()
        process = _CONTEXT.Process(target=child_life, args=(target, theirs, *args), name=name, daemon=True)
        process.start()
        theirs.close()
        child = Child(name, process, mine)
        self.children.append(child)
        return child

    def ready(self, children: list[Child], timeout: float = READY_TIMEOUT) -> None:
        """Wait until each child opened its backend; BackendError if one cannot."""
        deadline = time.monotonic() + timeout
        for child in children:
            left = deadline - time.monotonic()
            if left <= 0 or not child.connection.poll(left):
                raise BackendError(f"{child.name} did not open the backend within {timeout:.0f}s")
            try:
                ready: Ready = child.connection.recv()
            except EOFError:
                raise BackendError(f"{child.name} exited before opening the backend (exit code {child.process.exitcode})") from None
            child.pid = ready.pid

    def messages(self, timeout: float) -> Iterator[tuple[Child, Report]]:
        """Every report that arrives within ``timeout``; a child that exits reports ``Exited``."""
        by_connection = {c.connection: c for c in self.children if c.alive}
        for connection in multiprocessing.connection.wait(list(by_connection), timeout):
            child = by_connection[connection]
            try:
                report = connection.recv()
            except (EOFError, OSError):
                child.alive = False
                child.process.join(5)
                yield child, Exited(child.process.exitcode)
                continue
            yield child, report

    def kill(self, child: Child) -> tuple[float, list[Report]]:
        """SIGKILL, and reap: the moment it was sent, and what the child reported before it died.

        Those last reports are facts too (a reserve or a commit that landed just
        before the kill); the pipe keeps them after the process is gone.
        """
        t = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        child.process.join(10)
        child.alive = False
        last_words = []
        with contextlib.suppress(EOFError, OSError):
            while child.connection.poll():
                last_words.append(child.connection.recv())
        child.connection.close()
        return t, last_words

    def close(self) -> None:
        for child in self.children:
            if child.alive and child.process.is_alive():
                with contextlib.suppress(OSError, BrokenPipeError):
                    child.send(Stop())
        for child in self.children:
            child.process.join(5)
            if child.process.is_alive():
                os.kill(child.process.pid, signal.SIGKILL)
                child.process.join(5)
            with contextlib.suppress(OSError):
                child.connection.close()
            child.process.close()
        self.children = []
