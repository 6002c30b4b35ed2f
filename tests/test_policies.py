"""Unit tests of the built-in janitor policies and of the Janitor that drives them."""

from __future__ import annotations

import pytest

from fence.model.destination import AttemptState, CommitResult, Guards, TicketService
from fence.base.errors import IllegalMove
from fence.model.janitor import Janitor, Settlement
from fence.model.ledger import Ledger, ReservationState
from fence.model.policies import (
    POLICIES,
    Abandon,
    Decision,
    Evidence,
    JanitorPolicy,
    Naive,
    Policy,
    Reconcile,
    Witness,
    fenced,
    policy_problem,
    with_shared_identity,
)

S = ReservationState


def _of_type(cls: type) -> list[Policy]:
    return [p for p in POLICIES.values() if type(p) is cls]


NAIVE = _of_type(Naive)
RECONCILE = _of_type(Reconcile)
WITNESS = _of_type(Witness)
ABANDON = _of_type(Abandon)
HOLDING = [p for p in POLICIES.values() if p.hold_on_expiry]


def _pid(policy: Policy) -> str:
    return policy.name


def _identity(policy: Policy, job: str, attempt: int) -> str:
    return job if policy.shared_identity else f"{job}#{attempt}"


# -- the catalogue ---------------------------------------------------------------------
def test_builtin_policies_are_the_documented_eight_in_order():
    """POLICIES lists the eight built-ins in verdict-matrix order, keyed by their own names."""
    assert list(POLICIES) == [
        "naive",
        "reconcile",
        "fenced",
        "witness",
        "witness-fenced",
        "abandon",
        "abandon-fenced",
        "abandon-fenced-shared",
    ]
    assert all(name == policy.name for name, policy in POLICIES.items())


def test_builtin_policies_expect_the_documented_guards():
    """Each built-in policy asks the destination for exactly the guards its name promises."""
    assert {name: p.guards.describe() for name, p in POLICIES.items()} == {
        "naive": "none",
        "reconcile": "none",
        "fenced": "fence",
        "witness": "witness",
        "witness-fenced": "fence+witness",
        "abandon": "witness",
        "abandon-fenced": "fence+fingerprint+witness",
        "abandon-fenced-shared": "fence+fingerprint+witness",
    }


def test_only_naive_frees_on_expiry_and_only_the_shared_variant_shares_identity():
    """hold_on_expiry is False only for naive; shared_identity is True only for abandon-fenced-shared."""
    assert [n for n, p in POLICIES.items() if not p.hold_on_expiry] == ["naive"]
    assert [n for n, p in POLICIES.items() if p.shared_identity] == ["abandon-fenced-shared"]


@pytest.mark.parametrize("policy", list(POLICIES.values()), ids=_pid)
def test_builtin_policy_satisfies_the_protocol(policy):
    """Every built-in policy is a JanitorPolicy and policy_problem finds nothing wrong with it."""
    assert isinstance(policy, JanitorPolicy)
    assert policy_problem(policy) is None
    assert policy.summary


def test_fenced_and_shared_helpers_keep_the_policy_logic():
    """fenced() and with_shared_identity() change guards/identity and name, not the policy type."""
    base = Witness()
    wrapped = with_shared_identity(fenced(base, fingerprint=True))
    assert type(wrapped) is Witness
    assert wrapped.name == "witness-fenced-shared"
    assert wrapped.guards == Guards(fence=True, fingerprint=True, witness=True)
    assert wrapped.shared_identity is True
    assert base.guards == Guards(witness=True)
    assert base.shared_identity is False


# -- decide() over hand-made evidence --------------------------------------------------
NAIVE_EVIDENCE = [
    Evidence(),
    Evidence(key_exists=True),
    Evidence(key_exists=False),
    Evidence(attempt_state=AttemptState.IN_FLIGHT, attempt_asked=True),
    Evidence(abandon_result=AttemptState.COMMITTED),
]


@pytest.mark.parametrize("policy", NAIVE, ids=_pid)
@pytest.mark.parametrize("evidence", NAIVE_EVIDENCE, ids=lambda e: e.describe())
def test_naive_always_decides_unused(policy, evidence):
    """Naive frees the unit whatever the evidence, even evidence of an effect."""
    assert policy.decide(evidence) is Decision.UNUSED


@pytest.mark.parametrize("policy", RECONCILE, ids=_pid)
@pytest.mark.parametrize(
    "evidence, decision",
    [
        (Evidence(key_exists=True), Decision.EXISTING),
        (Evidence(key_exists=False), Decision.UNUSED),
    ],
    ids=["found", "absent"],
)
def test_reconcile_decides_by_key_lookup(policy, evidence, decision):
    """Reconcile: key found -> EXISTING, key absent -> UNUSED."""
    assert policy.decide(evidence) is decision


