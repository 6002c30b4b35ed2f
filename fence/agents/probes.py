"""SDK probes: the strands-agents behaviours fence relies on, checked against the installed SDK.

Each probe drives real ``Agent`` instances on a ``ScriptedModel`` (no network)
from real threads and returns a ``Finding``: what fence assumes, what the SDK
actually did, and whether the assumption held. A probe never asserts; the tests
and ``fence probe-sdk`` do, so that when a future SDK changes one behaviour the
report names the assumption that broke and shows what happened instead.

Synchronisation is by the model's gates and call counts, not by sleeping,
except in one place (probe 2) where the SDK gives no signal that a duplicate
caller has registered as a waiter; there a short pause is taken and the model's
call count still decides the finding.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from strands import Agent
from strands.types.agent import ConcurrentInvocationMode
from strands.types.exceptions import ConcurrencyException

from fence.agents.scripted import ScriptedModel, Turn

SDK_CONCURRENCY_MESSAGE = "Agent is already processing a request. Concurrent invocations are not supported."
DUPLICATE_REGISTER_PAUSE = 0.3
"""Seconds the duplicate caller is given to reach the SDK before the primary is released."""


@dataclass(frozen=True)
class Finding:
    name: str
    assumption: str
    observed: str
    held: bool


def _agent(model: ScriptedModel, **kwargs: Any) -> Agent:
    return Agent(model=model, callback_handler=None, **kwargs)


class _Call(threading.Thread):
    """One invocation on its own thread; keeps the result or the exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as error:  # recorded, judged by the probe
            self.error = error

    def outcome(self) -> str:
        if self.error is not None:
            return f"{type(self.error).__name__}({self.error})"
        return f"result stop_reason={self.result.stop_reason}"


def _usage(result: Any) -> dict[str, int]:
    return dict(result.metrics.accumulated_usage)


def probe_concurrent_calls_throw() -> Finding:
    """1. Two threads, one Agent, different prompts: one wins, the other gets ConcurrencyException."""
    gate = threading.Event()
    model = ScriptedModel([Turn.say("first", gate=gate), Turn.say("second")])
    agent = _agent(model)
    first = _Call(lambda: agent("write ticket A"))
    first.start()
    entered = model.wait_for_calls(1)
    second = _Call(lambda: agent("write ticket B"))
    second.start()
    second.join(10)
    gate.set()
    first.join(10)
    mode = agent.concurrent_invocation_mode
    raised = second.error
    held = (
        entered
        and mode is ConcurrentInvocationMode.THROW
        and first.error is None
        and isinstance(raised, ConcurrencyException)
        and str(raised) == SDK_CONCURRENCY_MESSAGE
        and model.calls == 1
    )
    observed = (
        f"default concurrent_invocation_mode={mode.value}; first call: {first.outcome()}; "
        f"second call: {second.outcome()}; model calls={model.calls}"
    )
    return Finding(
        "concurrent-calls-throw",
        "a second concurrent invocation of one Agent raises ConcurrencyException "
        "(THROW is the default concurrent_invocation_mode)",
        observed,
        held,
    )


def probe_token_dedupes_inflight() -> Finding:
    """2. Same prompt and idempotency_token from two threads: the model runs once, both get one result."""
    gate = threading.Event()
    model = ScriptedModel(
        [
            Turn.say("ticket written", gate=gate, input_tokens=700, output_tokens=248),
            Turn.say("ran again", input_tokens=1, output_tokens=1),  # only used if dedupe fails
        ]
    )
    agent = _agent(model)
    prompt, token = "write the ticket for job-1", "job-1"
    first = _Call(lambda: agent(prompt, idempotency_token=token))
    first.start()
    entered = model.wait_for_calls(1)
    second = _Call(lambda: agent(prompt, idempotency_token=token))
    second.start()
    time.sleep(DUPLICATE_REGISTER_PAUSE)
    gate.set()
    first.join(10)
    second.join(10)
    ok = first.error is None and second.error is None
    same = ok and first.result is second.result
    usage_a = _usage(first.result) if first.error is None else None
    usage_b = _usage(second.result) if second.error is None else None
    held = entered and ok and model.calls == 1 and same and usage_a == usage_b
    observed = (
        f"model calls={model.calls}; first: {first.outcome()} usage={usage_a}; "
        f"second: {second.outcome()} usage={usage_b}; same result object={same}"
    )
    return Finding(
        "token-dedupes-inflight",
        "a duplicate call with the inflight idempotency_token waits for the original: "
        "the model runs once and both callers get the same result and usage",
        observed,
        held,
    )


