"""Choosing the database a process run uses, restarting it, and naming it in evidence headers.

SQLite is a file in a temporary directory unless a URL is given; PostgreSQL is
the given URL, ``$FENCE_POSTGRES_URL``, or a private cluster started (and
stopped) here with the postgres script that ships inside the package. Only a
cluster that script started may be restarted (``fence bench fleet``'s restart).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import tempfile
from typing import Iterator

from fence.base.errors import BackendError, BadInput
from fence.model.policies import POLICIES
from fence.backends import POSTGRES_SCRIPT, open_backend, private_postgres

SCRIPT = POSTGRES_SCRIPT


@contextlib.contextmanager
def backend_url(kind: str, url: str | None = None) -> Iterator[tuple[str, bool]]:
    """A URL for ``kind`` (sqlite|postgres), and whether this run owns a restartable cluster.

    sqlite: ``url`` or a file in a temporary directory. postgres: ``url``,
    $FENCE_POSTGRES_URL, or a private cluster started (and stopped) here with
    scripts/postgres.sh. The URL is opened once, so a bad one fails here.
    """
    if kind not in ("sqlite", "postgres"):
        raise BadInput(f"unknown backend {kind!r}: use sqlite or postgres")
    if url is not None:
        if kind == "sqlite" and not url.startswith("sqlite://"):
            raise BadInput(f"--backend sqlite needs a sqlite:///PATH.db URL, got {url!r}")
        if kind == "postgres" and not url.startswith(("postgresql://", "postgres://")):
            raise BadInput(f"--backend postgres needs a postgresql:// URL, got {url!r}")
        _check(url)
        yield url, kind == "postgres" and _ours(url)
        return
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="fence-processes-") as directory:
            yield f"sqlite://{directory}/fence.db", False
        return
    env = os.environ.get("FENCE_POSTGRES_URL")
    if env:
        _check(env)
        yield env, _ours(env)
        return
    with private_postgres() as url:
        yield url, True


def _check(url: str) -> None:
    store_backend = open_backend(url, capacity=1, guards=POLICIES["naive"].guards, reset=True)
    store_backend.close()


def _ours(url: str) -> bool:
    """Is this a cluster scripts/postgres.sh started (so that it may restart it)?"""
    return subprocess.run(["bash", str(SCRIPT), "status", url], capture_output=True, timeout=60).returncode == 0


def restart_postgres(url: str) -> None:
    done = subprocess.run(["bash", str(SCRIPT), "restart", url], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BackendError(f"restarting PostgreSQL failed: {done.stderr.strip() or done.returncode}")


def describe_backend(url: str) -> str:
    """The database and its version, for evidence headers."""
    if url.startswith("sqlite://"):
        return f"SQLite {sqlite3.sqlite_version} (WAL), {url}"
    backend = open_backend(url, capacity=1, guards=POLICIES["naive"].guards, reset=True)
    try:
        version = backend.store.one("SHOW server_version")[0]
    finally:
        backend.close()
    return f"PostgreSQL {version}, {url}"
