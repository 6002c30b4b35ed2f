"""TargetLedger's helpers for adapters (``fence.targets.ledger``): reads kept until a write, writes accepted only
if they moved something, and a guarded row's failure caught by its guard. No server: a dict is the system."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fence.base.errors import PluginBroken
from fence.targets.protocol import (
    IllegalMove, ModelTime, Move, ReservationState, Restorer, Taken, TargetLedger, library_id, not_in_snapshot,
    refused_by,
)


class Jobs:
    """A job system that refuses nothing: job ids started per key, and a log of every call it answered."""

    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.calls: list[str] = []
        self.restorer = Restorer()

    def dump(self) -> tuple:
        return tuple(sorted(self.started.items()))

    def load(self, image: tuple) -> None:
        self.started = dict(image)

    def move_time(self, ticks: float) -> None:
        pass


@dataclass(frozen=True)
class Take:
    reservation_id: str
    key: str
    owner: str
    deadline: float


class JobsLedger(TargetLedger):
    def __init__(self, session: Jobs, capacity: int = 1, *, guarded: bool = False) -> None:
        super().__init__(session, capacity, guarded=guarded, time=ModelTime(tick_seconds=60.0))
        self._restoring(session.restorer)

    def _started(self) -> dict[str, int]:
        def read():
            self._session.calls.append("read")
            return dict(self._session.started)

        return self._answered("started", read)

    def _take(self, key, owner, reservation_id, deadline):
        self._writing()
        self._session.started[key] = 1
        return Take(reservation_id, key, owner, deadline)

    def _state(self, take):
        return ReservationState.RESERVED if take.key in self._started() else self._finished_state(take.key)

    def _past_lease(self, take):
        return False

    def _finish(self, take):
        self._session.calls.append("finish")
        self._session.started.pop(take.key, None)

    def _confirm(self, take, move):
        self._moved(lambda: take.key in self._started(), lambda: self._finish(take), f"finish of {take.key}: not started",
                    finishing=(take.key, move))

    def _fail(self, take):
        self._writing()
        self._session.calls.append("the library's failure handler")
        self._finish(take)

    def snapshot(self):
        return (tuple(self._records().values()), self.bookkeeping())


def test_a_read_is_answered_once_until_the_next_write():
    """_answered asks the server once for any number of states; a write (_writing) makes the next state ask again."""
    jobs = Jobs()
    ledger = JobsLedger(jobs)
    ledger.reserve("job1", "w1", 0, 2)  # its answer read the started jobs once, after the take
    ledger._writing()
    jobs.calls.clear()
    for _ in range(3):
        assert ledger.get("job1/r1").state is ReservationState.RESERVED
    assert jobs.calls == ["read"]
    ledger._writing()
    ledger.get("job1/r1")
    assert jobs.calls == ["read", "read"]


def test_a_write_that_moved_nothing_is_refused_and_the_answer_after_it_is_read_afresh():
    """_moved reads before and after the call (not the answer kept from before it): a second finish is refused."""
    jobs = Jobs()
    ledger = JobsLedger(jobs)
    ledger.reserve("job1", "w1", 0, 2)
    assert ledger.confirm("job1", "w1").state is ReservationState.CONFIRMED
    assert jobs.calls.count("finish") == 1
    ledger._finished_by.clear()  # so that the refusal, not fence's record, decides the second confirm
    with pytest.raises(IllegalMove, match="finish of job1: not started"):
        ledger.confirm_existing("job1", "w1")
    assert jobs.calls.count("finish") == 2  # the call was made, and changed nothing
    assert ledger._finished_by == {}  # and a refused call finished nothing


def test_an_accepted_write_that_finishes_a_job_is_remembered_as_the_move_that_finished_it():
    """_moved(..., finishing=(job, move)): the move is the job's finishing move (_finished) once the call moved."""
    jobs = Jobs()
    ledger = JobsLedger(jobs)
    ledger.reserve("job1", "w1", 0, 2)
    assert ledger.confirm_existing("job1", "w1").state is ReservationState.CONFIRMED_EXISTING
    assert ledger._finished_by == {"job1": Move.CONFIRM_EXISTING}