@pytest.mark.parametrize("policy", WITNESS, ids=_pid)
@pytest.mark.parametrize(
    "evidence, decision",
    [
        (Evidence(key_exists=True, attempt_state=AttemptState.COMMITTED, attempt_asked=True), Decision.EXISTING),
        (Evidence(key_exists=True, attempt_state=AttemptState.IN_FLIGHT, attempt_asked=True), Decision.EXISTING),
        (Evidence(key_exists=False, attempt_state=AttemptState.IN_FLIGHT, attempt_asked=True), Decision.HOLD),
        (Evidence(key_exists=False, attempt_state=AttemptState.REFUSED, attempt_asked=True), Decision.UNUSED),
        (Evidence(key_exists=False, attempt_state=AttemptState.ABANDONED, attempt_asked=True), Decision.UNUSED),
        (Evidence(key_exists=False, attempt_state=None, attempt_asked=True), Decision.UNUSED),
    ],
    ids=["found-committed", "found-in-flight", "absent-in-flight", "absent-refused", "absent-abandoned", "absent-unknown"],
)
def test_witness_decides_found_existing_in_flight_hold_else_unused(policy, evidence, decision):
    """Witness: key found -> EXISTING, else attempt in flight -> HOLD, else UNUSED."""
    assert policy.decide(evidence) is decision


@pytest.mark.parametrize("policy", ABANDON, ids=_pid)
@pytest.mark.parametrize(
    "evidence, decision",
    [
        (Evidence(key_exists=True, abandon_result=AttemptState.COMMITTED), Decision.EXISTING),
        (Evidence(key_exists=False, abandon_result=AttemptState.COMMITTED), Decision.EXISTING),
        (Evidence(key_exists=False, abandon_result=AttemptState.ABANDONED), Decision.UNUSED),
        (Evidence(key_exists=True, abandon_result=AttemptState.ABANDONED), Decision.EXISTING),
    ],
    ids=["committed-found", "committed-absent", "abandoned-absent", "abandoned-but-found"],
)
def test_abandon_decides_committed_existing_abandoned_unused(policy, evidence, decision):
    """Abandon: COMMITTED (or key found) -> EXISTING, ABANDONED with no key -> UNUSED."""
    assert policy.decide(evidence) is decision


def test_base_policy_holds_and_asks_nothing():
    """The Policy base class probes nothing and decides HOLD."""
    service = TicketService()
    ledger = Ledger(1)
    reservation = ledger.reserve("job1", "job1#1", now=0, lease=1)
    assert Policy().probe(service, reservation) == Evidence()
    assert Policy().decide(Evidence(key_exists=True)) is Decision.HOLD


# -- probe() against a real TicketService ----------------------------------------------
def _reserved(policy: Policy, job: str = "job1", attempt: int = 1):
    ledger = Ledger(capacity=1)
    reservation = ledger.reserve(job, _identity(policy, job, attempt), now=0, lease=2)
    return ledger, reservation


@pytest.mark.parametrize("policy", NAIVE, ids=_pid)
def test_naive_probe_asks_the_destination_nothing(policy):
    """Naive's probe returns empty evidence and leaves the destination untouched."""
    service = TicketService(policy.guards)
    service.commit("job1#1", "job1", "ticket")
    before = service.snapshot()
    _, reservation = _reserved(policy)
    assert policy.probe(service, reservation) == Evidence()
    assert service.snapshot() == before


@pytest.mark.parametrize("policy", RECONCILE, ids=_pid)
def test_reconcile_probe_reports_the_key_lookup(policy):
    """Reconcile's probe reports key_exists as the destination's lookup answers it, and nothing else."""
    service = TicketService(policy.guards)
    _, reservation = _reserved(policy)
    assert policy.probe(service, reservation) == Evidence(key_exists=False)
    service.commit(reservation.owner, "job1", "ticket")
    assert policy.probe(service, reservation) == Evidence(key_exists=True)


@pytest.mark.parametrize("policy", WITNESS, ids=_pid)
def test_witness_probe_reports_an_in_flight_attempt_and_holds(policy):
    """Witness's probe sees a registered attempt IN_FLIGHT with no key, which decides HOLD."""
    service = TicketService(policy.guards)
    _, reservation = _reserved(policy)
    service.register(reservation.owner, "job1")
    evidence = policy.probe(service, reservation)
    assert evidence == Evidence(key_exists=False, attempt_state=AttemptState.IN_FLIGHT, attempt_asked=True)
    assert policy.decide(evidence) is Decision.HOLD


