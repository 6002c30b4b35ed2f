"""The model world: workers, a lossy network, janitors, one ledger, one destination.

Theory of operation
-------------------
This is the one model of the fleet that every engine drives: the Hypothesis
machines pick its enabled actions at random and shrink, the explorer walks all of
them, and a saved counterexample is replayed through it step by step. It owns no
policy logic and no guard logic of its own: it wires the real ``Ledger``,
``Janitor`` and destination together and moves messages between them.

Everything is a discrete action on a logical clock (``now`` is an integer number
of ticks). A worker's life is: reserve -> start (its registration is a message
that may be delayed) -> send commit (a message) -> receive ack (a message that may
be lost) -> confirm at the ledger. It can crash at any point. With
``ModelConfig.failures`` it can also fail: raise and report the failure to the
ledger (``Fail``), which a crash never does. The network
delivers messages in any order, so a commit can land after the lease expired,
after the janitor released the unit, after a retry. Janitors scan, probe and
settle as separate actions, so a lookup can be answered and then go stale.

While it runs, the world records the facts the invariants are judged on
(``releases``, ``late_effects``, ``stale_changes``) and counts the dangerous
interleavings it reached (``reached``), so that a "safe" verdict can show that
the danger was really visited.
"""

from __future__ import annotations

import enum
import heapq
from collections import Counter
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Callable, ClassVar

from fence.model import protocol
from fence.model.destination import (
    CommitResult,
    Destination,
    Guards,
    TicketService,
)
from fence.base.errors import CapacityExhausted, FenceError, IllegalMove, StaleAttempt
from fence.model.janitor import SETTLE_MOVES, Janitor
from fence.model.ledger import Ledger, ReservationState
from fence.model.observer import ObservedDestination, Observer
from fence.model.worker import (
    ALIVE_PHASES,
    FAILABLE_PHASES,
    UNSENT_PHASES,
    Phase,
    WorkerMove,
    can_still_write,
    confirm_move,
    hearing,
    next_phase,
)
from fence.model.policies import FENCE_POLICY_TYPES, Decision, Evidence, JanitorPolicy

JOB_DETAIL = "detail:"
"""``World.job_memo`` keeps a job's detail (``fence.explore.transitions``) under this prefix and its name."""

def snapshot_is_complete(part) -> bool:
    """Does ``part`` (a ledger or destination) say that its ``snapshot()`` holds all of its state?

    fence's own ledgers and destinations say so in their class body
    (``SNAPSHOT_IS_COMPLETE = True``). Only the part's own class counts, not an
    inherited flag: a user's subclass may add state its parent's snapshot leaves out.
    """
    return vars(type(part)).get("SNAPSHOT_IS_COMPLETE", False) is True


@dataclass(frozen=True)
class ModelConfig:
    capacity: int = 1
    jobs: int = 1
    max_attempts: int = 3
    """Attempts per job the random part of a run may start (the drain may start more)."""
    lease: int = 2
    """Lease length in ticks."""
    janitors: int = 2
    horizon: int = 30
    """The clock never passes this many ticks during the random part of a run."""
    failures: bool = False
    """Workers may fail (``Fail``): raise before their effect, after it, or on a refused commit,
    and report the failure to the ledger for their reservation. Off, no ``Fail`` is ever
    enabled and every engine walks exactly the states and draws it walked before."""

    def problem(self) -> str | None:
        if self.capacity < 1:
            return f"capacity must be at least 1 unit, got {self.capacity}"
        if self.jobs < 1:
            return f"jobs must be at least 1, got {self.jobs}"
        if self.jobs > self.capacity:
            return (
                f"jobs ({self.jobs}) must not exceed capacity ({self.capacity}): each job "
                "spends one unit of quota, so extra jobs could never finish"
            )
        if self.lease < 1:
            return f"lease must be at least 1 tick, got {self.lease}"
        if self.max_attempts < 1:
            return f"max_attempts must be at least 1, got {self.max_attempts}"
        if self.janitors < 1:
            return f"janitors must be at least 1, got {self.janitors}"
        return None

    def describe(self) -> str:
        return (
            f"{self.capacity} unit(s), {self.jobs} job(s), {self.max_attempts} attempt(s) "
            f"per job, lease {self.lease} ticks, {self.janitors} janitor(s)"
            + (", failures reported" if self.failures else "")
        )




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


# -- actions ------------------------------------------------------------------------
@dataclass(frozen=True)
class Action:
    """One step of the world. Subclasses are the rules of the models."""

    kind: ClassVar[str]
    REGISTRY: ClassVar[dict[str, type[Action]]] = {}

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
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


@dataclass(frozen=True)
class Reserve(Action):
    kind: ClassVar[str] = "reserve"
    job: str


@dataclass(frozen=True)
class Retry(Action):
    kind: ClassVar[str] = "retry"
    job: str
    revised: bool = False
    """The retry carries a new payload (an agent that rewrote the ticket, say)."""


@dataclass(frozen=True)
class Start(Action):
    kind: ClassVar[str] = "start"
    attempt: str


@dataclass(frozen=True)
class SendCommit(Action):
    kind: ClassVar[str] = "send_commit"
    attempt: str


@dataclass(frozen=True)
class Deliver(Action):
    kind: ClassVar[str] = "deliver"
    message: str
    """register, commit or ack"""
    attempt: str


@dataclass(frozen=True)
class LoseAck(Action):
    kind: ClassVar[str] = "lose_ack"
    attempt: str


@dataclass(frozen=True)
class Confirm(Action):
    kind: ClassVar[str] = "confirm"
    attempt: str


@dataclass(frozen=True)
class Crash(Action):
    kind: ClassVar[str] = "crash"
    attempt: str


@dataclass(frozen=True)
class Tick(Action):
    kind: ClassVar[str] = "tick"
    by: int


@dataclass(frozen=True)
class Scan(Action):
    kind: ClassVar[str] = "scan"
    janitor: int
    reservation: str


