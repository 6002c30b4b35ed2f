"""TokenFleet: agent workers that share a token budget, the quota counted in tokens instead of units.

The shell around ``fence.agents.budget.TokenBudget``, as ``Fleet`` is around the
ledger: both are a ``fence.agents.fleet.FleetShell`` (real threads, the monotonic
clock, one lock and the run's log) over a different quota. A worker reserves the
most its call may use, runs a fresh Agent with ``limits`` that keep the call
within the reservation (``call_limit``: strands checks token caps only between
turns, so the limit leaves room for one more turn of ``max_turn_tokens``), and
settles the reservation with the AgentResult's actual usage; a janitor thread
charges an expired lease in full. ``TokenReport`` is what a run reports.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from strands import Agent, tool

from fence.base.errors import IllegalMove
from fence.agents.budget import TokenBudget, TokenReservation, call_limit
from fence.agents.scripted import ScriptedModel, Turn
from fence.agents.fleet import FleetEvent, FleetShell


@dataclass
class TokenReport:
    budget: int
    spent: int
    """What the budget charged: settled actual usage, plus expired leases in full."""
    actual_total: int
    """The sum of every AgentResult's total tokens, counted apart from the budget."""
    high_water: int
    """The most the budget ever had held plus spent at once."""
    runs: dict[str, int]
    """Job -> the total tokens its Agent call used."""
    stop_reasons: Counter
    turned_away: list[str]
    charged_in_full: list[str]
    overruns: int
    events: list[FleetEvent] = field(default_factory=list)
    late_settles: list[str] = field(default_factory=list)
    """Jobs whose worker reported its usage after its lease had been charged in full."""

    def summary(self) -> str:
        return (
            f"budget={self.budget} spent={self.spent} actual={self.actual_total} high_water={self.high_water} "
            f"runs={len(self.runs)} turned_away={len(self.turned_away)} "
            f"charged_in_full={len(self.charged_in_full)} late_settles={len(self.late_settles)} "
            f"overruns={self.overruns} "
            f"stop_reasons={dict(self.stop_reasons)}"
        )


class TokenFleet(FleetShell):
    """Worker threads that reserve tokens, run an Agent under per-call limits and settle actual usage."""

    def __init__(
        self,
        budget: int,
        *,
        workers: int = 6,
        reserve: int = 400,
        max_turn_tokens: int = 100,
        lease: float = 5.0,
        tick: float = 0.005,
        timeout: float = 20.0,
        log: Callable[[FleetEvent], None] | None = None,
    ) -> None:
        super().__init__(workers=workers, lease=lease, tick=tick, timeout=timeout, log=log)
        self.budget = TokenBudget(budget)
        self.reserve = reserve
        self.max_turn_tokens = max_turn_tokens
        self.limit = call_limit(reserve, max_turn_tokens)
        self._runs: dict[str, int] = {}
        self._stop_reasons: Counter[str] = Counter()
        self._high_water = 0
        self._pending = 0
        """Jobs not yet settled, charged in full or turned away: the run is over at zero."""
        self._late_settles: list[str] = []

    def _watch(self) -> None:
        # Called with the fleet lock held, after every budget move.
        self._high_water = max(self._high_water, self.budget.held + self.budget.spent)

    def run(self, scripts: dict[str, list[Turn]], crash: set[str] = frozenset()) -> TokenReport:
        for job, turns in scripts.items():
            for turn in turns:
                if turn.total_tokens > self.max_turn_tokens:
                    raise ValueError(
                        f"job {job!r}: a turn of {turn.total_tokens} tokens exceeds max_turn_tokens="
                        f"{self.max_turn_tokens}, which the per-call limit relies on"
                    )
        self._scripts = scripts
        self._crash = set(crash)
        self._pending = len(scripts)
        self._run_threads(list(scripts))
        with self._lock:
            reservations = self.budget.reservations()
            return TokenReport(
                budget=self.budget.budget,
                spent=self.budget.spent,
                actual_total=sum(self._runs.values()),
                high_water=self._high_water,
                runs=dict(self._runs),
                stop_reasons=Counter(self._stop_reasons),
                turned_away=list(self._turned_away),
                charged_in_full=[r.key for r in reservations if r.state.value == "charged_in_full"],
                overruns=len(self.budget.overruns),
                events=list(self._events),
                late_settles=list(self._late_settles),
            )

    def _settled(self) -> bool:
        # Called with the lock held.
        return self._pending == 0

    def _janitor_pass(self) -> None:
        # Called with the lock held.
        for reservation in self.budget.expire(self.now()):
            self._watch()
            self._note("janitor", f"{reservation.reservation_id}: lease expired, "
                       f"charged in full ({reservation.reserved} tokens)")
            self._pending -= 1

    def _spent_for_good(self) -> str | None:
        # Nothing in flight will ever return tokens: the budget is spent.
        return f"{self.budget.free} tokens left" if self.budget.held == 0 else None

    def _turn_away(self, name: str, job: str, spent: str) -> None:
        super()._turn_away(name, job, spent)
        self._pending -= 1

    def _attempt(self, name: str, job: str) -> None:
        def take() -> TokenReservation:
            reservation = self.budget.reserve(job, f"{job}#a1", self.reserve, self.now(), self.lease)
            self._watch()
            self._note(name, f"{reservation.reservation_id} reserved {self.reserve} tokens (free {self.budget.free})")
            return reservation

        reservation = self._wait_for_quota(name, job, take)
        if reservation is None:
            return
        model = ScriptedModel(self._scripts[job])

        @tool
        def work(step: int) -> str:
            """Do one step of the job."""
            return f"step {step} done"

        agent = Agent(model=model, tools=[work], callback_handler=None)
        result = agent(f"do {job}", idempotency_token=job, limits={"total_tokens": self.limit})
        used = int(result.metrics.accumulated_usage["totalTokens"])
        with self._lock:
            self._runs[job] = used
            self._stop_reasons[result.stop_reason] += 1
            if job in self._crash:
                self._note(name, f"{job} used {used} tokens and crashed before settling")
                return  # the janitor charges the lease in full when it expires
            try:
                settled = self.budget.settle(reservation.reservation_id, reservation.owner, used)
            except IllegalMove:
                # The call outlived its lease and the janitor charged it in full (and
                # counted the job as finished). The budget keeps the larger charge:
                # the report came too late to give tokens back.
                self._late_settles.append(job)
                self._note(name, f"{job} used {used} tokens, but {reservation.reservation_id} was "
                           "already charged in full: the late report is refused")
                return
            self._watch()
            self._pending -= 1
            self._note(name, f"{settled.reservation_id} settled at {used} tokens "
                       f"({result.stop_reason}; spent {self.budget.spent}/{self.budget.budget})")
