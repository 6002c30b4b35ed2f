"""A user's policy on the explorer's keyed engine: every call it gets is made twice, and must agree.

Why
---
The explorer's fast engine (the state key, the step memo, the abstract walk,
jobs symmetric) rests on four properties of a policy that fence's own
policies have by construction (``fence.explore.walk`` argues each):

* it keeps no state of its own: the key holds the world, not the policy;
* each call is *local*: a probe, decide or second step about one job's
  reservation asks the destination about that job's names only (its key, its
  attempts' identities), so what the step did is decided by that job's part of
  the world (the step memo is keyed by it);
* it is *blind to names*: it treats keys and identities as opaque labels, so a
  step learned on one job holds for another with the same part, and states
  that differ by a renaming of the jobs have renamed futures (symmetry);
* it is deterministic, and its answers are values: fence's own ``Evidence``.

A user's policy is not trusted to have them. While the explorer walks with
one, every policy call the model makes (``Janitor.probe``, ``settle``'s
``decide``, ``follow_up``) is made twice: first on a copy of the destination,
with the job's names swapped with another job's (or, with one job, unchanged),
then for real. The policy sees the destination through ``NamedView``, which
records every name it asks about and translates the swapped names back, so
the twin reaches the same records. The two calls must return equal answers
and leave the destination in equal states, each must ask about its own job's
names only, the answer must be a ``fence.Evidence``, and the policy's fields
must not change. Any difference raises ``PolicyNotKeyable``, and the explorer
walks the whole world instead (``generic_state_key``, deep copies, no
symmetry), saying why.

Every answer the memos hold was once such a real call, so every answer they
reuse was checked, not sampled: a policy that reads another job, counts its
calls, reads a clock or branches on a job's name is caught at the first call
where that changes an answer.
"""

from __future__ import annotations

import re
from dataclasses import replace

from fence.model import protocol
from fence.model.destination import TicketService
from fence.model.ledger import Reservation
from fence.model.policies import Decision, Evidence

_JOB_NAME = re.compile(r"job\d+")
"""How the model names jobs (``World.jobs``); attempts are ``job#n``, reservations ``job/rn``."""

# What the janitor's protocol checks say a policy's answer must be (fence.model.janitor).
EVIDENCE_MUST = "a fence.Evidence (or a subclass) holding what the destination answered"
DECISION_MUST = "a fence.Decision (EXISTING, UNUSED or HOLD)"


class PolicyNotKeyable(Exception):
    """A user's policy lacks a property the keyed engine rests on; the explorer walks whole worlds instead.

    Not a protocol breach: a policy may keep state (declared by ``snapshot()``),
    read another job or look at names, and is then explored the generic way.
    """


class NamedView:
    """The destination as a policy sees it, with the names it asks about recorded and (in a twin) swapped back.

    ``renaming`` maps the policy's names to the destination's (a swap of two
    jobs, or nothing). Strings in arguments are renamed token by token, so an
    identity ``job2#1`` asked about in the twin reaches ``job1#1``. Reads of
    anything but the five per-name calls are recorded as ``reads_everything``.
    """

    _CALLS = ("register", "commit", "lookup", "attempt_state", "abandon_unless_committed")

    def __init__(self, destination, renaming: dict[str, str]) -> None:
        self._destination = destination
        self._renaming = renaming
        self.names: list[str] = []
        """The keys and identities the policy asked about, in its own names."""
        self.reads_everything: list[str] = []
        """Other reads (``effects()``, attributes): not local to one job."""

    def _forward(self, call: str, names: tuple[str, ...], *data):
        self.names.extend(names)
        renamed = tuple(rename(name, self._renaming) for name in names)
        return getattr(self._destination, call)(*renamed, *data)

    def register(self, attempt_id: str, key: str):
        return self._forward("register", (attempt_id, key))

    def commit(self, attempt_id: str, key: str, payload: str):
        return self._forward("commit", (attempt_id, key), rename(payload, self._renaming))

    def lookup(self, key: str):
        return self._forward("lookup", (key,))

    def attempt_state(self, attempt_id: str):
        return self._forward("attempt_state", (attempt_id,))

    def abandon_unless_committed(self, attempt_id: str):
        return self._forward("abandon_unless_committed", (attempt_id,))

    def effects(self):
        self.reads_everything.append("effects()")
        back = {theirs: ours for ours, theirs in self._renaming.items()}
        return [replace(e, key=rename(e.key, back), attempt_id=rename(e.attempt_id, back),
                        payload=rename(e.payload, back)) for e in self._destination.effects()]

    @property
    def guards(self):
        return self._destination.guards  # the same in every state

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        self.reads_everything.append(name)
        return getattr(self._destination, name)


def rename(text: str, renaming: dict[str, str]) -> str:
    """``text`` with every job name in it renamed by ``renaming`` (names it does not map stay)."""
    if not renaming or not isinstance(text, str):
        return text
    return _JOB_NAME.sub(lambda match: renaming.get(match.group(0), match.group(0)), text)


def _belongs_to(name: str, job: str) -> bool:
    """Is ``name`` one of ``job``'s (its key, an identity ``job#n``)? Any other job's, or none, is not."""
    return isinstance(name, str) and _JOB_NAME.findall(name) == [job]


