"""The SQL backends held to the in-memory core: the same model, step by step.

One contract, several implementations (trio's generic lock tests): every test
that takes ``backend_url`` runs on SQLite (a file in tmp_path) and on PostgreSQL
(the session's private cluster, see conftest.py). The in-memory Ledger and
TicketService are the specification:

* ``fence.search.lockstep`` drives two worlds with the same drawn actions, one on the
  backend and one in memory, and after every step compares what each world
  offers next, the ledger, the destination and every invariant's result; at the
  end of a run both drain and are compared again (strict: any difference fails).
  It runs for every built-in policy on both model configurations.
* every pinned counterexample replays on the backend and breaks the same
  invariant with the same words.
* the things only a database has to get right: refusals that change nothing,
  the UNIQUE fence under concurrent commits, janitors racing for the same
  leases, one clock for a fleet whose own clocks disagree.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from fence.search import counterexample

from fence.search import lockstep
from fence.model.destination import AttemptState, CommitResult, Guards, TicketService
from fence.base.errors import BackendError, CapacityExhausted, IllegalMove, StaleAttempt
from fence.model.invariants import BY_NAME
from fence.model.ledger import Ledger, Move, ReservationState
from fence.search.minimise import replay_actions
from fence.model.policies import POLICIES
from fence.model.world import Confirm, Deliver, ModelConfig, Reserve, SendCommit, Start, World
from fence.backends import ModelStorage, open_backend
from stateful.machines import machine_for

PINNED = sorted((Path(__file__).parent / "pinned").glob("*.json"))
CONFIGS = [ModelConfig(capacity=1, jobs=1), ModelConfig(capacity=2, jobs=2)]
ALL_GUARDS = Guards(fence=True, fingerprint=True, witness=True)
# Examples per policy and configuration: PostgreSQL's loopback round trips make
# a step about 7x dearer than SQLite's, and CI must stay under 10 minutes.
LOCKSTEP_EXAMPLES = {"sqlite": 25, "postgresql": 12}


@pytest.fixture
def storage(backend_url):
    opened = ModelStorage(backend_url)
    yield opened
    opened.close()


# -- the models, in lockstep ------------------------------------------------------------
def lockstep_machine(policy, config, storage: ModelStorage):
    """The fleet machine over a world on the backend, with the in-memory model beside it (fence.search.lockstep)."""
    base = machine_for(policy, config, checked=(), destination_factory=storage.destination_factory,
                       ledger_factory=storage.ledger_factory)
    return lockstep.lockstep_machine(base, lambda: World(policy, config))


# One unit and one job with --run-slow: two units and two jobs take every move it takes and more, and CI's ten
# minutes hold no more on this machine.
@pytest.mark.parametrize("config", [pytest.param(CONFIGS[0], marks=pytest.mark.slow), CONFIGS[1]], ids=["1x1", "2x2"])
@pytest.mark.parametrize("policy", POLICIES.values(), ids=list(POLICIES))
def test_backend_world_matches_memory_step_by_step(policy, config, storage):
    """Under every policy, the world on the backend makes the same moves, states and verdicts as the one in memory."""
    machine = lockstep_machine(policy, config, storage)
    examples = LOCKSTEP_EXAMPLES[storage.store.dialect.name]
    run_state_machine_as_test(machine, settings=settings(max_examples=examples, stateful_step_count=30))


@pytest.mark.parametrize("path", PINNED, ids=[p.stem for p in PINNED])
def test_pinned_counterexample_breaks_the_same_invariant_on_the_backend(path, storage):
    """A pinned counterexample replayed on the backend breaks its invariant with the same message as in memory."""
    policy, config, invariant, actions, drains = counterexample.load(path)
    chosen = [action for action, drain in zip(actions, drains) if not drain]
    inv = BY_NAME[invariant]
    in_memory = replay_actions(policy, config, chosen, inv)
    on_backend = replay_actions(policy, config, chosen, inv, storage.destination_factory, storage.ledger_factory)
    assert in_memory is not None and on_backend is not None
    assert on_backend.message == in_memory.message
    assert [s.sentence for s in on_backend.world.trace] == [s.sentence for s in in_memory.world.trace]


# -- the ledger's contract ----------------------------------------------------------------
def test_copies_of_a_world_on_the_backend_take_turns_and_stay_independent(storage):
    """A deep copy of a backend world is its tables' image: each copy's moves reach only its own state."""
    if storage.store is None:
        pytest.skip("memory: needs no restore")
    policy = POLICIES["abandon-fenced"]
    world = World(policy, ModelConfig(capacity=1, jobs=1), storage.destination_factory, storage.ledger_factory)
    world.apply(Reserve("job1"))
    before = (world.ledger.snapshot(), world.destination.snapshot())
    other = world.clone(history=False)
    for action in [Start("job1#1"), SendCommit("job1#1"), Deliver("commit", "job1#1"), Deliver("ack", "job1#1"),
                   Confirm("job1#1")]:
        other.apply(action)
    # the original, reached again, holds what it held: the database was loaded back for it
    assert (world.ledger.snapshot(), world.destination.snapshot()) == before
    assert world.ledger.get("job1/r1").state is ReservationState.RESERVED and world.destination.effects() == []
    assert other.ledger.get("job1/r1").state is ReservationState.CONFIRMED
    assert [effect.key for effect in other.destination.effects()] == ["job1"]
    assert storage.restorers["ledger"].loads >= 2 and storage.restorers["destination"].loads >= 1


def test_the_explorer_runs_on_sqlite_and_its_copies_are_faithful(tmp_path):
    """The explorer's generic path on SQLite: naive violated, abandon-fenced proved with every danger, faithful copies."""
    storage = ModelStorage(f"sqlite://{tmp_path}/fence.db")
    try:
        _explore_on(storage)
    finally:
        storage.close()


