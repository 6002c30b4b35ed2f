"""What each real-clock scenario must break, judged by INVARIANTS on the facts its engine recorded.

One table for the thread experiments (tests/test_experiments.py) and the process
experiments (tests/test_processes.py): the same scenario breaks the same named
invariants on either engine. A SIGKILL inside the open commit transaction (a
process-only crash point) rolls the commit back, so it breaks what a crash
before the effect breaks: nothing.
"""

from __future__ import annotations

BROKEN = {
    ("crash", "POLICY=naive CRASH=after-effect"): {"no_duplicate_writes", "no_release_while_effect_exists", "everything_settles"},
    ("crash", "POLICY=naive CRASH=in-flight"): set(),
    ("crash", "POLICY=naive CRASH=before-effect"): set(),
    ("crash", "POLICY=reconcile CRASH=after-effect"): set(),
    ("crash", "POLICY=reconcile CRASH=in-flight"): set(),
    ("crash", "POLICY=reconcile CRASH=before-effect"): set(),
    ("delayed", "MODE=naive"): {"no_duplicate_writes", "no_early_release", "everything_settles"},
    ("delayed", "MODE=reconcile"): {"no_duplicate_writes", "no_early_release", "everything_settles"},
    ("delayed", "MODE=fenced"): {"no_early_release"},
    ("delayed", "MODE=witness"): set(),
    ("delayed", "MODE=abandon"): set(),
}

ON_THREADS = {scenario: broken for scenario, broken in BROKEN.items() if "in-flight" not in scenario[1]}
"""Threads have no open transaction to kill inside."""
