"""Real strands Agents (scripted model, real threads, real clock) as the workers of fence's fleet.

Leases are 0.2 s and the slow tool commits at 0.6 s, so a run takes under a
second; the tests assert counts and orderings, never absolute times. The ones on
real threads are marked ``realclock``, so CI also runs them on a busy machine.
"""

import itertools
import random
from collections import Counter

import pytest

pytest.importorskip("strands", reason="strands-agents is in the test extra: pip install -e '.[test]'")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fence import POLICIES, CapacityExhausted, IllegalMove, StaleAttempt  # noqa: E402
from fence.checking.verdicts import Verdict  # noqa: E402
from fence.checking.expected import load_expected  # noqa: E402
from fence.agents.budget import TokenBudget, TokenState, call_limit  # noqa: E402
from fence.agents.fleet import Fleet  # noqa: E402
from fence.agents.token_fleet import TokenFleet  # noqa: E402
from fence.agents.scripted import Turn  # noqa: E402

SAFE = "abandon-fenced"


# Any attempt to open a connection fails the test (the fixture is in conftest.py).
# Its module fixture runs once: every test of this file on one xdist worker (--dist loadgroup).
pytestmark = [pytest.mark.usefixtures("no_network"), pytest.mark.xdist_group("agent-fleet")]


def run(policy, faults, jobs=("job-1", "job-2")):
    return Fleet(POLICIES[policy]).run(list(jobs), faults)


def freed(report) -> Counter:
    """Units the janitor gave back, per job, read from the run's own log.

    A fault frees its job's unit by design; a healthy job's unit is freed only
    if a starved worker overran its 0.2 s lease (a busy machine). Counts that
    depend on that are judged against this record, never assumed to be zero.
    """
    return Counter(e.what.split("/")[0] for e in report.events if e.actor == "janitor" and e.what.endswith("-> unused"))


def written_once_more_per_freed_unit(report) -> bool:
    """naive and reconcile: every freed unit is one more write (the freed attempt still writes, and so does the retry)."""
    frees = freed(report)
    return report.effects == {job: 1 + frees[job] for job in report.jobs}


@pytest.fixture(scope="module")
def matrix():
    """Every built-in policy under each fault, once: {(policy, fault): FleetReport}."""
    return {(p, f): run(p, {"job-1": f}) for p in POLICIES for f in ("crash", "slow")}


# ids avoid the word "slow", which conftest.py reads as the slow marker.
@pytest.mark.realclock
@pytest.mark.parametrize("fault", ["crash", "slow"], ids=["crash-after-effect", "commit-after-expiry"])
def test_naive_writes_the_ticket_twice(matrix, fault):
    """Under naive, a crash after the effect and a commit after expiry each end in a duplicate write."""
    report = matrix["naive", fault]
    assert freed(report)["job-1"] >= 1 and written_once_more_per_freed_unit(report), report.summary()
    assert report.effects["job-1"] >= 2 and not report.timed_out


@pytest.mark.realclock
@pytest.mark.parametrize("fault", ["crash", "slow"], ids=["crash-after-effect", "commit-after-expiry"])
def test_safe_policy_writes_each_ticket_once(matrix, fault):
    """Under abandon-fenced, both faults end with exactly one ticket per job and nothing stuck."""
    report = matrix[SAFE, fault]
    assert report.duplicates == 0 and report.unsettled == [] and not report.timed_out, report.summary()
    assert report.violated() == set()


@pytest.mark.realclock
def test_article_findings_with_real_agents(matrix):
    """Reconcile survives the crash but not the slow commit; the fence stops that duplicate, not the early release."""
    crash, slow = matrix["reconcile", "crash"], matrix["reconcile", "slow"]
    assert crash.released_while_effect_exists == 0 and written_once_more_per_freed_unit(crash), crash.summary()
    assert freed(slow)["job-1"] >= 1 and written_once_more_per_freed_unit(slow), slow.summary()
    fenced = matrix["fenced", "slow"]
    frees = sum(freed(fenced).values())
    assert fenced.duplicates == 0 and frees >= 1, fenced.summary()
    # Each unit freed under a running attempt is one early release and one late commit the fence refuses.
    assert fenced.late_commits_refused == fenced.released_while_attempt_running == frees, fenced.summary()


@pytest.mark.realclock
def test_real_runs_never_contradict_the_models(matrix):
    """No real Agent run breaks an invariant the models say holds for that policy."""
    expected = load_expected()
    contradictions = [
        (policy, fault, name)
        for (policy, fault), report in matrix.items()
        for name in report.violated()
        if expected[policy][name] is Verdict.PROVED
    ]
    assert contradictions == []