@pytest.mark.slow
@pytest.mark.postgres
def test_the_explorer_runs_on_postgres_and_its_copies_are_faithful(postgres_url):
    """The same on PostgreSQL (each restore a round trip: about five times SQLite's time)."""
    storage = ModelStorage(postgres_url)
    try:
        _explore_on(storage)
    finally:
        storage.close()


def _explore_on(storage: ModelStorage) -> None:
    from fence.explore.results import Outcome
    from fence.explore.walk import explore

    bound = ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2)
    naive = explore(POLICIES["naive"], bound, destination_factory=storage.destination_factory,
                    ledger_factory=storage.ledger_factory, invariants=(BY_NAME["no_duplicate_writes"],),
                    stop_when_all_violated=True, faithfulness=(10, 20))
    assert naive.results["no_duplicate_writes"].outcome is Outcome.VIOLATED and naive.unfaithful is None
    guarded = explore(POLICIES["abandon-fenced"], bound, destination_factory=storage.destination_factory,
                      ledger_factory=storage.ledger_factory, faithfulness=(10, 20))
    assert guarded.unfaithful is None and guarded.faithfulness_checks == 30 and guarded.exhausted
    assert guarded.outcome() is Outcome.PROVED and guarded.missing_dangers() == []


def test_refusals_raise_what_memory_raises_and_change_nothing(backend_url):
    """Full capacity, a stale owner, an illegal move and a janitor's move by an owner are refused alike, with no change."""
    backend = open_backend(backend_url, capacity=1, guards=Guards(), reset=True)
    memory = Ledger(1)
    try:
        for ledger in (memory, backend.ledger):
            ledger.reserve("job1", "job1#1", 0, 2)
        refusals = [
            (CapacityExhausted, lambda ledger: ledger.reserve("job2", "job2#1", 0, 2)),
            (IllegalMove, lambda ledger: ledger.apply("job1/r1", Move.SETTLE_UNUSED)),
            (StaleAttempt, lambda ledger: ledger.confirm("job1", "job1#2")),
            (StaleAttempt, lambda ledger: ledger.confirm("job9", "job9#1")),
            (IllegalMove, lambda ledger: ledger.owner_move("job1", "job1#1", Move.SETTLE_EXISTING)),
            (ValueError, lambda ledger: ledger.reserve("job2", "job2#1", 0, float("nan"))),
            (KeyError, lambda ledger: ledger.get("job7/r1")),
        ]
        for error, call in refusals:
            before = backend.ledger.snapshot()
            with pytest.raises(error) as from_memory:
                call(memory)
            with pytest.raises(error) as from_backend:
                call(backend.ledger)
            assert str(from_backend.value) == str(from_memory.value)
            assert backend.ledger.snapshot() == before == memory.snapshot()
    finally:
        backend.close()


