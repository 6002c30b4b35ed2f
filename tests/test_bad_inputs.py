"""Bad input to every command: one line on stderr, a non-zero exit, no traceback, the checkout unchanged (issue 14).

Each case runs ``fence.cli.main.main(argv)`` in this process (fast: no interpreter
to start) with the checkout as the current directory, so a stray write into it
would show in ``git status``. Only what needs a process of its own runs as
one: Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and a
closed pipe. Misbehaving plug-ins live in tests/plugins_bad/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fence.cli.main import main

REPO = Path(__file__).resolve().parent.parent
BAD = Path(__file__).resolve().parent / "plugins_bad"
PINNED = Path(__file__).resolve().parent / "pinned" / "naive__no_duplicate_writes.json"
DESK = Path(__file__).resolve().parent / "user_targets" / "forgetful_desk.py"
"""A user's target (tests/test_targets_user.py runs it); here only loaded, or named in a counterexample."""
LEVEL_LINE = re.compile(r"(\[explorer\] .+?: )?depth \d+: [\d,]+ distinct states, ")
"""The explorer's progress line: explore's own, or the one check and verdicts print for it."""


def _git_status() -> str | None:
    """``git status --porcelain`` of the checkout, or None where there is no git or no checkout."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.fixture(scope="module")
def status_before() -> str | None:
    return _git_status()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Paths for the cases: missing, empty, garbage and wrong-shape files, a file where a directory goes."""
    made = {
        "missing": tmp_path / "missing.json",
        "empty": tmp_path / "empty.json",
        "garbage": tmp_path / "garbage.json",
        "wrong_shape": tmp_path / "wrong_shape.json",
        "a_file": tmp_path / "a_file",
        "a_dir": tmp_path / "a_dir",
        "empty_py": tmp_path / "empty_plugin.py",
        "syntax_py": tmp_path / "syntax_plugin.py",
        "db_garbage": tmp_path / "garbage.db",
        "out": tmp_path / "out",
    }
    made["empty"].write_text("")
    made["garbage"].write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe not json")
    made["wrong_shape"].write_text("[1, 2, 3]\n")
    made["a_file"].write_text("keep me\n")
    made["a_dir"].mkdir()
    made["empty_py"].write_text("")
    made["syntax_py"].write_text("def oops(:\n")
    made["db_garbage"].write_bytes(b"this is not a database, it is a shopping list\n" * 40)
    pinned = json.loads(PINNED.read_text())
    for name, change in {
        "negative_capacity": lambda d: d["config"].update(capacity=-3),
        "text_capacity": lambda d: d["config"].update(capacity="three"),
        "unknown_policy": lambda d: d.update(policy="no-such-policy"),
        "unknown_invariant": lambda d: d.update(invariant="no_such_invariant"),
        "bad_step": lambda d: d["steps"][0].update(action="teleport"),
        "missing_plugin": lambda d: d.update(plugins={"destination": str(tmp_path / "gone.py") + ":Gone"}),
        "no_steps": lambda d: d.pop("steps"),
    }.items():
        data = json.loads(json.dumps(pinned))
        change(data)
        made[name] = tmp_path / f"{name}.json"
        made[name].write_text(json.dumps(data))
    # A counterexample found on a target names it: such a file replays on the real system only.
    desk = {"row": "forgetful-desk", "spec": f"{DESK}:FORGETFUL_DESK", "storage": f"{DESK}:ForgetfulDeskStorage",
            "server": "redis"}
    for name, target, policy in [
        ("target_found", desk, "abandon-fenced"),
        ("target_corrupt", {"row": 1}, "abandon-fenced"),
        ("target_unknown_row", {**desk, "row": "sidekiq", "spec": None}, "abandon-fenced"),
        ("target_unimportable", {**desk, "spec": "unimportable:a Target not found at any module's top level"},
         "abandon-fenced"),
        ("target_gone", {**desk, "spec": f"{tmp_path / 'gone.py'}:DESK"}, "abandon-fenced"),
        ("target_other_policy", desk, "naive"),
    ]:
        made[name] = tmp_path / f"{name}.json"
        made[name].write_text(json.dumps({**pinned, "policy": policy, "target": target}))
    return made


def _plugin(name: str) -> str:
    module, _, attribute = name.partition(":")
    return f"{BAD / module}.py:{attribute}"