def _fields(policy) -> object:
    """The policy's own fields, as text: a change shows that it keeps state."""
    names = sorted(set(getattr(policy, "__dict__", {})) | {
        name for klass in type(policy).__mro__ for name in getattr(klass, "__slots__", ())
    })
    return tuple((name, repr(getattr(policy, name, None))) for name in names)


def keyable_problem(policy) -> str | None:
    """Why a user's policy is walked as whole worlds from the start, or None if the twins may hold it."""
    if callable(getattr(policy, "snapshot", None)):
        return "it declares state of its own (snapshot())"
    return None


class PolicyTwins:
    """Makes each policy call twice (see the module docstring) for the janitors of one explored World."""

    def __init__(self, jobs: list[str]) -> None:
        self.jobs = jobs
        self.calls = 0
        """Policy calls checked (each made twice or more)."""

    def _renamings(self, job: str) -> list[dict[str, str]]:
        others = [other for other in self.jobs if other != job]
        if not others:
            return [{}]
        return [{job: other, other: job} for other in others]

    def probe(self, janitor, reservation: Reservation) -> Evidence:
        policy = janitor.policy
        job = reservation.key
        return self._twice(
            janitor, job, "probe", EVIDENCE_MUST,
            lambda view, renaming: policy.probe(view, _renamed(reservation, renaming)),
            answer_must=Evidence,
        )

    def follow_up(self, janitor, reservation: Reservation) -> None:
        policy = janitor.policy
        self._twice(
            janitor, reservation.key, "after_release", "None (it acts on the destination)",
            lambda view, renaming: policy.after_release(view, _renamed(reservation, renaming)),
        )

    def decide(self, janitor, job: str, evidence: Evidence) -> Decision:
        if type(evidence) is not Evidence:
            raise PolicyNotKeyable(f"its probe() answered a {type(evidence).__qualname__}, not a fence.Evidence")
        policy = janitor.policy
        return self._twice(
            janitor, job, "decide", DECISION_MUST,
            lambda view, renaming: policy.decide(evidence),
            answer_must=Decision,
        )

    def _twice(self, janitor, job: str, method: str, must: str, call, answer_must: type | None = None):
        """``call`` on a twin for each renaming, then for real; raise ``PolicyNotKeyable`` on any difference."""
        self.calls += 1
        policy = janitor.policy
        fields_before = _fields(policy)
        observed = janitor.destination  # fence's ObservedDestination around fence's own TicketService
        destination: TicketService = observed._destination
        twins = []
        for renaming in self._renamings(job):
            copy = destination.clone()
            view = NamedView(copy, renaming)
            outcome = _outcome(policy, method, must, lambda: call(view, renaming))
            self._local(view, renaming.get(job, job), method, job)
            twins.append((renaming, outcome, copy.snapshot()))
        view = NamedView(observed, {})
        outcome = _outcome(policy, method, must, lambda: call(view, {}))
        self._local(view, job, method, job)
        after = destination.snapshot()
        for renaming, twin, twin_after in twins:
            named = f"with {job} named {renaming[job]}" if renaming else "made again"
            if _comparable(twin) != _comparable(outcome):
                raise PolicyNotKeyable(
                    f"its {method}() on {job}'s reservation answered {_said(outcome)}, and {named} {_said(twin)}"
                )
            if twin_after != after:
                raise PolicyNotKeyable(
                    f"its {method}() on {job}'s reservation left the destination otherwise when {named}"
                )
        if _fields(policy) != fields_before:
            raise PolicyNotKeyable(f"its {method}() changed the policy's own fields (it keeps state)")
        if outcome[0] == "raised":
            raise outcome[1]
        answer = outcome[1]
        if answer_must is not None:
            protocol.returned(policy, "policy", method, answer, answer_must, must)
        if method == "probe" and type(answer) is not Evidence:
            raise PolicyNotKeyable(f"its probe() answered a {type(answer).__qualname__}, not a fence.Evidence")
        return answer

    @staticmethod
    def _local(view: NamedView, own: str, method: str, job: str) -> None:
        if view.reads_everything:
            raise PolicyNotKeyable(
                f"its {method}() on {job}'s reservation read {', '.join(sorted(set(view.reads_everything)))}, "
                "which is not one job's"
            )
        strangers = [name for name in view.names if not _belongs_to(name, own)]
        if strangers:
            raise PolicyNotKeyable(
                f"its {method}() on {job}'s reservation asked about {strangers[0]!r}, which is not {own}'s"
            )


def _renamed(reservation: Reservation, renaming: dict[str, str]) -> Reservation:
    if not renaming:
        return reservation
    return replace(
        reservation, reservation_id=rename(reservation.reservation_id, renaming),
        key=rename(reservation.key, renaming), owner=rename(reservation.owner, renaming),
    )


def _outcome(policy, method: str, must: str, call) -> tuple:
    """("returned", answer) or ("raised", the exception): a refusal by exception is an answer too."""
    try:
        return ("returned", protocol.call(policy, "policy", method, must, call))
    except Exception as error:  # compared with the other call's, then raised if it was the real one
        return ("raised", error)


def _comparable(outcome: tuple) -> tuple:
    """An outcome as a value: an exception by its type and words (two raises are never ``==``)."""
    kind, value = outcome
    return outcome if kind == "returned" else (kind, type(value), str(value))


def _said(outcome: tuple) -> str:
    kind, value = outcome
    return f"{value!r}" if kind == "returned" else f"raised {type(value).__name__}"