def test_two_connections_share_one_ledger(backend_url):
    """A reservation made through one connection is seen, and refused a second unit, through another."""
    first = open_backend(backend_url, capacity=1, guards=Guards(), reset=True)
    second = open_backend(backend_url, capacity=1, guards=Guards())
    try:
        first.ledger.reserve("job1", "job1#1", None, 30)
        assert [r.reservation_id for r in second.ledger.reservations()] == ["job1/r1"]
        with pytest.raises(CapacityExhausted):
            second.ledger.reserve("job2", "job2#1", None, 30)
        second.ledger.confirm("job1", "job1#1")
        assert first.ledger.get("job1/r1").state is ReservationState.CONFIRMED
    finally:
        first.close()
        second.close()


def test_another_capacity_on_the_same_database_is_refused(backend_url):
    """Opening a ledger with another capacity than the database holds is one BackendError naming both."""
    open_backend(backend_url, capacity=1, guards=Guards(), reset=True).close()
    with pytest.raises(BackendError, match="holds capacity 1, not 2"):
        open_backend(backend_url, capacity=2, guards=Guards())


def test_wrong_schema_version_is_one_line_with_the_fix(backend_url):
    """A schema of another version is refused naming both versions and the reset command; reset=True recreates it."""
    backend = open_backend(backend_url, capacity=1, guards=Guards(), reset=True)
    backend.store.run("UPDATE fence_schema SET version = 99")
    backend.close()
    with pytest.raises(BackendError) as refused:
        open_backend(backend_url, capacity=1, guards=Guards())
    message = str(refused.value)
    assert "schema version 99 found, fence expects 1" in message and "fence db reset" in message
    assert "\n" not in message
    reopened = open_backend(backend_url, capacity=1, guards=Guards(), reset=True)
    assert reopened.ledger.reservations() == []
    reopened.close()


# -- the destination's contract -----------------------------------------------------------
def test_destination_answers_like_the_ticket_service_under_every_guard(backend_url):
    """Commits, replays, conflicts, abandons and tombstones get the TicketService's answers under all eight guard sets."""
    for fence_on in (False, True):
        for fingerprint in (False, True):
            for witness in (False, True):
                guards = Guards(fence_on, fingerprint, witness)
                backend = open_backend(backend_url, capacity=1, guards=guards, reset=True)
                memory = TicketService(guards)
                calls = [
                    ("register", ("a1", "k")), ("commit", ("a1", "k", "p")), ("commit", ("a1", "k", "p")),
                    ("commit", ("a2", "k", "p")), ("commit", ("a3", "k", "q")), ("lookup", ("k",)),
                    ("lookup", ("other",)), ("attempt_state", ("a3",)), ("register", ("a4", "k")),
                ]
                if witness:
                    calls += [("abandon_unless_committed", ("a1",)), ("abandon_unless_committed", ("a4",)),
                              ("commit", ("a4", "k", "p")), ("abandon_unless_committed", ("ghost",)),
                              ("register", ("ghost", "k")), ("commit", ("ghost", "k2", "p"))]
                try:
                    for name, arguments in calls:
                        expected = getattr(memory, name)(*arguments)
                        assert getattr(backend.destination, name)(*arguments) == expected, (guards, name, arguments)
                    assert backend.destination.snapshot() == memory.snapshot()
                    assert backend.destination.effects() == memory.effects()
                finally:
                    backend.close()


def test_the_fence_is_a_unique_constraint_in_the_database(backend_url):
    """With the fence on, a second row for a key is refused by the database itself, not only by fence's code."""
    backend = open_backend(backend_url, capacity=1, guards=Guards(fence=True), reset=True)
    try:
        assert backend.destination.commit("a1", "k", "p") is CommitResult.WRITTEN
        with pytest.raises(Exception, match="(?i)unique"):
            with backend.store.write():
                backend.store.run(
                    "INSERT INTO fence_effects (key, attempt_id, payload, fence_key) VALUES (?, ?, ?, ?)",
                    ("k", "a2", "p", "k"),
                )
        assert len(backend.destination.effects()) == 1
    finally:
        backend.close()


