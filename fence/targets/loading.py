"""Finding a target again: from its ``MODULE:ATTR`` / ``FILE.py:ATTR`` spec, or from a counterexample file.

A target's counterexample records where its target is found again (its spec,
or the built-in row's name) and its storage's spec, so that ``fence replay``
runs the same row on the same real system (``fence.targets.replay``); these
are the loaders both use, and ``fence targets --target`` and
``fence.testing.check_target`` too.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from fence.search.counterexample import TargetRecord, read_json, run_of, target_record
from fence.base.errors import BadInput
from fence.model.plugins import UNIMPORTABLE, absolute, load_attribute
from fence.model.world import Action, ModelConfig


def storage_spec_problem(spec) -> str | None:
    """Why ``spec`` is not ``MODULE:ATTR`` or ``FILE.py:ATTR`` (one line), or None."""
    if not isinstance(spec, str):
        return f"must be MODULE:ATTR or FILE.py:ATTR, not a {type(spec).__name__}"
    module, _, attribute = spec.rpartition(":")
    if not module or not attribute.isidentifier():
        return f"{spec!r}: write it as MODULE:ATTR or FILE.py:ATTR, e.g. mypkg.queue:QueueStorage"
    return None


def load_storage(target):
    """The storage callable a target names; a library that is not installed is one line naming its extra."""
    module_name = target.storage.rpartition(":")[0]
    if target.extra and not module_name.endswith(".py"):
        try:
            importlib.import_module(module_name)
        except ImportError as error:
            raise BadInput(
                f"target {target.row}: {error}; install it with pip install 'fence[{target.extra}]'"
            ) from None
    storage = load_attribute(target.storage, f"target {target.row}: storage")
    if not callable(storage):
        raise BadInput(f"target {target.row}: storage {target.storage!r} is not callable; name a class or "
                       "function taking the server's URL")
    return storage


def load_target(spec: str):
    """The ``fence.targets.Target`` at ``spec`` (``MODULE:ATTR`` or ``FILE.py:ATTR``); BadInput in one line."""
    from fence.targets import TARGETS

    if ":" not in spec:
        known = f"; a built-in row is named with --row ({', '.join(TARGETS)})" if spec in TARGETS else ""
        raise BadInput(f"target {spec!r}: write it as MODULE:ATTR or FILE.py:ATTR naming a fence.targets.Target{known}")
    module = spec.rpartition(":")[0]
    if module.endswith(".py") and Path(module).is_file():
        # As Python runs a script: its directory is searched too (last, so installed packages win), so
        # that a storage named MODULE:ATTR beside the target's file imports (examples/redis_job_list.py).
        directory = str(Path(module).resolve().parent)
        if directory not in sys.path:
            sys.path.append(directory)
    return checked_target(load_attribute(spec, "target"), repr(spec))


def checked_target(candidate, label: str):
    """``candidate`` if it is a well-formed ``fence.targets.Target``; else BadInput naming ``label``."""
    from fence.targets import Target

    if not isinstance(candidate, Target):
        raise BadInput(f"target {label} is a {type(candidate).__name__}, not a fence.targets.Target; "
                       "name a Target(row=..., system=..., policy=..., storage=...) at a module's top level")
    problem = candidate.problem()
    if problem:
        raise BadInput(f"target {label}: {problem}")
    return candidate


def target_spec_of(target) -> str | None:
    """``MODULE:ATTR`` (or ``FILE.py:ATTR``) at which ``target`` itself is found again, else None.

    A counterexample records it, so that ``fence replay`` runs the same row; a
    Target built inside a function has none.
    """
    for name, module in list(sys.modules.items()):
        found = getattr(module, "__dict__", None)
        if not found:
            continue
        for attribute, value in list(found.items()):
            if value is target and not attribute.startswith("__"):
                if name.startswith("fence_plugin_"):
                    return f"{Path(module.__file__).resolve()}:{attribute}"
                if name == "__main__":
                    continue
                return f"{name}:{attribute}"
    return None


@dataclass(frozen=True)
class TargetRun:
    """A target's counterexample, read back: the target found again, and the run to replay on it."""

    target: object
    """The ``fence.targets.Target`` (loaded again from its spec, or the built-in row of that name)."""
    record: TargetRecord
    config: ModelConfig
    invariant: str
    actions: list[Action]
    drains: list[bool]

    @property
    def chosen(self) -> list[Action]:
        """The steps the run chose (the drain that ends it is the replay's own)."""
        return [action for action, drain in zip(self.actions, self.drains) if not drain]


def load_target_run(path: Path) -> TargetRun:
    """Read a target's counterexample and find its target again; BadInput in one line if either fails."""
    from fence.targets import TARGETS

    data = read_json(path)
    if "target" not in data:
        raise BadInput(f"{path}: found on fence's model, not on a target; fence replay {path} plays it on threads")
    record = target_record(path, data)
    if record.spec is not None and record.spec.startswith(UNIMPORTABLE):
        raise BadInput(f"{path}: found on target {record.row}, passed to fence.testing as an object fence cannot "
                       f"find again ({record.spec.removeprefix(UNIMPORTABLE)}); define the Target at a module's top "
                       "level, or replay it from the test that found it")
    if record.spec is not None:
        target = load_target(record.spec)
    elif record.row in TARGETS:
        target = TARGETS[record.row]
    else:
        raise BadInput(f"{path}: found on target {record.row!r}, which is no built-in row ({', '.join(TARGETS)}) "
                       "and the file names no spec to load it from")
    if target.row != record.row or absolute(target.storage) != record.storage:
        raise BadInput(f"{path}: found on target {record.row} with storage {record.storage}; "
                       f"{record.spec or 'the built-in row'} is now {target.row} with storage "
                       f"{absolute(target.storage)}: re-run the check that wrote the file")
    if data.get("policy") != target.policy.name:
        raise BadInput(f"{path}: found on {record.name} claiming the policy {data.get('policy')!r}; it now claims "
                       f"{target.policy.name!r}: re-run the check that wrote the file")
    try:
        config, invariant, actions, drains = run_of(data)
    except (KeyError, TypeError, ValueError) as error:
        raise BadInput(f"{path}: corrupt fence counterexample ({type(error).__name__}: {error})") from None
    return TargetRun(target, record, config, invariant, actions, drains)