@pytest.mark.parametrize("policy", WITNESS, ids=_pid)
def test_witness_probe_of_unknown_attempt_says_asked_but_unknown(policy):
    """Witness's probe of an attempt the destination never heard of reports attempt_asked with no state."""
    service = TicketService(policy.guards)
    _, reservation = _reserved(policy)
    evidence = policy.probe(service, reservation)
    assert evidence == Evidence(key_exists=False, attempt_state=None, attempt_asked=True)
    assert evidence.describe() == "key absent, attempt unknown to the destination"
    assert policy.decide(evidence) is Decision.UNUSED
    # Witness only asks; it leaves no tombstone behind.
    assert service.attempt_state(reservation.owner) is None


@pytest.mark.parametrize("policy", WITNESS, ids=_pid)
def test_witness_probe_after_commit_reports_existing(policy):
    """Witness's probe after the attempt's commit landed reports key found and COMMITTED."""
    service = TicketService(policy.guards)
    _, reservation = _reserved(policy)
    service.register(reservation.owner, "job1")
    service.commit(reservation.owner, "job1", "ticket")
    evidence = policy.probe(service, reservation)
    assert evidence == Evidence(key_exists=True, attempt_state=AttemptState.COMMITTED, attempt_asked=True)
    assert policy.decide(evidence) is Decision.EXISTING


@pytest.mark.parametrize("policy", ABANDON, ids=_pid)
def test_abandon_probe_of_in_flight_attempt_abandons_it(policy):
    """Abandon's probe abandons an uncommitted attempt, so its late commit is refused."""
    service = TicketService(policy.guards)
    _, reservation = _reserved(policy)
    service.register(reservation.owner, "job1")
    evidence = policy.probe(service, reservation)
    assert evidence == Evidence(key_exists=False, abandon_result=AttemptState.ABANDONED)
    assert policy.decide(evidence) is Decision.UNUSED
    assert service.commit(reservation.owner, "job1", "ticket") is CommitResult.ABANDONED
    assert service.effects() == []


@pytest.mark.parametrize("policy", ABANDON, ids=_pid)
def test_abandon_probe_of_committed_attempt_reports_committed(policy):
    """Abandon's probe of a committed attempt reports COMMITTED and key found, deciding EXISTING."""
    service = TicketService(policy.guards)
    _, reservation = _reserved(policy)
    service.commit(reservation.owner, "job1", "ticket")
    evidence = policy.probe(service, reservation)
    assert evidence == Evidence(key_exists=True, abandon_result=AttemptState.COMMITTED)
    assert policy.decide(evidence) is Decision.EXISTING


@pytest.mark.parametrize("policy", ABANDON, ids=_pid)
def test_abandon_probe_tombstones_a_registration_still_on_its_way(policy):
    """Abandon's probe before the registration arrives leaves a tombstone the registration cannot undo."""
    service = TicketService(policy.guards)
    _, reservation = _reserved(policy)
    evidence = policy.probe(service, reservation)
    assert evidence.abandon_result is AttemptState.ABANDONED
    assert service.register(reservation.owner, "job1") is AttemptState.ABANDONED
    assert service.commit(reservation.owner, "job1", "ticket") is CommitResult.ABANDONED


# -- the Janitor on a real Ledger and TicketService ------------------------------------
def _world(policy: Policy, lease: int = 2):
    ledger = Ledger(capacity=1)
    service = TicketService(policy.guards)
    janitor = Janitor(ledger, service, policy)
    reservation = ledger.reserve("job1", _identity(policy, "job1", 1), now=0, lease=lease)
    return ledger, service, janitor, reservation


@pytest.mark.parametrize("policy", list(POLICIES.values()), ids=_pid)
def test_scan_before_expiry_is_refused_and_changes_nothing(policy):
    """Scanning a lease that has not expired raises IllegalMove and leaves it RESERVED."""
    ledger, _, janitor, reservation = _world(policy, lease=2)
    with pytest.raises(IllegalMove):
        janitor.scan(reservation.reservation_id, now=1)
    assert ledger.get(reservation.reservation_id) == reservation


