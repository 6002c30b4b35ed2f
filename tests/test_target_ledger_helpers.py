"""TargetLedger's helpers for adapters (``fence.targets.ledger``): reads kept until a write, writes accepted only
if they moved something, and a guarded row's failure caught by its guard. No server: a dict is the system."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fence.targets.protocol import IllegalMove, ModelTime, Move, ReservationState, Restorer, TargetLedger


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
        self._moved(lambda: take.key in self._started(), lambda: self._finish(take), f"finish of {take.key}: not started")
        self._finished(take.key, move)

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
        ledger.confirm("job1", "w1")
    assert jobs.calls.count("finish") == 2  # the call was made, and changed nothing


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
