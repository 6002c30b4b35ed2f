"""What each real-clock scenario must break, judged by INVARIANTS on the facts its engine recorded.

One table for the thread experiments (tests/test_experiments.py) and the process
experiments (tests/test_processes.py): the same scenario breaks the same named
invariants, and gives the article's same counts, on either engine. A SIGKILL inside the open commit transaction (a
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


def crash_boundary_counts(trials: int, *, in_flight: bool) -> list[tuple[str, int, int, int]]:
    """The article's crash-boundary counts over ``trials`` trials per variant.

    Rows of (label, duplicate writes, units returned while their effect exists,
    units returned). ``in_flight``: with the process-only crash inside the open
    commit transaction, which rolls back and so counts as a crash before the effect.
    """
    rows = [
        ("POLICY=naive CRASH=after-effect", trials, trials, trials),
        ("POLICY=naive CRASH=in-flight", 0, 0, trials),
        ("POLICY=naive CRASH=before-effect", 0, 0, trials),
        ("POLICY=reconcile CRASH=after-effect", 0, 0, 0),
        ("POLICY=reconcile CRASH=in-flight", 0, 0, trials),
        ("POLICY=reconcile CRASH=before-effect", 0, 0, trials),
    ]
    return [row for row in rows if in_flight or "in-flight" not in row[0]]


def delayed_commit_counts(trials: int) -> list[tuple[str, int, int, int]]:
    """The article's delayed-commit counts over ``trials`` trials per mode.

    Rows of (mode, duplicate writes, early releases, releases): naive and
    reconcile duplicate and release early, fenced only releases early, witness
    and abandon do neither.
    """
    return [
        ("naive", trials, trials, trials),
        ("reconcile", trials, trials, trials),
        ("fenced", 0, trials, trials),
        ("witness", 0, 0, 0),
        ("abandon", 0, 0, trials),
    ]
