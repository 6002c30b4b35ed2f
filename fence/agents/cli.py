"""``fence probe-sdk``: run the SDK probes against the installed strands-agents and print them.

Exit 0 when every assumption holds, 1 when one does not. The caller in
``fence.cli.main`` imports this module inside its handler and turns the ImportError
of a missing strands into one line and exit 2.
"""

from __future__ import annotations

import sys

from fence.base import evidence
import strands  # noqa: F401  -- fail at import, before any output, when the extra is missing


def header(argv: list[str] | None = None) -> list[str]:
    command = " ".join(["fence", *(argv if argv is not None else sys.argv[1:])])
    return evidence.header(command, ("fence", "strands-agents"))


def cmd_probe_sdk(args) -> int:
    from fence.agents.probes import PROBES

    for line in header(getattr(args, "argv", None)):
        print(line)
    findings = []
    for number, probe in enumerate(PROBES, 1):
        finding = probe()
        findings.append(finding)
        mark = "HOLDS " if finding.held else "BROKEN"
        print(f"{number}. [{mark}] {finding.name}")
        print(f"   assumes:  {finding.assumption}")
        print(f"   observed: {finding.observed}")
    broken = [f.name for f in findings if not f.held]
    if broken:
        print(f"{len(broken)} of {len(findings)} assumptions broke: {', '.join(broken)}")
        return 1
    print(f"all {len(findings)} assumptions fence relies on hold")
    return 0