def _together(workers: int, work) -> list:
    """Run ``work(index)`` on ``workers`` threads released at the same moment; their results."""
    barrier = threading.Barrier(workers)
    results: list = [None] * workers
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work(index)
        except BaseException as error:  # re-raised below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return results


def test_concurrent_commits_of_one_key_write_once_and_refuse_the_rest(backend_url):
    """Four connections committing the same key at once: one WRITTEN, three ALREADY_EXISTS, no error raised."""
    guards = Guards(fence=True, witness=True)
    open_backend(backend_url, capacity=1, guards=guards, reset=True).close()
    backends = [open_backend(backend_url, capacity=1, guards=guards) for _ in range(4)]
    try:
        for round_ in range(10):
            key = f"k{round_}"
            results = _together(4, lambda i: backends[i].destination.commit(f"{key}-a{i}", key, "p"))
            assert sorted(r.value for r in results) == ["already_exists"] * 3 + ["written"]
        effects = backends[0].destination.effects()
        assert len(effects) == 10 and len({e.key for e in effects}) == 10
    finally:
        for backend in backends:
            backend.close()


def test_abandon_and_commit_racing_never_both_win(backend_url):
    """An attempt abandoned while its commit races in is either committed (and abandon says so) or refused."""
    guards = Guards(witness=True)
    open_backend(backend_url, capacity=1, guards=guards, reset=True).close()
    worker, janitor = (open_backend(backend_url, capacity=1, guards=guards) for _ in range(2))
    try:
        for n in range(30):
            attempt, key = f"a{n}", f"k{n}"
            worker.destination.register(attempt, key)
            committed, abandoned = _together(
                2,
                lambda i: worker.destination.commit(attempt, key, "p") if i == 0
                else janitor.destination.abandon_unless_committed(attempt),
            )
            if abandoned is AttemptState.ABANDONED:
                assert committed is CommitResult.ABANDONED and not janitor.destination.lookup(key)
            else:
                assert committed is CommitResult.WRITTEN and janitor.destination.lookup(key)
    finally:
        worker.close()
        janitor.close()


def test_the_guards_commits_racing_on_one_key_write_once_and_judge_the_rest(backend_url):
    """With fence.guard's three guards, four attempts committing one key at once (two payloads): one WRITTEN, the
    rest ALREADY_EXISTS for the winner's payload or CONFLICT for the other, each loser witnessed refused."""
    open_backend(backend_url, capacity=1, guards=ALL_GUARDS, reset=True).close()
    backends = [open_backend(backend_url, capacity=1, guards=ALL_GUARDS) for _ in range(4)]
    try:
        for round_ in range(10):
            key = f"k{round_}"
            for i in range(4):
                backends[i].destination.register(f"{key}-a{i}", key)
            results = _together(4, lambda i: backends[i].destination.commit(f"{key}-a{i}", key, "pq"[i % 2]))
            assert [r.value for r in results].count("written") == 1
            winner = results.index(CommitResult.WRITTEN)
            for i, result in enumerate(results):
                state = backends[0].destination.attempt_state(f"{key}-a{i}")
                if i == winner:
                    assert state is AttemptState.COMMITTED
                else:
                    same_payload = i % 2 == winner % 2
                    assert result is (CommitResult.ALREADY_EXISTS if same_payload else CommitResult.CONFLICT)
                    assert state is AttemptState.REFUSED
        effects = backends[0].destination.effects()
        assert len(effects) == 10 and len({e.key for e in effects}) == 10
    finally:
        for backend in backends:
            backend.close()


def test_the_guards_abandon_and_commit_racing_never_both_win(backend_url):
    """With fence.guard's three guards, an attempt abandoned while its commit races in is either committed (and
    abandon says so, the effect there) or refused (and no effect written), registered first or unseen."""
    open_backend(backend_url, capacity=1, guards=ALL_GUARDS, reset=True).close()
    worker, janitor = (open_backend(backend_url, capacity=1, guards=ALL_GUARDS) for _ in range(2))
    outcomes = set()
    try:
        for n in range(40):
            attempt, key = f"a{n}", f"k{n}"
            if n % 2:  # half registered on entry, half unseen until their commit
                worker.destination.register(attempt, key)
            committed, abandoned = _together(
                2,
                lambda i: worker.destination.commit(attempt, key, "p") if i == 0
                else janitor.destination.abandon_unless_committed(attempt),
            )
            outcomes.add(abandoned)
            if abandoned is AttemptState.ABANDONED:
                assert committed is CommitResult.ABANDONED and not janitor.destination.lookup(key)
            else:
                assert abandoned is AttemptState.COMMITTED
                assert committed is CommitResult.WRITTEN and janitor.destination.lookup(key)
            assert janitor.destination.attempt_state(attempt) is abandoned
    finally:
        worker.close()
        janitor.close()


