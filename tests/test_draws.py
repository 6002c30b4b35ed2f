"""Verdict runs draw the same examples whatever source code happens to be loaded.

Hypothesis' default provider mixes in constants read from every local module
imported so far; fence turns that off for its own runs (fence/search/draws.py), so a
derandomised verdict depends on the policy, the bound and the seed alone.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from hypothesis.internal.conjecture.providers import HypothesisProvider

from fence.search.draws import source_independent_draws

# Print what one derandomised survey found, and at which example: the draw's fingerprint.
SURVEY = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    if sys.argv[2] == "load":
        import many_constants  # a local module full of integers and strings
    from fence.model.policies import POLICIES
    from fence.checking.verdicts import EXPLORER_BOUND, profile_settings, survey_config
    result = survey_config(POLICIES["witness-fenced"], EXPLORER_BOUND, run_settings=profile_settings(100, 20))
    print(result.examples, sorted(result.first_found_at_example.items()))
    """
)


def _fingerprint(tmp_path, load: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SURVEY, str(tmp_path), load], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_a_module_full_of_constants_does_not_change_the_draw(tmp_path):
    """Importing a local module with hundreds of literals leaves a derandomised survey unchanged.

    Without fence/search/draws.py this survey's first no_early_release find moved from
    example 42 to example 20 when the module was loaded.
    """
    integers = ", ".join(str(n) for n in range(-50, 400))
    strings = ", ".join(repr(f"w{n}") for n in range(100))
    (tmp_path / "many_constants.py").write_text(f"VALUES = [{integers}]\nNAMES = [{strings}]\n")
    assert _fingerprint(tmp_path, "load") == _fingerprint(tmp_path, "skip")


def test_the_provider_is_restored_after_a_run():
    """A user's own Hypothesis tests in the same process keep Hypothesis' constants."""
    original = HypothesisProvider.__dict__["_maybe_draw_constant"]
    with source_independent_draws():
        assert HypothesisProvider.__dict__["_maybe_draw_constant"] is not original
    assert HypothesisProvider.__dict__["_maybe_draw_constant"] is original


def test_the_machines_fast_draw_chooses_exactly_what_st_data_s_public_draw_does(monkeypatch):
    """The machines draw from the test case's choices directly (fence.search.machines._draw_of), skipping
    ``st.data()``'s checks for user strategies; the public ``data.draw`` must choose the same: the same
    examples, first finds, dangers reached and counterexamples. Fails if a Hypothesis release makes the two
    paths draw differently (then ``_draw_of`` must go)."""
    from fence.search import machines
    from fence.checking.verdicts import profile_settings, survey_config
    from fence.model.policies import POLICIES
    from fence.model.world import ModelConfig

    def survey():
        found = survey_config(POLICIES["witness-fenced"], ModelConfig(capacity=2, jobs=2),
                              run_settings=profile_settings(60, 20))
        stories = {name: [step.sentence for step in example.steps] for name, example in found.counterexamples.items()}
        return found.examples, found.first_found_at_example, dict(found.reached), stories

    fast = survey()
    monkeypatch.setattr(machines, "_draw_of", lambda data: data.draw)
    public = survey()
    assert fast == public
    assert fast[1], "nothing found: the comparison would say little"
