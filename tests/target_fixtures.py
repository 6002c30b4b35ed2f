"""The fixtures every target's tests ask for, made once, and the shipped systems they run over.

The common suite (tests/test_targets_rows.py) is parametrised over ``system``,
one case a shipped system of ``fence.targets.TARGETS`` (a row ``S`` and its
guarded row ``S+guard``, the rows ``fence targets`` runs), by ``over_systems``.
Its fixtures come from here: ``adapter`` (the adapter module; skipped where its
library is not installed, a failure in CI, which runs every target for real),
``server_url`` (the session's server for the system's rows), ``shipped`` and
``guarded`` (a storage on each row, closed after the test).

A target's own test module (tests/test_targets_SYSTEM.py) says
``adapter, shipped, guarded = system_fixtures("arq")`` at its top level, and
pytest finds three fixtures there: ``arq_module``, ``shipped`` and ``guarded``.
"""

from __future__ import annotations

import importlib
import os

import pytest

from fence.targets import TARGETS

SYSTEMS = tuple(row for row, target in TARGETS.items() if row == target.system and f"{row}+guard" in TARGETS)
"""Every shipped system with both rows (as shipped, and with fence.guard), in the order ``fence targets`` prints them."""

SERVER_MARK = {"postgres": pytest.mark.postgres, "redis": pytest.mark.redis}


def over_systems(not_by_default=frozenset(), only=None, marks=None) -> list:
    """``pytest.param`` a shipped system, id the system's name, marked with its server.

    ``only``: the systems the test applies to (default: every one, so a new
    row gets the test by being added to ``TARGETS``). ``not_by_default``: the
    systems whose case runs only with --run-slow (marked slow), each named
    with its reason where the test is. ``marks``: more marks of a system's case.
    """
    chosen = [system for system in SYSTEMS if only is None or system in only]
    unknown = (set(not_by_default) | set(marks or {})) - set(SYSTEMS)
    assert not unknown, f"not shipped systems: {sorted(unknown)}"
    return [pytest.param(system, id=system, marks=[SERVER_MARK[TARGETS[system].server]]
                         + ([pytest.mark.slow] if system in not_by_default else []) + (marks or {}).get(system, []))
            for system in chosen]


def import_adapter(system: str):
    """The adapter module of ``system``'s rows; skipped where its library is missing, failed under CI."""
    try:
        return importlib.import_module(TARGETS[system].storage.split(":")[0])
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the {system} target for real, and it cannot be imported: {error}", pytrace=False)
        pytest.skip(f"{system} is not installed ({error}): pip install -e '.[test]'")


def _open(row: str, request):
    import_adapter(TARGETS[row].system)
    opened = TARGETS[row].open(request.getfixturevalue(f"{TARGETS[row].server}_url"))
    request.addfinalizer(opened.close)
    return opened


# -- the common suite's fixtures: they read the test's ``system`` parameter --------------------------
@pytest.fixture
def adapter(system):
    """The adapter module of the system under test."""
    return import_adapter(system)


@pytest.fixture
def server_url(system, request):
    """The session's server (postgres_url, redis_url) for the system's rows."""
    return request.getfixturevalue(f"{TARGETS[system].server}_url")


@pytest.fixture
def shipped_storage(system, request):
    """A storage on the system's shipped row."""
    return _open(system, request)


@pytest.fixture
def guarded_storage(system, request):
    """A storage on the system's guarded row."""
    return _open(f"{system}+guard", request)


# -- a target's own file ----------------------------------------------------------------------------
def system_fixtures(system: str):
    """``({system}_module, shipped, guarded)`` for the rows ``system`` and ``system+guard`` of ``TARGETS``."""
    assert system in SYSTEMS, system

    @pytest.fixture(scope="module", name=f"{system}_module")
    def adapter_module():
        return import_adapter(system)

    def storage_on(row: str, name: str):
        @pytest.fixture(name=name)
        def storage(request):
            return _open(row, request)

        return storage

    return adapter_module, storage_on(system, "shipped"), storage_on(f"{system}+guard", "guarded")


# -- an adapter on the public target API (issue 27) ---------------------------------------------------
PUBLIC_TARGET_API = frozenset({"fence", "fence.guard", "fence.targets", "fence.targets.protocol", "fence.targets.images"})
"""What of fence an adapter and its recovery recipe may import: the public target API (and the recipe itself)."""


def fence_imports(module) -> set[str]:
    """The fence modules ``module``'s source imports, at any depth (``from X import`` and ``import X``)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return {name for name in found if name == "fence" or name.startswith("fence.")}


def source_lines(module) -> int:
    """``module``'s length as ``wc -l`` counts it, documentation included."""
    import inspect

    return inspect.getsource(module).count("\n")


def code_lines(module) -> int:
    """``module``'s lines that hold code: without docstrings, comments and blank lines.

    What a user writing an adapter of their own writes besides its explanation, which is how issue 27's
    "about 100 lines" is read (``source_lines`` counts both)."""
    import ast
    import inspect
    import io
    import tokenize

    source = inspect.getsource(module)
    docstrings = {line for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)
                  for line in range(node.lineno, node.end_lineno + 1)}
    layout = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    return len({line for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type not in layout
                for line in range(token.start[0], token.end[0] + 1)} - docstrings)