# (argv with {placeholders} for the files above, a fragment the one line must hold)
CASES: dict[str, tuple[list[str], str]] = {
    # -- the command line itself
    "no command": ([], "required: command"),
    "unknown command": (["frobnicate"], "invalid choice: 'frobnicate'"),
    "abbreviated option": (["explore", "--max-s", "5"], "unrecognized arguments: --max-s"),
    # -- verdicts
    "targets explorer budget 0": (["targets", "--profile", "deep", "--explorer-budget", "0"], "--explorer-budget"),
    "verdicts capacity 0": (["verdicts", "--capacity", "0"], "must be at least 1"),
    "verdicts capacity text": (["verdicts", "--capacity", "two"], "must be a whole number, got 'two'"),
    "verdicts capacity huge": (["verdicts", "--capacity", "1000000"], "must be at most 100"),
    "verdicts jobs negative": (["verdicts", "--jobs", "-1"], "must be at least 1"),
    "verdicts jobs over capacity": (["verdicts", "--capacity", "1", "--jobs", "2"], "must not exceed capacity"),
    "verdicts lease negative": (["verdicts", "--lease", "-1"], "cannot be negative"),
    "verdicts lease 0": (["verdicts", "--lease", "0"], "lease must be at least 1 tick"),
    "verdicts workers 0": (["verdicts", "--workers", "0"], "must be at least 1"),
    "verdicts workers huge": (["verdicts", "--workers", "100000"], "must be at most 64"),
    "verdicts seed text": (["verdicts", "--seed", "lucky"], "invalid int value: 'lucky'"),
    "verdicts unknown profile": (["verdicts", "--profile", "turbo"], "invalid choice: 'turbo'"),
    "verdicts unknown policy": (["verdicts", "--policy", "bogus"], "unknown policy 'bogus'"),
    "verdicts expected missing": (["verdicts", "--expected", "{missing}"], "cannot read the expected verdicts"),
    "verdicts expected empty": (["verdicts", "--expected", "{empty}"], "{empty}"),
    "verdicts expected garbage": (["verdicts", "--expected", "{garbage}"], "{garbage}"),
    "verdicts expected wrong shape": (["verdicts", "--expected", "{wrong_shape}"], "{wrong_shape}"),
    "verdicts expected a directory": (["verdicts", "--expected", "{a_dir}"], "cannot read the expected verdicts"),
    "verdicts out is a file": (["verdicts", "--out", "{a_file}"], "is a file, not a directory"),
    "verdicts out under a file": (["verdicts", "--out", "{a_file}/sub"], "cannot write there"),
    "verdicts out under /proc": (["verdicts", "--out", "/proc/fence-no/such"], "cannot write there"),
    "verdicts report is a directory": (["verdicts", "--report", "{a_dir}"], "is a directory"),
    "verdicts report under /proc": (["verdicts", "--report", "/proc/fence-no/report.txt"], "cannot write there"),
    "verdicts record and out": (["verdicts", "--record", "--out", "{out}"], "not allowed with argument"),
    "verdicts shortest on a backend": (["verdicts", "--shortest", "--backend", "sqlite:///{a_dir}/x.db"], "in memory only"),
    "verdicts backend scheme": (["verdicts", "--backend", "nope://x", "--policy", "naive"], "is not a backend URL"),
    "verdicts backend no directory": (["verdicts", "--backend", "sqlite:///no/such/dir/x.db"], "does not exist"),
    "verdicts backend unreachable": (["verdicts", "--backend", "postgresql://fence@127.0.0.1:1/fence"], "cannot reach PostgreSQL"),
    "verdicts unknown option": (["verdicts", "--fast"], "unrecognized arguments: --fast"),
    # -- check, and the plug-ins it loads
    "check no policy": (["check"], "required: policy"),
    "check unknown name": (["check", "no-such-policy"], "unknown policy 'no-such-policy'"),
    "check no such module": (["check", "no_such_module_xyz:P"], "importing no_such_module_xyz failed"),
    "check no such attribute": (["check", "fence.model.policies:NotThere"], "has no attribute 'NotThere'"),
    "check spec without attribute": (["check", "fence.model.policies:"], "write it as MODULE:ATTR"),
    "check missing file": (["check", "{missing}.py:P"], "no file"),
    "check empty file": (["check", "{empty_py}:P"], "has no attribute 'P'"),
    "check syntax error": (["check", "{syntax_py}:P"], "SyntaxError"),
    "check module raises on import": (["check", _plugin("explodes:Anything")], "importing this module fails"),
    "check not a policy": (["check", "json:JSONDecoder"], "is not a janitor policy"),
    "check no fields": (["check", _plugin("policies:NoFields")], "it lacks name, guards"),
    "check a function": (["check", _plugin("policies:make_policy")], "is not a janitor policy but a function"),
    "check forgot dataclass": (["check", _plugin("policies:ForgotDataclass")], "is not a @dataclass"),
    "check name not text": (["check", _plugin("policies:NameNotText")], "name must be a non-empty string"),
    "check needs arguments": (["check", _plugin("policies:NeedsArguments")], "must build with no arguments"),
    "check record": (["check", "naive", "--record"], "unrecognized arguments: --record"),
    "check out under /proc": (["check", "naive", "--out", "/proc/fence-no/out"], "cannot write there"),
    "check destination not callable": (["check", "naive", "--destination", _plugin("destinations:NOT_CALLABLE")],
                                       "must be a class or function"),
    "check destination returns None": (["check", "naive", "--destination", _plugin("destinations:forgets_to_return")],
                                       "returned None when called with the policy's Guards"),
    "check destination wrong arguments": (["check", "naive", "--destination", _plugin("destinations:needs_two_arguments")],
                                          "calling it with the policy's Guards failed"),
    "check destination incomplete": (["check", "naive", "--destination", _plugin("destinations:Incomplete")],
                                     "makes an object without register"),
    "check ledger returns None": (["check", "naive", "--ledger", _plugin("ledgers:forgets_to_return")],
                                  "returned None when called with the capacity"),
    # -- plug-ins that load and then break their protocol while the engines run
    "decide returns None": (["check", _plugin("policies:DecideReturnsNone")],
                            "decide() returned None; it must return a fence.Decision"),
    "decide raises": (["check", _plugin("policies:DecideRaises")],
                      "decide() raised RuntimeError: no idea; it must return a fence.Decision"),
    "decide returns a string": (["check", _plugin("policies:DecideReturnsString")], "decide() returned 'unused'"),
    "probe returns a dict": (["check", _plugin("policies:ProbeReturnsDict")], "probe() returned {{'key_exists'"),
    "probe raises": (["check", _plugin("policies:ProbeRaises")], "probe() raised AttributeError"),
    "after_release raises": (["check", _plugin("policies:AfterReleaseRaises")], "after_release() raised ValueError"),
    "commit returns a string": (["check", "naive", "--destination", _plugin("destinations:CommitReturnsString")],
                                "commit() returned 'ok' (a str); it must return a fence.CommitResult"),
    "commit raises": (["check", "naive", "--destination", _plugin("destinations:CommitRaises")],
                      "commit() raised ConnectionError"),
    "register returns text": (["check", "abandon-fenced", "--destination", _plugin("destinations:RegisterReturnsText")],
                              "register() returned 'in flight'"),
    "ledger reserve raises": (["check", "naive", "--ledger", _plugin("ledgers:ReserveRaises")],
                              "ledger (ReserveRaises in ledgers.py): reserve('job1', 'job1#1', 0, 2) raised KeyError: "
                              "'job1'; it must return a new fence.Reservation"),
    "explore decide returns None": (["explore", "--policy", _plugin("policies:DecideReturnsNone")],
                                    "decide() returned None"),
    "explore commit returns a string": (["explore", "--policy", "naive", "--destination",
                                         _plugin("destinations:CommitReturnsString")], "commit() returned 'ok'"),
}
# Plug-ins that break a protocol where the world receives a ledger's answer, or that cannot be
# copied: the same one line from every command that runs them (issue 24; explore used to print
# the traceback of fence's own IllegalMove). verdicts takes a policy only.
BROKEN_EVERYWHERE: dict[str, tuple[list[str], str]] = {
    "ledger expired() lists claimed leases": (
        ["abandon-fenced", "--ledger", _plugin("ledgers:ExpiredListsClaimed")],
        "ledger (ExpiredListsClaimed in ledgers.py): expired(2) listed job1/r1, which is "),
    "ledger refuses a scan its expired() listed": (
        ["abandon-fenced", "--ledger", _plugin("ledgers:ExpiredFromStaleCache")],
        "then the scan of it was refused"),
    "ledger get() raises KeyError": (
        ["naive", "--ledger", _plugin("ledgers:GetByJob")],
        "ledger (GetByJob in ledgers.py): get('job1/r1') raised KeyError: 'job1'; it must return the fence.Reservation"),
    "destination cannot be copied": (
        ["naive", "--destination", _plugin("destinations:CannotBeCopied")],
        "destination (CannotBeCopied in destinations.py) cannot be copied: copy.deepcopy raised TypeError"),
    "policy cannot be copied": (
        [_plugin("policies:CannotBeCopied")],
        "policy 'cannot-be-copied' (CannotBeCopied in policies.py) cannot be copied: copy.deepcopy raised TypeError"),
    "policy raises fence's own error": (
        [_plugin("policies:ProbeRaisesStaleAttempt")],
        "ProbeRaisesStaleAttempt.probe() (policies.py:"),
    # It once passed for the ledger refusing the settle ("already outcome_unknown: the
    # ledger refuses"), and the reservation left unsettled was reported as a violation.
    "policy's decide raises the ledger's refusal": (
        [_plugin("policies:DecideRaisesIllegalMove")],
        "decide() raised IllegalMove: this policy refuses to decide; it must return a fence.Decision"),
    # fence's destination raises WitnessRequired, so it once kept fence's traceback.
    "policy abandons without the witness guard": (
        [_plugin("policies:AbandonsWithoutWitness")],
        "AbandonsWithoutWitness.probe() (policies.py:"),
}
for _name, ([_policy, *_plugins], _needle) in BROKEN_EVERYWHERE.items():
    CASES[f"check {_name}"] = (["check", _policy, *_plugins], _needle)
    CASES[f"explore {_name}"] = (["explore", "--policy", _policy, *_plugins], _needle)
    if not _plugins:
        CASES[f"verdicts {_name}"] = (["verdicts", "--policy", _policy], _needle)
