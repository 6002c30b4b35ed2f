"""What every shipped target must show, written once and run on each system of ``fence.targets.TARGETS``.

Each test is parametrised over the shipped systems (``over_systems``: a row
``S`` as shipped, which claims fence's naive policy, and ``S+guard`` with
fence.guard, which claims abandon-fenced), the rows ``fence targets`` runs;
its cases are named by the system. A new shipped target gets every test here
by being added to ``TARGETS``: where a system behaves its own way, the
expectation is a line of a table below, keyed by the system, and a new system
without its line fails saying which table wants it.

What only one library shows (its own worker running the guard, its keys or
tables read back, a mutation of its image) is in tests/test_targets_SYSTEM.py
and tests/test_targets_explorer_SYSTEM.py.

``NOT_BY_DEFAULT`` sets name the cases that run only with --run-slow: walks
of minutes, and the cases a per-target file did not run before this suite
was folded from them, kept out of the default run so that CI's time does not
grow.

Every test needs its system's server (the session's, see conftest.py) and
library (the test extra): skipped without them locally, failed under CI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fence.base.errors import BadInput
from fence.checking.verdicts import Verdict, profile_settings
from fence.model.invariants import BY_NAME
from fence.model.policies import POLICIES
from fence.model.world import Fail, ModelConfig, Probe, Reserve, Retry, Scan, Settle, Tick, World
from fence.search import counterexample
from fence.search.lockstep import replay_in_lockstep, without_refusal_reasons
from fence.search.minimise import replay_actions
from fence.targets import EXPLORER_BOUND, TARGET_BOUND, TARGETS, judge_target
from tests.target_explorer_checks import (
    STALE_CONFIRM, STALE_SETTLE, guarded_row_holds, guarded_row_proved, machines_duplicate_replays,
    shipped_duplicate_replays, shortest_failure_finding_replays,
)
from tests.target_fixtures import (
    PUBLIC_TARGET_API, SYSTEMS, adapter, fence_imports, guarded_storage, over_systems, server_url, shipped_storage,
    code_lines, source_lines,
)

FIXTURES = (adapter, server_url, shipped_storage, guarded_storage)
"""The fixtures of the system under test (tests/target_fixtures.py), found by pytest in this module by name."""

NAIVE, GUARDED = POLICIES["naive"], POLICIES["abandon-fenced"]
ONE = ModelConfig(capacity=1, jobs=1)
ONE_FAILING = ModelConfig(capacity=1, jobs=1, failures=True)
PINNED_NAIVE = sorted((Path(__file__).parent / "pinned").glob("naive__*.json"))
FENCE = [sys.executable, "-m", "fence.cli.main"]
UNREACHABLE = {"postgres": "postgresql://fence@127.0.0.1:1/fence", "redis": "redis://127.0.0.1:1/0"}
"""A URL of each server nobody listens on."""


def expected(table: dict, system: str):
    """``table[system]``, or a failure naming the table a new system needs a line in."""
    if system not in table:
        pytest.fail(f"{system} has no line in this suite's table of what it is expected to show: add one", pytrace=False)
    return table[system]


def _on(storage, policy, config=ONE) -> World:
    return World(policy, config, storage.destination_factory, storage.ledger_factory)


# -- the library and the command line ---------------------------------------------------------------
@pytest.mark.parametrize("system", over_systems())
def test_without_its_library_the_target_is_one_line_naming_the_extra(system, monkeypatch):
    """A missing library is BadInput in one line, on both rows, naming the pip extra, before any server is touched."""
    monkeypatch.setitem(sys.modules, system, None)  # import SYSTEM now raises ImportError
    monkeypatch.delitem(sys.modules, TARGETS[system].storage.split(":")[0], raising=False)
    for row in (system, f"{system}+guard"):
        with pytest.raises(BadInput) as missing:
            TARGETS[row].open(UNREACHABLE[TARGETS[row].server])
        message = str(missing.value)
        assert "\n" not in message and message.startswith(f"target {row}:")
        assert message.endswith(f"install it with pip install 'fence[{TARGETS[row].extra}]'")


REPLAY_BY_FENCE_NOT_BY_DEFAULT = {"procrastinate", "pgqueuer", "dramatiq", "dbos"}
"""pgqueuer: new here; dramatiq and dbos: slow in their files before; procrastinate (11 s) since CI outgrew ten
minutes on this machine. arq (PostgreSQL-free) and celery replay in every run, through the same fence replay."""


@pytest.mark.parametrize("system", over_systems(REPLAY_BY_FENCE_NOT_BY_DEFAULT))
def test_a_shipped_rows_duplicate_replays_on_its_library_by_fence_replay(system, adapter, server_url, tmp_path):
    """check_target on the shipped row (the machines alone) finds the duplicate; its file, replayed by the public
    replay_target and by ``fence replay FILE``, breaks it again on the real library."""
    from fence.testing import check_target, replay_target

    checked = check_target(system, server_url, profile="quick", explore=False, out=tmp_path)
    checked.assert_violated("no_duplicate_writes")
    assert checked.report.cells["no_duplicate_writes"].verdict is Verdict.VIOLATED
    path = checked.replay_file("no_duplicate_writes")
    assert path == tmp_path / f"{system}__naive__no_duplicate_writes.json"
    again = replay_target(path, server_url)
    assert again.violation is not None and "job1 was written 2 times" in again.violation
    result = subprocess.run([*FENCE, "replay", str(path), f"--{TARGETS[system].server}", server_url],
                            capture_output=True, text=True, cwd=tmp_path, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"target {system}," in result.stdout and f"BROKEN on the real system ({TARGETS[system].system} " in result.stdout
    assert "no_duplicate_writes: job1 was written 2 times" in result.stdout.splitlines()[-1]
    assert "Traceback" not in result.stderr


# Procrastinate's, pgqueuer's and celery's rows once expected 4 (and 6) violated here: that was issue 25's finding
# with each library's own failure handler, before the guard's wrapper caught the failure; since that fix the
# quick profile proves them as the default one does (evidence/targets.txt), and the folded suite carried the old
# words of slow tests no run had reached since.
GUARDED_CELLS = {system: ["proved"] * 7 for system in ("procrastinate", "pgqueuer", "celery", "dramatiq", "arq", "dbos")}
"""The guarded row's seven cells as ``fence targets --profile quick`` prints them."""


