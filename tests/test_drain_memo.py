"""The drain judge's flat memo (issue 28): a dict's answers in arrays, two generations, and unchanged walks."""

import random

import pytest

from fence.explore import drain_judge
from fence.explore.drain_memo import DrainMemo
from fence.explore.walk import explore
from fence.model.policies import POLICIES
from fence.model.world import ModelConfig

SETTLED, BROKEN = ((), True), (("everything_settles",), False)


def test_it_answers_as_a_dict_does_through_growth_and_shared_slots():
    """Every stored key answers what was stored last, 0 and 2^64 - 1 included, and keys
    that share their low bits (one slot) are told apart by the whole fingerprint."""
    memo = DrainMemo()
    plain = {}
    rng = random.Random(3)
    keys = [0, 2**64 - 1, 1 << 40, (1 << 40) + 1024, 2048 << 50]  # 1 << 40 and 2048 << 50: slot 0, like 0
    keys += [rng.getrandbits(64) for _ in range(5_000)]
    for key in keys:
        answer = rng.choice([SETTLED, BROKEN])
        memo[key] = answer
        plain[key] = answer
    for key in keys[:100]:  # replaced, not added
        memo[key] = plain[key] = BROKEN if plain[key] == SETTLED else SETTLED
    assert len(memo) == len(plain)
    for key, answer in plain.items():
        assert memo.get(key) == answer and key in memo and memo[key] == answer
    for _ in range(1_000):
        missing = rng.getrandbits(64)
        if missing not in plain:
            assert memo.get(missing) is None and missing not in memo
            with pytest.raises(KeyError):
                memo[missing]
    assert sorted(memo.answers[1:]) == sorted([SETTLED, BROKEN])  # each distinct answer kept once


def test_past_its_capacity_it_keeps_two_generations_and_what_is_still_asked_for():
    memo = DrainMemo(capacity=4)
    for key in range(4):
        memo[key] = SETTLED
    assert memo.generations == 2  # the first four are the older generation now
    memo.get(0)  # asked for: copied into the newer generation
    for key in range(10, 13):
        memo[key] = BROKEN  # with key 0, the newer generation is full again: the first is dropped
    assert memo.generations == 3
    assert [memo.get(key) for key in range(4)] == [SETTLED, None, None, None]
    assert [memo.get(key) for key in range(10, 13)] == [BROKEN] * 3
    assert len(memo) <= 2 * memo.capacity


def test_more_than_255_distinct_answers_take_two_bytes_a_slot():
    memo = DrainMemo(capacity=200)
    answers = [((f"invariant {n}",), n % 2 == 0) for n in range(600)]
    for key, answer in enumerate(answers):
        memo[key * 7919] = answer
    assert [memo.get(key * 7919) for key in range(400, 600)] == answers[400:]  # the last two generations
    assert memo.get(0) is None


def test_none_cannot_be_stored():
    with pytest.raises(ValueError):
        DrainMemo()[5] = None


def test_a_walk_with_a_tiny_memo_drains_more_and_concludes_the_same(monkeypatch):
    """A drain memo that forgets almost everything gives the walk's own states, transitions and
    verdicts: a miss only drains again (the module docstring says why)."""
    config = ModelConfig(capacity=2, jobs=2, max_attempts=1, horizon=2)
    policy = POLICIES["witness-fenced"]
    whole = explore(policy, config, symmetry=True)
    made = []

    def tiny(*_args, **_options):
        made.append(DrainMemo(capacity=8))
        return made[-1]

    monkeypatch.setattr(drain_judge, "DrainMemo", tiny)
    forgetful = explore(policy, config, symmetry=True)
    assert made and made[0].generations > 10
    assert (forgetful.states, forgetful.transitions, forgetful.depth, forgetful.drains_unsettled) == (
        whole.states, whole.transitions, whole.depth, whole.drains_unsettled)
    assert {name: (r.outcome, r.depth) for name, r in forgetful.results.items()} == {
        name: (r.outcome, r.depth) for name, r in whole.results.items()}
