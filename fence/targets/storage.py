"""``TargetStorage``: a target's world factories, fence's destination beside one session on the job system.

What a storage must do is ``fence.targets.protocol``'s documentation ("a storage").
"""

from __future__ import annotations

from typing import Callable

from fence.base.errors import BackendError
from fence.backends import ModelStorage
from fence.targets.ledger import TargetLedger


class TargetStorage(ModelStorage):
    """A target's storage: fence's destination (``ModelStorage``) beside one session on the job system.

    A subclass names its ledger class (``LEDGER``, made as ``LEDGER(session,
    capacity, guarded=...)``), itself (``WHAT``: "a dramatiq target", for its
    errors) and its session class (``SESSION``, made as ``SESSION(url)``, with
    ``empty``, ``versions`` and ``close``); then ``Storage(url, guarded=...)``
    checks the URL's scheme (``URL_SCHEMES``), makes the destination (fence's
    in-memory one, or its SQL one on the same server in the schema
    ``DESTINATION_SCHEMA``) and opens the session. A subclass with a
    constructor of its own (and no ``SESSION``) calls ``ModelStorage``'s
    through ``super().__init__(destination_url)``, sets ``guarded`` and opens
    its session through ``_open_session``.
    """

    LEDGER: type[TargetLedger]
    WHAT: str
    SESSION: Callable[[str], object] | None = None
    URL_SCHEMES: tuple[str, ...] = ()
    """The URL schemes the system runs on (``("redis://",)``); empty: any."""
    DESTINATION_SCHEMA: str | None = None
    """None: the task's effect goes to fence's in-memory destination; else to fence's SQL destination on the
    system's own server (PostgreSQL), in this schema."""

    def __init__(self, url: str, *, guarded: bool = False, **destination) -> None:
        if self.SESSION is None:  # a constructor of the subclass's own: this is ModelStorage's
            super().__init__(url, **destination)
            return
        if self.URL_SCHEMES and not url.startswith(self.URL_SCHEMES):
            raise BackendError(f"{url!r}: {self.WHAT} runs on a {' or '.join(self.URL_SCHEMES)} URL")
        if self.DESTINATION_SCHEMA is None:
            super().__init__("memory:")
        else:
            super().__init__(url, namespace=self.DESTINATION_SCHEMA)
        self.guarded = guarded
        self._open_session(lambda: self.SESSION(url))

    def _open_session(self, open_session: Callable[[], object]) -> None:
        try:
            self.session = open_session()
        except BaseException:
            ModelStorage.close(self)  # the destination's store is open already
            raise

    def __reduce__(self):
        # The session's connections and the server's state live in this process.
        raise TypeError(f"{self.WHAT}'s storage lives in the process that opened it")

    def _fresh(self) -> None:
        if not self._half_given:
            self.session.empty()
        super()._fresh()

    def ledger_factory(self, capacity: int) -> TargetLedger:
        self._fresh()
        return self.LEDGER(self.session, capacity, guarded=self.guarded)

    def versions(self) -> dict[str, str]:
        return self.session.versions()

    def close(self) -> None:
        try:
            self.session.close()
        finally:
            super().close()



__all__ = ["TargetStorage"]