def probe_limits_are_per_instance() -> Finding:
    """3. Two Agents, each limits={"turns": 1}: both stop at limit_turns, no budget is shared."""
    models = [
        ScriptedModel(
            [Turn.call("noop", {}, input_tokens=300, output_tokens=153), Turn.say("never reached")]
        )
        for _ in range(2)
    ]
    from strands import tool

    @tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    agents = [_agent(model, tools=[noop]) for model in models]
    calls = [_Call(lambda a=a: a("write the ticket", limits={"turns": 1})) for a in agents]
    for call in calls:
        call.start()
    for call in calls:
        call.join(10)
    ok = all(call.error is None for call in calls)
    reasons = [call.result.stop_reason if call.error is None else None for call in calls]
    usages = [_usage(call.result) if call.error is None else None for call in calls]
    held = ok and reasons == ["limit_turns", "limit_turns"] and [m.calls for m in models] == [1, 1]
    held = held and usages[0] == usages[1]
    observed = (
        f"stop_reasons={reasons}; model calls per instance={[m.calls for m in models]}; "
        f"usage per instance={usages}; together they ran {sum(m.calls for m in models)} turns "
        "although each was capped at 1"
    )
    return Finding(
        "limits-are-per-instance",
        'limits={"turns": 1} caps each invocation on its own instance: two instances both run to '
        "limit_turns and share no budget (so a fleet needs fence's ledger)",
        observed,
        held,
    )


def probe_token_is_not_durable() -> Finding:
    """4. The token dedupes only while in flight; UNSAFE_REENTRANT ignores it."""
    model = ScriptedModel([Turn.say("first run"), Turn.say("second run")])
    agent = _agent(model)
    after_a = agent("write the ticket for job-1", idempotency_token="job-1")
    after_b = agent("write the ticket for job-1", idempotency_token="job-1")
    sequential_calls = model.calls
    reran = sequential_calls == 2 and after_a is not after_b

    gate = threading.Event()
    reentrant_model = ScriptedModel([Turn.say("a", gate=gate), Turn.say("b", gate=gate)])
    reentrant = _agent(reentrant_model, concurrent_invocation_mode=ConcurrentInvocationMode.UNSAFE_REENTRANT)
    calls = [_Call(lambda: reentrant("write the ticket for job-1", idempotency_token="job-1")) for _ in range(2)]
    for call in calls:
        call.start()
    both_entered = reentrant_model.wait_for_calls(2, timeout=5)
    gate.set()
    for call in calls:
        call.join(10)
    reentrant_ok = all(call.error is None for call in calls)
    ignored = both_entered and reentrant_ok and reentrant_model.calls == 2
    held = reran and ignored
    observed = (
        f"same token after completion: model calls={sequential_calls}, "
        f"distinct results={after_a is not after_b}; UNSAFE_REENTRANT with one token from two "
        f"threads: both in the model at once={both_entered}, model calls={reentrant_model.calls}, "
        f"outcomes={[call.outcome() for call in calls]}"
    )
    return Finding(
        "token-is-not-durable",
        "the idempotency_token dedupes only while the first call is in flight: the same token after "
        "completion runs the model again, and UNSAFE_REENTRANT ignores the token",
        observed,
        held,
    )


PROBES: tuple[Callable[[], Finding], ...] = (
    probe_concurrent_calls_throw,
    probe_token_dedupes_inflight,
    probe_limits_are_per_instance,
    probe_token_is_not_durable,
)


def run_probes() -> list[Finding]:
    return [probe() for probe in PROBES]