def test_on_postgres_a_guarded_job_is_two_statements_and_no_transaction_block(postgres_url):
    """fence.guard's price on PostgreSQL: the attempt's registration and a commit that writes are one statement
    each, sent without BEGIN or COMMIT; a commit refused by the fence reads the key's payload after its one try."""
    backend = open_backend(postgres_url, capacity=1, guards=ALL_GUARDS, reset=True)
    connection = backend.store._connection
    sent: list[str] = []

    class Counting:
        def __getattr__(self, name):
            return getattr(connection, name)

        def execute(self, query, *args, **kwargs):
            sent.append(" ".join(str(query).split()[:1]).upper())
            return connection.execute(query, *args, **kwargs)

        def transaction(self, *args, **kwargs):
            sent.append("BEGIN")
            return connection.transaction(*args, **kwargs)

    backend.store._connection = Counting()
    try:
        destination = backend.destination
        assert destination.register("a1", "k") is AttemptState.IN_FLIGHT
        assert destination.commit("a1", "k", "p") is CommitResult.WRITTEN
        assert sent == ["INSERT", "WITH"]
        sent.clear()
        assert destination.commit("a2", "k", "p") is CommitResult.ALREADY_EXISTS
        assert sent[:2] == ["WITH", "BEGIN"] and "SELECT" in sent[2:]
    finally:
        backend.store._connection = connection
        backend.close()


# -- janitors that race, and one clock ---------------------------------------------------
def _expired_leases(url: str, count: int):
    backend = open_backend(url, capacity=count, guards=Guards(), reset=True)
    for n in range(count):
        backend.ledger.reserve(f"job{n}", f"job{n}#1", 0, 1)
    return backend


@pytest.mark.realclock
def test_two_janitors_claiming_at_once_never_claim_the_same_lease(backend_url):
    """Two janitors on their own connections drain 200 expired leases: each is claimed, and freed, exactly once."""
    count = 200
    setup = _expired_leases(backend_url, count)
    janitors = [open_backend(backend_url, capacity=count, guards=Guards()) for _ in range(2)]
    # A janitor makes its second claim only once the other has made its first,
    # so both take part however the machine schedules them (on a loaded machine
    # one thread once took every batch); from there on they race freely.
    claimed_once = [threading.Event(), threading.Event()]

    def drain(index: int) -> list[str]:
        mine = []
        ledger = janitors[index].ledger
        while True:
            batch = ledger.claim_expired(10, f"janitor-{index}", Move.EXPIRE_AND_RELEASE, limit=7)
            if not batch:
                if not ledger.expired(10):
                    break
                # Leases remain but this claim got none (on busy cores PostgreSQL
                # once answered a janitor's first claim with nothing while the
                # other held its batch, and the test ended "claimed 0 and 200"):
                # scan again, as a real janitor loop does. The other janitor waits
                # for our first claim, so the leases left are there to be found.
                time.sleep(0.002)
                continue
            mine.extend(r.reservation_id for r in batch)
            claimed_once[index].set()
            claimed_once[1 - index].wait(60)
            # A real janitor does work between claims. Without this pause a thread
            # that holds the GIL and SQLite's write lock can take every batch
            # before the other wakes (seen on a loaded 2-core machine), and the
            # race this test is about never happens.
            time.sleep(0.002)
        claimed_once[index].set()  # never leave the other waiting
        return mine

    try:
        first, second = _together(2, drain)
        assert not set(first) & set(second), "a lease was claimed by both janitors"
        assert sorted(first + second) == sorted(f"job{n}/r1" for n in range(count))
        assert setup.ledger.units_freed == {f"job{n}/r1": 1 for n in range(count)}
        assert all(setup.ledger.claimed_by(rid) == "janitor-0" for rid in first)
        assert all(setup.ledger.claimed_by(rid) == "janitor-1" for rid in second)
        assert first and second, f"both janitors took part (claimed {len(first)} and {len(second)})"
    finally:
        setup.close()
        for janitor in janitors:
            janitor.close()


