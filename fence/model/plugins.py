"""Loading a user's plug-ins from ``MODULE:ATTR`` or ``FILE.py:ATTR``, and saying what they are.

The three plug-in protocols (see docs/reference/protocols.md):

* a janitor policy (``fence.JanitorPolicy``; subclass ``fence.Policy``),
* a destination factory: called with the policy's ``Guards``, returns a
  ``fence.Destination``,
* a ledger factory: called with the capacity, returns a ledger with
  ``fence.Ledger``'s members (``fence.model.protocol.LEDGER_METHODS`` and
  ``LEDGER_PROPERTIES``: the one list of them).

A module loaded from a file is registered in ``sys.modules`` under a name made
from its path, so that its classes pickle by reference: worker processes
(forked) find it there, and a counterexample names the spec it was found with so
that ``fence replay`` can load the same plug-ins again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from fence.model.destination import Guards
from fence.base.errors import BadInput
from fence.model.policies import POLICIES, JanitorPolicy, policy_problem

from fence.model.protocol import missing_members


@dataclass(frozen=True)
class PlugInSpecs:
    """The import specs a run was made with (None: fence's own), recorded with its counterexamples."""

    policy: str | None = None
    destination: str | None = None
    ledger: str | None = None

    def to_json(self) -> dict:
        return {name: value for name, value in vars(self).items() if value is not None}


def absolute(spec: str | None) -> str | None:
    """A ``FILE.py:ATTR`` spec with the file's absolute path, so it loads from anywhere."""
    if spec is None or ":" not in spec:
        return spec
    module, _, attribute = spec.rpartition(":")
    if module.endswith(".py"):
        return f"{Path(module).resolve()}:{attribute}"
    return spec


def _module_from_file(path: Path, what: str, spec: str):
    if not path.is_file():
        raise BadInput(f"{what} {spec!r}: no file {path}")
    resolved = path.resolve()
    name = f"fence_plugin_{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before running it: its dataclasses look themselves up there
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_attribute(spec: str, what: str):
    module_name, _, attribute = spec.rpartition(":")
    if not module_name or not attribute:
        raise BadInput(f"{what} {spec!r}: write it as MODULE:ATTR or FILE.py:ATTR, e.g. mypkg.policies:MyPolicy")
    try:
        if module_name.endswith(".py"):
            module = _module_from_file(Path(module_name), what, spec)
        else:
            if "" not in sys.path:
                sys.path.insert(0, "")  # let a module in the current directory import
            module = importlib.import_module(module_name)
    except BadInput:
        raise
    except Exception as error:  # any import failure is the user's to fix, not a crash
        raise BadInput(
            f"{what} {spec!r}: importing {module_name} failed ({type(error).__name__}: {error}); "
            "check the module name and that it is on PYTHONPATH or in the current directory"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise BadInput(f"{what} {spec!r}: module {module_name} has no attribute {attribute!r}") from None


def load_policy(spec: str) -> JanitorPolicy:
    if spec in POLICIES:
        return POLICIES[spec]
    if ":" not in spec:
        raise BadInput(f"unknown policy {spec!r}: use one of {', '.join(POLICIES)}, MODULE:ATTR or FILE.py:ATTR")
    return checked_policy(load_attribute(spec, "policy"), repr(spec))


def checked_policy(candidate, label: str) -> JanitorPolicy:
    """``candidate`` (a policy, or a class that builds one with no arguments) if it is a janitor policy.

    ``label`` names it in the one-line refusal (the spec it was loaded from, or its class).
    """
    if isinstance(candidate, type):
        forgot = _forgot_dataclass(candidate)
        if forgot:
            raise BadInput(f"policy {label}: {forgot}")
        try:
            candidate = candidate()
        except Exception as error:
            raise BadInput(f"policy {label}: {candidate.__name__}() failed ({error}); it must build with no arguments") from None
    elif callable(candidate) and not hasattr(candidate, "decide"):
        raise BadInput(
            f"policy {label} is not a janitor policy but a function: name the policy class (or an instance), "
            "e.g. FILE.py:MyPolicy"
        )
    problem = policy_problem(candidate)
    if problem:
        raise BadInput(f"policy {label} is not a janitor policy: {problem}")
    return candidate


def _forgot_dataclass(cls: type) -> str | None:
    """Why a policy class that subclasses a dataclass but is not one itself would not be what it says.

    ``fence.Policy`` is a dataclass; a subclass without ``@dataclass`` inherits
    its ``__init__``, which sets every field to the base's default, so the
    subclass's own ``name = "mine"`` is silently replaced by ``"custom"``.
    """
    if not dataclasses.is_dataclass(cls) or "__dataclass_fields__" in vars(cls):
        return None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for klass in cls.__mro__:
        if "__dataclass_fields__" in vars(klass):
            break
        shadowed = sorted(name for name in vars(klass) if name in fields)
        if shadowed:
            return (
                f"class {cls.__name__} sets {', '.join(shadowed)} but is not a @dataclass: the __init__ it "
                f"inherits sets {'it' if len(shadowed) == 1 else 'them'} back to {klass.__mro__[1].__name__}'s "
                f"default; decorate it with @dataclass(frozen=True)"
            )
    return None


def _factory(spec: str, what: str, argument: str, sample):
    return checked_factory(load_attribute(spec, what), repr(spec), what, argument, sample)


def checked_factory(factory, label: str, what: str, argument: str, sample):
    """``factory`` if calling it with ``sample`` makes an object with every member of ``what``'s protocol."""
    if not callable(factory):
        raise BadInput(f"{what} {label} must be a class or function taking {argument}")
    try:
        made = factory(sample)
    except Exception as error:
        raise BadInput(f"{what} {label}: calling it with {argument} failed ({type(error).__name__}: {error})") from None
    if made is None:
        raise BadInput(f"{what} {label} returned None when called with {argument}; it must return the {what} it made")
    missing = missing_members(made, what)
    if missing:
        raise BadInput(f"{what} {label} makes an object without {', '.join(missing)}; see the {what} protocol in docs/reference/protocols.md")
    return factory


def load_destination(spec: str):
    return _factory(spec, *_DESTINATION_PROTOCOL)


def load_ledger(spec: str):
    return _factory(spec, *_LEDGER_PROTOCOL)


def checked_destination(factory, label: str):
    """A destination factory given as an object (fence.testing): checked as ``load_destination`` checks a spec."""
    return checked_factory(factory, label, *_DESTINATION_PROTOCOL)


def checked_ledger(factory, label: str):
    """A ledger factory given as an object (fence.testing): checked as ``load_ledger`` checks a spec."""
    return checked_factory(factory, label, *_LEDGER_PROTOCOL)


# (what, what it is called with, a sample argument); the members it must have: fence.model.protocol.MEMBERS
_DESTINATION_PROTOCOL = ("destination", "the policy's Guards", Guards())
_LEDGER_PROTOCOL = ("ledger", "the capacity (an int)", 1)


UNIMPORTABLE = "unimportable:"
"""How a counterexample names a plug-in that was passed as an object fence cannot import again."""


def spec_of(thing) -> str | None:
    """``MODULE:ATTR`` that imports ``thing`` itself again (a class or function at module level), else None.

    fence.testing records it with a counterexample, so that ``fence replay``
    loads the same plug-in; an object built with arguments has no such spec.
    """
    module, name = getattr(thing, "__module__", None), getattr(thing, "__qualname__", None)
    if not module or not name or "<" in name or module == "__main__":
        return None
    found = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is not thing:
        return None
    if module.startswith("fence_plugin_"):  # loaded from a FILE.py spec: name the file again
        return f"{Path(sys.modules[module].__file__).resolve()}:{name}"
    return f"{module}:{name}"
