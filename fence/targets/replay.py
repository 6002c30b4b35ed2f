"""A target's servers, its counterexample files, and ``fence replay`` of them on the real system.

``servers`` gives each server a row needs (a URL given, one from the
environment, or one the project's scripts start and stop); a violated cell's
counterexample is written with the target it was found on (``record_of``), so
that ``replay_target`` finds the target again (``fence.targets.loading``) and
replays the run through the one replay loop (``fence.search.minimise.play``) on a
world made from the target's storage: never on fence's model.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from fence.search import counterexample
from fence.search.counterexample import TargetRecord
from fence.base.errors import BadInput
from fence.model.invariants import BY_NAME
from fence.search.minimise import NotEnabled, play
from fence.model.plugins import absolute
from fence.model.world import World
from fence.targets.loading import load_target_run


@contextlib.contextmanager
def servers(given: dict[str, str | None]):
    """``url(server)``: the URL of that server, given, from the environment, or started here (and stopped after).

    Only the servers asked for are started; each is named once on stderr.
    """
    from fence.targets import postgres, redis

    known = {
        "postgres": (postgres, "PostgreSQL", "a private cluster started by scripts/postgres.sh"),
        "redis": (redis, "Redis", "a private server started by scripts/redis.sh"),
    }
    with contextlib.ExitStack() as stack:
        urls: dict[str, tuple[str, str]] = {}

        def url(server: str) -> tuple[str, str]:
            """(url, what it is) for ``server``."""
            if server not in urls:
                start, name, private = known[server]
                found, ours = stack.enter_context(start(given.get(server)))
                urls[server] = found, f"{name} ({private})" if ours else f"{name} at {found}"
                print(f"{name}: {private if ours else found}", file=sys.stderr, flush=True)
            return urls[server]

        yield url


def record_of(target, spec: str | None):
    """What a counterexample found on ``target`` records of it (``spec``: where it is found again; None: built in)."""
    return TargetRecord(target.row, absolute(spec), absolute(target.storage), target.server)


def write_target_counterexamples(report, target, spec: str | None, out: Path) -> list[Path]:
    """Each violated cell's counterexample into ``out``, named by the row, recording the target.

    The row's files from an earlier run that this run did not write are removed
    (a cell that now holds has no counterexample); another row's are never touched.
    """
    record = record_of(target, spec)
    mine: list[Path] = []
    for cell in report.cells.values():
        if cell.counterexample is not None:
            cell.counterexample = replace(cell.counterexample, target=record)
            mine.extend(counterexample.write(cell.counterexample, out))
    counterexample.remove_stale(out, target.policy.name, mine, target.row)
    return mine


def versions_of(target, url: str) -> dict[str, str]:
    """The versions the storage reports (``versions()``), else the installed version of the target's system."""
    storage = target.open(url)
    try:
        if callable(getattr(storage, "versions", None)):
            return storage.versions()
    finally:
        storage.close()
    from importlib import metadata

    try:
        return {target.system: metadata.version(target.system)}
    except metadata.PackageNotFoundError:
        return {}


@dataclass(frozen=True)
class TargetReplay:
    """A target's counterexample replayed on its real system: where, the steps taken, what broke."""

    row: str
    invariant: str
    system: str
    """The system it replayed on, in words: the library and its version, the server and its URL."""
    steps: tuple
    """The world's steps (``fence.model.world.Step``), the drain's included."""
    violation: str | None
    broke_at: int | None
    """The chosen step after which the invariant broke (a teardown invariant: the last)."""
    not_enabled: str | None = None
    """Why the run stopped short: a step the real system did not enable at its turn."""


def replay_target(path: Path, postgres: str | None = None, redis: str | None = None) -> TargetReplay:
    """Replay a target's counterexample on the real system it was found on (never on fence's model).

    The target is found again from the file (its spec, or the built-in row), its
    server taken from ``postgres``/``redis`` or the environment, or started by the
    project's scripts; the run goes through the one replay loop
    (``fence.search.minimise.play``) on a world made from the target's storage.
    """
    run = load_target_run(Path(path))
    target = run.target
    given = {"postgres": postgres, "redis": redis}
    server = target.server
    if target.server_problem():
        named = [kind for kind, url in given.items() if url]
        if len(named) != 1:
            raise BadInput(f"{path}: target {target.row} {target.server_problem().split(':')[0]}: pass its URL with "
                           "--postgres URL or --redis URL")
        server = named[0]
    with servers(given) as url_of:
        url, where = url_of(server)
        versions = versions_of(target, url)
        system = ", ".join(f"{name} {value}" for name, value in versions.items()) or target.system
        storage = target.open(url)
        try:
            world = World(target.policy, run.config, storage.destination_factory, storage.ledger_factory)
            try:
                found = play(world, run.chosen, BY_NAME[run.invariant])
                stopped = None
            except NotEnabled as error:
                found, stopped = None, str(error)
            steps = tuple(world.trace)
        finally:
            storage.close()
    return TargetReplay(target.row, run.invariant, f"{system} on {where}", steps,
                        found.message if found else None, len(found.actions) if found else None, stopped)
