"""The rows of fence targets: what a target is (Target), the built-in rows, the bounds and profiles they are judged at."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from fence.model.policies import POLICIES, JanitorPolicy
from fence.checking.verdicts import DEFAULT_CONFIGS
from fence.model.world import ModelConfig

SERVERS = ("postgres", "redis")
"""The servers fence starts for a target (``fence/_scripts/postgres.sh``, ``redis.sh``)."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """One row of ``fence targets``: a real system, configured one way, and the model it claims.

    A user's target is one of these at a module's top level, passed to ``fence
    targets --target FILE.py:ATTR`` (or ``MODULE:ATTR``) or to
    ``fence.testing.check_target``; nothing in fence is edited to add one.
    """

    row: str
    """The row's name (``procrastinate``, ``procrastinate+guard``): its report line and its files."""
    system: str
    """The library under test, as pip names it (its version goes into the evidence)."""
    policy: JanitorPolicy | str
    """The model policy this configuration of the system claims to implement (or a built-in's name)."""
    storage: str
    """``MODULE:ATTR`` or ``FILE.py:ATTR`` of a callable (url, **options) -> storage with
    ``destination_factory``, ``ledger_factory`` and ``close`` (``versions`` if it can say them)."""
    server: str | None = None
    """The server it needs, started by the project's scripts when no URL is given (``postgres``,
    ``redis``); None, or another name: the caller always gives the URL."""
    recovery: str = ""
    """What the system does with a lease that ran out, in its own words."""
    time: str = ""
    """How fence moves the system's time without sleeping."""
    tick_seconds: float | None = None
    """The seconds of the system's clock one model tick stands for in the adapter (its model time). A
    lease of L ticks is judged as a timeout of (L - 1/2) ticks, so the half tick must absorb the real
    time a run takes: ``fence targets`` says when a run outlasted it. None: the ledger's own
    ``time.tick_seconds`` (a ``ModelTime``), if it has one."""
    options: dict = field(default_factory=dict)
    """Keyword arguments for the storage."""
    extra: str = ""
    """The pip extra that installs the system (``pip install 'fence[EXTRA]'``)."""
    explorable: bool = False
    """Its ledger and destination are restorable (``fence.targets.protocol``: ``dump``/``load``), so the
    explorer can walk it too; until then only the machines judge it, and its cells say so."""

    def __post_init__(self) -> None:
        if isinstance(self.policy, str):  # a built-in's name, or MODULE:ATTR / FILE.py:ATTR
            from fence.model.plugins import load_policy

            object.__setattr__(self, "policy", load_policy(self.policy))

    def problem(self) -> str | None:
        """Why this cannot be a target row (one line), or None."""
        from fence.targets.loading import storage_spec_problem
        from fence.model.policies import policy_problem

        if not isinstance(self.row, str) or not self.row.strip():
            return f"row must be a non-empty name, not {self.row!r}"
        problem = policy_problem(self.policy)
        if problem:
            return f"policy is not a janitor policy: {problem}"
        problem = storage_spec_problem(self.storage)
        if problem:
            return f"storage {problem}"
        if self.tick_seconds is not None and not (
                isinstance(self.tick_seconds, (int, float)) and self.tick_seconds > 0):
            return f"tick_seconds must be a positive number of seconds, not {self.tick_seconds!r}"
        if not isinstance(self.options, dict):
            return f"options must be a dict of keyword arguments for the storage, not {type(self.options).__name__}"
        return None

    def server_problem(self) -> str | None:
        """Why fence cannot start this target's server itself (it needs a URL given), or None."""
        if self.server is None:
            return "names no server (server='postgres' or 'redis'): pass its URL"
        if self.server not in SERVERS:
            return f"server {self.server!r} is not one fence starts ({', '.join(SERVERS)}): pass its URL"
        return None

    def open(self, url: str):
        """This target's storage on the server at ``url``: every world made from it starts empty."""
        from fence.targets.loading import load_storage

        return load_storage(self)(url, **self.options)


