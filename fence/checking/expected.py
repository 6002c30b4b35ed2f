"""The expected-verdicts file (``fence/expected_verdicts.txt``), and how a run's verdicts differ from it.

The file is the committed matrix, one row per built-in policy and one column
per invariant; ``fence verdicts`` and the gate tests compare every run with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fence.base.errors import BadInput
from fence.model.invariants import INVARIANTS, Invariant
from fence.checking.verdicts import PolicyReport, Verdict

EXPECTED_FILE = Path(__file__).parent.parent / "expected_verdicts.txt"


def parse_expected(text: str, source: str = "expected verdicts") -> dict[str, dict[str, Verdict]]:
    """Read the committed matrix: a header of invariant numbers, then one row per policy."""
    rows: dict[str, dict[str, Verdict]] = {}
    columns: list[Invariant] | None = None
    by_number = {str(inv.number): inv for inv in INVARIANTS}
    for line_number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if columns is None:
            if words[0] != "policy" or any(w not in by_number for w in words[1:]):
                raise BadInput(
                    f"{source}:{line_number}: the first row must be 'policy' followed by "
                    f"invariant numbers 1-{len(INVARIANTS)}"
                )
            columns = [by_number[w] for w in words[1:]]
            continue
        if len(words) != len(columns) + 1:
            raise BadInput(f"{source}:{line_number}: expected {len(columns)} verdicts after the policy name")
        policy, *values = words
        try:
            rows[policy] = {
                inv.name: Verdict(value) for inv, value in zip(columns, values, strict=True)
            }
        except ValueError:
            raise BadInput(
                f"{source}:{line_number}: verdicts are 'violated' or 'proved' ('holds' is now 'proved'), got {values}"
            ) from None
    if columns is None:
        raise BadInput(f"{source}: no header row found")
    return rows


def load_expected(path: Path = EXPECTED_FILE) -> dict[str, dict[str, Verdict]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{path}: cannot read the expected verdicts ({error}); pass --expected FILE") from None
    return parse_expected(text, str(path))


@dataclass(frozen=True)
class Difference:
    policy: str
    invariant: str
    expected: Verdict | None
    observed: Verdict


def compare(
    reports: list[PolicyReport], expected: dict[str, dict[str, Verdict]], hypothesis_only: bool = False
) -> list[Difference]:
    """The cells that differ from the expected matrix.

    With ``hypothesis_only`` (a run where only Hypothesis searched, as ``judge``
    on a backend by default), an expected "proved" is met by "not-found": the
    most a search can say.
    """
    differences = []
    for report in reports:
        row = expected.get(report.policy.name, {})
        for name, cell in report.cells.items():
            want = row.get(name)
            if hypothesis_only and want is Verdict.PROVED and cell.verdict is Verdict.NOT_FOUND:
                continue
            if want is not cell.verdict:
                differences.append(Difference(report.policy.name, name, want, cell.verdict))
    return differences
