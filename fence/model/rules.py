"""The rules of the models: every kind of action, in the one order every engine takes them.

A new action is a class in ``worker_actions``, ``network_actions`` or
``janitor_actions`` (``fence.model.actions`` says what it must answer) and its
kind here. The order is part of every engine's behaviour: the world lists its
enabled actions kind by kind in it, the explorer ranks steps by it, and
Hypothesis' draws (and so the committed verdicts) depend on it.
"""

from __future__ import annotations

from fence.model.actions import Action
from fence.model.janitor_actions import Probe, Scan, Settle
from fence.model.network_actions import Deliver, LoseAck, Tick
from fence.model.worker_actions import Confirm, Crash, Fail, Reserve, Retry, SendCommit, Start

ACTION_KINDS: tuple[str, ...] = (
    "reserve", "retry", "start", "send_commit", "deliver", "lose_ack", "confirm", "crash", "tick",
    "scan", "probe", "settle",
    "fail",  # last: without failures every engine's order of kinds (and Hypothesis' draws) is the old one
)
FAILURE_KINDS: tuple[str, ...] = ("fail",)

ACTION_CLASSES: dict[str, type[Action]] = {
    cls.kind: cls for cls in (Reserve, Retry, Start, SendCommit, Deliver, LoseAck, Confirm, Crash, Tick,
                              Scan, Probe, Settle, Fail)
}
assert tuple(ACTION_CLASSES) == ACTION_KINDS == tuple(sorted(Action.REGISTRY, key=ACTION_KINDS.index)), (
    "every action class has its kind in ACTION_KINDS, once")


def action_kinds(config) -> tuple[str, ...]:
    """The kinds a world of ``config`` (a ``ModelConfig``) can ever enable, in ``ACTION_KINDS`` order."""
    if config.failures:
        return ACTION_KINDS
    return tuple(kind for kind in ACTION_KINDS if kind not in FAILURE_KINDS)