@pytest.mark.parametrize("catches", [True, False], ids=["guard-catches", "library-handles"])
def test_a_guarded_rows_failure_goes_to_its_guard_only_when_the_ledger_says_so(catches):
    """GUARD_CATCHES_FAILURES: the guarded row's failure is outcome_unknown and the library's handler never runs;
    without it the library's handler runs on the guarded row too (a guarded system whose own handler still runs)."""
    jobs = Jobs()
    ledger = type("Ledger", (JobsLedger,), {"GUARD_CATCHES_FAILURES": catches})(jobs, guarded=True)
    ledger.reserve("job1", "w1", 0, 2)
    failed = ledger.fail("job1", "w1")
    if catches:
        assert failed.state is ReservationState.OUTCOME_UNKNOWN and ledger.failures_caught() == ("job1/r1",)
        assert "the library's failure handler" not in jobs.calls
    else:
        assert failed.state is ReservationState.UNUSED and ledger.failures_caught() == ()
        assert "the library's failure handler" in jobs.calls


def test_the_shipped_rows_failure_is_the_librarys_own_handler_whatever_the_flag():
    """GUARD_CATCHES_FAILURES concerns the guarded row only: the shipped row's failure runs _fail."""
    jobs = Jobs()
    ledger = type("Ledger", (JobsLedger,), {"GUARD_CATCHES_FAILURES": True})(jobs, guarded=False)
    ledger.reserve("job1", "w1", 0, 2)
    assert ledger.fail("job1", "w1").state is ReservationState.UNUSED
    assert "the library's failure handler" in jobs.calls and ledger._finished_by == {}
    assert Move.FAIL not in ledger._finished_by.values()


# -- what every adapter wrote alike, now TargetLedger's (issue 27) ----------------------------------------
class TimedJobs(Jobs):
    """A session that states its model time and snapshots an image, as RedisSession does."""

    time = ModelTime(tick_seconds=60.0)

    def snapshot(self, image: tuple, now: float) -> tuple:
        return ("snapshot of", image, now)


@dataclass(frozen=True)
class Started(Taken):
    number: int


class PlainLedger(TargetLedger):
    """No constructor of its own: time and the server's adoption are TargetLedger's."""

    def _take(self, key, owner, reservation_id, deadline):
        self._publish_once(key, lambda: self._session.calls.append(f"publish {key}"))
        self._session.started[key] = self._count_by_key.get(key, 0) + 1
        return Started(reservation_id, key, owner, deadline, self._session.started[key])

    def _state(self, take):
        return ReservationState.RESERVED


class SeeingLedger(PlainLedger):
    STATE = ("_seen",)

    def __init__(self, session, capacity: int = 1, *, guarded: bool = False) -> None:
        super().__init__(session, capacity, guarded=guarded)
        self._seen: dict[str, int] = {}

    def _take(self, key, owner, reservation_id, deadline):
        self._seen[key] = self._seen.get(key, 0) + 1
        return super()._take(key, owner, reservation_id, deadline)


def test_a_ledger_takes_its_time_from_its_session_and_adopts_the_server_as_it_is():
    """TargetLedger's constructor: the session's ModelTime, and the server's state as the ledger's first image."""
    jobs = TimedJobs()
    jobs.started = {"job0": 1}
    ledger = PlainLedger(jobs, 1, guarded=False)
    assert ledger.time is TimedJobs.time
    assert ledger.image() == (("job0", 1),)
    ledger._restoring(jobs.restorer)  # a subclass written before may still call it: nothing is dumped again
    assert jobs.restorer.dumps == 1


def test_a_ledger_without_a_time_anywhere_is_one_line_saying_where_to_give_it():
    """A session with no time and no time= is PluginBroken naming both ways to give one, not an AttributeError."""
    with pytest.raises(PluginBroken, match="pass time=ModelTime"):
        PlainLedger(Jobs(), 1, guarded=False)


