"""Where a command's files go, checked before the work starts.

One rule for every command that writes (``verdicts``, ``check``, ``explore``,
``bench``, ``experiments``):

* ``--out DIR`` writes into DIR (made if missing);
* ``--record`` writes the repository's evidence, into ``evidence/`` of the
  current directory (run it from the checkout's root), exactly where the
  committed evidence came from; ``check`` has no ``--record``: a user's plug-in
  is never the repository's evidence;
* neither: a fresh temporary directory, named on the first line of stderr, so
  that a run from a checkout never changes ``git status``.

``--out`` and ``--report FILE`` are checked (made, and written to once) before
any work, so a path that cannot be written is one line and exit 2 at once,
not after a long run. Names that come from a user (a plug-in policy's name)
become file names only through ``file_stem``, which cannot leave the directory.
"""

from __future__ import annotations

import hashlib
import re
import sys
import tempfile
from pathlib import Path

from fence.base.errors import BadInput

EVIDENCE = Path("evidence")


def add_options(parser, *, record: str | None, out_help: str, report: str | None = None) -> None:
    """``--out DIR`` and, where the command makes evidence, ``--record`` (and ``--report FILE``): one of them."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--out", metavar="DIR", help=f"{out_help} (default: a fresh temporary directory, named on stderr)")
    if record is not None:
        group.add_argument("--record", action="store_true", help=f"write the repository's evidence: {record}")
    if report is not None:
        group.add_argument("--report", metavar="FILE", help=report)


def precheck(args) -> None:
    """Check ``--out``, ``--record`` and ``--report`` now, for a command that makes its directory later."""
    if getattr(args, "record", False):
        in_evidence(EVIDENCE)
    if getattr(args, "out", None):
        writable_directory(Path(args.out), "--out")
    if getattr(args, "report", None):
        writable_file(Path(args.report), "--report")


def report_file(args, command: str, name: str) -> Path:
    """The one file a command writes: ``--report FILE``, or ``name`` in its directory (``--record``: evidence/)."""
    if args.report:
        return writable_file(Path(args.report), "--report")
    return directory(args, command, EVIDENCE) / name


def directory(args, command: str, recorded: Path | None = None) -> Path:
    """The directory this run writes into, made and checked now (see the module docstring)."""
    if getattr(args, "record", False) and recorded is not None:
        return writable_directory(in_evidence(recorded), "--record")
    if args.out:
        return writable_directory(Path(args.out), "--out")
    made = Path(tempfile.mkdtemp(prefix=f"fence-{command.replace(' ', '-')}-"))
    print(f"fence {command}: writing into {made}/ (a fresh temporary directory; --out DIR chooses one)",
          file=sys.stderr, flush=True)
    return made


def in_evidence(path: Path) -> Path:
    """``path`` (under ``evidence/``), once it is sure that this is a checkout's root; else BadInput."""
    if not EVIDENCE.is_dir():
        raise BadInput(
            f"--record writes into the repository's {EVIDENCE}/, and there is none in {Path.cwd()}; "
            "run it from the checkout's root, or pass --out DIR"
        )
    return path


def writable_directory(path: Path, option: str) -> Path:
    """``path``, made if missing and proved writable by writing a file there; else BadInput."""
    if path.exists() and not path.is_dir():
        raise BadInput(f"{option} {path}: is a file, not a directory; pass a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise BadInput(f"{option} {path}: cannot write there ({error.strerror or error}); pass a directory you can write") from None
    return path


def writable_file(path: Path, option: str) -> Path:
    """``path`` can be written (its directory made now); else BadInput. The file itself is not touched."""
    if path.is_dir():
        raise BadInput(f"{option} {path}: is a directory; pass a file name")
    if not path.name or path.name in (".", ".."):
        raise BadInput(f"{option} {path}: names no file; pass a file name")
    writable_directory(path.parent, option)
    return path


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(name: str) -> str:
    """A file name made from ``name`` that stays inside its directory.

    Anything but letters, digits, ``.``, ``_`` and ``-`` becomes ``_``, leading
    dots go, and it is cut to 80 characters; a name that had to change gets a
    short hash of the original, so two names never meet in one file.
    """
    safe = _UNSAFE.sub("_", name).lstrip(".")[:80]
    if safe == name:
        return name
    return f"{safe or 'policy'}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def command_line(default: str) -> str:
    """The command as typed, for an evidence header (``default`` when run some other way)."""
    import shlex

    if Path(sys.argv[0]).name in ("fence", "__main__.py") and len(sys.argv) > 1:
        return " ".join(["fence", *(shlex.quote(a) for a in sys.argv[1:])])
    return default
