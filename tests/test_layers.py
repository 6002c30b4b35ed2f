"""The house's floors: fence's packages by layer, no import up a floor, no circle, no private name across packages.

Read by parsing the source (every import, also those inside functions), not by
importing it: an arrow a lazy import hides is still an arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FENCE = Path(__file__).resolve().parent.parent / "fence"

LAYERS = (
    ("fence.base",),  # errors, copy-on-write, evidence files, output directories, a process pool
    ("fence.model", "fence"),  # the ledger, destination, policies, ..., and fence/__init__.py, which re-exports them
    ("fence.backends",),  # the model's ledger and destination on SQLite and PostgreSQL
    ("fence.guard",),  # public: what a task adds around its side effect
    ("fence.search",),  # Hypothesis machines, draws, the minimiser, lockstep, counterexample files
    ("fence.explore",),  # the exhaustive explorer
    ("fence.checking",),  # verdicts, both engines on a policy and plug-ins
    ("fence.live",),  # the model's parts on real threads and processes
    ("fence.targets",),  # public: real job systems as the model's ledger
    ("fence.agents",),  # strands-agents workers under the ledger
    ("fence.bench",),  # benchmarks that write evidence/
    ("fence.cli",),  # the fence command
    ("fence.__main__", "fence.testing", "fence.pytest_plugin"),  # the public front for users' tests
)
"""Lowest first. A module may import from its own floor and the floors below."""


def module_name(path: Path) -> str:
    parts = path.relative_to(FENCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(FENCE.rglob("*.py"))}


def floor_of(module: str) -> int:
    best = None
    for number, members in enumerate(LAYERS):
        for member in members:
            if module == member or module.startswith(member + ".") and member != "fence":
                if best is None or len(member) > len(best[1]):
                    best = (number, member)
    if best is None and module in LAYERS[-1]:
        return len(LAYERS) - 1
    assert best is not None, f"{module} is on no floor: add it to LAYERS"
    return best[0]


def package_of(module: str) -> str:
    """The package a module belongs to (its own name if it is a package's __init__)."""
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(module: str, type_checking: bool = True) -> list[tuple[int, str, str | None]]:
    """(line, the fence module imported from, the name imported or None) for every import, lazy ones too.

    ``type_checking=False`` leaves out the imports under ``if TYPE_CHECKING:``, which only a type checker runs.
    """
    found = []
    tree = ast.parse(MODULES[module].read_text())
    if not type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names if alias.name.split(".")[0] == "fence"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "fence":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in MODULES:
                    found.append((node.lineno, submodule, None))
                else:
                    found.append((node.lineno, node.module, alias.name))
    return found


def test_every_module_is_on_a_floor():
    assert all(floor_of(module) is not None for module in MODULES)


def test_no_module_imports_from_a_floor_above_its_own():
    upward = [
        f"{module}:{line} imports {imported} ({LAYERS[floor_of(imported)][0]} is above {LAYERS[floor_of(module)][0]})"
        for module in MODULES
        for line, imported, _ in imports_of(module)
        if imported in MODULES and floor_of(imported) > floor_of(module)
    ]
    assert upward == []


def test_there_is_no_import_circle():
    """Not at run time: a type annotation may name a class of the module that imports this one
    (``if TYPE_CHECKING:``), as an action's methods name the World they are given."""
    graph = {module: {imported for _, imported, _ in imports_of(module, type_checking=False)
                      if imported in MODULES and imported != module}
             for module in MODULES}
    # A package's __init__ that re-exports its own modules is not a circle with them.
    for module in graph:
        if MODULES[module].name == "__init__.py":
            graph[module] = {imported for imported in graph[module] if not imported.startswith(module + ".")}
    circles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                circles.append(" -> ".join(path[path.index(imported):] + [imported]))
            elif imported not in state:
                visit(imported, path + [imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_no_module_reads_another_package_s_private_names():
    """``from fence.x.y import _name`` (or ``import`` of a ``_module``) only inside the package that owns it."""
    readers = []
    for module in MODULES:
        own = package_of(module)
        for line, imported, name in imports_of(module):
            owner = package_of(imported) if imported in MODULES else imported
            if owner == own or owner.startswith(own + ".") and own != "fence":
                continue
            private_module = any(part.startswith("_") and part != "__main__" for part in imported.split(".")[1:])
            if private_module or (name or "").startswith("_"):
                readers.append(f"{module}:{line} reads {imported}{'.' + name if name else ''}")
    assert readers == []


STILL_TOO_LONG: dict[str, int] = {}
"""Modules still over 500 lines, with the length they may not grow past (none since issue 26's splits):
a ratchet for a module that cannot be split at once. Remove a line here when its module is split."""


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_runs_past_500_lines_without_saying_why(module):
    lines = MODULES[module].read_text().count("\n")
    if lines <= 500:
        assert module not in STILL_TOO_LONG, f"{module} is {lines} lines now: take it off STILL_TOO_LONG"
        return
    if module in STILL_TOO_LONG:
        assert lines <= STILL_TOO_LONG[module], f"{MODULES[module]} grew to {lines} lines; split it, do not grow it"
        return
    docstring = ast.get_docstring(ast.parse(MODULES[module].read_text())) or ""
    assert "Why one long module" in docstring, f"{MODULES[module]} has {lines} lines"