def test_a_keys_job_is_published_once_and_the_published_keys_are_part_of_the_state():
    """_publish_once calls publish on the key's first reserve only; bookkeeping() holds which keys were published."""
    jobs = TimedJobs()
    ledger = PlainLedger(jobs, 2, guarded=False)
    ledger.reserve("job1", "w1", 0, 2)
    ledger.reserve("job1", "w2", 0, 2)
    ledger.reserve("job2", "w3", 0, 2)
    assert jobs.calls == ["publish job1", "publish job2"]
    assert ledger.published() == ("job1", "job2") and ledger.published() in ledger.bookkeeping()
    assert ledger.record("job1/r2") == Started("job1/r2", "job1", "w2", 2, 2)


def test_the_default_snapshot_holds_the_records_the_sessions_snapshot_the_declared_state_and_the_bookkeeping():
    """snapshot(): records, the session's snapshot of the image at the ledger's clock, each STATE field sorted."""
    jobs = TimedJobs()
    ledger = SeeingLedger(jobs)
    ledger.reserve("job1", "w1", 1, 2)
    records, image, state, bookkeeping = ledger.snapshot()
    assert records == (Started("job1/r1", "job1", "w1", 3, 1),)
    assert image == ("snapshot of", (("job1", 1),), 1)
    assert state == ((("job1", 1),),)
    assert bookkeeping == ledger.bookkeeping()


class DeclaringLedger(PlainLedger):
    STATE = {"_seen": dict, "_released": set}


def test_state_declared_as_types_is_made_empty_by_the_constructor_and_held_by_the_default_snapshot():
    """STATE as {name: type}: TargetLedger's constructor makes each attribute empty; snapshot() holds each sorted."""
    ledger = DeclaringLedger(TimedJobs(), 1, guarded=False)
    assert ledger._seen == {} and ledger._released == set()
    ledger._seen["job1"] = 2
    ledger._released |= {"job1/r2", "job1/r1"}
    assert ledger.snapshot()[2] == ((("job1", 2),), ("job1/r1", "job1/r2"))


def test_a_lease_past_its_deadline_at_the_ledgers_clock_from_the_tick_it_runs_out():
    """_past_deadline: a lease of 2 ticks taken at 1 has run out at 3, not at 2 (a timeout of L - 1/2 ticks)."""
    ledger = PlainLedger(TimedJobs(), 1, guarded=False)
    ledger.reserve("job1", "w1", 1, 2)
    record = ledger.record("job1/r1")
    ledger._now = 2
    assert not ledger._past_deadline(record)
    ledger._now = 3
    assert ledger._past_deadline(record)


def test_a_librarys_refusing_error_is_an_illegal_move_in_its_words():
    """refused_by: the named error becomes IllegalMove(why: words); any other error passes through."""
    with pytest.raises(IllegalMove, match="^finish job1: row 7 is not doing$"):
        with refused_by(LookupError, "finish job1"):
            raise IndexError("row 7 is not doing")
    with pytest.raises(IllegalMove, match="^finish job1: first line$"):
        with refused_by(LookupError, "finish job1", words=lambda error: str(error.args[0]).splitlines()[0]):
            raise LookupError("first line\nsecond")
    with pytest.raises(ZeroDivisionError):
        with refused_by(LookupError, "finish job1"):
            raise ZeroDivisionError


# -- declared instead of written: ids by rank, expiry at a deadline, a refusal's words, no instants (issue 27) --
class RenamingJobs(TimedJobs):
    """A session whose snapshot renames ids as RedisSession's does (``canonical=``)."""

    def snapshot(self, image: tuple, now: float, canonical=lambda value: value) -> tuple:
        return tuple(sorted(canonical(image)))  # sorted after the renaming, as RedisDatabase.snapshot does


@dataclass(frozen=True)
class Fetched(Taken):
    worker_id: str = library_id()
    message_id: str = library_id()
    data: bytes = not_in_snapshot()