@dataclass(frozen=True)
class Probe(Action):
    kind: ClassVar[str] = "probe"
    janitor: int
    reservation: str


@dataclass(frozen=True)
class Settle(Action):
    kind: ClassVar[str] = "settle"
    janitor: int
    reservation: str
    follow_up: bool = False
    """The policy's second step after it freed the unit (``after_release``), not a decision."""


@dataclass(frozen=True)
class Fail(Action):
    """The worker raises and reports the failure to the ledger (only with ``ModelConfig.failures``).

    Defined last, so that its kind comes last in ``ACTION_KINDS``: without
    failures every engine's order of kinds (and Hypothesis' draws) is the old one.
    """

    kind: ClassVar[str] = "fail"
    attempt: str


ACTION_KINDS: tuple[str, ...] = tuple(Action.REGISTRY)
FAILURE_KINDS: tuple[str, ...] = ("fail",)


def action_kinds(config: ModelConfig) -> tuple[str, ...]:
    """The kinds a world of ``config`` can ever enable, in ``ACTION_KINDS`` order."""
    if config.failures:
        return ACTION_KINDS
    return tuple(kind for kind in ACTION_KINDS if kind not in FAILURE_KINDS)


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


class World:
    def __init__(
        self,
        policy: JanitorPolicy,
        config: ModelConfig = ModelConfig(),
        destination_factory: Callable[[Guards], Destination] | None = None,
        ledger_factory: Callable[[int], Ledger] | None = None,
    ) -> None:
        # A user's policy is copied: whatever it keeps, no run sees another run's.
        self.policy = policy if type(policy) in FENCE_POLICY_TYPES else protocol.deepcopy({"policy": policy})["policy"]
        self.config = config
        make = destination_factory or TicketService
        self.destination: Destination = make(policy.guards)
        self.ledger = (ledger_factory or Ledger)(config.capacity)  # fence.backends: SQL ledgers
        self.observer = Observer(config.capacity)
        self.policy_twins = None
        """Set by ``key_users_policy``: the explorer keys a user's policy, each call made twice."""
        self._make_janitors()
        self.now = 0
        self.jobs = [f"job{n}" for n in range(1, config.jobs + 1)]
        self.attempts: dict[str, Attempt] = {}
        self.attempts_used: dict[str, int] = {job: 0 for job in self.jobs}
        self.retry_queue: list[str] = []
        self.network: list[Message] = []
        self.evidence: list[dict[str, Evidence]] = [{} for _ in range(config.janitors)]
        self.owner_of_reservation: dict[str, str] = {}
        self.follow_ups: list[tuple[int, str]] = []
        """(janitor, reservation): the policy's second step after a release, not yet taken."""
        self.trace: list[Step] = []
        self.draining = False
        self._enabled_cache: dict[str, list[Action]] | None = None
        self.job_memo: dict[str, object] = {}
        """Values computed from one job's part of the world (the explorer's key parts, under
        the job's name, and its memo details, under ``JOB_DETAIL`` + name), each dropped by
        any step that touches that job (``_touched_job``)."""

    def _make_janitors(self) -> None:
        # A janitor's policy talks to the destination through the observer, so that
        # what the destination promised (an abandon's answer) is a recorded fact.
        observed = ObservedDestination(self.destination, self.observer)
        self._janitors = [
            Janitor(self.ledger, observed, self.policy, self.policy_twins) for _ in range(self.config.janitors)
        ]

    def key_users_policy(self) -> None:
        """Walk a user's policy on the keyed engine (``fence.model.policy_twins``): every call it gets is made twice.

        Only with fence's own ledger and destination (the twins copy and compare
        them); the twins raise ``PolicyNotKeyable`` at the first call that shows
        the policy is not stateless, local, blind to names and deterministic.
        """
        from fence.model.policy_twins import PolicyTwins

        if type(self.destination) is not TicketService or type(self.ledger) is not Ledger:
            raise ValueError("a user's policy is keyed with fence's own ledger and destination only")
        self.policy_twins = PolicyTwins(self.jobs)
        self._make_janitors()

    @property
    def janitors(self) -> list[Janitor]:
        # Made on first use: most of the explorer's clones take a step no janitor
        # takes part in, and the janitors hold nothing but references to the parts.
        if self._janitors is None:
            self._make_janitors()
        return self._janitors

    @property
    def reached(self) -> Counter[str]:
        """The dangerous interleavings this run visited (the observer counts them)."""
        return self.observer.reached

    # -- reading -----------------------------------------------------------------
    def attempt_of(self, reservation_id: str) -> Attempt:
        return self.attempts[self.owner_of_reservation[reservation_id]]

    def in_network(self, kind: MessageKind, attempt: str) -> bool:
        return any(m.kind is kind and m.attempt == attempt for m in self.network)

    def can_still_write(self, attempt: Attempt) -> bool:
        """Could this attempt still make an effect land (or try to)?

        Judged from facts fence holds, never from the destination's reads: the
        worker is alive or its commit is on its way, and the destination has not
        answered 'abandoned' to an abandon of it. If that answer was a lie, the
        write it then lets through is caught when it lands (a late effect).
        """
        return can_still_write(
            attempt.phase, self.in_network(MessageKind.COMMIT, attempt.handle), attempt.identity in self.observer.abandoned
        )

    def live_writers(self) -> list[str]:
        """The attempts that could still make an effect land, by handle (read by invariant 3)."""
        # ``can_still_write`` per attempt, with the network read once rather than once per attempt.
        commits = {m.attempt for m in self.network if m.kind is MessageKind.COMMIT}
        abandoned = self.observer.abandoned
        return [
            a.handle for a in self.attempts.values()
            if can_still_write(a.phase, a.handle in commits, a.identity in abandoned)
        ]

    # -- enabled actions -----------------------------------------------------------
    def enabled(self, kind: str) -> list[Action]:
        # The machines ask every rule's precondition at every step: compute the
        # enabled actions once per state (apply() clears the cache).
        # Kinds are computed lazily: apply() asks only for the kind it applies.
        cache = self._enabled_cache
        if cache is None:
            cache = self._enabled_cache = {}
        actions = cache.get(kind)
        if actions is None:
            actions = cache[kind] = _ENABLED[kind](self)
        return actions

    def enabled_actions(self) -> list[Action]:
        cache = self._enabled_cache
        if cache is None:  # every kind at once, into the cache ``enabled`` keeps
            self._enabled_cache = cache = {kind: enabled(self) for kind, enabled in _ENABLED.items()}
            return [action for actions in cache.values() for action in actions]
        return [action for kind in ACTION_KINDS for action in self.enabled(kind)]

    def _within_attempts(self, job: str) -> bool:
        return self.draining or self.attempts_used[job] < self.config.max_attempts

    # The ledger is asked for its free units once per list, not once per job: the
    # answer is the same for every job, and asking it per job made a state with a
    # hundred jobs cost a hundred scans of the ledger.
    def _enabled_reserve(self) -> list[Action]:
        if protocol.ledger_free(self.ledger) < 1:
            return []
        return [Reserve(j) for j in self.jobs if self.attempts_used[j] == 0 and self._within_attempts(j)]

    def _enabled_retry(self) -> list[Action]:
        if not self.retry_queue or protocol.ledger_free(self.ledger) < 1:
            return []
        return [
            Retry(j, revised)
            for j in dict.fromkeys(self.retry_queue)
            if self._within_attempts(j)
            for revised in (False, True)
        ]

    def _attempts_in(self, *phases: Phase) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.phase in phases]

    def _enabled_start(self) -> list[Action]:
        return [Start(a.handle) for a in self._attempts_in(Phase.RESERVED)]

    def _enabled_send_commit(self) -> list[Action]:
        return [SendCommit(a.handle) for a in self._attempts_in(Phase.WORKING)]

    def _enabled_deliver(self) -> list[Action]:
        # Commits first, registrations last: the Hypothesis rules pick by index, so
        # this order keeps "deliver the commit" at index 0 whatever else is queued,
        # which lets the shrinker delete unrelated deliveries without side effects.
        network = self.network
        ranked = sorted(network, key=_delivery_rank) if len(network) > 1 else network
        return [Deliver(m.kind._value_, m.attempt) for m in ranked]

    def _enabled_lose_ack(self) -> list[Action]:
        return [LoseAck(m.attempt) for m in self.network if m.kind is MessageKind.ACK]

    def _enabled_confirm(self) -> list[Action]:
        return [Confirm(a.handle) for a in self._attempts_in(Phase.ACKED)]

    def _enabled_crash(self) -> list[Action]:
        return [Crash(a.handle) for a in self._attempts_in(*ALIVE_PHASES)]

    def _enabled_fail(self) -> list[Action]:
        # A failure is a fault, like a crash: none in the drain, whose workers finish.
        if not self.config.failures or self.draining:
            return []
        return [Fail(a.handle) for a in self._attempts_in(*FAILABLE_PHASES)]

    def _enabled_tick(self) -> list[Action]:
        room = self.config.horizon - self.now
        # Longest tick first, so a shrunk counterexample jumps straight to expiry.
        return [Tick(by) for by in range(min(self.config.lease, room), 0, -1)]

    def _enabled_scan(self) -> list[Action]:
        return [
            Scan(j, r.reservation_id)
            for r in protocol.ledger_expired(self.ledger, self.now)
            for j in range(self.config.janitors)
        ]

    def _enabled_probe(self) -> list[Action]:
        return [
            Probe(j, r.reservation_id)
            for r in protocol.ledger_reservations(self.ledger)
            if r.state is ReservationState.OUTCOME_UNKNOWN
            for j in range(self.config.janitors)
            if r.reservation_id not in self.evidence[j]
        ]

    def _enabled_settle(self) -> list[Action]:
        settles = [Settle(j, r) for j in range(self.config.janitors) for r in self.evidence[j]]
        return settles + [Settle(j, r, follow_up=True) for j, r in self.follow_ups]

    # -- applying --------------------------------------------------------------------
    def is_enabled(self, action: Action) -> bool:
        """Whether ``action`` is in ``enabled(action.kind)``, answered without listing the kind when that is cheaper.

        A worker's step and a delivery concern one attempt or one message: their
        answer is that attempt's phase or that message's presence, where the list
        costs a pass over every attempt (and a sort of the network) on every
        apply. A drain of a hundred jobs applied thousands of steps, each one
        listing all of them. tests/test_world.py holds both answers equal.
        """
        cache = self._enabled_cache
        if cache is None or action.kind not in cache:
            one = _ENABLED_ONE.get(action.kind)
            if one is not None:
                return type(action) is _ACTION_CLASS[action.kind] and one(self, action)
        return action in self.enabled(action.kind)

    def apply(self, action: Action) -> Step:
        if not self.is_enabled(action):
            raise InapplicableAction(f"{action.to_dict()} is not enabled at t={self.now}")
        self._enabled_cache = None
        if self.job_memo:
            job = self._touched_job(action)
            if job is None:
                self.job_memo = {}
            else:
                self.job_memo.pop(job, None)
                self.job_memo.pop(JOB_DETAIL + job, None)
        sentence, actor, target = _DO[action.kind](self, action)
        step = Step(action, sentence, self.now, actor, target, self.draining)
        self.trace.append(step)
        return step

    def _touched_job(self, action: Action) -> str | None:
        """The one job whose part of the world ``action`` may change, or None for any job's.

        A worker's step, a delivery and a janitor's step on a reservation touch
        only that attempt's or reservation's job: its reservations, its key's
        effects, its attempts' witness entries, messages and retries. A tick
        moves every deadline's standing.
        """
        kind = action.kind
        if kind == "reserve" or kind == "retry":
            return action.job
        if kind == "scan" or kind == "probe" or kind == "settle":
            return self.attempt_of(action.reservation).key
        if kind == "tick":
            return None
        return self.attempts[action.attempt].key

    def _new_attempt(self, job: str, revised: bool = False) -> Attempt | FenceError:
        """A new attempt at ``job`` under a fresh reservation, or the ledger's refusal.

        The world offers a reserve only when fence's count says a unit is free; a
        user's ledger may still refuse, and a refusal is an answer, not a crash.
        """
        number = self.attempts_used[job] + 1
        handle = f"{job}#{number}"
        identity = job if self.policy.shared_identity else handle
        try:
            reservation = protocol.ledger_reserve(self.ledger, job, identity, self.now, self.config.lease)
        except (CapacityExhausted, IllegalMove) as refusal:
            return refusal
        self.observer.reserved(reservation.reservation_id, job, handle, deadline=self.now + self.config.lease)
        self.attempts_used[job] = number
        payload = f"ticket for {job}" + (f" (revision {number})" if revised else "")
        attempt = Attempt(handle, identity, job, reservation.reservation_id, payload)
        self.attempts[handle] = attempt
        self.owner_of_reservation[reservation.reservation_id] = handle
        return attempt

    def _do_reserve(self, action: Reserve):
        attempt = self._new_attempt(action.job)
        if isinstance(attempt, FenceError):
            return f"a worker asks for a unit for {action.job}; the ledger refuses: {attempt}", "worker", "ledger"
        deadline = self.observer.reservations[attempt.reservation_id].deadline
        return (
            f"a worker reserves a unit for {action.job} as attempt {attempt.handle} "
            f"(lease until t={deadline})",
            f"worker:{attempt.handle}",
            "ledger",
        )

    def _do_retry(self, action: Retry):
        self.retry_queue.remove(action.job)
        attempt = self._new_attempt(action.job, action.revised)
        if isinstance(attempt, FenceError):
            return f"{action.job} is retried, but the ledger refuses a unit: {attempt}", "worker", "ledger"
        self.observer.reach("retry_after_release")
        if action.revised:
            self.observer.reach("revised_retry")
        deadline = self.observer.reservations[attempt.reservation_id].deadline
        revised = f" with a revised payload '{attempt.payload}'" if action.revised else ""
        return (
            f"{action.job} is retried{revised}: a worker reserves a unit as attempt {attempt.handle} "
            f"(lease until t={deadline})",
            f"worker:{attempt.handle}",
            "ledger",
        )

    def _do_start(self, action: Start):
        attempt = self.attempts[action.attempt]
        attempt.phase = next_phase(attempt.phase, WorkerMove.START)
        self.network.append(Message(MessageKind.REGISTER, attempt.handle))
        return (
            f"{attempt.handle} starts working and sends its registration to the destination",
            f"worker:{attempt.handle}",
            "network",
        )

    def _do_send_commit(self, action: SendCommit):
        attempt = self.attempts[action.attempt]
        attempt.phase = next_phase(attempt.phase, WorkerMove.SEND_COMMIT)
        self.network.append(Message(MessageKind.COMMIT, attempt.handle))
        return (
            f"{attempt.handle} finishes its work and sends its commit",
            f"worker:{attempt.handle}",
            "network",
        )

    def _take(self, kind: MessageKind, attempt: str) -> Message:
        for index, message in enumerate(self.network):
            if message.kind is kind and message.attempt == attempt:
                return self.network.pop(index)
        raise AssertionError("enabled() offered a message that is not in the network")

    def _do_deliver(self, action: Deliver):
        kind = MessageKind(action.message)
        message = self._take(kind, action.attempt)
        attempt = self.attempts[action.attempt]
        if kind is MessageKind.REGISTER:
            state = protocol.register(self.destination, attempt.identity, attempt.key)
            known = f" (witness: {state.value})" if state is not None else " (no witness kept)"
            return f"the destination receives {attempt.handle}'s registration{known}", "network", "destination"
        if kind is MessageKind.COMMIT:
            return self._deliver_commit(attempt)
        # An answer reaching its worker.
        if attempt.phase is not Phase.COMMIT_SENT:
            gone = "failed" if attempt.phase is Phase.FAILED else "crashed"
            return f"{message.describe()} arrives, but {attempt.handle} has {gone}", "network", f"worker:{attempt.handle}"
        attempt.ack = message.result
        heard = hearing(message.result)
        attempt.phase = next_phase(attempt.phase, heard)
        if heard is WorkerMove.HEAR_ACCEPTED:
            return f"{attempt.handle} receives the answer '{message.result.value}'", "network", f"worker:{attempt.handle}"
        return (
            f"{attempt.handle} receives the refusal '{message.result.value}' and gives up",
            "network",
            f"worker:{attempt.handle}",
        )

    def _deliver_commit(self, attempt: Attempt):
        observer = self.observer
        mine = observer.reservations[attempt.reservation_id]
        if self.now >= mine.deadline or mine.state is not ReservationState.RESERVED:
            observer.reach("commit_after_expiry")
        if observer.released(attempt.reservation_id):
            observer.reach("commit_after_release")
        result = protocol.commit(self.destination, attempt.identity, attempt.key, attempt.payload)
        self.network.append(Message(MessageKind.ACK, attempt.handle, result))
        written = observer.commit_answered(
            attempt.handle, attempt.identity, attempt.reservation_id, attempt.key, attempt.payload,
            result, self.destination.effects(),
        )
        if written:
            attempt.wrote = True
        copies = observer.effects_per_key[attempt.key]
        what = "the ticket is written" if result is CommitResult.WRITTEN else f"refused: {result.value}"
        if written and result is not CommitResult.WRITTEN:
            what += f", yet the destination's record gained {len(written)} write(s)"
        if written and copies > 1:
            what += f" (copy {copies} for {attempt.key})"
        return f"the destination receives {attempt.handle}'s commit: {what}", "network", "destination"

    def _do_lose_ack(self, action: LoseAck):
        self._take(MessageKind.ACK, action.attempt)
        return f"the network loses the destination's answer to {action.attempt}", "network", "network"

    def _do_confirm(self, action: Confirm):
        attempt = self.attempts[action.attempt]
        attempt.phase = next_phase(attempt.phase, WorkerMove.CONFIRM)
        move = confirm_move(attempt.ack)
        try:
            changed = protocol.ledger_owner_move(self.ledger, attempt.key, attempt.identity, move)
        except (StaleAttempt, IllegalMove) as refusal:
            return f"{attempt.handle} tries to {move.value}; the ledger refuses: {refusal}", f"worker:{attempt.handle}", "ledger"
        self.observer.owner_move_accepted(attempt.handle, attempt.reservation_id, attempt.key, move)
        return (
            f"{attempt.handle} {move.value}s: {changed.reservation_id} is {changed.state.value}",
            f"worker:{attempt.handle}",
            "ledger",
        )

    def _do_crash(self, action: Crash):
        attempt = self.attempts[action.attempt]
        if attempt.phase in UNSENT_PHASES:
            point = "before its effect"
        elif self.in_network(MessageKind.COMMIT, attempt.handle):
            point = "while its commit is in flight"
            self.observer.reach("crash_while_commit_in_flight")
        elif attempt.wrote:
            point = "after its effect landed, before confirming"
            self.observer.reach("crash_after_effect")
        else:
            point = "after its commit was refused, before hearing of it"
        attempt.phase = next_phase(attempt.phase, WorkerMove.CRASH)
        return f"{attempt.handle} crashes {point}", f"worker:{attempt.handle}", f"worker:{attempt.handle}"

    def _do_fail(self, action: Fail):
        """The worker raises and reports the failure: the ledger's ``fail``, owner-checked.

        The report says no more than an expiry would: a worker that raised after
        sending cannot know whether its effect landed. fence's own ledger moves the
        reservation to outcome_unknown, for the janitor's policy to settle as if
        the lease had expired; it refuses the report (a fact the observer records)
        if the worker no longer owns the key's reservation or the janitor took the
        lease back first.
        """
        attempt = self.attempts[action.attempt]
        actor = f"worker:{attempt.handle}"
        if attempt.phase in UNSENT_PHASES:
            point = "before its effect"
        elif self.in_network(MessageKind.COMMIT, attempt.handle):
            point = "while its commit is in flight"
            self.observer.reach("failure_while_commit_in_flight")
        elif attempt.wrote:
            point = "after its effect landed"
        elif attempt.phase is Phase.ACKED:
            point = f"after hearing '{attempt.ack.value}'"
        elif attempt.phase is Phase.REFUSED:
            point = f"after its commit was refused ('{attempt.ack.value}')"
        else:
            point = "after its commit was refused, before hearing of it"
        attempt.phase = next_phase(attempt.phase, WorkerMove.FAIL)
        try:
            changed = protocol.ledger_fail(self.ledger, attempt.key, attempt.identity)
        except (StaleAttempt, IllegalMove) as refusal:
            self.observer.failure_refused(attempt.handle, attempt.reservation_id)
            return f"{attempt.handle} fails {point} and reports it; the ledger refuses: {refusal}", actor, "ledger"
        self.observer.failure_accepted(attempt.handle, attempt.reservation_id, attempt.key, attempt.wrote)
        return (
            f"{attempt.handle} fails {point} and reports it: {changed.reservation_id} is {changed.state.value}",
            actor,
            "ledger",
        )

    def _do_tick(self, action: Tick):
        self.now += action.by
        # Named in one order whatever order the ledger lists them in: the order they were
        # reserved in is not state (the explorer's key sorts it away).
        expired = sorted(r.reservation_id for r in protocol.ledger_expired(self.ledger, self.now))
        note = f"; lease of {', '.join(expired)} has expired" if expired else ""
        return f"the clock advances {action.by} tick(s) to t={self.now}{note}", "clock", "clock"

    def _do_scan(self, action: Scan):
        janitor = self.janitors[action.janitor]
        try:
            janitor.scan(action.reservation, self.now)
        except IllegalMove as refusal:
            # A scan is taken only right after expired() listed the lease (apply() asks
            # enabled() anew): fence's own ledger never refuses it, a plug-in that does
            # contradicts itself.
            if protocol.fences_own(self.ledger):
                raise
            raise protocol.scan_refused(self.ledger, action.reservation, self.now, refusal) from refusal
        actor = f"janitor:{action.janitor}"
        mirror = self.observer.moved(action.reservation, janitor.expiry_move, by=actor)
        if mirror.state is ReservationState.UNUSED:
            self._record_release(action.reservation)
            return f"janitor {action.janitor} sees {action.reservation} expired and frees its unit", actor, "ledger"
        return (
            f"janitor {action.janitor} sees {action.reservation} expired and holds it as outcome_unknown",
            actor,
            "ledger",
        )

    def _do_probe(self, action: Probe):
        owner = self.attempt_of(action.reservation)
        if self.in_network(MessageKind.COMMIT, owner.handle):
            self.observer.reach("probe_while_commit_in_flight")
        if self.in_network(MessageKind.REGISTER, owner.handle):
            self.observer.reach("probe_while_registration_in_flight")
        evidence = self.janitors[action.janitor].probe(action.reservation)
        self.evidence[action.janitor][action.reservation] = evidence
        return (
            f"janitor {action.janitor} asks the destination about {action.reservation}: {evidence.describe()}",
            f"janitor:{action.janitor}",
            "destination",
        )

    def _do_settle(self, action: Settle):
        actor = f"janitor:{action.janitor}"
        if action.follow_up:
            self.follow_ups.remove((action.janitor, action.reservation))
            self.janitors[action.janitor].follow_up(action.reservation)
            return (
                f"janitor {action.janitor} takes the policy's second step on {action.reservation}",
                actor,
                "destination",
            )
        evidence = self.evidence[action.janitor].pop(action.reservation)
        try:
            settlement = self.janitors[action.janitor].settle(action.reservation, evidence)
        except IllegalMove:
            self.observer.reach("settle_on_stale_evidence_refused")
            state = protocol.ledger_get(self.ledger, action.reservation).state.value
            return (
                f"janitor {action.janitor} acts on '{evidence.describe()}', but {action.reservation} "
                f"is already {state}: the ledger refuses",
                actor,
                "ledger",
            )
        if settlement.decision is Decision.HOLD:
            return f"janitor {action.janitor} holds {action.reservation} ({evidence.describe()})", actor, "ledger"
        mirror = self.observer.moved(action.reservation, SETTLE_MOVES[settlement.decision], by=actor)
        if mirror.state is ReservationState.UNUSED:
            self._record_release(action.reservation)
            if self.janitors[action.janitor].has_follow_up:
                self.follow_ups.append((action.janitor, action.reservation))
            return (
                f"janitor {action.janitor} settles {action.reservation} as unused ({evidence.describe()}): "
                "its unit returns and the job is queued for retry",
                actor,
                "ledger",
            )
        return (
            f"janitor {action.janitor} settles {action.reservation} as "
            f"{settlement.reservation.state.value} ({evidence.describe()})",
            actor,
            "ledger",
        )

    def _record_release(self, reservation_id: str) -> None:
        owner = self.attempt_of(reservation_id)
        self.observer.release_judged(reservation_id, self.can_still_write(owner), owner.handle)
        self.retry_queue.append(owner.key)

    # -- the end of a run ---------------------------------------------------------------
    def start_draining(self) -> None:
        """From here on no faults happen and retries are not bounded (what ``drain`` runs under)."""
        self.draining = True
        # What is enabled changes with draining (retries are no longer bounded):
        # an enabled list cached before the drain would hide them.
        self._enabled_cache = None

    def drain(self, max_rounds: int = 12) -> bool:
        """Deliver everything, let live workers finish, run the janitor to a fixed point.

        No faults happen here: messages arrive, workers do not crash, janitor 0 does
        its whole job each round, retries are not bounded. Returns True if a fixed
        point was reached within ``max_rounds``.
        """
        self.start_draining()
        after = None
        for _ in range(max_rounds):
            # A round starts where the last one ended: its fingerprint is the last one's ``after``.
            before, steps = after if after is not None else self.fingerprint(), len(self.trace)
            self._drain_round()
            after = self.fingerprint()
            if self.reached_fixed_point(before, steps, after):
                return True
        return False

    def reached_fixed_point(self, before: tuple, steps_before: int, after: tuple | None = None) -> bool:
        """Did the drain round that started at ``before`` (fingerprint, trace length) change nothing?

        ``after`` is the fingerprint now, if the caller has it already.

        A round that only re-asks and holds leaves the fingerprint as it was. That
        is a fixed point only if the fingerprint sees everything that decides the
        next answers, which fence knows of its own ledger and destination only; a
        plug-in may keep state outside its ``snapshot()`` (a witness that gives up
        after some questions), so with one the drain stops only at a round that
        took no step at all, or at ``max_rounds``.
        """
        if (self.fingerprint() if after is None else after) != before:
            return False
        return self.snapshots_complete() or len(self.trace) == steps_before

    def snapshots_complete(self) -> bool:
        """Are the ledger and destination fence's own, whose snapshots hold all of their state?"""
        return snapshot_is_complete(self.destination) and snapshot_is_complete(self.ledger)

    def fast_copy_is_faithful(self) -> bool:
        """Can ``clone`` copy this world field by field (fence's own parts only)?

        The field-by-field copy knows what fence's own ledger, destination, policies
        and evidence hold. Anything else (a user's subclass, extra state, a policy
        whose evidence points at the destination) is deep-copied, all of the
        user's parts in one ``copy.deepcopy`` so that references between them and
        into fence's parts stay consistent (``_generic_clone``).
        """
        return (
            type(self.destination) is TicketService
            and type(self.ledger) is Ledger
            and (type(self.policy) in FENCE_POLICY_TYPES or self.policy_twins is not None)
        )

    def _drain_round(self) -> None:
        # Every order in a drain round is a function of what the world holds, never
        # of the order in which messages were sent, reservations made or evidence
        # gathered: two worlds that differ only in such orders drain alike. The
        # explorer's state key leaves those orders out and relies on this.
        self._drain_workers()
        self._drain_clock_and_janitors()

    def _drain_workers(self) -> int:
        """A drain round's first half: every message delivered, every live worker's next step.

        Returns how many steps it took. A round in which this half took a step
        is never a fixed point: a delivered message cannot be in flight again by
        the round's end (a registration or commit is sent once per attempt, and
        an answer only on a commit's delivery, which happens here), and a
        worker's phase never goes back. The explorer's drain judge relies on it.
        """
        steps = len(self.trace)
        while self.network:
            self._drain_deliveries()
        self._drain_worker_steps()
        return len(self.trace) - steps

    def _drain_deliver_next(self) -> None:
        """Deliver the message a drain delivers next (one step of ``_drain_deliveries``, for the drain judge)."""
        message = min(self.network, key=_drain_order)
        self.apply(Deliver(message.kind._value_, message.attempt))

    def _drain_deliveries(self) -> None:
        """Deliver what is in flight, always the least by ``_drain_order``: what is in flight alone decides the order.

        A heap rather than a ``min`` over the network per delivery, which made a
        drain of a hundred jobs quadratic. A delivery removes its message and
        appends at most an answer, so the heap follows the network by pushing
        what was appended; the caller's loop catches anything else.
        """
        heap = [(_drain_order(m), m) for m in self.network]  # the orders are unique: messages are never compared
        heapq.heapify(heap)
        network = self.network
        while heap:
            _, message = heapq.heappop(heap)
            before = len(network)
            self.apply(Deliver(message.kind._value_, message.attempt))
            for sent in network[before - 1:]:
                heapq.heappush(heap, (_drain_order(sent), sent))

    def _drain_worker_steps(self) -> None:
        """Every live worker's next step, in the drain's order: confirms, then commits sent, then starts."""
        for kind in ("confirm", "send_commit", "start"):
            for action in sorted(self.enabled(kind), key=lambda a: a.attempt):
                self.apply(action)

    def _drain_clock_and_janitors(self) -> None:
        """A drain round's second half: the clock to the last deadline, the janitors, the retries."""
        unexpired = [
            r.deadline for r in protocol.ledger_reservations(self.ledger) if r.state is ReservationState.RESERVED
        ]
        if unexpired and max(unexpired) > self.now and not self.network:
            self.apply_unbounded_tick(int(max(unexpired) - self.now))
        # Janitors first finish what they were doing (act on the answers they hold,
        # stale or not), then janitor 0 makes a whole pass. Which janitor held which
        # answer does not change the order: janitors are interchangeable.
        pending = sorted(self.enabled("settle"), key=self._settle_order)
        for action in pending:
            self.apply(action)
        for action in sorted(self.enabled("scan"), key=lambda a: a.reservation):
            if action.janitor == 0 and action in self.enabled("scan"):
                self.apply(action)
        for action in sorted(self.enabled("probe"), key=lambda a: a.reservation):
            if action.janitor == 0:
                self.apply(action)
        for action in sorted(self.enabled("settle"), key=self._settle_order):
            self.apply(action)
        retries = sorted(self.enabled("retry"), key=lambda a: (a.job, a.revised))
        for action in self.enabled("reserve") + retries:
            if self.is_enabled(action):
                self.apply(action)
        # A write no commit reported (a destination that writes on its own) still counts at the end.
        self.observer.writes_no_worker_made(self.destination.effects())

    def _settle_order(self, action: Settle) -> tuple:
        """The drain's order of settles: by reservation, then by the answer held, then janitor.

        The policy is never asked here (its ``decide`` runs only when a settle is
        taken). Ordering by fence's own ``Evidence`` value, before the janitor,
        keeps the order independent of which janitor holds which answer, which the
        explorer's key relies on; any other evidence object is ordered by janitor.
        """
        if action.follow_up:
            return (action.reservation, 1, "", action.janitor)
        held = self.evidence[action.janitor][action.reservation]
        answer = repr(held) if type(held) is Evidence else ""
        return (action.reservation, 0, answer, action.janitor)

    def apply_unbounded_tick(self, by: int) -> Step:
        """A tick the drain may take past the horizon, to let every lease expire."""
        self._enabled_cache = None
        self.job_memo = {}
        sentence, actor, target = self._do_tick(Tick(by))
        step = Step(Tick(by), sentence, self.now, actor, target, self.draining)
        self.trace.append(step)
        return step

    def clone(self, history: bool = True) -> World:
        """An independent copy of this world.

        fence's own parts are copied field by field, much faster than
        ``copy.deepcopy``; a world with a user's ledger, destination or policy
        takes ``_generic_clone`` (``fast_copy_is_faithful``). The policy of the
        fast path is shared (fence's policies are frozen and keep nothing). With
        ``history=False`` the copy starts with no trace and no findings or danger
        counts, while keeping the observer's present state: the explorer judges
        each transition on what that transition alone adds.
        """
        if not self.fast_copy_is_faithful():
            return self._generic_clone(history)
        other = World.__new__(World)
        other.policy = self.policy
        other.config = self.config
        other.destination = self.destination.clone()
        other.ledger = self.ledger.copy()
        other.observer = self.observer.copy(findings=history)
        other._janitors = None  # made on first use (see ``janitors``)
        self._copy_worker_side(other, history)
        other.evidence = [dict(e) for e in self.evidence]  # fence's Evidence is frozen
        other.job_memo = dict(self.job_memo)  # values computed from the state the copy shares
        return other

    def _copy_worker_side(self, other: World, history: bool) -> None:
        """Copy the fields only fence keeps (clock, attempts, network, queues, trace) into ``other``."""
        other.now = self.now
        other.jobs = self.jobs  # never mutated
        other.policy_twins = self.policy_twins  # the walk's checks, the same in every state
        other.attempts = {handle: _copy_attempt(a) for handle, a in self.attempts.items()}
        other.attempts_used = dict(self.attempts_used)
        other.retry_queue = list(self.retry_queue)
        other.network = list(self.network)  # Message is frozen
        other.owner_of_reservation = dict(self.owner_of_reservation)
        other.follow_ups = list(self.follow_ups)
        other.trace = list(self.trace) if history else []
        other.draining = self.draining
        # The enabled actions are a function of the state the copy shares: it
        # starts with what this world computed so far (apply() drops the cache
        # before it changes anything, so the lists themselves are never changed).
        cache = self._enabled_cache
        other._enabled_cache = dict(cache) if cache is not None else None

    def _generic_clone(self, history: bool) -> World:
        """The copy of a world with a user's ledger, destination or policy.

        fence's own parts are copied by their own rules, as on the fast path. The
        user's parts (policy, destination, ledger, and the answers the janitors
        hold, which a user's policy made) are copied in one ``copy.deepcopy``
        whose memo already maps each of fence's parts a user's object can point
        at (the world, its destination and ledger, the observer, and the
        destination as the policy sees it) to that part's copy. So a reference
        from a user's object into fence's parts, or from one user's part to
        another, lands inside the copy, exactly as with a deepcopy of the whole
        world, without copying fence's parts object by object. Whether the
        copy is faithful is what the explorer's ``FaithfulnessCheck`` tests.
        """
        other = World.__new__(World)
        other.config = self.config
        other.observer = self.observer.copy(findings=history)
        memo: dict[int, object] = {id(self): other, id(self.observer): other.observer}
        users: dict[str, object] = {}
        if all(type(held) is Evidence for answers in self.evidence for held in answers.values()):
            other.evidence = [dict(e) for e in self.evidence]  # fence's Evidence is frozen
        else:
            users["evidence"] = self.evidence
        if type(self.destination) is TicketService:
            other.destination = memo[id(self.destination)] = self.destination.clone()
        else:
            users["destination"] = self.destination
        if type(self.ledger) is Ledger:
            other.ledger = memo[id(self.ledger)] = self.ledger.copy()
        else:
            users["ledger"] = self.ledger
        if type(self.policy) in FENCE_POLICY_TYPES:
            other.policy = self.policy  # frozen, keeps nothing
        else:
            users["policy"] = self.policy
        if "policy" not in users and "evidence" not in users:
            # fence's policy keeps nothing and its answers are values: nothing copied can hold
            # the janitors' proxy, so the copy's janitors are made on first use, as on the fast path.
            copied = protocol.deepcopy(users, memo)
            for name, part in copied.items():
                setattr(other, name, part)
            other._janitors = None
            self._copy_worker_side(other, history)
            other.job_memo = {}
            return other
        # The policy sees the destination through the janitors' proxy (and may keep
        # it in an answer): the copy's proxy stands in for it, its destination set
        # once the destination is copied.
        observed = ObservedDestination.__new__(ObservedDestination)
        janitors = self.janitors
        memo[id(janitors[0].destination)] = observed
        copied = protocol.deepcopy(users, memo)
        for name, part in copied.items():
            setattr(other, name, part)
        observed.__init__(other.destination, other.observer)
        other._janitors = [Janitor(other.ledger, observed, other.policy, self.policy_twins) for _ in janitors]
        self._copy_worker_side(other, history)
        other.job_memo = {}  # a user's parts: the explorer's generic key keeps no memo
        return other

    def fingerprint(self) -> tuple:
        """A hashable picture of everything that decides what can happen next (see ``reached_fixed_point``)."""
        return (
            self.now,
            ledger_snapshot(self.ledger),
            destination_snapshot(self.destination),
            tuple(
                (a.handle, a.phase.value, a.ack.value if a.ack else None, a.wrote, a.payload)
                for a in self.attempts.values()
            ),
            tuple(sorted((m.kind.value, m.attempt, m.result.value if m.result else "") for m in self.network)),
            tuple(self.retry_queue),
            tuple(tuple(sorted(e.items(), key=lambda kv: kv[0])) for e in self.evidence),
            tuple(self.follow_ups),
        )