@pytest.mark.parametrize("policy", HOLDING, ids=_pid)
def test_scan_of_expired_lease_holds_it_for_evidence(policy):
    """Every policy but naive moves an expired lease to OUTCOME_UNKNOWN and keeps the unit."""
    ledger, _, janitor, reservation = _world(policy)
    moved = janitor.scan(reservation.reservation_id, now=2)
    assert moved.state is S.OUTCOME_UNKNOWN
    assert ledger.held == 1
    assert ledger.units_freed == {}


@pytest.mark.parametrize("policy", NAIVE, ids=_pid)
def test_naive_scan_frees_the_unit_at_once(policy):
    """Naive's scan takes an expired lease straight to UNUSED and frees its unit once."""
    ledger, _, janitor, reservation = _world(policy)
    moved = janitor.scan(reservation.reservation_id, now=2)
    assert moved.state is S.UNUSED
    assert ledger.units_freed == {reservation.reservation_id: 1}
    assert ledger.free == 1


@pytest.mark.parametrize("policy", NAIVE, ids=_pid)
def test_naive_frees_a_unit_whose_effect_landed(policy):
    """Naive frees the unit of an attempt that wrote and crashed, so a retry writes a second ticket."""
    ledger, service, janitor, reservation = _world(policy)
    service.commit(reservation.owner, "job1", "ticket")  # then the worker crashes
    janitor.scan(reservation.reservation_id, now=2)
    retry = ledger.reserve("job1", "job1#2", now=2, lease=2)
    assert service.commit(retry.owner, "job1", "ticket") is CommitResult.WRITTEN
    assert len(service.effects()) == 2


@pytest.mark.parametrize("policy", HOLDING, ids=_pid)
def test_scan_twice_is_refused(policy):
    """A lease already held for evidence is not scanned again."""
    _, _, janitor, reservation = _world(policy)
    janitor.scan(reservation.reservation_id, now=2)
    with pytest.raises(IllegalMove):
        janitor.scan(reservation.reservation_id, now=3)


@pytest.mark.parametrize("policy", HOLDING, ids=_pid)
def test_crash_after_effect_settles_confirmed_existing(policy):
    """A worker that wrote and crashed before confirming is settled CONFIRMED_EXISTING, its unit kept."""
    ledger, service, janitor, reservation = _world(policy)
    service.register(reservation.owner, "job1")
    assert service.commit(reservation.owner, "job1", "ticket") is CommitResult.WRITTEN
    janitor.scan(reservation.reservation_id, now=2)
    evidence = janitor.probe(reservation.reservation_id)
    settlement = janitor.settle(reservation.reservation_id, evidence)
    assert settlement.decision is Decision.EXISTING
    assert settlement.reservation.state is S.CONFIRMED_EXISTING
    assert settlement.released is False
    assert ledger.get(reservation.reservation_id).state is S.CONFIRMED_EXISTING
    assert ledger.units_freed == {}


@pytest.mark.parametrize("policy", RECONCILE + ABANDON, ids=_pid)
def test_crash_before_effect_settles_unused(policy):
    """A worker that crashed before registering or writing is settled UNUSED and its unit returns once."""
    ledger, _, janitor, reservation = _world(policy)
    janitor.scan(reservation.reservation_id, now=2)
    evidence = janitor.probe(reservation.reservation_id)
    settlement = janitor.settle(reservation.reservation_id, evidence)
    assert settlement == Settlement(ledger.get(reservation.reservation_id), Decision.UNUSED, evidence)
    assert settlement.released is True
    assert ledger.units_freed == {reservation.reservation_id: 1}


@pytest.mark.parametrize("policy", WITNESS, ids=_pid)
def test_witness_holds_an_in_flight_attempt(policy):
    """Witness keeps a reservation whose attempt is in flight in OUTCOME_UNKNOWN, unit still held."""
    ledger, service, janitor, reservation = _world(policy)
    service.register(reservation.owner, "job1")
    janitor.scan(reservation.reservation_id, now=2)
    settlement = janitor.settle(reservation.reservation_id, janitor.probe(reservation.reservation_id))
    assert settlement.decision is Decision.HOLD
    assert settlement.released is False
    assert ledger.get(reservation.reservation_id).state is S.OUTCOME_UNKNOWN
    assert ledger.held == 1


@pytest.mark.parametrize("policy", ABANDON, ids=_pid)
def test_abandon_settles_unused_and_the_late_commit_is_refused(policy):
    """Abandon frees an in-flight attempt's unit only after making sure its commit can never land."""
    ledger, service, janitor, reservation = _world(policy)
    service.register(reservation.owner, "job1")
    janitor.scan(reservation.reservation_id, now=2)
    settlement = janitor.settle(reservation.reservation_id, janitor.probe(reservation.reservation_id))
    assert settlement.reservation.state is S.UNUSED
    assert service.commit(reservation.owner, "job1", "ticket") is CommitResult.ABANDONED
    assert service.effects() == []