def test_a_claim_takes_at_most_its_limit_oldest_first(backend_url):
    """claim_expired moves at most ``limit`` expired leases, the oldest first, and leaves the rest expired.

    On PostgreSQL the claim picks its leases in a CTE evaluated once: a subquery
    with LIMIT and SKIP LOCKED inside ``seq IN (...)`` may be run again per row.
    """
    backend = _expired_leases(backend_url, 20)
    try:
        batch = backend.ledger.claim_expired(10, "janitor-0", Move.EXPIRE_AND_RELEASE, limit=7)
        assert [r.reservation_id for r in batch] == [f"job{n}/r1" for n in range(7)]
        assert len(backend.ledger.expired(10)) == 13
        assert backend.ledger.claim_expired(10, "janitor-0", Move.EXPIRE_AND_RELEASE, limit=20)[0].reservation_id == "job7/r1"
        assert backend.ledger.expired(10) == []
    finally:
        backend.close()


def test_a_stale_settle_is_refused_not_applied_twice(backend_url):
    """Two janitors settling the same 50 held leases at once: each lease is settled by one, refused to the other."""
    count = 50
    setup = _expired_leases(backend_url, count)
    setup.ledger.claim_expired(10, "scanner", Move.EXPIRE_AND_HOLD, limit=count)
    janitors = [open_backend(backend_url, capacity=count, guards=Guards()) for _ in range(2)]

    def settle_all(index: int) -> list[bool]:
        settled = []
        for n in range(count):
            try:
                janitors[index].ledger.apply(f"job{n}/r1", Move.SETTLE_UNUSED)
                settled.append(True)
            except IllegalMove:
                settled.append(False)
        return settled

    try:
        first, second = _together(2, settle_all)
        assert all(a != b for a, b in zip(first, second)), "each lease settled by exactly one janitor"
        assert setup.ledger.units_freed == {f"job{n}/r1": 1 for n in range(count)}
    finally:
        setup.close()
        for janitor in janitors:
            janitor.close()


SKEW = 5.0


def test_a_worker_trusting_its_own_skewed_clock_disagrees_with_the_janitor(backend_url):
    """A worker 5 s behind that writes its deadline from its own clock has its fresh lease claimed as expired at once."""
    backend = open_backend(backend_url, capacity=2, guards=Guards(), reset=True)
    janitor = open_backend(backend_url, capacity=2, guards=Guards())
    try:
        worker_clock = backend.clock() - SKEW  # what the worker believes the time is
        backend.ledger.reserve("job1", "job1#1", worker_clock, 2.0)
        claimed = janitor.ledger.claim_expired(None, "janitor", Move.EXPIRE_AND_RELEASE)
        assert [r.reservation_id for r in claimed] == ["job1/r1"], "a lease taken just now, judged expired"
        # And a worker 5 s ahead, judging its own lease alive on its own clock, thinks it is dead.
        alive = backend.ledger.reserve("job2", "job2#1", None, 2.0)
        assert alive.expired(backend.clock() + SKEW) and janitor.ledger.expired(None) == []
    finally:
        backend.close()
        janitor.close()


@pytest.mark.realclock
def test_on_the_database_clock_skewed_workers_and_the_janitor_agree(backend_url):
    """With now=None the deadline and the expiry are both judged on the database's clock: the lease it passed is claimed, the one it has not is alive."""
    backend = open_backend(backend_url, capacity=2, guards=Guards(), reset=True)
    janitor = open_backend(backend_url, capacity=2, guards=Guards())
    try:
        # Two leases judged in one claim, rather than one lease judged twice:
        # "still alive right after reserving" held only if the machine got to
        # the next statement within the 0.3 s lease.
        short = backend.ledger.reserve("job1", "job1#1", None, 0.3)
        long = backend.ledger.reserve("job2", "job2#1", None, 600.0)
        time.sleep(0.4)
        assert [r.reservation_id for r in janitor.ledger.claim_expired(None, "janitor")] == ["job1/r1"]
        now = janitor.clock()
        assert short.expired(now) and not long.expired(now)
    finally:
        backend.close()
        janitor.close()