@pytest.mark.slow
@pytest.mark.parametrize("system", over_systems())
def test_cli_targets_prints_both_rows_and_replays_what_it_found(system, adapter, server_url, tmp_path):
    """fence targets --profile quick on the system's two rows: the shipped row violated, its counterexamples replayed on
    a fresh database; the guarded row's cells as the table says; exit status 1 where the guarded row (which claims
    safety) is violated, else 0 (the shipped row's violations are what it claims)."""
    report = tmp_path / "targets.txt"
    result = subprocess.run([*FENCE, "targets", "--row", system, "--row", f"{system}+guard", "--profile", "quick",
                             f"--{TARGETS[system].server}", server_url, "--report", str(report)],
                            capture_output=True, text=True, timeout=600)
    cells = expected(GUARDED_CELLS, system)
    assert result.returncode == (1 if "violated" in cells else 0), result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:3]}
    guarded = [cell.split("(")[0] for cell in rows[f"{system}+guard"]]
    assert rows[system][0].startswith("violated")
    assert guarded == cells, rows
    assert "explorer: violated within 1 unit(s) x 1 job(s) x 2 attempt(s), lease 2, horizon 2" in result.stdout
    assert "DID NOT REPLAY" not in result.stdout and "replayed on a fresh database: job1 was written 2 times" in result.stdout
    assert report.read_text().startswith("# command: fence targets")
    if system == "celery":
        # Invariant 5's shortest story is the stale worker's ack on failure (issue 25); the stale ack on success
        # stays pinned by its own replay (test_a_stale_workers_confirm_after_the_retry_took_its_job).
        import re

        stale = re.search(r"job1#(\d)'s fail changed job1/r(\d), which belongs to job1#(\d)", result.stdout)
        assert stale and int(stale[1]) < int(stale[2]) == int(stale[3]), result.stdout