@pytest.mark.parametrize("policy", RECONCILE, ids=_pid)
def test_settle_on_stale_evidence_after_late_confirm_is_refused(policy):
    """Evidence taken before a late commit+confirm cannot move the now-CONFIRMED reservation."""
    ledger, service, janitor, reservation = _world(policy)
    janitor.scan(reservation.reservation_id, now=2)
    evidence = janitor.probe(reservation.reservation_id)
    assert evidence == Evidence(key_exists=False)
    # The worker's delayed commit lands and it confirms before the janitor settles.
    service.commit(reservation.owner, "job1", "ticket")
    ledger.confirm("job1", reservation.owner)
    with pytest.raises(IllegalMove):
        janitor.settle(reservation.reservation_id, evidence)
    assert ledger.get(reservation.reservation_id).state is S.CONFIRMED
    assert ledger.units_freed == {}


@pytest.mark.parametrize("policy", HOLDING, ids=_pid)
def test_settle_after_late_confirm_with_any_evidence_keeps_confirmed(policy):
    """Whatever a holding policy decides from its evidence, a CONFIRMED reservation stays CONFIRMED."""
    ledger, service, janitor, reservation = _world(policy)
    janitor.scan(reservation.reservation_id, now=2)
    evidence = janitor.probe(reservation.reservation_id)
    ledger.confirm("job1", reservation.owner)
    decision = policy.decide(evidence)
    if decision is Decision.HOLD:
        assert janitor.settle(reservation.reservation_id, evidence).reservation.state is S.CONFIRMED
    else:
        with pytest.raises(IllegalMove):
            janitor.settle(reservation.reservation_id, evidence)
    assert ledger.get(reservation.reservation_id).state is S.CONFIRMED


@pytest.mark.parametrize("policy", RECONCILE, ids=_pid)
def test_run_once_scans_probes_and_settles(policy):
    """run_once takes an expired lease with an effect through scan, probe and settle to CONFIRMED_EXISTING."""
    ledger, service, janitor, reservation = _world(policy)
    service.commit(reservation.owner, "job1", "ticket")
    assert janitor.run_once(now=1) == []
    results = janitor.run_once(now=2)
    assert len(results) == 2
    assert results[0].state is S.OUTCOME_UNKNOWN
    assert isinstance(results[1], Settlement)
    assert results[1].reservation.state is S.CONFIRMED_EXISTING
    assert ledger.get(reservation.reservation_id).state is S.CONFIRMED_EXISTING


# -- policy_problem --------------------------------------------------------------------
class _Complete:
    name = "mine"
    guards = Guards()
    shared_identity = False
    hold_on_expiry = True

    def probe(self, destination, reservation):
        return Evidence()

    def decide(self, evidence):
        return Decision.HOLD


def test_policy_problem_accepts_a_complete_duck_typed_policy():
    """An object with every required attribute and method is accepted without subclassing Policy."""
    assert policy_problem(_Complete()) is None


def test_policy_problem_names_everything_a_bare_object_lacks():
    """A bare object is told it lacks every required attribute, in order."""
    assert policy_problem(object()) == (
        "it lacks name, guards, shared_identity, hold_on_expiry, probe, decide "
        "(subclass fence.Policy to get them all)"
    )


@pytest.mark.parametrize("missing", ["name", "guards", "shared_identity", "hold_on_expiry", "probe", "decide"])
def test_policy_problem_names_the_one_missing_attribute(missing):
    """An object missing a single attribute is told exactly that one."""
    attributes = {k: v for k, v in vars(_Complete).items() if not k.startswith("__")}
    del attributes[missing]
    candidate = type("Partial", (), attributes)()
    assert policy_problem(candidate) == f"it lacks {missing} (subclass fence.Policy to get them all)"


def test_policy_problem_rejects_guards_that_are_not_guards():
    """guards given as something other than fence.Guards is named as the problem."""
    candidate = type("BadGuards", (_Complete,), {"guards": {"fence": True}})()
    assert policy_problem(candidate) == "its guards must be a fence.Guards"


@pytest.mark.parametrize("attribute", ["probe", "decide"])
def test_policy_problem_rejects_probe_or_decide_that_is_not_callable(attribute):
    """A probe or decide that is not callable is named as the problem."""
    candidate = type("NotCallable", (_Complete,), {attribute: "nope"})()
    assert policy_problem(candidate) == "its probe and decide must be methods"
