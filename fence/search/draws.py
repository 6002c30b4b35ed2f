"""Hypothesis draws that depend on the seed and the strategies, not on source text.

Hypothesis' default provider sometimes (p = 0.05 per draw) replaces a drawn
integer, float, string or bytes value with a "constant": one from a fixed
global list, or one read from the source of every local module imported so far
(``hypothesis.internal.constants_ast``). That is a fine heuristic for finding
edge-case values, but it makes fence's verdicts depend on things that have
nothing to do with the policy under test: a string literal added to fence's CLI,
whether the package is installed as a wheel (site-packages is not "local") or
from a checkout, and which modules pytest's conftest happened to import. One
such literal once turned a derandomised "violated" into "not found" at the CI
bound. A verdict matrix that CI gates on must be a function of (policy, bound,
seed, Hypothesis version) alone.

``source_independent_draws()`` replaces ``HypothesisProvider._maybe_draw_constant``
with one that never picks a constant, for the duration of one run. Patching the
class itself, rather than registering a provider of our own, matters twice:
Hypothesis builds some draws (the novel prefixes of its data tree) on a bare
``HypothesisProvider`` whatever backend is set, and it turns off those search
heuristics for any backend not named "hypothesis". The method is put back
afterwards, so a user's own Hypothesis tests in the same process are unaffected.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from hypothesis.internal.conjecture.providers import HypothesisProvider

_HOOK = "_maybe_draw_constant"


def _never_a_constant(self, choice_type, constraints, *, p: float = 0.05):
    # Consume the one random number the original consumes before deciding,
    # so the rest of the stream keeps its shape; then never use a constant.
    self._random.random()
    return None


@contextmanager
def source_independent_draws() -> Iterator[None]:
    """Run the enclosed Hypothesis tests with draws that ignore source-code constants."""
    original = HypothesisProvider.__dict__.get(_HOOK)
    if original is None:  # pragma: no cover - a Hypothesis upgrade moved the hook
        raise RuntimeError(
            f"this Hypothesis has no HypothesisProvider.{_HOOK}; "
            "fence's reproducible draws need updating (fence/search/draws.py)"
        )
    setattr(HypothesisProvider, _HOOK, _never_a_constant)
    try:
        yield
    finally:
        setattr(HypothesisProvider, _HOOK, original)