# -- as shipped: the naive policy, on the real system --------------------------------------------------
PINNED_NOT_BY_DEFAULT = {"celery", "dramatiq", "arq", "dbos"}
"""New here."""


@pytest.mark.parametrize("path", PINNED_NAIVE, ids=[p.stem for p in PINNED_NAIVE])
@pytest.mark.parametrize("system", over_systems(PINNED_NOT_BY_DEFAULT))
def test_the_models_naive_counterexamples_replay_on_the_shipped_row(system, path, shipped_storage):
    """Each pinned counterexample of the naive model, replayed on the shipped row, breaks the same invariant."""
    policy, config, invariant, actions, drains = counterexample.load(path)
    chosen = [action for action, drain in zip(actions, drains) if not drain]
    replayed = replay_actions(policy, config, chosen, BY_NAME[invariant], shipped_storage.destination_factory,
                              shipped_storage.ledger_factory)
    assert replayed is not None, f"{path.stem} did not break {invariant} on {system}"
    assert replayed.world.observer.findings.first(invariant) or BY_NAME[invariant].check(replayed.world)


MACHINES_NOT_BY_DEFAULT = {"dramatiq", "arq", "dbos"}
"""New here (their files replay the duplicate on a fixed path, or by check_target and fence replay)."""


@pytest.mark.parametrize("system", over_systems(MACHINES_NOT_BY_DEFAULT))
def test_the_machines_find_a_duplicate_and_it_replays_on_a_fresh_database(system, shipped_storage):
    """The machines on the shipped row find a job written twice; their run, replayed on the emptied server, writes it
    twice again, by two attempts: the recovery (a scan) gave the job back before the retry that ran it again."""
    kinds = machines_duplicate_replays(shipped_storage)
    assert "scan" in kinds and "retry" in kinds and kinds.index("scan") < kinds.index("retry"), kinds


STALE_CONFIRM_REFUSED = {
    # system: None where the system accepts the stale worker's confirm (a lockstep finding), else what refuses it
    "procrastinate": None,  # finish_job checks the job id and status only
    "pgqueuer": None,  # log_jobs is keyed by the job id alone (pgqueuer #430)
    "celery": None,  # the restored message keeps its delivery tag, so the stale ack acks the retry's delivery
    "dramatiq": "the ledger refuses: ack of job1/r1 changed nothing",  # the ack is keyed by the worker's own ack set
    "arq": None,  # finish_job keys on the job id alone
    "dbos": "no longer owned by this execution",  # every claim writes an ownership token
}


@pytest.mark.parametrize("system", over_systems())
def test_a_stale_workers_confirm_after_the_retry_took_its_job(system, shipped_storage):
    """A worker outlives its lease, the retry takes its job, and the first worker confirms: the system accepts it and
    changes the retry's reservation (the lockstep's finding, and invariant 5 broken on fence's facts), or refuses it as
    the naive model does, as the table says."""
    world = _on(shipped_storage, NAIVE)
    difference = replay_in_lockstep(STALE_CONFIRM, world, World(NAIVE, ONE), same_story=without_refusal_reasons)
    refused = expected(STALE_CONFIRM_REFUSED, system)
    broken = replay_actions(NAIVE, ONE, STALE_CONFIRM, BY_NAME["stale_attempt_cannot_change_newer"],
                            shipped_storage.destination_factory, shipped_storage.ledger_factory)
    if refused is None:
        assert difference is not None and difference.what == "confirm: the step's story"
        assert "the ledger refuses" in difference.detail and "job1#1 confirms: job1/r2 is confirmed" in difference.detail
        assert broken is not None and broken.message == "job1#1's confirm changed job1/r2, which belongs to job1#2"
    else:
        assert difference is None and refused in world.trace[-1].sentence, world.trace[-1].sentence
        assert world.ledger.get("job1/r2").state.value == "reserved"  # the retry still holds its job
        assert broken is None