TARGETS: dict[str, Target] = {
    target.row: target
    for target in (
        Target(
            row="procrastinate",
            system="procrastinate",
            policy=POLICIES["naive"],
            recovery="the documented stalled-jobs recipe: get_stalled_jobs() then retry_job(job) "
            "on the same row; the worker's finish_job(job) checks the job id and status only",
            time="each worker's last_heartbeat is moved back in procrastinate_workers, 60 s per tick",
            server="postgres",
            storage="fence.targets.procrastinate:ProcrastinateStorage",
            options={"guarded": False},
            extra="procrastinate",
            explorable=True,
        ),
        Target(
            row="procrastinate+guard",
            system="procrastinate",
            policy=POLICIES["abandon-fenced"],
            recovery="fence.guard on the task's side effect; the stalled-jobs recipe through "
            "fence.targets.procrastinate.recover_stalled_jobs: abandon the attempt unless it "
            "committed, then finish_job(succeeded), or finish_job(failed) and defer a fresh row",
            time="each worker's last_heartbeat is moved back in procrastinate_workers, 60 s per tick",
            server="postgres",
            storage="fence.targets.procrastinate:ProcrastinateStorage",
            options={"guarded": True},
            extra="procrastinate",
            explorable=True,
        ),
        Target(
            row="pgqueuer",
            system="pgqueuer",
            policy=POLICIES["naive"],
            recovery="the stale re-pick in dequeue: a picked job whose heartbeat is older than heartbeat_timeout "
            "is picked again, on the same row, by the next queue manager's dequeue (next_stale), which runs it; "
            "the stale worker's log_jobs(job) and update_heartbeat are keyed by the job id alone",
            time="each job's heartbeat and execute_after are moved back in the pgqueuer table, 60 s per tick",
            server="postgres",
            storage="fence.targets.pgqueuer:PgqueuerStorage",
            options={"guarded": False},
            extra="pgqueuer",
            explorable=True,
        ),
        Target(
            row="pgqueuer+guard",
            system="pgqueuer",
            policy=POLICIES["abandon-fenced"],
            recovery="fence.guard on the task's side effect; the stale re-pick runs the recovery instead of the "
            "body (fence.targets.pgqueuer.guarded_attempt): abandon the earlier picks' attempts unless one "
            "committed, then log_jobs(successful), or log_jobs(exception) and enqueue a fresh row",
            time="each job's heartbeat and execute_after are moved back in the pgqueuer table, 60 s per tick",
            server="postgres",
            storage="fence.targets.pgqueuer:PgqueuerStorage",
            options={"guarded": True},
            extra="pgqueuer",
            explorable=True,
        ),
        Target(
            row="celery",
            system="celery",
            policy=POLICIES["naive"],
            recovery="kombu's QoS.restore_visible with visibility_timeout puts an unacked message back on its "
            "queue under the same delivery tag; a worker's basic_ack removes that tag, whoever holds it now",
            time="each delivery time in kombu's unacked_index is moved back, 600 s per tick",
            server="redis",
            storage="fence.targets.celery_redis:CeleryStorage",
            options={"guarded": False},
            extra="celery",
            explorable=True,
        ),
        Target(
            row="celery+guard",
            system="celery",
            policy=POLICIES["abandon-fenced"],
            recovery="fence.guard on the task's side effect; instead of restore_visible, "
            "fence.targets.celery_redis.recover_expired: abandon the attempt unless it committed, then "
            "basic_ack, or basic_reject and publish a fresh message (a new task id and delivery tag)",
            time="each delivery time in kombu's unacked_index is moved back, 600 s per tick",
            server="redis",
            storage="fence.targets.celery_redis:CeleryStorage",
            options={"guarded": True},
            extra="celery",
            explorable=True,
        ),
        Target(
            row="dramatiq",
            system="dramatiq",
            policy=POLICIES["naive"],
            recovery="the RedisBroker's maintenance (run by chance on any command): every message in the ack set "
            "of a worker whose heartbeat is older than heartbeat_timeout goes back on its queue under the same "
            "id; the stale worker's ack is then a no-op, its failure's Retries still enqueues a retry",
            time="each worker heartbeat, dead-letter instant and retry eta is moved back, 60 s per tick",
            server="redis",
            storage="fence.targets.dramatiq_redis:DramatiqStorage",
            options={"guarded": False},
            extra="dramatiq",
            explorable=True,
        ),
        Target(
            row="dramatiq+guard",
            system="dramatiq",
            policy=POLICIES["abandon-fenced"],
            recovery="fence.guard on the task's side effect; instead of maintenance (maintenance_chance=0), "
            "fence.targets.dramatiq_redis.recover_stalled: abandon the attempt unless it committed, then ack it "
            "as its worker, or nack it and enqueue a fresh message (a new redis_message_id)",
            time="each worker heartbeat, dead-letter instant and retry eta is moved back, 60 s per tick",
            server="redis",
            storage="fence.targets.dramatiq_redis:DramatiqStorage",
            options={"guarded": True},
            extra="dramatiq",
            explorable=True,
        ),
        Target(
            row="arq",
            system="arq",
            policy=POLICIES["naive"],
            recovery="none of its own: a job whose in-progress key expired (job_timeout + 10 s) is picked again "
            "by the next worker's start_jobs, under the same job id; finish_job(id) finishes whoever runs it",
            time="every TTL (in-progress keys) is shortened in Redis, 60 s per tick",
            server="redis",
            storage="fence.targets.arq_redis:ArqStorage",
            options={"guarded": False},
            extra="arq",
            explorable=True,
        ),
        Target(
            row="arq+guard",
            system="arq",
            policy=POLICIES["abandon-fenced"],
            recovery="fence.guard on the task's side effect; a pick of a job that ran before runs "
            "fence.targets.arq_redis.guarded_task's recovery instead of the body: abandon the earlier tries "
            "unless one committed, then finish the job, or finish it and enqueue a fresh job id",
            time="every TTL (in-progress keys) is shortened in Redis, 60 s per tick",
            server="redis",
            storage="fence.targets.arq_redis:ArqStorage",
            options={"guarded": True},
            extra="arq",
            explorable=True,
        ),
        Target(
            row="dbos",
            system="dbos",
            policy=POLICIES["naive"],
            recovery="DBOS's recovery of a dead executor (recover_pending_workflows, as Conductor calls it): "
            "get_pending_workflows(executor), then reenqueue_for_recovery puts the same workflow back to ENQUEUED "
            "for the next claim, which re-runs every step not checkpointed",
            time="no DBOS instant is compared with a clock on this path: fence's recovery service declares an "
            "executor dead once a lease of ticks has passed since its claim (60 s per tick, nominal)",
            server="postgres",
            storage="fence.targets.dbos_postgres:DbosStorage",
            options={"guarded": False},
            extra="dbos",
            explorable=True,
        ),
        Target(
            row="dbos+guard",
            system="dbos",
            policy=POLICIES["abandon-fenced"],
            recovery="fence.guard on the step's side effect; instead of DBOS's recovery, "
            "fence.targets.dbos_postgres.recover_dead_executor: abandon the run unless it committed, then "
            "update_workflow_outcome(SUCCESS) under the dead claim's token, or reenqueue_for_recovery for a fresh "
            "claim (a fresh owner token: DBOS refuses the stale run's checkpoint and outcome)",
            time="no DBOS instant is compared with a clock on this path: fence's recovery service declares an "
            "executor dead once a lease of ticks has passed since its claim (60 s per tick, nominal)",
            server="postgres",
            storage="fence.targets.dbos_postgres:DbosStorage",
            options={"guarded": True},
            extra="dbos",
            explorable=True,
        ),
    )
}