WORKERS = ["9e0c1c5a-4f0e-4c38-9d59-3c1d7b0a1f11", "01234567-89ab-4cde-8f01-23456789abcd"]
MESSAGES = ["aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee", "ffffffff-0000-4111-8222-333333333333"]


class FetchingLedger(PlainLedger):
    def _take(self, key, owner, reservation_id, deadline):
        number = self._count_by_key.get(key, 0)
        self._writing()
        self._session.started[f"acks.{self._session.workers[number]}"] = self._session.messages[number]
        return Fetched(reservation_id, key, owner, deadline, self._session.workers[number],
                       self._session.messages[number], f"message taken at {number}".encode())


@pytest.mark.parametrize("order", [1, -1], ids=["drawn-so", "drawn-the-other-way"])
def test_library_ids_in_records_and_image_are_named_by_rank_alike_and_what_decides_nothing_is_left_out(order):
    """A record's library_id fields and the same ids in the image get one renaming, ranked by the records first:
    two paths that drew other uuids snapshot alike; a not_in_snapshot field is not in it."""
    snapshots = []
    for workers, messages in ((WORKERS, MESSAGES), (WORKERS[::order], MESSAGES[::-1])):
        jobs = RenamingJobs()
        jobs.workers, jobs.messages = workers, messages
        ledger = FetchingLedger(jobs, 2, guarded=False)
        ledger.reserve("job1", "w1", 0, 2)
        ledger.reserve("job1", "w2", 0, 2)
        snapshots.append(ledger.snapshot())
    records, image, _, _ = snapshots[0]
    assert records == (("job1/r1", "job1", "w1", 2, "<id0>", "<id1>"), ("job1/r2", "job1", "w2", 2, "<id2>", "<id3>"))
    assert set(image) == {("acks.<id0>", "<id1>"), ("acks.<id2>", "<id3>")}
    assert snapshots[0] == snapshots[1]


class DeadlineLedger(PlainLedger):
    EXPIRES_AT_DEADLINE = True
    UNEXPIRED_BECAUSE = "{record.owner} still holds {record.key}"

    def _past_lease(self, record):
        return self._past_deadline(record)


def test_a_ledger_expiring_at_deadlines_holds_which_records_are_past_them_and_refuses_in_its_declared_words():
    """EXPIRES_AT_DEADLINE: the default snapshot holds each record's past-deadline flag (no image says it);
    UNEXPIRED_BECAUSE, formatted with the record, is a refused expiry's reason."""
    ledger = DeadlineLedger(TimedJobs(), 1, guarded=False)
    ledger.reserve("job1", "w1", 1, 2)
    assert ledger.snapshot()[2] == ((False,),)
    with pytest.raises(IllegalMove, match="^expire_and_release on job1/r1: w1 still holds job1$"):
        ledger.apply("job1/r1", Move.EXPIRE_AND_RELEASE)
    ledger._now = 3
    assert ledger.snapshot()[2] == ((True,),)
    assert PlainLedger(TimedJobs(), 1, guarded=False)._unexpired_because(None) == (
        "the system's expiry query does not list it")


class MovingJobs(TimedJobs):
    def move_time(self, ticks: float) -> None:
        self.calls.append(f"moved {ticks:g}")


@pytest.mark.parametrize("keeps", [True, False], ids=["keeps-instants", "keeps-none"])
def test_the_clock_moves_the_servers_instants_only_where_the_session_keeps_some(keeps):
    """_move_clock: the session's move_time as a write; nothing at all (no call, no write) where keeps_instants is
    False (a PostgresTables with no timed column, as DBOS's)."""
    jobs = MovingJobs()
    jobs.keeps_instants = keeps
    ledger = DeadlineLedger(jobs, 1, guarded=False)
    ledger.reserve("job1", "w1", 0, 2)
    ledger._answered("question", lambda: "answer")
    ledger.expired(2)
    assert jobs.calls.count("moved 2") == (1 if keeps else 0)
    assert ("question" in ledger._answers) is not keeps  # a write forgets what the server answered
