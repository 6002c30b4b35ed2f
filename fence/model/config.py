"""The bounds of a model world: units, jobs, attempts per job, lease, janitors, clock horizon, failures."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    capacity: int = 1
    jobs: int = 1
    max_attempts: int = 3
    """Attempts per job the random part of a run may start (the drain may start more)."""
    lease: int = 2
    """Lease length in ticks."""
    janitors: int = 2
    horizon: int = 30
    """The clock never passes this many ticks during the random part of a run."""
    failures: bool = False
    """Workers may fail (``Fail``): raise before their effect, after it, or on a refused commit,
    and report the failure to the ledger for their reservation. Off, no ``Fail`` is ever
    enabled and every engine walks exactly the states and draws it walked before."""

    def problem(self) -> str | None:
        if self.capacity < 1:
            return f"capacity must be at least 1 unit, got {self.capacity}"
        if self.jobs < 1:
            return f"jobs must be at least 1, got {self.jobs}"
        if self.jobs > self.capacity:
            return (
                f"jobs ({self.jobs}) must not exceed capacity ({self.capacity}): each job "
                "spends one unit of quota, so extra jobs could never finish"
            )
        if self.lease < 1:
            return f"lease must be at least 1 tick, got {self.lease}"
        if self.max_attempts < 1:
            return f"max_attempts must be at least 1, got {self.max_attempts}"
        if self.janitors < 1:
            return f"janitors must be at least 1, got {self.janitors}"
        return None

    def describe(self) -> str:
        return (
            f"{self.capacity} unit(s), {self.jobs} job(s), {self.max_attempts} attempt(s) "
            f"per job, lease {self.lease} ticks, {self.janitors} janitor(s)"
            + (", failures reported" if self.failures else "")
        )