@pytest.mark.parametrize("system", over_systems())
def test_as_shipped_a_failure_frees_the_job_at_once_where_the_model_holds_it(system, shipped_storage):
    """The lockstep's finding on every shipped row: the system's own failure handler leaves the job unused at once
    (finished, acked, deleted, ERROR), where the model holds it as outcome_unknown for the recovery to settle."""
    difference = replay_in_lockstep([Reserve("job1"), Fail("job1#1")], _on(shipped_storage, NAIVE, ONE_FAILING),
                                    World(NAIVE, ONE_FAILING), same_story=without_refusal_reasons)
    assert difference is not None and difference.what == "fail: the step's story"
    assert "the world under test: 'job1#1 fails before its effect and reports it: job1/r1 is unused'" in difference.detail
    assert "job1/r1 is outcome_unknown" in difference.detail


NEVER_SETTLES_NOT_BY_DEFAULT = {"procrastinate", "dramatiq", "arq"}
"""New here."""


@pytest.mark.parametrize("system", over_systems(NEVER_SETTLES_NOT_BY_DEFAULT))
def test_as_shipped_a_failed_job_never_settles(system, shipped_storage):
    """On fence's facts: nothing settles the failed job on the shipped row, and it never has its effect."""
    broken = replay_actions(NAIVE, ONE_FAILING, [Reserve("job1"), Fail("job1#1")], BY_NAME["everything_settles"],
                            shipped_storage.destination_factory, shipped_storage.ledger_factory)
    assert broken is not None
    assert broken.message == "job1/r1 stayed outcome_unknown after the drain, though no attempt was left running"


# -- with the guard ------------------------------------------------------------------------------------
STALE_SETTLE_NOT_BY_DEFAULT = {"arq"}
"""New here (arq's file refuses the stale finish on its ledger directly)."""


@pytest.mark.parametrize("system", over_systems(STALE_SETTLE_NOT_BY_DEFAULT))
def test_the_guarded_recovery_refuses_a_stale_settle_like_the_model(system, guarded_storage):
    """Two janitors hold one answer for an expired lease; one settles it and the job is retried on a fresh job, row,
    message or claim; the other's stale settle meets a finished one and is refused, as in the model."""
    world = _on(guarded_storage, GUARDED)
    assert replay_in_lockstep(STALE_SETTLE, world, World(GUARDED, ONE), same_story=without_refusal_reasons) is None
    assert world.trace[-1].sentence.endswith("the ledger refuses"), world.trace[-1].sentence
    assert world.ledger.get("job1/r2").state.value == "reserved"


CAUGHT_NOT_BY_DEFAULT = {"pgqueuer", "arq", "dbos"}
"""New here (their files walk the guarded failure path with their own steps)."""


@pytest.mark.parametrize("system", over_systems(CAUGHT_NOT_BY_DEFAULT))
def test_guarded_a_caught_failure_is_outcome_unknown_until_the_janitor_settles_it_as_the_model(system, guarded_storage):
    """The guard's wrapper, not the system's failure handler, takes the report: the failed attempt holds its unit until
    the settle, and the job is retried afresh, exactly as in the model."""
    steps = [Reserve("job1"), Fail("job1#1"), Probe(0, "job1/r1"), Settle(0, "job1/r1"), Retry("job1")]
    assert replay_in_lockstep(steps, _on(guarded_storage, GUARDED, ONE_FAILING), World(GUARDED, ONE_FAILING),
                              same_story=without_refusal_reasons) is None