EXPLORER_BOUND = ModelConfig(capacity=1, jobs=1, max_attempts=2, lease=2, horizon=2)
"""The bound the explorer exhausts on a target: 1 unit x 1 job x 2 attempts, lease 2, horizon 2,
2 janitors; ``judge_target`` (so ``fence targets`` and ``check_target``) walks it with workers
that may fail (``TARGET_BOUND``), ``explore_target`` as given. The smallest at which the model reaches every danger the guarded policy must face
(a retry and a revised retry need two attempts; a commit after expiry needs the clock to reach
the lease), at the lease the machines use. About 1,200 states and 5,000 transitions on
procrastinate with fence.guard, 1,700 and 8,700 with workers that may fail (``TARGET_BOUND``),
each a few calls on the real database."""


EXPLORER_DEEP_BOUND = ModelConfig(capacity=2, jobs=2, max_attempts=2, lease=2, horizon=2)
"""The second bound of ``fence targets --profile deep``: 2 units x 2 jobs x 2 attempts, lease 2,
horizon 2, walked after ``EXPLORER_BOUND`` for at most ``EXPLORER_DEEP_BUDGET`` seconds a row.
Two jobs share the server there (two rows, two workers' heartbeats, two messages' delivery
times), which one job never shows. No row is exhausted within the budget today: a plug-in's
states are keyed by ``generic_state_key``, much finer than fence's own key, and each costs
calls on the server. The walk then proves nothing, but what it finds is found (a violation is
replayed from scratch), and its FaithfulnessCheck checks every depth it finishes."""