@pytest.mark.realclock
def test_real_runs_reach_the_dangerous_interleavings(matrix):
    """The slow fault really lands its commit after the janitor acted, and the crash really skips the confirm."""
    slow = matrix["naive", "slow"].events
    release = next(i for i, e in enumerate(slow) if "lease expired" in e.what and "job-1/r1" in e.what)
    late = next(i for i, e in enumerate(slow) if "job-1#a1 commit" in e.what)
    assert release < late
    crash = [e.what for e in matrix["naive", "crash"].events]
    assert "job-1#a1 crashed before confirming" in crash
    assert not any("confirmed by job-1#a1" in what for what in crash)


FAULT_PLANS = list(itertools.product(["none", "crash", "slow"], repeat=2))


@pytest.mark.realclock
@pytest.mark.parametrize("policy", ["naive", SAFE])
def test_exhaustive_fault_plans_with_real_agents(policy):
    """Over every fault plan for two jobs, naive duplicates once per faulted job and the safe policy never does."""
    for plan in FAULT_PLANS:
        faults = dict(zip(["job-1", "job-2"], plan))
        report = run(policy, faults)
        faulted = sum(fault != "none" for fault in plan)
        assert not report.timed_out, (plan, report.summary())
        if policy == "naive":
            frees = freed(report)
            assert all(frees[job] >= 1 for job, fault in faults.items() if fault != "none"), (plan, report.summary())
            assert written_once_more_per_freed_unit(report), (plan, report.summary())
            if sum(frees.values()) == faulted:  # no healthy lease overran: exactly the article's count
                assert report.duplicates == faulted, (plan, report.summary())
        else:
            assert report.duplicates == 0 and report.unsettled == [], (plan, report.summary())


@pytest.mark.realclock
def test_fleet_of_four_shares_a_quota_and_reconciles_a_crash():
    """Four Agent workers on a quota of four units: the crashed job is reconciled, not retried, and two jobs are turned away."""
    fleet = Fleet(POLICIES["reconcile"], capacity=4, workers=4)
    jobs = [f"job-{i}" for i in range(1, 7)]
    report = fleet.run(jobs, {"job-3": "crash"})
    assert fleet.errors == [] and not report.timed_out, report.summary()
    frees = sum(freed(report).values())
    # Reconcile never frees a unit whose effect exists; a unit it frees from a
    # healthy worker that overran its lease (only on a busy machine) is one
    # write more than the quota. On an idle machine none: the article's counts.
    assert report.released_while_effect_exists == 0, report.summary()
    assert sum(report.effects.values()) == 4 + frees and fleet.ledger.free == 0, report.summary()
    if frees == 0:
        assert report.duplicates == 0 and report.unsettled == [] and len(report.turned_away) == 2, report.summary()
        assert report.effects["job-3"] == 1
        assert any("job-3/r1: key found -> confirmed_existing" in e.what for e in report.events)
        assert fleet.ledger.units_freed == {}


@pytest.mark.realclock
def test_naive_quota_fleet_lands_five_writes_on_four_units():
    """The same fleet under naive frees the crashed job's unit, so five writes land on a quota of four."""
    fleet = Fleet(POLICIES["naive"], capacity=4, workers=4)
    jobs = [f"job-{i}" for i in range(1, 7)]
    report = fleet.run(jobs, {"job-3": "crash"})
    # Whether the freed unit goes to job-3's retry (a duplicate) or to a waiting
    # job (an unpaid effect) is a race; either way one write more than the quota
    # per freed unit. A healthy worker that overran its lease (a busy machine)
    # is freed too: one write more for it, counted from the run's own log.
    frees = freed(report)
    assert frees["job-3"] >= 1 and report.released_while_effect_exists >= 1, report.summary()
    assert sum(report.effects.values()) == 4 + sum(frees.values()), report.summary()
    if sum(frees.values()) == 1:
        assert sum(report.effects.values()) == 5 and report.released_while_effect_exists == 1, report.summary()
        assert fleet.ledger.units_freed == {"job-3/r1": 1}


def scripts_for(seed, jobs):
    rng = random.Random(seed)
    scripts = {}
    for i in range(jobs):
        turns = [
            Turn.call("work", {"step": s}, input_tokens=rng.randint(20, 60), output_tokens=rng.randint(5, 40))
            for s in range(rng.randint(1, 10))
        ]
        scripts[f"job-{i}"] = [*turns, Turn.say("done", input_tokens=30, output_tokens=10)]
    return scripts