HELD_NOT_BY_DEFAULT = {"dramatiq", "arq", "dbos"}
"""New here."""


@pytest.mark.parametrize("system", over_systems(HELD_NOT_BY_DEFAULT))
def test_guarded_a_stalled_workers_failure_after_the_recovery_held_its_job_is_refused_like_the_model(
        system, guarded_storage):
    """The guarded recovery holds a stalled job; that worker's task then raises: the guard's wrapper refuses it (the
    system's own handler would finish, ack or log the job the recovery holds), and the unit stays held."""
    steps = [Reserve("job1"), Tick(2), Scan(0, "job1/r1"), Fail("job1#1")]
    assert replay_in_lockstep(steps, _on(guarded_storage, GUARDED, ONE_FAILING), World(GUARDED, ONE_FAILING),
                              same_story=without_refusal_reasons) is None
    assert replay_actions(GUARDED, ONE_FAILING, steps, BY_NAME["capacity_conserved"],
                          guarded_storage.destination_factory, guarded_storage.ledger_factory) is None


HOLDS = {
    # system: (examples, workers that may fail); every danger must be reached, the failure path's where it is on
    "procrastinate": (40, False),
    "pgqueuer": (40, False),
    "celery": (40, False),
    "dramatiq": (100, True),  # Hypothesis reaches failure_after_effect rarely here: once in 40 examples, never in 30
    "arq": (40, True),  # 20 examples miss failure_after_effect
    "dbos": (40, True),
}
HOLDS_NOT_BY_DEFAULT = {"dramatiq", "arq", "dbos"}
"""16 s and more a run: over their share of CI's time (slow in their files before)."""


@pytest.mark.parametrize("system", over_systems(HOLDS_NOT_BY_DEFAULT))
def test_the_guarded_row_holds_within_the_bound_and_reaches_every_danger(system, adapter, server_url):
    """The machines on the guarded row, 1 unit x 1 job: no invariant broken, no lockstep difference, every danger
    reached (failure_after_effect too, where workers may fail)."""
    examples, failures = expected(HOLDS, system)
    reached = guarded_row_holds(f"{system}+guard", server_url, examples, failures=failures)
    if failures:
        assert reached["failure_after_effect"] > 0


BOTH_CONFIGURATIONS_FAIL = {"procrastinate": False, "pgqueuer": False, "celery": False, "dramatiq": True,
                            "arq": True, "dbos": True}
"""Whether workers may fail in the run at both configurations."""


@pytest.mark.slow
@pytest.mark.parametrize("system", over_systems())
def test_the_guarded_row_holds_at_both_configurations(system, adapter, server_url):
    """The guarded row at fence verdicts' configurations (1x1 and 2x2), 150 examples each: nothing found."""
    found = judge_target(TARGETS[f"{system}+guard"], server_url, run_settings=profile_settings(150, 30), explore=False,
                         failures=expected(BOTH_CONFIGURATIONS_FAIL, system))
    # Each cell's word and detail on failure: a guarded row's verdict is the one that must never be wrong.
    assert {name: cell.verdict for name, cell in found.report.cells.items()} == dict.fromkeys(
        found.report.cells, Verdict.NOT_FOUND), {name: (cell.verdict.value, cell.detail, cell.counterexample)
                                                 for name, cell in found.report.cells.items()}
    assert found.lockstep_findings == []


# -- the explorer: the same world, copied by restoring the server ----------------------------------------
EXPLORER_DUPLICATE_NOT_BY_DEFAULT = {"pgqueuer", "dramatiq", "arq", "dbos"}
"""Slow in their files before; pgqueuer (7 s) since CI outgrew ten minutes on this machine: procrastinate on
PostgreSQL and celery on Redis run in every run."""


