"""What every file in evidence/ starts with, and how it is written.

One header (command, date, Python, package versions, machine) so that any
figure in evidence/ says which command made it and on what; one writer that
replaces a file only once the new one is complete, so a run that dies halfway
never leaves a half-written evidence file behind.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import os
import platform
import secrets
from pathlib import Path
from typing import Iterable, Iterator


def package_versions(names: Iterable[str]) -> str:
    parts = []
    for name in names:
        try:
            parts.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{name} not installed")
    return ", ".join(parts)


def header(command: str, packages: Iterable[str] = ("fence", "hypothesis")) -> list[str]:
    return [
        f"# command: {command}",
        f"# date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"# python: {platform.python_version()} ({platform.python_implementation()})",
        f"# packages: {package_versions(packages)}",
        f"# machine: {platform.system()} {platform.machine()}, {os.cpu_count()} cpu(s)",
    ]


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole, or leave it as it was (a crash, a Ctrl-C, a full disk)."""
    with atomic_target(path) as temporary:
        temporary.write_text(text)


@contextlib.contextmanager
def atomic_target(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; it becomes ``path`` only if the block returns.

    Same directory, so ``os.replace`` is atomic; a name of its own per process
    and call, so two writers never share one; removed if the block raises.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