CASES |= {
    # -- explore
    "explore capacity 0": (["explore", "--capacity", "0"], "must be at least 1"),
    "explore share-levels unknown": (["explore", "--share-levels", "never"], "invalid choice: 'never'"),
    "explore horizon negative": (["explore", "--horizon", "-1"], "cannot be negative"),
    "explore max-states 0": (["explore", "--max-states", "0"], "must be at least 1"),
    "explore time-budget 0": (["explore", "--time-budget", "0"], "more than 0 seconds"),
    "explore time-budget inf": (["explore", "--time-budget", "inf"], "finite number of seconds"),
    "explore time-budget text": (["explore", "--time-budget", "soon"], "must be a number of seconds"),
    "explore attempts huge": (["explore", "--attempts", "101"], "must be at most 100"),
    "explore jobs over capacity": (["explore", "--capacity", "1", "--jobs", "2"], "must not exceed capacity"),
    "explore unknown policy": (["explore", "--policy", "bogus"], "unknown policy 'bogus'"),
    "bench engines unknown": (["bench", "explorer", "--engines", "one-process,gpu"], "one-process, partitioned, ray"),
    "bench engines elsewhere": (["bench", "detection", "--engines", "ray"], "--engines is for 'fence bench explorer'"),
    "explore ray not an address": (["explore", "--ray", "nonsense"], "is not an address"),
    # Port 1 of this machine: refused at once (ray.init itself would retry for minutes).
    "explore ray nobody answers": (["explore", "--ray", "127.0.0.1:1"], "no Ray cluster answers there"),
    "explore out is a file": (["explore", "--out", "{a_file}"], "is a file, not a directory"),
    "explore report is a directory": (["explore", "--report", "{a_dir}"], "is a directory"),
    "explore lease in seconds": (["explore", "--lease-seconds", "1"], "unrecognized arguments: --lease-seconds"),
    # -- replay
    "replay missing file": (["replay", "{missing}"], "no such file"),
    "replay empty file": (["replay", "{empty}"], "not readable JSON"),
    "replay garbage": (["replay", "{garbage}"], "not readable JSON"),
    "replay wrong shape": (["replay", "{wrong_shape}"], "not a fence counterexample"),
    "replay a directory": (["replay", "{a_dir}"], "not a fence counterexample"),
    "replay capacity -3": (["replay", "{negative_capacity}"], "capacity must be at least 1 unit, got -3"),
    "replay capacity text": (["replay", "{text_capacity}"], "corrupt fence counterexample"),
    "replay unknown policy": (["replay", "{unknown_policy}"], "corrupt fence counterexample"),
    "replay unknown invariant": (["replay", "{unknown_invariant}"], "corrupt fence counterexample"),
    "replay unknown step": (["replay", "{bad_step}"], "corrupt fence counterexample"),
    "replay no steps": (["replay", "{no_steps}"], "corrupt fence counterexample"),
    "replay missing plug-in": (["replay", "{missing_plugin}"], "no file"),
    "replay tick 0": (["replay", str(PINNED), "--tick", "0"], "positive number of seconds"),
    "replay tick too long": (["replay", str(PINNED), "--tick", "100"], "use at most"),
    "replay a target's on the model": (["replay", "{target_found}", "--tick", "0.01"], "replays on its real system only"),
    "replay the model's with a server": (["replay", str(PINNED), "--redis", "redis://127.0.0.1:1/0"],
                                         "are for a target's counterexample"),
    "replay target record corrupt": (["replay", "{target_corrupt}"], "\"target\" must hold row, spec, storage"),
    "replay target no such row": (["replay", "{target_unknown_row}"], "which is no built-in row"),
    "replay target unimportable": (["replay", "{target_unimportable}"], "cannot find again"),
    "replay target file gone": (["replay", "{target_gone}"], "no file"),
    "replay target now claims another policy": (["replay", "{target_other_policy}"], "it now claims 'abandon-fenced'"),
    # -- targets: a user's Target, loaded before any server starts
    "targets target without attribute": (["targets", "--target", "forgetful"], "write it as MODULE:ATTR or FILE.py:ATTR"),
    "targets target a built-in row": (["targets", "--target", "procrastinate"], "named with --row"),
    "targets target missing file": (["targets", "--target", "{missing}.py:DESK"], "no file"),
    "targets target no attribute": (["targets", "--target", f"{DESK}:NOPE"], "has no attribute 'NOPE'"),
    "targets target not a Target": (["targets", "--target", f"{DESK}:NOT_A_TARGET"], "not a fence.targets.Target"),
    "targets target storage spec": (["targets", "--target", _plugin("targets:STORAGE_WITHOUT_ATTRIBUTE")],
                                    "storage 'mypkg.queue': write it as MODULE:ATTR"),
    "targets target no server": (["targets", "--target", _plugin("targets:NO_SERVER")], "names no server"),
    "targets target unknown server": (["targets", "--target", _plugin("targets:UNKNOWN_SERVER")],
                                      "server 'mongodb' is not one fence starts"),
    "targets target zero tick": (["targets", "--target", _plugin("targets:ZERO_TICK")],
                                 "tick_seconds must be a positive number"),
    "targets two targets one row": (["targets", "--target", f"{DESK}:FORGETFUL_DESK", "--target",
                                     _plugin("targets:SAME_ROW_AS_THE_DESK")], "two targets are named 'forgetful-desk'"),
    "targets target out is a file": (["targets", "--target", f"{DESK}:FORGETFUL_DESK", "--out", "{a_file}"],
                                     "is a file, not a directory"),
    "targets storage not importable": (["targets", "--target", _plugin("targets:STORAGE_NOT_INSTALLED"), "--redis",
                                        "redis://127.0.0.1:1/0"], "importing no_such_queue_library_xyz failed"),
    "targets record and out": (["targets", "--record", "--out", "{out}"], "not allowed with argument"),
    "targets record and report": (["targets", "--record", "--report", "{out}/targets.txt"], "give one of them"),
    # -- db
    "db unknown action": (["db", "frobnicate", "memory:"], "invalid choice: 'frobnicate'"),
    "db no url": (["db", "check"], "required: url"),
    "db bad scheme": (["db", "check", "nope://x"], "is not a backend URL"),
    "db sqlite without file": (["db", "check", "sqlite://"], "names no database file"),
    "db check missing file": (["db", "check", "sqlite:///{missing}.db"], "does not exist"),
    "db check a directory": (["db", "check", "sqlite:///{a_dir}"], "is not a file"),
    "db check not a database": (["db", "check", "sqlite:///{db_garbage}"], "not a database"),
    "db unreachable postgres": (["db", "check", "postgresql://fence@127.0.0.1:1/fence"], "cannot reach PostgreSQL"),
    "db reset under /proc": (["db", "reset", "sqlite:///proc/fence-no/x.db"], "does not exist"),
    # -- bench
    "bench nothing": (["bench"], "required: what"),
    "bench unknown": (["bench", "everything"], "invalid choice: 'everything'"),
    "bench seeds 0": (["bench", "detection", "--seeds", "0"], "must be at least 1"),
    "bench unknown policy": (["bench", "detection", "--policy", "bogus"], "unknown policy 'bogus'"),
    "bench time-budget negative": (["bench", "explorer", "--time-budget", "-1"], "more than 0 seconds"),
    "bench repeat 0": (["bench", "explorer", "--repeat", "0"], "must be at least 1"),
    "bench repeat a typo": (["bench", "explorer", "--repeat", "1000"], "must be at most 100"),
    "bench bound without horizon": (["bench", "explorer", "--bound", "2x2x2"], "units x jobs x attempts : horizon"),
    "bench bound more jobs than units": (["bench", "explorer", "--bound", "1x2x1:2"], "must not exceed capacity"),
    "bench guard workers 0": (["bench", "guard", "--workers", "0"], "must be at least 1"),
    "bench guard jobs 0": (["bench", "guard", "--jobs", "0"], "must be at least 1"),
    "bench guard jobs a typo": (["bench", "guard", "--jobs", "many"], "must be a whole number"),
    "bench guard repeat 0": (["bench", "guard", "--repeat", "0"], "must be at least 1"),
    "bench guard unknown queue": (["bench", "guard", "--queue", "sidekiq"], "invalid choice: 'sidekiq'"),
    "bench guard with a policy": (["bench", "guard", "--policy", "naive"], "not for 'fence bench guard'"),
    "bench queue not guard": (["bench", "detection", "--queue", "celery"], "are for 'fence bench guard'"),
    "bench backend not fleet": (["bench", "detection", "--backend", "sqlite"], "are for 'fence bench fleet'"),
    "bench out is a file": (["bench", "detection", "--out", "{a_file}"], "is a file, not a directory"),
    "bench report under /proc": (["bench", "suite", "--report", "/proc/fence-no/suite.txt"], "cannot write there"),
    "bench record outside a checkout": (["bench", "detection", "--record"], "run it from the checkout's root"),
    "fleet restart sqlite": (["bench", "fleet", "--backend", "sqlite", "--restart-db"], "SQLite has no server"),
    "fleet lease in ticks": (["bench", "fleet", "--lease", "1"], "use --lease-seconds"),
    "fleet kill-every negative": (["bench", "fleet", "--kill-every", "-1"], "cannot be negative"),
    "fleet unknown backend": (["bench", "fleet", "--backend", "oracle"], "invalid choice: 'oracle'"),
    "fleet unknown policy": (["bench", "fleet", "--policy", "bogus"], "unknown policy 'bogus'"),
    "fleet bad url": (["bench", "fleet", "--url", "sqlite:///no/such/dir/f.db"], "does not exist"),
    # -- experiments
    "experiments trials 0": (["experiments", "--trials", "0"], "at least 1 trial"),
    "experiments trials text": (["experiments", "--trials", "many"], "whole number"),
    "experiments lease in ticks": (["experiments", "--lease", "1"], "use --lease-seconds"),
    "experiments lease nan": (["experiments", "--lease-seconds", "nan"], "positive number of seconds"),
    "experiments lease huge": (["experiments", "--lease-seconds", "1e9"], "use at most 60"),
    "experiments unknown experiment": (["experiments", "--only", "bogus"], "invalid choice: 'bogus'"),
    "experiments backend without processes": (["experiments", "--backend", "sqlite"], "need --processes"),
    "experiments contention on processes": (["experiments", "--processes", "--only", "contention"],
                                            "does not run on processes"),
    "experiments out is a file": (["experiments", "--out", "{a_file}"], "is a file, not a directory"),
    "experiments record outside a checkout": (["experiments", "--record"], "run it from the checkout's root"),
    # -- probe-sdk
    "probe-sdk unknown option": (["probe-sdk", "--deep"], "unrecognized arguments: --deep"),
}
OUTSIDE_A_CHECKOUT = {"bench record outside a checkout", "experiments record outside a checkout"}
ENGINES_RUN = {name for name, (argv, _) in CASES.items() if any(BAD.name in a for a in argv) and argv[0] != "targets"}
"""Cases whose plug-ins load: they pass --out (a run without it names its temporary directory
on stderr first) and --workers 1 where the command has it (no processes to start)."""


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_the_checkout_is_unchanged(name, files, tmp_path, monkeypatch, capsys,
                                                                      status_before):
    """Each bad input gets exactly one line on stderr naming the problem, exit 2, no traceback, nothing written."""
    argv, needle = CASES[name]
    argv = [a.format(**files) for a in argv]
    needle = needle.format(**files)
    if name in ENGINES_RUN:
        argv += ["--out", str(files["out"]), "--workers", "1"]
        if argv[0] in ("check", "verdicts"):
            argv += ["--profile", "quick"]
    monkeypatch.chdir(tmp_path if name in OUTSIDE_A_CHECKOUT else REPO)
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's usage errors
        status = stop.code
    out, err = capsys.readouterr()
    # A walk's progress lines ("depth N: ...", in check and verdicts "[explorer] POLICY: depth N: ...")
    # may come before a plug-in breaks its protocol deep in it; the problem itself is still one line.
    lines = [line for line in err.strip().splitlines() if not LEVEL_LINE.match(line)]
    assert status == 2, f"exit {status}, stderr: {err}"
    assert len(lines) == 1, f"not one line:\n{err}"
    assert lines[0].startswith("fence: ") and needle in lines[0], lines[0]
    assert "Traceback" not in err + out
    assert files["a_file"].read_text() == "keep me\n"
    assert not files["missing"].exists() and not Path(f"{files['missing']}.db").exists()
    if files["out"].exists():  # made by the up-front check of --out, and then left empty
        assert list(files["out"].iterdir()) == [], list(files["out"].iterdir())
    assert _git_status() == status_before


