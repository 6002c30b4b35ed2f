"""Counterexamples as a reader and a machine want them: steps, a diagram, JSON.

The JSON form holds the policy name, the model configuration, the invariant and
the list of actions; ``replay`` feeds those actions through a fresh ``World`` and
checks that the same invariant breaks, so a saved counterexample is a
regression test and (in the real-clock harness) a script.

A counterexample found on a target (a real job system, ``fence.targets``)
also records the target (``"target"``: its row, the spec it is found again at,
its storage's spec and the server it needs). Such a file is the real system's
and replays only there (``fence.targets.loading.load_target_run``, ``fence replay``): never on fence's
model, where a bug of the system's own would not show. Its files are named by
the row (``ROW__POLICY__INVARIANT``), so two targets that claim one policy
write side by side.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from fence.base import evidence
from fence.base.errors import BadInput
from fence.base.output import file_stem
from fence.model.invariants import BY_NAME
from fence.model.policies import POLICIES, JanitorPolicy
from fence.model.world import Action, ModelConfig, Step, World


@dataclass(frozen=True)
class Counterexample:
    """A run that breaks one invariant: its steps (the drain's last), and how it was found and shortened."""

    policy: str
    config: ModelConfig
    invariant: str
    message: str
    steps: tuple[Step, ...]
    found_steps: int | None = None
    """Chosen steps of the run Hypothesis found, before minimising."""
    hypothesis_steps: int | None = None
    """Chosen steps after Hypothesis' own shrink, when that was asked for."""
    shortest_steps: int | None = None
    """Chosen steps of the explorer's shortest counterexample, when it searched for one."""
    plugins: object = None
    """The import specs of a user's policy, destination and ledger (fence.model.plugins.PlugInSpecs)."""
    target: TargetRecord | None = None
    """The target it was found on (None: fence's model, or a user's plug-ins)."""

    @property
    def rule_steps(self) -> int:
        """Steps the machine chose (the drain that ends a run is not counted)."""
        return sum(1 for step in self.steps if not step.drain)


@dataclass(frozen=True)
class TargetRecord:
    """What a target's counterexample says of the system it was found on."""

    row: str
    spec: str | None
    """``MODULE:ATTR`` or an absolute ``FILE.py:ATTR`` of the ``Target``; None: a built-in row, by its name."""
    storage: str
    """The target's storage spec (a ``FILE.py`` one made absolute)."""
    server: str | None
    """``postgres``, ``redis``, or None (the replay needs a URL given)."""

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        return f"target {self.row}"


FORMAT = "fence-counterexample/1"


def steps_text(example: Counterexample) -> str:
    inv = BY_NAME[example.invariant]
    who = (f"target {example.target.row} (claims the policy {example.policy})" if example.target
           else f"policy {example.policy}")
    lines = [
        f"{who} breaks invariant {inv.label}: {inv.statement}",
        f"model: {example.config.describe()}",
        f"{_provenance(example)}:",
    ]
    drain_started = False
    for number, step in enumerate(example.steps, 1):
        if step.drain and not drain_started:
            lines.append("then the network drains and the janitor runs to a fixed point:")
            drain_started = True
        lines.append(f"  {number:2}. t={step.now}: {step.sentence}")
    lines.append(f"=> {example.message}")
    return "\n".join(lines)


def _provenance(example: Counterexample) -> str:
    """Where the steps came from: how long the found run was, how short it became."""
    text = f"{example.rule_steps} chosen step(s)"
    if example.found_steps is not None:
        text += f" (Hypothesis found a run of {example.found_steps}"
        if example.hypothesis_steps is not None:
            text += f", its shrinker cut one to {example.hypothesis_steps}"
        text += "; fence minimised it on the same model"
        if example.shortest_steps is not None:
            text += f"; the explorer's shortest is {example.shortest_steps}"
        text += ")"
    elif example.shortest_steps is not None:
        text += " (the explorer's shortest: breadth first over every interleaving)"
    return text


def _participant(name: str) -> str:
    return name.replace(":", "_").replace("#", "_").replace("/", "_")


def mermaid(example: Counterexample) -> str:
    """A sequence diagram of workers, janitors, network, ledger and destination."""
    lines = ["sequenceDiagram"]
    seen: list[str] = []
    for step in example.steps:
        for who in (step.actor, step.target):
            if who not in seen:
                seen.append(who)
    for who in seen:
        lines.append(f"    participant {_participant(who)} as {who}")
    for step in example.steps:
        text = step.sentence.replace(";", ",").replace("#", "")
        prefix = "[drain] " if step.drain else ""
        if step.actor == step.target:
            lines.append(f"    Note over {_participant(step.actor)}: t={step.now} {prefix}{text}")
        else:
            lines.append(f"    {_participant(step.actor)}->>{_participant(step.target)}: t={step.now} {prefix}{text}")
    lines.append(f"    Note over {_participant(seen[0])}: VIOLATED {example.invariant}")
    return "\n".join(lines)


def to_json(example: Counterexample) -> dict:
    return {
        "format": FORMAT,
        "policy": example.policy,
        "config": asdict(example.config),
        "invariant": example.invariant,
        "message": example.message,
        "rule_steps": example.rule_steps,
        "found_steps": example.found_steps,
        "hypothesis_steps": example.hypothesis_steps,
        "shortest_steps": example.shortest_steps,
        **({"plugins": example.plugins.to_json()} if example.plugins is not None else {}),
        **({"target": example.target.to_json()} if example.target is not None else {}),
        "steps": [
            {**step.action.to_dict(), "drain": step.drain, "sentence": step.sentence}
            for step in example.steps
        ],
    }


SUFFIXES = (".txt", ".mmd", ".json")


def stem(policy: str, invariant: str, row: str | None = None) -> str:
    """The file name of a counterexample, without its suffix; a user's policy name cannot leave the directory.

    A target's is led by its row (``ROW__POLICY__INVARIANT``): rows are unique, policies are shared.
    """
    name = f"{file_stem(policy)}__{invariant}"
    return f"{file_stem(row)}__{name}" if row is not None else name


def stem_of(example: Counterexample) -> str:
    return stem(example.policy, example.invariant, example.target.row if example.target else None)


def write(example: Counterexample, directory: Path) -> list[Path]:
    """Write the three forms side by side, each whole or not at all; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    name = stem_of(example)
    paths = {
        directory / f"{name}.txt": steps_text(example) + "\n",
        directory / f"{name}.mmd": mermaid(example) + "\n",
        directory / f"{name}.json": json.dumps(to_json(example), indent=2) + "\n",
    }
    for path, text in paths.items():
        evidence.write_atomically(path, text)
    return list(paths)


def remove_stale(directory: Path, policy: str, written: list[Path], row: str | None = None) -> list[Path]:
    """Delete ``policy``'s counterexample files in ``directory`` that this run did not write.

    A run judges a policy's whole row, so a file left from an earlier run for a
    cell that now holds would be a stale claim beside the fresh ones. Only
    fence's own names for that policy (or that target's ``row``) are touched.
    """
    kept = set(written)
    removed = []
    for inv in BY_NAME:
        for suffix in SUFFIXES:
            path = directory / f"{stem(policy, inv, row)}{suffix}"
            if path not in kept and path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file; pass a .json written by 'fence verdicts'") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadInput(f"{path}: not a fence counterexample (not readable JSON: {error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadInput(f"{path}: not a fence counterexample (expected \"format\": \"{FORMAT}\")")
    return data


def _plugin_specs(path: Path, data: dict) -> dict:
    specs = data.get("plugins", {})
    if not isinstance(specs, dict) or not set(specs) <= {"policy", "destination", "ledger"} or not all(
        isinstance(v, str) for v in specs.values()
    ):
        raise BadInput(f"{path}: corrupt fence counterexample (\"plugins\" must map policy/destination/ledger to specs)")
    from fence.model.plugins import UNIMPORTABLE

    for what, spec in specs.items():
        if spec.startswith(UNIMPORTABLE):
            raise BadInput(
                f"{path}: found with a {what} passed to fence.testing as an object fence cannot import again "
                f"({spec.removeprefix(UNIMPORTABLE)}); replay it from the test that found it, or pass the {what} "
                "there as MODULE:ATTR"
            )
    return specs


def load_plugins(path: Path) -> tuple:
    """The destination and ledger factories a counterexample was found with (None: fence's own)."""
    from fence.model.plugins import load_destination, load_ledger

    specs = _plugin_specs(path, read_json(path))
    destination = load_destination(specs["destination"]) if "destination" in specs else None
    ledger = load_ledger(specs["ledger"]) if "ledger" in specs else None
    return destination, ledger


def load(path: Path, policies: dict[str, JanitorPolicy] = POLICIES) -> tuple[JanitorPolicy, ModelConfig, str, list[Action], list[bool]]:
    """Read a counterexample of fence's model; BadInput with one clear line if it is not one.

    A counterexample found with a user's plug-ins names their import specs
    (``"plugins"``); the policy is loaded from its spec (see ``load_plugins`` for
    the destination and ledger). A target's counterexample is refused: it
    replays on its real system only (``fence.targets.loading.load_target_run``).
    """
    data = read_json(path)
    if "target" in data:
        record = target_record(path, data)
        raise BadInput(
            f"{path}: found on {record.name} ({record.server or 'a server you name'}), not on fence's model: it "
            f"replays on the real system only, with fence replay {path}"
            + {"postgres": " [--postgres URL]", "redis": " [--redis URL]"}.get(record.server, "")
        )
    specs = _plugin_specs(path, data)
    try:
        if "policy" in specs:
            from fence.model.plugins import load_policy

            policy = load_policy(specs["policy"])
        else:
            policy = policies[data["policy"]]
        config, invariant, actions, drains = run_of(data)
    except (KeyError, TypeError, ValueError) as error:
        raise BadInput(f"{path}: corrupt fence counterexample ({type(error).__name__}: {error})") from None
    return policy, config, invariant, actions, drains


def run_of(data: dict) -> tuple[ModelConfig, str, list[Action], list[bool]]:
    """The configuration, invariant, actions and drain marks of a file's JSON (KeyError, TypeError, ValueError)."""
    config = ModelConfig(**data["config"])
    problem = config.problem()
    if problem:
        raise ValueError(problem)
    invariant = data["invariant"]
    if invariant not in BY_NAME:
        raise KeyError(invariant)
    actions = []
    drains = []
    for raw in data["steps"]:
        raw = dict(raw)
        drains.append(bool(raw.pop("drain", False)))
        raw.pop("sentence", None)
        actions.append(Action.from_dict(raw))
    return config, invariant, actions, drains


def is_target(path: Path) -> bool:
    """Was the counterexample at ``path`` found on a target (a real system)? BadInput if it is no counterexample."""
    return "target" in read_json(path)


def target_record(path: Path, data: dict) -> TargetRecord:
    raw = data.get("target")
    fields = ("row", "spec", "storage", "server")
    if (not isinstance(raw, dict) or set(raw) != set(fields) or not isinstance(raw["row"], str)
            or not isinstance(raw["storage"], str)
            or not all(raw[name] is None or isinstance(raw[name], str) for name in ("spec", "server"))):
        raise BadInput(f"{path}: corrupt fence counterexample (\"target\" must hold row, spec, storage and server)")
    return TargetRecord(**raw)


def replay(path: Path, policies: dict[str, JanitorPolicy] = POLICIES) -> tuple[World, str | None]:
    """Play a saved counterexample of fence's model through a fresh World; returns it and the violation."""
    from fence.search.minimise import NotEnabled, play

    policy, config, invariant, actions, drains = load(path, policies)
    destination, ledger = load_plugins(path)
    world = World(policy, config, destination, ledger)
    chosen = [action for action, drain in zip(actions, drains) if not drain]
    try:
        found = play(world, chosen, BY_NAME[invariant])
    except NotEnabled as error:
        raise BadInput(f"{path}: the steps do not replay under the current model ({error})") from None
    return world, found.message if found else None
