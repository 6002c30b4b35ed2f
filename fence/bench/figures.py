"""What the benchmarks share: how a spread of runs is printed, and how the figures are written.

Every benchmark's figures go into evidence/ (or ``--report FILE``), never into
timed tests.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Sequence

from fence.base import evidence


def spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:g}"
    return f"{statistics.median(values):g} [{min(values):g}-{max(values):g}]"


def publish(lines: list[str], out: Path) -> None:
    text = "\n".join(lines) + "\n"
    evidence.write_atomically(out, text)
    print(text, end="")