_DELIVERY_RANK = {MessageKind.COMMIT: 0, MessageKind.ACK: 1, MessageKind.REGISTER: 2}
_DELIVERY_RANK_BY_VALUE = {kind._value_: rank for kind, rank in _DELIVERY_RANK.items()}
"""The same ranks by the kind's value: a str hashes in C, an Enum member in Python."""


def _delivery_rank(message: Message) -> int:
    return _DELIVERY_RANK_BY_VALUE[message.kind._value_]


def _drain_order(message: Message) -> tuple:
    """The drain delivers commits, then answers, then registrations, each by attempt."""
    return (_DELIVERY_RANK_BY_VALUE[message.kind._value_], message.attempt)


def _copy_attempt(attempt: Attempt) -> Attempt:
    other = Attempt.__new__(Attempt)
    other.__dict__.update(attempt.__dict__)  # its fields are immutable values
    return other


def destination_snapshot(destination: Destination) -> tuple:
    snapshot = getattr(destination, "snapshot", None)
    if callable(snapshot):
        return snapshot()
    return tuple((e.key, e.attempt_id, e.payload) for e in destination.effects())


def ledger_snapshot(ledger) -> tuple:
    snapshot = getattr(ledger, "snapshot", None)
    if callable(snapshot):
        return snapshot()
    return tuple((r.reservation_id, r.owner, r.deadline, r.state.value) for r in ledger.reservations())