def test_ray_not_installed_is_one_line_naming_the_extra(monkeypatch, capsys):
    """``--ray`` where Ray is not installed: one line naming pip install 'fence[ray]', exit 2, no traceback."""
    monkeypatch.setitem(sys.modules, "ray", None)  # importlib finds no Ray then, installed or not
    monkeypatch.chdir(REPO)
    status = main(["explore", "--ray", "local"])
    out, err = capsys.readouterr()
    assert status == 2, err
    assert err.strip().splitlines() == [
        "fence: --ray needs Ray, which is not installed here; install it with: pip install 'fence[ray]'"
    ]
    assert "Traceback" not in err + out


@pytest.mark.parametrize("name, engine", [
    (name, engine) for name in BROKEN_EVERYWHERE for engine in ("hypothesis", "explorer")
    # Hypothesis never copies a destination: only the explorer has to.
    if not (engine == "hypothesis" and name == "destination cannot be copied")
])
def test_each_engine_alone_names_the_broken_plugin(name, engine):
    """Hypothesis and the explorer, each on its own, stop with the plug-in's one line, not fence's error."""
    from fence.base.errors import PluginBroken
    from fence.explore.walk import explore
    from fence.model.plugins import load_destination, load_ledger, load_policy
    from fence.model.protocol import broken_in
    from fence.checking.verdicts import profile_settings, survey_config
    from fence.model.world import ModelConfig

    [policy, *plugins], needle = BROKEN_EVERYWHERE[name]
    named = dict(zip(plugins[::2], plugins[1::2]))
    parts = {
        "destination_factory": load_destination(named["--destination"]) if "--destination" in named else None,
        "ledger_factory": load_ledger(named["--ledger"]) if "--ledger" in named else None,
    }
    if engine == "hypothesis":
        with pytest.raises(PluginBroken) as raised:
            survey_config(load_policy(policy), ModelConfig(), run_settings=profile_settings(60, 25), **parts)
        said = str(raised.value)
    else:
        with pytest.raises(Exception) as raised:
            explore(load_policy(policy), ModelConfig(horizon=3), **parts)
        said = str(broken_in(raised.value))  # as the command line and fence check turn it
    assert needle in said, said


