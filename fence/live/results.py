"""What a real-clock trial leaves behind, and how a row of trials is summed and held to the article.

Every engine (threads, processes) returns the same records: a ``TrialResult``
per trial, with its evidence line, its counts, its times and its timeline of
``Event``s, gathered into one ``VariantResult`` per row of an experiment. The
``close_*`` functions sum a row, write its SUMMARY line and list where its
counts differ from the article's, the same way whatever engine ran it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Event:
    t: float
    """Seconds since the trial started, on the monotonic clock."""
    lane: str
    """Who acted: ``worker <attempt>``, ``janitor`` or ``destination``."""
    kind: str
    label: str


@dataclass
class TrialResult:
    number: int
    line: str
    counts: dict[str, int]
    times: dict[str, float | None]
    events: list[Event]
    settled: bool = True
    broken: dict[str, str] = field(default_factory=dict)
    """The invariants (fence.model.invariants) this trial's facts broke, with how."""


@dataclass
class VariantResult:
    experiment: str
    label: str
    """e.g. ``POLICY=naive CRASH=after-effect``."""
    trials: list[TrialResult] = field(default_factory=list)
    summary: str = ""
    totals: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    lease: float = 1.0


Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """The progress reporter that says nothing (not a terminal, or a test)."""


def spread(values: list[float], unit: str = "s", digits: int = 3) -> str:
    """Median and range, as ``1.002s[1.001..1.009]``; ``none`` if there are no values."""
    values = [v for v in values if v is not None]
    if not values:
        return "none"
    med = statistics.median(values)
    return f"{med:.{digits}f}{unit}[{min(values):.{digits}f}..{max(values):.{digits}f}]"


def when(t: float | None) -> str:
    """A time in an evidence line: ``1.234s``, or ``never``."""
    return "never" if t is None else f"{t:.3f}s"


def expect(variant: VariantResult, name: str, want: int) -> None:
    """Note a difference if the row's total ``name`` is not the article's ``want``."""
    got = variant.totals[name]
    if got != want:
        variant.differences.append(f"{variant.experiment} {variant.label}: {name}={got}, the article has {want}")


def _sum_row(variant: VariantResult, trials: int, columns: tuple[tuple[str, str, bool], ...],
             timing: tuple[str, str], clean: tuple[str, ...]) -> None:
    """The row's totals and SUMMARY line: ``columns`` are (total, trial count, shown out of the trials),
    then the spread of one of the trials' times, as (shown as, time), then the ``clean`` counts."""
    shown_as, time = timing
    total = {k: sum(t.counts[k] for t in variant.trials) for k in variant.trials[0].counts}
    variant.totals = {name: total[count] for name, count, _ in columns} | {name: total[name] for name in clean}
    variant.summary = (
        f"SUMMARY {variant.label} trials={trials} "
        + "".join(f"{name}={total[count]}{f'/{trials}' if out_of else ''} " for name, count, out_of in columns)
        + f"{shown_as}={spread([t.times[time] for t in variant.trials])}"
        + "".join(f" {name}={total[name]}" for name in clean)
    )


def close_crash_variant(variant: VariantResult, policy: str, after: bool, trials: int,
                        clean: tuple[str, ...] = ()) -> None:
    """Totals, SUMMARY and the article's expectations for one crash-boundary row (threads or processes).

    ``after``: the crash left an effect behind. ``clean`` names extra counts
    that must be 0 (the process runs' drain problems).
    """
    columns = (
        ("duplicate_writes_total", "duplicates", False),
        ("capacity_returned_while_effect_exists", "returned_with_effect", True),
        ("capacity_returned", "released", True),
    )
    _sum_row(variant, trials, columns, ("expiry", "expiry"), clean)
    if policy == "naive":
        expect(variant, "duplicate_writes_total", trials if after else 0)
        expect(variant, "capacity_returned_while_effect_exists", trials if after else 0)
        expect(variant, "capacity_returned", trials)
    else:
        expect(variant, "duplicate_writes_total", 0)
        expect(variant, "capacity_returned_while_effect_exists", 0)
        expect(variant, "capacity_returned", 0 if after else trials)
    for name in clean:
        expect(variant, name, 0)


DELAYED_EXPECTED = {
    # policy: (duplicates in every trial?, early release in every trial?)
    "naive": (True, True),
    "reconcile": (True, True),
    "fenced": (False, True),
    "witness": (False, False),
    "abandon": (False, False),
}


def close_delayed_variant(variant: VariantResult, policy: str, trials: int, clean: tuple[str, ...] = ()) -> None:
    """Totals, SUMMARY and the article's expectations for one delayed-commit row (threads or processes)."""
    columns = (
        ("duplicate_writes_total", "duplicates", False),
        ("early_capacity_release", "early_release", True),
        ("capacity_released", "released", True),
    )
    _sum_row(variant, trials, columns, ("loser_wasted", "wasted"), clean)
    duplicates, early = DELAYED_EXPECTED[policy]
    expect(variant, "duplicate_writes_total", trials if duplicates else 0)
    expect(variant, "early_capacity_release", trials if early else 0)
    for name in clean:
        expect(variant, name, 0)
