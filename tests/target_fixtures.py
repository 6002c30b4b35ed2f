"""The fixtures every target's test files ask for, made once per system.

A target's test module says ``adapter, shipped, guarded = system_fixtures("arq")``
at its top level, and pytest finds three fixtures there: ``arq_module`` (the
adapter module, imported once per test module; skipped where its library is
not installed, a failure in CI, which runs every target for real),
``shipped`` and ``guarded`` (a storage on the system's two rows, on the
session's server for that row, closed after the test).
"""

from __future__ import annotations

import importlib
import os

import pytest

from fence.targets import TARGETS


def system_fixtures(system: str):
    """``({system}_module, shipped, guarded)`` for the rows ``system`` and ``system+guard`` of ``TARGETS``."""
    shipped_row, guarded_row = TARGETS[system], TARGETS[f"{system}+guard"]
    module_name = shipped_row.storage.split(":")[0]

    @pytest.fixture(scope="module", name=f"{system}_module")
    def adapter():
        try:
            return importlib.import_module(module_name)
        except ImportError as error:
            if os.environ.get("CI"):
                pytest.fail(f"CI runs the {system} target for real, and it cannot be imported: {error}", pytrace=False)
            pytest.skip(f"{system} is not installed ({error}): pip install -e '.[test]'")

    def storage_on(row, name: str):
        @pytest.fixture(name=name)
        def storage(request):
            request.getfixturevalue(f"{system}_module")
            opened = row.open(request.getfixturevalue(f"{row.server}_url"))
            yield opened
            opened.close()

        return storage

    return adapter, storage_on(shipped_row, "shipped"), storage_on(guarded_row, "guarded")
