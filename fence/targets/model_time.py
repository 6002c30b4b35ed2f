"""Model time on a real server: one tick of the model's clock as seconds of the server's (``ModelTime``).

See ``fence.targets.protocol`` ("Model time") for why a lease of L ticks is a
timeout of (L - 1/2) ticks and why an image keeps instants as ticks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelTime:
    """How model time maps onto a server's clock: one tick is ``tick_seconds`` of it."""

    tick_seconds: float

    def seconds(self, ticks: float) -> float:
        """``ticks`` of model time in the server's seconds."""
        return ticks * self.tick_seconds

    def timeout(self, lease_ticks: float) -> float:
        """The library's timeout (heartbeat, visibility) for a lease of ``lease_ticks``: (L - 1/2) ticks."""
        return (lease_ticks - 0.5) * self.tick_seconds

    def ticks(self, seconds: float) -> int:
        """A span of the server's seconds as whole ticks (an image keeps instants and TTLs so)."""
        return round(seconds / self.tick_seconds)

    def sql_ticks_ago(self, column: str) -> str:
        """SQL: the whole ticks between ``column`` (a timestamp) and the server's ``now()``."""
        return f"round(extract(epoch FROM now() - {column}) / {self.tick_seconds})::int"

    def sql_instant(self, ticks_ago: str) -> str:
        """SQL: the timestamp ``ticks_ago`` (an SQL int) ticks before the server's ``now()``."""
        return f"now() - make_interval(secs => {ticks_ago} * {self.tick_seconds})"



__all__ = ["ModelTime"]