# -- the verdict matrix on a backend ---------------------------------------------------
def _row_on_backend(name: str, storage: ModelStorage):
    from fence.checking.checking import PROFILES
    from fence.checking.verdicts import DEFAULT_CONFIGS, judge, profile_settings
    from fence.checking.expected import compare, load_expected

    examples, steps, _shrink = PROFILES["default"]
    report = judge(
        POLICIES[name], configs=DEFAULT_CONFIGS, run_settings=profile_settings(examples, steps),
        destination_factory=storage.destination_factory, ledger_factory=storage.ledger_factory,
    )
    return compare([report], {name: load_expected()[name]}, hypothesis_only=True)


# Every row on SQLite, and PostgreSQL's (about 7x slower per step), with --run-slow: the safe
# row alone cost 50 s of CI on a slow machine. In every run SQLite gets the explorer's walk with
# its copies checked (test_the_explorer_runs_on_sqlite_and_its_copies_are_faithful), every world
# stepped beside memory's (test_backend_world_matches_memory_step_by_step), and a violated row
# through the process experiments (tests/test_processes.py, sqlite-naive). All 56 cells on
# both: evidence/verdicts-sqlite.txt and evidence/verdicts-postgres.txt.
GATE_ROWS = [pytest.param(name, marks=pytest.mark.slow) for name in POLICIES]


@pytest.mark.parametrize("name", GATE_ROWS, ids=list(POLICIES))
def test_the_machines_reproduce_the_expected_row_on_sqlite(name, tmp_path):
    """A policy judged with every world on SQLite gets the committed row, as in memory."""
    storage = ModelStorage(f"sqlite://{tmp_path}/verdicts.db")
    try:
        assert _row_on_backend(name, storage) == []
    finally:
        storage.close()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("name", list(POLICIES))
def test_the_machines_reproduce_the_expected_row_on_postgres(name, postgres_url):
    """A policy judged with every world on PostgreSQL gets the committed row, as in memory."""
    storage = ModelStorage(postgres_url)
    try:
        assert _row_on_backend(name, storage) == []
    finally:
        storage.close()


# -- the command line ---------------------------------------------------------------------
FENCE = [sys.executable, "-m", "fence.cli.main"]


def fence(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCE, *args], capture_output=True, text=True, timeout=120)


def assert_one_line_exit_2(result: subprocess.CompletedProcess, needle: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "url, needle",
    [
        ("nope://somewhere", "is not a backend URL"),
        ("sqlite://", "names no database file"),
        ("sqlite:///no/such/directory/fence.db", "does not exist"),
        ("postgresql://fence@127.0.0.1:1/fence", "cannot reach PostgreSQL"),
        ("postgresql://fence@127.0.0.1:1/fence?x=1=2", "not a PostgreSQL URL"),
    ],
    ids=["scheme", "no-file", "no-directory", "unreachable", "unparsable"],
)
def test_cli_bad_backend_is_one_line_and_exit_2(url, needle):
    """A bad, unreachable or unparsable backend URL is one line on stderr and exit 2, for db and verdicts alike."""
    assert_one_line_exit_2(fence("db", "check", url), needle)
    assert_one_line_exit_2(fence("verdicts", "--backend", url, "--policy", "naive"), needle)


def test_cli_wrong_schema_is_one_line_and_reset_fixes_it(tmp_path):
    """fence db check names a wrong schema version and exits 2; fence db reset fixes it; check then prints it."""
    url = f"sqlite://{tmp_path}/fence.db"
    backend = open_backend(url, capacity=1, guards=Guards(), reset=True)
    backend.store.run("UPDATE fence_schema SET version = 7")
    backend.close()
    assert_one_line_exit_2(fence("db", "check", url), "schema version 7 found, fence expects 1")
    assert fence("db", "reset", url).returncode == 0
    checked = fence("db", "check", url)
    assert checked.returncode == 0 and "schema version 1, database clock" in checked.stdout


def test_cli_bad_url_writes_nothing(tmp_path):
    """A refused URL leaves no file behind: nothing half-written."""
    fence("db", "check", f"sqlite://{tmp_path}/missing/fence.db")
    assert list(tmp_path.iterdir()) == []