def test_a_policy_name_cannot_write_outside_out(tmp_path):
    """A policy named '../../x' writes its counterexample files inside --out, under a sanitised name."""
    from dataclasses import replace

    from fence.search import counterexample

    from fence.search.counterexample import Counterexample

    policy, config, invariant, _, _ = counterexample.load(PINNED)
    world, _ = counterexample.replay(PINNED)
    example = Counterexample(policy.name, config, invariant, "a message", tuple(world.trace))
    out = tmp_path / "deep" / "out"
    written = counterexample.write(replace(example, policy="../../escaped"), out)
    assert written and all(path.parent == out for path in written), written
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == sorted(p.name for p in written)
    assert all(not p.name.startswith(".") and "/" not in p.name for p in written)


# -- in processes of their own: Ctrl-C and a closed pipe ------------------------------------
FENCE = [sys.executable, "-m", "fence"]


@pytest.mark.parametrize(
    "argv, first",
    [
        (["verdicts", "--profile", "quick"], "[1/"),
        (["explore", "--policy", "abandon-fenced", "--horizon", "8", "--workers", "2", "--share-levels", "always"],
         "depth 1:"),
        (["experiments", "--quick", "--trials", "1", "--no-pictures"], None),
    ],
    ids=["verdicts", "explore-2-workers", "experiments"],
)
def test_ctrl_c_is_one_line_exit_130_and_no_partial_file(argv, first, tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C, once the run is under way: one line, exit 130."""
    out = tmp_path / "out"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    # ``with``: the pipes are closed even when the run overstays (left open, they surface as
    # a ResourceWarning in whichever later test the garbage collector happens to run in).
    with subprocess.Popen(
        [*FENCE, *argv, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=REPO, env=environment, start_new_session=True,
    ) as process:
        try:
            if first is not None:
                line = process.stderr.readline()  # the run is under way: a progress line
                while line.startswith("[explorer] ") and LEVEL_LINE.match(line):  # verdicts: the explorer's first
                    line = process.stderr.readline()
                assert line.startswith(first), line
            else:
                line = process.stdout.readline()  # experiments: the first trial's line
                assert line.startswith("=="), line
            os.killpg(process.pid, signal.SIGINT)
            stdout, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert process.returncode == 130, stderr
    rest = [line for line in stderr.splitlines() if not line.startswith(("[", "depth "))]
    assert rest == ["fence: interrupted; no file was left half-written"], stderr
    assert "Traceback" not in stderr
    leftovers = [p for p in out.rglob("*") if p.name.endswith(".tmp")] if out.exists() else []
    assert leftovers == []
    assert list(out.glob("*.txt")) == [] if argv[0] != "experiments" else all(
        p.read_text().startswith("# command: ") for p in out.glob("*.txt")
    )
    if shutil.which("pgrep"):  # nothing of ours is left running in the group
        assert subprocess.run(["pgrep", "-g", str(process.pid)], capture_output=True).stdout == b""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["db", "check", "memory:"],
        ["replay", str(PINNED), "--tick", "0.001"],
        ["explore", "--policy", "naive", "--horizon", "1", "--json"],
    ],
    ids=["help", "db", "replay", "explore-json"],
)
def test_a_closed_pipe_exits_141_quietly(argv, tmp_path):
    """Output into a pipe whose reader is already gone: exit 141, nothing on stderr."""
    reader, writer = os.pipe()
    os.close(reader)  # gone before the first write, every time
    try:
        done = subprocess.run([*FENCE, *argv, *(["--out", str(tmp_path)] if argv[0] == "explore" else [])],
                              stdout=writer, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(writer)
    assert done.returncode == 141, done.stderr
    assert [line for line in done.stderr.splitlines() if not line.startswith("depth ")] == [], done.stderr


@pytest.mark.parametrize("argv", [["bogus"], ["naive", "extra"]], ids=["unknown-policy", "two-words"])
def test_the_agent_fleet_example_refuses_a_bad_policy_in_one_line(argv):
    """`python examples/agent_fleet.py bogus` names the policies it knows, exit 2, no traceback, no fleet run."""
    done = subprocess.run([sys.executable, str(REPO / "examples" / "agent_fleet.py"), *argv],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "abandon-fenced" in done.stderr, done.stderr