@pytest.mark.parametrize("system", over_systems(EXPLORER_DUPLICATE_NOT_BY_DEFAULT))
def test_the_explorer_finds_the_shipped_rows_duplicate_and_it_replays_on_a_fresh_database(
        system, shipped_storage, server_url):
    """Breadth first on the shipped row: a job written twice, whose path replays on another storage's emptied server."""
    shipped_duplicate_replays(system, shipped_storage, server_url)


DESTINATION_ON_THE_SERVER = {"procrastinate": True, "pgqueuer": True, "celery": False, "dramatiq": False,
                             "arq": False, "dbos": False}
"""Whether fence's destination lives on the target's server (its tables beside the system's) or in memory.
DBOS's storage names no ``DESTINATION_SCHEMA``: its ticket goes to fence's in-memory destination (the
system under test is the workflow table), so no destination image is ever loaded; the per-target file's
old claim of True was only ever in a --run-slow case."""
PROVED_NOT_BY_DEFAULT = {"procrastinate", "pgqueuer", "dramatiq", "arq", "dbos"}
"""14 s and more; celery's takes the same path in every run (guarded_row_proved)."""


@pytest.mark.parametrize("system", over_systems(PROVED_NOT_BY_DEFAULT))
def test_the_explorer_proves_the_guarded_row_without_failures_and_reaches_every_danger(system, guarded_storage):
    """Every interleaving within EXPLORER_BOUND, workers that never fail: nothing broken, every danger reached, copies
    faithful and taking turns on the server."""
    guarded_row_proved(f"{system}+guard", guarded_storage,
                       destination_on_the_server=expected(DESTINATION_ON_THE_SERVER, system), bound=EXPLORER_BOUND)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole walk on the server: minutes, more on a busy machine
@pytest.mark.parametrize("system", over_systems())
def test_with_failures_the_explorer_proves_the_guarded_row_and_reaches_every_danger(system, guarded_storage):
    """Every interleaving within TARGET_BOUND, workers that may fail (thousands of states, minutes): the task's failure
    goes to its guard, so nothing breaks; failure_after_effect among the dangers reached. (With the system's own
    failure handler as the guarded failure path, 4 and 6 broke on procrastinate, pgqueuer and celery: issue 25's
    finding, kept on the shipped rows.)"""
    guarded_row_proved(f"{system}+guard", guarded_storage,
                       destination_on_the_server=expected(DESTINATION_ON_THE_SERVER, system), bound=TARGET_BOUND)


def _pgqueuer_story(story: list[str]) -> None:
    assert [sentence.split(" ")[0] for sentence in story] == ["a", "the", "janitor", "job1", "job1#1"]
    assert story[-1] == "job1#1 fails before its effect and reports it: job1/r2 is unused"


def _retry_then_stale_failure(on: str):
    def check(story: list[str]) -> None:
        assert story[2:] == ["janitor 0 sees job1/r1 expired and frees its unit",
                             "job1 is retried: a worker reserves a unit as attempt job1#2 (lease until t=4)",
                             f"job1#1 fails before its effect and reports it: {on} is unused"]
    return check


def _arq_story(sentences: list[str]) -> None:
    assert sentences[0].startswith("a worker reserves a unit for job1 as attempt job1#1")
    released = next(i for i, s in enumerate(sentences) if "sees job1/r1 expired and frees its unit" in s)
    assert sentences[-1].startswith("job1#1 fails") and released < len(sentences) - 1, sentences


STALE_FAILURE = ("stale_attempt_cannot_change_newer", "job1#1's fail changed job1/r2, which belongs to job1#2")
SHORTEST_FAILURE_FINDING = {
    # system: (invariant, message, a check of the replayed story's sentences), where the shipped row's failure
    # handler is the shortest breach; procrastinate's and dbos's shipped failure paths are pinned by their files
    "pgqueuer": (*STALE_FAILURE, _pgqueuer_story),  # log_jobs(exception) deletes the row the retry runs
    "celery": (*STALE_FAILURE, _retry_then_stale_failure("job1/r2")),  # the ack on failure removes the retry's tag
    # Retries acts whatever the worker holds: a second retry enqueued (accepted: the broker changed)
    "dramatiq": (*STALE_FAILURE, _retry_then_stale_failure("job1/r1")),
    # a stale worker's failure finishes the job its lease no longer holds (finish_job keys on the id)
    "arq": ("capacity_conserved", "job1#1: the ledger accepted fail on job1/r1, which was unused (the table allows "
            "nothing): it left the table", _arq_story),
}
SHORTEST_FAILURE_NOT_BY_DEFAULT = {"dramatiq", "arq"}
"""Slow in their files before."""


