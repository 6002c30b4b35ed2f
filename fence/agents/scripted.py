"""ScriptedModel: a strands ``Model`` that replays scripted assistant turns.

Agents built on it run with no network and no credentials, and do the same
thing every time: each call to ``stream`` takes the next ``Turn`` of the script
and emits the stream events a real provider would (``messageStart``, content
blocks for text and tool use, ``messageStop``, ``metadata`` with usage).

A turn can also wait before it answers, either for a delay or for a
``threading.Event`` (a gate), and the model counts the calls that entered it,
so a test can hold one invocation in flight while it starts another. Calls are
taken under a lock, so two invocations running at once (UNSAFE_REENTRANT, or
two agents sharing one model) each get their own turn.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Iterable

from strands.models import Model

from fence.base.errors import FenceError

_tool_use_ids = itertools.count(1)


class ScriptExhausted(FenceError, LookupError):
    """The model was called more times than its script has turns."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]
    tool_use_id: str = ""


@dataclass(frozen=True)
class Turn:
    """One assistant turn: text and/or tool calls, the usage it reports, and its timing."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5
    delay: float = 0.0
    """Seconds to wait (on the invocation's own event loop) before answering."""
    gate: threading.Event | None = None
    """If set, the turn waits until this event is set before answering."""
    gate_timeout: float = 30.0
    extra_events: tuple[dict[str, Any], ...] = ()
    """Raw StreamEvents emitted after the content, before ``messageStop``."""
    structured: dict[str, Any] | None = None
    """What ``structured_output`` returns for this turn, validated by the output model."""

    @classmethod
    def say(cls, text: str, **kwargs: Any) -> Turn:
        return cls(text=text, **kwargs)

    @classmethod
    def call(cls, name: str, tool_input: dict[str, Any], *, text: str | None = None, **kwargs: Any) -> Turn:
        return cls(text=text, tool_calls=(ToolCall(name, tool_input),), **kwargs)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool_calls else "end_turn"


@dataclass
class ScriptedModel(Model):
    """Replays ``turns`` in order, one per model call; raises ScriptExhausted after the last."""

    turns: list[Turn]
    config: dict[str, Any] = field(
        default_factory=lambda: {"model_id": "fence-scripted", "context_window_limit": 200_000}
    )
    calls: int = 0
    """How many model calls have entered ``stream`` (or ``structured_output``)."""
    seen_messages: list[list[dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.turns = list(self.turns)
        self._lock = threading.Condition()

    # -- the Model interface ---------------------------------------------------
    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        return dict(self.config)

    async def stream(
        self,
        messages: Any,
        tool_specs: Any = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[dict[str, Any], None]:
        turn = self._next_turn(messages)
        await self._wait(turn)
        for event in self.events_for(turn):
            yield event

    async def structured_output(
        self, output_model: Any, prompt: Any, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        turn = self._next_turn(prompt)
        await self._wait(turn)
        if turn.structured is None:
            raise ScriptExhausted(
                f"structured_output on call {self.calls}: the scripted turn has no 'structured' "
                "value; give the Turn structured={...}"
            )
        yield {"output": output_model.model_validate(turn.structured)}

    # -- helpers ---------------------------------------------------------------
    def wait_for_calls(self, n: int, timeout: float = 10.0) -> bool:
        """Block until at least ``n`` calls have entered the model; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self.calls >= n, timeout)

    def _next_turn(self, messages: Any) -> Turn:
        with self._lock:
            if self.calls >= len(self.turns):
                raise ScriptExhausted(
                    f"model call {self.calls + 1}: the script has only {len(self.turns)} turns; "
                    "add turns or check why the agent called the model again"
                )
            turn = self.turns[self.calls]
            self.calls += 1
            self.seen_messages.append(list(messages or []))
            self._lock.notify_all()
            return turn

    @staticmethod
    async def _wait(turn: Turn) -> None:
        if turn.gate is not None:
            opened = await asyncio.to_thread(turn.gate.wait, turn.gate_timeout)
            if not opened:
                raise TimeoutError(f"scripted turn waited {turn.gate_timeout}s for its gate")
        if turn.delay > 0:
            await asyncio.sleep(turn.delay)

    @staticmethod
    def events_for(turn: Turn) -> Iterable[dict[str, Any]]:
        """The StreamEvents of one turn, in the order a provider sends them."""
        yield {"messageStart": {"role": "assistant"}}
        if turn.text is not None:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": turn.text}}}
            yield {"contentBlockStop": {}}
        for call in turn.tool_calls:
            tool_use_id = call.tool_use_id or f"tooluse_{next(_tool_use_ids)}"
            yield {"contentBlockStart": {"start": {"toolUse": {"name": call.name, "toolUseId": tool_use_id}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(call.input)}}}}
            yield {"contentBlockStop": {}}
        yield from turn.extra_events
        yield {"messageStop": {"stopReason": turn.stop_reason}}
        yield {
            "metadata": {
                "usage": {
                    "inputTokens": turn.input_tokens,
                    "outputTokens": turn.output_tokens,
                    "totalTokens": turn.total_tokens,
                },
                "metrics": {"latencyMs": int(turn.delay * 1000)},
            }
        }
