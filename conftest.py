"""Test-wide settings: Hypothesis profiles, the --run-slow switch, and PostgreSQL.

Profiles (choose with FENCE_PROFILE=dev|ci|thorough; CI sets ci):
  dev       quick local runs, random seeds, examples remembered in .hypothesis/
  ci        derandomised, so the gate finds the same counterexamples on every run
  thorough  ten times the examples, for a night run or before changing a policy

PostgreSQL: tests marked ``postgres`` use $FENCE_POSTGRES_URL if it is set,
otherwise a private cluster that scripts/postgres.sh starts for the session and
stops at its end. Under CI (env CI set) a cluster that cannot be started FAILS
those tests; elsewhere they are skipped, with the reason. The suite runs on
three pytest-xdist workers; on a shared cluster each worker has a database of its
own (``_database_of_this_worker``), and without one each starts its own cluster.

Redis: tests marked ``redis`` (the celery target) use $FENCE_REDIS_URL the same
way (a database number per worker), otherwise a private server that
scripts/redis.sh starts for the session; under CI, failed rather than skipped.
"""

import os
import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("dev", max_examples=100, stateful_step_count=30, **_COMMON)
settings.register_profile(
    "ci", max_examples=100, stateful_step_count=30, derandomize=True, database=None, print_blob=True, **_COMMON
)
settings.register_profile("thorough", max_examples=1000, stateful_step_count=50, **_COMMON)
settings.load_profile(os.environ.get("FENCE_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def _import_every_module_of_the_project() -> None:
    """Import all of fence and the machines before any test runs.

    Hypothesis mixes constants found in the source of the project's *loaded*
    modules into what it draws (hypothesis.internal.conjecture.providers,
    ``_get_local_constants``). fence imports many modules lazily, so without
    this a derandomised test drew differently depending on which tests had run
    before it in the process: alone or in the full suite, and under
    pytest-xdist on whichever tests the worker happened to get first. With
    every module loaded up front the pool is the same in every worker on every
    run, and so is the CI draw. A module whose optional dependency is missing
    is skipped (the tests that need it say so themselves).
    """
    import importlib
    import pkgutil

    import fence

    names = [info.name for info in pkgutil.walk_packages(fence.__path__, "fence.")]
    for name in ["stateful.machines", *names]:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


_import_every_module_of_the_project()

# tests/test_testing.py runs fence's own pytest plugin in a pytest of its own.
pytest_plugins = ["pytester"]


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        # The marker itself, not item.keywords: keywords also holds parameter
        # ids, so a test parametrised with an id containing "slow" was skipped.
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test: nothing at run time may reach the network."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


POSTGRES_SCRIPT = Path(__file__).resolve().parent / "scripts" / "postgres.sh"


def _no_postgres(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the PostgreSQL tests for real, and {reason}", pytrace=False)
    pytest.skip(reason)


def _database_of_this_worker(url: str) -> str:
    """``url`` with its database replaced by one of this pytest-xdist worker's own.

    The suite runs on three workers (``-n 3`` in pyproject's addopts) and the tests
    empty fence's tables freely, so two workers sharing one database would
    erase each other's rows. Each worker gets ``fence_gw0``, ``fence_gw1``...
    on the same cluster, created here if missing. Without xdist: ``url``.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    import psycopg

    name = f"fence_{worker}"
    with psycopg.connect(url, autocommit=True) as connection:
        if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL URL: $FENCE_POSTGRES_URL, or a private cluster for this session."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _no_postgres("psycopg is not installed (pip install -e '.[test]')")
    url = os.environ.get("FENCE_POSTGRES_URL")
    if url:
        try:
            own = _database_of_this_worker(url)
        except Exception as error:  # psycopg's errors: the cluster is not there
            _no_postgres(f"$FENCE_POSTGRES_URL ({url}) cannot be reached: {str(error).splitlines()[0]}")
        # Commands the tests run in subprocesses read the variable: give them ours too.
        os.environ["FENCE_POSTGRES_URL"] = own
        yield own
        os.environ["FENCE_POSTGRES_URL"] = url
        return
    try:
        started = subprocess.run(
            ["bash", str(POSTGRES_SCRIPT), "start"], capture_output=True, text=True, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        _no_postgres(f"scripts/postgres.sh start failed: {error}")
    if started.returncode != 0:
        last = (started.stderr.strip().splitlines() or ["no output"])[-1]
        _no_postgres(f"scripts/postgres.sh start failed: {last}")
    url = started.stdout.strip().splitlines()[-1]
    yield url
    subprocess.run(["bash", str(POSTGRES_SCRIPT), "stop", url], capture_output=True, timeout=120)


REDIS_SCRIPT = Path(__file__).resolve().parent / "scripts" / "redis.sh"


def _no_redis(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the Redis tests for real, and {reason}", pytrace=False)
    pytest.skip(reason)


def _redis_database_of_this_worker(url: str) -> str:
    """``url`` with its database number replaced by one of this pytest-xdist worker's own.

    The celery target empties its database (FLUSHDB) before every world, so
    two workers sharing one would erase each other's queues: gw0 gets
    database 1, gw1 database 2, and so on (Redis has 16). Without xdist: ``url``.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return url
    return url.rsplit("/", 1)[0] + f"/{1 + int(worker.removeprefix('gw'))}"


@pytest.fixture(scope="session")
def redis_url():
    """A Redis URL: $FENCE_REDIS_URL (a database of this worker's own), or a private server for this session."""
    try:
        import redis
    except ImportError:
        _no_redis("redis-py is not installed (pip install -e '.[test]')")
    url = os.environ.get("FENCE_REDIS_URL")
    if url:
        own = _redis_database_of_this_worker(url)
        try:
            with redis.Redis.from_url(own, socket_connect_timeout=5) as client:
                client.ping()
        except redis.RedisError as error:
            _no_redis(f"$FENCE_REDIS_URL ({url}) cannot be reached: {str(error).splitlines()[0]}")
        # Commands the tests run in subprocesses read the variable: give them ours too.
        os.environ["FENCE_REDIS_URL"] = own
        yield own
        os.environ["FENCE_REDIS_URL"] = url
        return
    try:
        started = subprocess.run(["bash", str(REDIS_SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as error:
        _no_redis(f"scripts/redis.sh start failed: {error}")
    if started.returncode != 0:
        last = (started.stderr.strip().splitlines() or ["no output"])[-1]
        _no_redis(f"scripts/redis.sh start failed: {last}")
    url = started.stdout.strip().splitlines()[-1]
    yield url
    subprocess.run(["bash", str(REDIS_SCRIPT), "stop", url], capture_output=True, timeout=120)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def open_implementation(request, tmp_path):
    """Open a fresh ledger-and-destination pair of one implementation: in memory, SQLite or PostgreSQL.

    One contract, every implementation (trio's generic lock tests): the unit
    tests of the Ledger and Destination protocols take this fixture, so each
    runs on all three. Each call empties the backend's tables; a test uses one
    pair at a time.
    """
    from fence.backends import open_backend

    url = {
        "memory": "memory:",
        "sqlite": f"sqlite://{tmp_path}/contract.db",
    }.get(request.param) or request.getfixturevalue("postgres_url")
    opened = []

    def open_pair(capacity: int = 1, guards=None):
        from fence.model.destination import NO_GUARDS

        for earlier in opened:
            earlier.close()
        opened.clear()
        backend = open_backend(url, capacity=capacity, guards=guards or NO_GUARDS, reset=True)
        opened.append(backend)
        return backend

    yield open_pair
    for backend in opened:
        backend.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend_url(request, tmp_path):
    """The URL of an empty-to-be backend: a SQLite file in tmp_path, or the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/fence.db"
    return request.getfixturevalue("postgres_url")
