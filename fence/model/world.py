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

from collections import Counter
from typing import Callable

from fence.base.errors import CapacityExhausted, FenceError, IllegalMove
from fence.model import protocol
from fence.model.destination import Destination, Guards, TicketService
from fence.model.janitor import Janitor
from fence.model.ledger import Ledger
from fence.model.observer import ObservedDestination, Observer
from fence.model.policies import FENCE_POLICY_TYPES, Evidence, JanitorPolicy
from fence.model.worker import Phase, can_still_write
from fence.model.config import ModelConfig
from fence.model.drain import Drain, snapshot_is_complete
from fence.model.state_table import compile_world_code, undeclared_fields, undeclared_problem
from fence.model.actions import Action, Attempt, InapplicableAction, Message, MessageKind, Step
from fence.model.janitor_actions import Probe, Scan, Settle
from fence.model.network_actions import Deliver, LoseAck, Tick
from fence.model.rules import ACTION_CLASSES, ACTION_KINDS, FAILURE_KINDS, action_kinds
from fence.model.worker_actions import Confirm, Crash, Fail, Reserve, Retry, SendCommit, Start

# The world is where the model is met: the vocabulary and the rules are importable from here too.
__all__ = [
    "ACTION_KINDS", "FAILURE_KINDS", "JOB_DETAIL", "Action", "Attempt", "Confirm", "Crash", "Deliver", "Fail",
    "InapplicableAction", "LoseAck", "Message", "MessageKind", "ModelConfig", "Probe", "Reserve", "Retry", "Scan",
    "SendCommit", "Settle", "Start", "Step", "Tick", "World", "action_kinds", "destination_snapshot",
    "ledger_snapshot", "snapshot_is_complete",
]

JOB_DETAIL = "detail:"
"""``World.job_memo`` keeps a job's detail (``fence.explore.transitions``) under this prefix and its name."""


class World(Drain):
    """The one model world every engine drives (see the module doc)."""

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
        any step that touches that job (``Action.job_in``)."""
        # Every field is declared in fence.model.state_table's WORLD_STATE, which the copies are written from.
        if undeclared_fields(self):
            raise TypeError(undeclared_problem(self))

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

    def within_attempts(self, job: str) -> bool:
        """May ``job`` start another attempt (the drain's retries are not bounded)?"""
        return self.draining or self.attempts_used[job] < self.config.max_attempts

    def attempts_in(self, *phases: Phase) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.phase in phases]

    # -- applying --------------------------------------------------------------------
    def is_enabled(self, action: Action) -> bool:
        """Whether ``action`` is in ``enabled(action.kind)``, answered without listing the kind when that is cheaper.

        A worker's step and a delivery concern one attempt or one message: their
        answer is that attempt's phase or that message's presence, where the list
        costs a pass over every attempt (and a sort of the network) on every
        apply. A drain of a hundred jobs applied thousands of steps, each one
        listing all of them. tests/test_world_enabled.py holds both answers equal.
        """
        cache = self._enabled_cache
        if (cache is None or action.kind not in cache) and type(action) is ACTION_CLASSES.get(action.kind):
            if action.CHEAP_ENABLED_TEST:
                return action.is_enabled_in(self)
        return action in self.enabled(action.kind)

    def apply(self, action: Action) -> Step:
        if not self.is_enabled(action):
            raise InapplicableAction(f"{action.to_dict()} is not enabled at t={self.now}")
        self._enabled_cache = None
        if self.job_memo:
            job = action.job_in(self)
            if job is None:
                self.job_memo = {}
            else:
                self.job_memo.pop(job, None)
                self.job_memo.pop(JOB_DETAIL + job, None)
        sentence, actor, target = action.take(self)
        step = Step(action, sentence, self.now, actor, target, self.draining)
        self.trace.append(step)
        return step

    def new_attempt(self, job: str, revised: bool = False) -> Attempt | FenceError:
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

    def take_message(self, kind: MessageKind, attempt: str) -> Message:
        for index, message in enumerate(self.network):
            if message.kind is kind and message.attempt == attempt:
                return self.network.pop(index)
        raise AssertionError("enabled() offered a message that is not in the network")

    def record_release(self, reservation_id: str) -> None:
        owner = self.attempt_of(reservation_id)
        self.observer.release_judged(reservation_id, self.can_still_write(owner), owner.handle)
        self.retry_queue.append(owner.key)

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
        return self._copy_fields(history)

    # Written from fence.model.state_table's WORLD_STATE and compiled once (below the class):
    # ``_copy_fields(history)`` copies every field by its rule (fence's own parts); ``_copy_worker_side(other,
    # history)`` the fields both copies share (``_generic_clone`` copies the user's parts itself);
    # ``fingerprint()`` reads the fields the drain's fixed point is judged on.
    _copy_fields: Callable[[World, bool], World]
    _copy_worker_side: Callable[[World, World, bool], None]
    fingerprint: Callable[[World], tuple]

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


_ENABLED: dict[str, Callable[[World], list[Action]]] = {kind: cls.enabled_in for kind, cls in ACTION_CLASSES.items()}
"""Each kind's list of enabled actions, in ``ACTION_KINDS`` order."""


def _derive_copies_and_fingerprint() -> None:
    code = compile_world_code({
        "World": World, "_copy_attempt": _copy_attempt,
        "destination_snapshot": destination_snapshot, "ledger_snapshot": ledger_snapshot,
    })
    World._copy_fields = code["copy_fields"]
    World._copy_worker_side = code["copy_worker_side"]
    World.fingerprint = code["fingerprint"]
    World.fingerprint.__doc__ = (
        "A hashable picture of everything that decides what can happen next (see ``reached_fixed_point``).")


_derive_copies_and_fingerprint()