@pytest.mark.parametrize("system", over_systems(SHORTEST_FAILURE_NOT_BY_DEFAULT, only=SHORTEST_FAILURE_FINDING))
def test_with_failures_the_shipped_failure_handlers_shortest_breach_is_found_and_replays(
        system, shipped_storage, server_url):
    """The explorer's shortest violation with workers that may fail ends in the stale worker's fail, and replays on a
    fresh database: the system's failure handler changed what another attempt holds."""
    invariant, message, check_story = SHORTEST_FAILURE_FINDING[system]
    check_story(shortest_failure_finding_replays(system, shipped_storage, server_url, invariant, message))


def test_every_shipped_row_is_in_this_suite():
    """Every row of TARGETS is a system of this suite (as shipped, naive) or its guarded row (abandon-fenced)."""
    assert SYSTEMS
    for row, target in TARGETS.items():
        assert target.system in SYSTEMS, row
        assert target.policy is (GUARDED if row == f"{target.system}+guard" else NAIVE), row
        assert row in (target.system, f"{target.system}+guard"), row


# -- the adapter itself ----------------------------------------------------------------------------------
ADAPTER_LINES = {"procrastinate": (416, None), "pgqueuer": (370, 229), "celery": (453, 122), "dramatiq": (154, 121),
                 "arq": (147, 64), "dbos": (167, 93)}
"""Caps on each adapter and its recovery recipe (``<system>_recovery``; procrastinate's is in its adapter),
documentation included (``wc -l``): a ratchet, so that they only shrink (issue 27 asks about 100 lines)."""


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_adapter_and_its_recipe_are_on_the_public_target_api_alone(system, adapter):
    """The adapter imports of fence only the public target API and its recipe, the recipe only the public API; neither
    grows past its cap."""
    import importlib

    adapter_cap, recipe_cap = ADAPTER_LINES[system]
    recipe = None if recipe_cap is None else importlib.import_module(f"fence.targets.{system}_recovery")
    allowed = PUBLIC_TARGET_API | ({recipe.__name__} if recipe else set())
    assert fence_imports(adapter) <= allowed, fence_imports(adapter) - allowed
    assert source_lines(adapter) <= adapter_cap
    if recipe is not None:
        assert fence_imports(recipe) <= PUBLIC_TARGET_API, fence_imports(recipe) - PUBLIC_TARGET_API
        assert source_lines(recipe) <= recipe_cap


NEW_ADAPTERS_CODE_LINES = {"dramatiq": 106, "arq": 97, "dbos": 112}
"""Issue 27's three adapters in lines of code (``code_lines``: no docstrings, comments or blank lines), capped as
measured when it was resolved, each within 15% of 100: a ratchet, as ``ADAPTER_LINES`` is for their whole length."""


@pytest.mark.parametrize("system", sorted(NEW_ADAPTERS_CODE_LINES))
def test_each_of_the_three_new_adapters_is_about_100_lines_of_code(system, adapter):
    """dramatiq, arq and DBOS each take about 100 lines of code through the public API (issue 27): within 15%, and
    never more than when that was first measured. Their recovery recipes are the guard a user deploys, counted apart
    (``ADAPTER_LINES``)."""
    assert code_lines(adapter) <= NEW_ADAPTERS_CODE_LINES[system] <= 115, code_lines(adapter)