TARGET_BOUND = replace(EXPLORER_BOUND, failures=True)
"""``EXPLORER_BOUND`` with workers that may fail: what every target row is proved within (its legend's bound)."""


EXPLORER_DEEP_BUDGET = 1800.0
"""Seconds the walk at ``EXPLORER_DEEP_BOUND`` may take per row (``fence targets --explorer-budget``)."""


@dataclass(frozen=True)
class TargetProfile:
    """How hard ``fence targets`` and ``check_target`` look at each row: one line of ``TARGET_PROFILES``."""

    examples: int
    """Hypothesis examples per configuration (derandomised)."""
    steps: int
    """Steps per example."""
    configs: tuple[ModelConfig, ...]
    """The machines' configurations, every one with workers that may fail: a target's failure handler
    (its fail) is part of what it claims (``judge_target``)."""
    bounds: tuple[ModelConfig, ...]
    """The bounds the explorer walks on each row, in order; the first (``EXPLORER_BOUND``) is exhausted,
    a later one walked for at most ``EXPLORER_DEEP_BUDGET`` seconds."""
    faithfulness: tuple[int, int]
    """(new states, merges) the FaithfulnessCheck replays from scratch on an emptied database
    (``fence.explore.walk.explore``'s ``faithfulness``); each replay costs dozens of restores."""


_WITH_FAILURES = tuple(replace(config, failures=True) for config in DEFAULT_CONFIGS)


TARGET_PROFILES = {
    "quick": TargetProfile(40, 30, (ModelConfig(capacity=1, jobs=1, failures=True),), (EXPLORER_BOUND,), (20, 40)),
    "default": TargetProfile(150, 30, _WITH_FAILURES, (EXPLORER_BOUND,), (60, 120)),
    "thorough": TargetProfile(600, 40, _WITH_FAILURES, (EXPLORER_BOUND,), (200, 400)),
    "deep": TargetProfile(150, 30, _WITH_FAILURES, (EXPLORER_BOUND, EXPLORER_DEEP_BOUND), (60, 120)),
}
"""``fence targets --profile`` and ``check_target(profile=)``: the one table of what each profile does."""


def with_failures(configs: Iterable[ModelConfig]) -> tuple[ModelConfig, ...]:
    """The same configurations with workers that may fail: what every target row is walked at."""
    return tuple(replace(config, failures=True) for config in configs)