@pytest.mark.realclock
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_token_budget_never_overspends_under_a_concurrent_fleet(seed):
    """Eight Agent workers racing for a token budget smaller than the demand never spend more than it."""
    fleet = TokenFleet(3000, workers=8, reserve=400, max_turn_tokens=100, lease=0.3)
    report = fleet.run(scripts_for(seed, 24), crash={"job-5"})
    assert report.actual_total <= report.budget and report.spent <= report.budget, report.summary()
    assert report.high_water <= report.budget
    assert report.overruns == 0 and all(used <= 400 for used in report.runs.values())
    assert report.turned_away, "the demand must exceed the budget, or the test shows nothing"
    assert report.stop_reasons["limit_total_tokens"] >= 1, "some calls must be cut by their limit"
    assert set(report.runs) | set(report.turned_away) == set(fleet._scripts)


@pytest.mark.realclock
def test_a_call_that_outlives_its_lease_is_charged_in_full_and_its_late_report_refused():
    """A worker whose Agent call ends after its token lease expired gets its settle refused, not a crash.

    Under load (the whole suite on two cores) the 0.3 s lease above sometimes ran
    out mid-call and the worker thread died on IllegalMove. Here every call waits
    0.3 s on its first turn and every lease is 0.05 s, so every report comes late.
    """
    slow = Turn.call("work", {"step": 0}, input_tokens=40, output_tokens=10, delay=0.3)
    scripts = {f"job-{i}": [slow, Turn.say("done", input_tokens=30, output_tokens=10)] for i in range(4)}
    fleet = TokenFleet(3000, workers=2, reserve=400, max_turn_tokens=100, lease=0.05, timeout=10)
    report = fleet.run(scripts)
    assert sorted(report.late_settles) == sorted(report.runs), report.summary()
    assert sorted(report.charged_in_full) == sorted(report.runs) and report.spent == 400 * len(report.runs)
    assert all("late report is refused" in e.what for e in report.events if "used" in e.what)


def test_settled_reservation_returns_the_unused_tokens():
    """Settling 150 of 400 reserved tokens returns 250 to the pool; expiry charges the whole reservation."""
    budget = TokenBudget(1000)
    first = budget.reserve("job-1", "job-1#a1", 400, now=0, lease=1)
    budget.reserve("job-2", "job-2#a1", 400, now=0, lease=1)
    with pytest.raises(CapacityExhausted, match="only 200 of 1000 are free"):
        budget.reserve("job-3", "job-3#a1", 400, now=0, lease=1)
    budget.settle(first.reservation_id, "job-1#a1", 150)
    assert (budget.spent, budget.held, budget.free) == (150, 400, 450)
    [expired] = budget.expire(now=1)
    assert expired.state is TokenState.CHARGED_IN_FULL and budget.spent == 550
    with pytest.raises(IllegalMove, match="charged_in_full"):
        budget.settle(expired.reservation_id, "job-2#a1", 10)
    with pytest.raises(StaleAttempt):
        budget.settle(first.reservation_id, "someone-else", 10)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.sampled_from(["reserve", "settle", "expire"]), st.integers(1, 500), st.integers(0, 500)),
        max_size=40,
    )
)
def test_token_budget_held_plus_spent_never_exceeds_budget(steps):
    """Any sequence of reserves, settles within the reservation and expiries keeps held + spent <= budget."""
    budget = TokenBudget(1000)
    now = 0.0
    for i, (op, tokens, actual) in enumerate(steps):
        now += 0.1
        open_ = [r for r in budget.reservations() if r.state is TokenState.RESERVED]
        if op == "reserve":
            try:
                budget.reserve(f"k{i}", f"k{i}#a1", tokens, now, lease=1.0)
            except CapacityExhausted:
                assert tokens > budget.free
        elif op == "settle" and open_:
            r = open_[tokens % len(open_)]
            budget.settle(r.reservation_id, r.owner, min(actual, r.reserved))
        elif op == "expire":
            budget.expire(now)
        assert budget.held + budget.spent <= budget.budget and budget.free >= 0


def test_call_limit_keeps_the_last_turn_inside_the_reservation():
    """The total_tokens limit leaves room for one more turn of at most max_turn_tokens."""
    assert call_limit(400, 100) == 301
    with pytest.raises(ValueError, match="cannot hold one turn"):
        call_limit(50, 100)


@pytest.mark.realclock
def test_readme_example_runs_and_reconciles_the_crash():
    """`python examples/agent_fleet.py` prints the fleet as it happens and ends with no duplicate."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "agent_fleet.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "job-3/r1: key found -> confirmed_existing" in result.stdout
    summary = next(line for line in result.stdout.splitlines() if line.startswith("SUMMARY"))
    assert "duplicates=0" in summary and "unsettled=0" in summary
