"""The model's vocabulary: attempts, messages, steps, and what every action answers for itself.

An action is one step of the world and a rule of the models. Each kind is one
class (``worker_actions``, ``network_actions``, ``janitor_actions``) that
carries everything an engine asks of it, so that a new action is one class and
one line in ``rules.ACTION_KINDS``:

* ``enabled_in(world)``: every action of the kind the world enables now;
* ``is_enabled_in(world)``: whether this one is, for the kinds that can answer
  without listing the kind (``CHEAP_ENABLED_TEST``);
* ``take(world)``: its effect, returning what a ``Step`` tells (sentence, actor, target);
* ``job_in(world)``: the one job whose part of the world it may change (None: any);
* ``relative(world, job, held_answer)`` and ``from_relative(job, relative, janitor)``:
  the action written relative to its job and without the janitor, and back
  (the explorer's step memo keys steps by that form);
* ``janitors_alike(world, held_answer)``: what another janitor's same step is
  known by, for the explorer to take one janitor's of several (None: no janitor's step);
* ``actor(handles)``: who acts, as a replay on real threads names it.

``held_answer`` turns a janitor's held evidence into a key part; the explorer
passes its own (``fence.explore.state_key.evidence_token``).
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import MISSING, asdict, dataclass, fields
from typing import TYPE_CHECKING, Callable, ClassVar

from fence.base.errors import FenceError
from fence.model.destination import CommitResult
from fence.model.worker import Phase

if TYPE_CHECKING:
    from fence.model.world import World


@dataclass
class Attempt:
    handle: str
    """The model's own unique name for the attempt (job1#2: job1's second attempt)."""
    identity: str
    """The id the attempt reports under: its handle, or the job's one shared id."""
    key: str
    reservation_id: str
    payload: str
    phase: Phase = Phase.RESERVED
    ack: CommitResult | None = None
    wrote: bool = False


class MessageKind(enum.Enum):
    REGISTER = "register"
    COMMIT = "commit"
    ACK = "ack"


@dataclass(frozen=True)
class Message:
    kind: MessageKind
    attempt: str
    result: CommitResult | None = None

    def describe(self) -> str:
        if self.kind is MessageKind.ACK:
            return f"the answer '{self.result.value}' to {self.attempt}"
        return f"{self.attempt}'s {self.kind.value}"


_DELIVERY_RANK = {MessageKind.COMMIT: 0, MessageKind.ACK: 1, MessageKind.REGISTER: 2}
_DELIVERY_RANK_BY_VALUE = {kind._value_: rank for kind, rank in _DELIVERY_RANK.items()}
"""The same ranks by the kind's value: a str hashes in C, an Enum member in Python."""


def delivery_rank(message: Message) -> int:
    return _DELIVERY_RANK_BY_VALUE[message.kind._value_]


def drain_order(message: Message) -> tuple:
    """The drain delivers commits, then answers, then registrations, each by attempt."""
    return (_DELIVERY_RANK_BY_VALUE[message.kind._value_], message.attempt)


HeldAnswer = Callable[[object], tuple]
"""A janitor's held evidence as a key part (``fence.explore.state_key.evidence_token``)."""


class Action:
    """One step of the world. Subclasses are the rules of the models (see the module doc)."""

    kind: ClassVar[str]
    REGISTRY: ClassVar[dict[str, type[Action]]] = {}
    CHEAP_ENABLED_TEST: ClassVar[bool] = False
    """``is_enabled_in`` answers for this one action without listing its kind."""

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        if "kind" in vars(cls):  # a rule, not a base its rules share
            Action.REGISTRY[cls.kind] = cls

    def to_dict(self) -> dict:
        return {"action": self.kind, **asdict(self)}

    @staticmethod
    def from_dict(data: dict) -> Action:
        if not isinstance(data, dict) or data.get("action") not in Action.REGISTRY:
            raise ValueError(f"not a fence action: {data!r}")
        cls = Action.REGISTRY[data["action"]]
        names = {f.name for f in fields(cls)}
        # Fields added later have defaults, so files written before them still load.
        required = {f.name for f in fields(cls) if f.default is MISSING}
        arguments = {k: v for k, v in data.items() if k != "action"}
        if not required <= set(arguments) <= names:
            raise ValueError(f"action {data['action']!r} takes {sorted(names)}, got {sorted(arguments)}")
        return cls(**arguments)

    # What every engine asks. The defaults are a worker's step on one attempt.
    @classmethod
    def enabled_in(cls, world: World) -> list[Action]:
        raise NotImplementedError

    def is_enabled_in(self, world: World) -> bool:
        return self in world.enabled(self.kind)

    def take(self, world: World) -> tuple[str, str, str]:
        raise NotImplementedError

    def job_in(self, world: World) -> str | None:
        return world.attempts[self.attempt].key

    def relative(self, world: World, job: str, held_answer: HeldAnswer) -> tuple:
        return (self.kind, self.attempt[len(job):])

    @classmethod
    def from_relative(cls, job: str, relative: tuple, janitor: int) -> Action:
        return cls(job + relative[1])

    def janitors_alike(self, world: World, held_answer: HeldAnswer) -> tuple | None:
        return None

    def actor(self, handles: Counter) -> str:
        return f"worker:{self.attempt}"


@dataclass(frozen=True)
class Step:
    """An applied action with the sentence that tells what happened."""

    action: Action
    sentence: str
    now: int
    actor: str
    """worker:<attempt>, janitor:<n>, network, clock: who acted (for diagrams)."""
    target: str
    """ledger, destination, worker:<attempt>, network, clock: who it acted on."""
    drain: bool = False


class InapplicableAction(FenceError, ValueError):
    """An action that is not enabled in the current state (e.g. a corrupt replay)."""