_ENABLED: dict[str, Callable[[World], list[Action]]] = {
    kind: getattr(World, f"_enabled_{kind}") for kind in ACTION_KINDS
}



def _phase_is(*phases: Phase) -> Callable[[World, Action], bool]:
    def enabled(world: World, action: Action) -> bool:
        attempt = world.attempts.get(action.attempt)
        return attempt is not None and attempt.phase in phases
    return enabled


def _failable(world: World, action: Action) -> bool:
    return bool(world.config.failures) and not world.draining and _phase_is(*FAILABLE_PHASES)(world, action)


def _in_flight(world: World, action: Action) -> bool:
    wanted, attempt = action.message, action.attempt
    return any(m.attempt == attempt and m.kind._value_ == wanted for m in world.network)


def _reservable(world: World, action: Action) -> bool:
    if protocol.ledger_free(world.ledger) < 1:  # asked first and always, as the list asks it
        return False
    used = world.attempts_used.get(action.job)
    return used == 0 and world._within_attempts(action.job)


_ENABLED_ONE: dict[str, Callable[[World, Action], bool]] = {
    "reserve": _reservable,
    "start": _phase_is(Phase.RESERVED),
    "send_commit": _phase_is(Phase.WORKING),
    "confirm": _phase_is(Phase.ACKED),
    "crash": _phase_is(*ALIVE_PHASES),
    "fail": _failable,
    "deliver": _in_flight,
}
"""One action's ``is_enabled`` for the kinds whose list is a filter over attempts or messages."""
_ACTION_CLASS: dict[str, type] = {"reserve": Reserve, "start": Start, "send_commit": SendCommit, "confirm": Confirm, "crash": Crash,
                                  "fail": Fail, "deliver": Deliver}

_DO: dict[str, Callable[[World, Action], tuple[str, str, str]]] = {
    kind: getattr(World, f"_do_{kind}") for kind in ACTION_KINDS
}
