"""An exploration in words and in JSON: its bounds, one progress line per level, the report, the file form."""

from __future__ import annotations


from fence.search.counterexample import to_json as counterexample_json
from fence.model.invariants import required_dangers
from fence.explore.visited import describe_collisions
from fence.explore.results import Exploration, Outcome


def describe_bounds(found: Exploration) -> str:
    config = found.config
    text = (
        f"{config.capacity} unit(s) x {config.jobs} job(s) x {config.max_attempts} attempt(s), "
        f"lease {config.lease}, horizon {config.horizon}, {config.janitors} janitor(s)"
    )
    if found.max_depth is not None:
        text += f", at most {found.max_depth} chosen steps"
    return text + (", jobs symmetric" if found.symmetry else "")


def level_line(found: Exploration) -> str:
    """One breadth-first level, as TLC prints it: depth, states, rate, what is queued."""
    return (
        f"depth {found.depth}: {found.states:,} distinct states, {found.states_per_second:,.0f} states/s, "
        f"{found.queued:,} queued ({found.seconds:.1f}s)"
    )


def report_text(found: Exploration) -> str:
    lines = [f"policy {found.policy.name}, bounds: {describe_bounds(found)}"]
    if found.exhausted:
        scope = "the state space under these bounds was exhausted"
    elif found.unfaithful:
        scope = f"stopped: the plug-ins cannot be explored faithfully: {found.unfaithful}"
    elif found.stopped_by:
        scope = f"the {found.stopped_by.replace('_', ' ')} ran out before the state space was exhausted"
    else:
        scope = f"every run of at most {found.max_depth} chosen steps was checked (deeper states remain)"
    lines.append(
        f"{found.states} distinct states, {found.transitions} transitions, depth {found.depth}, "
        f"{found.seconds:.1f}s, {found.states_per_second:.0f} states/s; {scope}"
    )
    lines.append(describe_collisions(found.states, found.fingerprint_bits))
    if found.whole_worlds_because:
        lines.append(found.whole_worlds_because)
    if found.faithfulness_checks:
        renamed = f", {found.renamings_checked} of them merges across a renaming of the jobs" if found.symmetry else ""
        lines.append(f"the plug-ins were replayed from scratch {found.faithfulness_checks} times and agreed{renamed}"
                     if not found.unfaithful else f"{found.faithfulness_checks} replays of the plug-ins{renamed}")
    if found.policy_calls_checked:
        lines.append(
            f"the user's policy keyed like fence's own: each of its {found.policy_calls_checked} calls was made "
            "twice, with its job's names swapped, and agreed"
        )
    if found.partitioned_on:
        lines.append(f"each state owned by one of {found.partitioned_on}, by its fingerprint")
    elif found.processes > 1:
        lines.append(f"each level shared between {found.processes} processes")
    elif found.one_process_because:
        lines.append(f"in one process: {found.one_process_because}")
    vacuous = " (but see NOT REACHED below)" if found.missing_dangers() else ""
    for name, item in found.results.items():
        text = f"  {item.invariant.label}: {item.outcome.value.upper()}"
        if item.outcome is Outcome.PROVED:
            text += vacuous
        if item.depth is not None:
            text += f" (shortest counterexample: {item.depth} chosen steps)"
        lines.append(text)
    danger_text = ", ".join(f"{d.name} x{found.reached[d.name]}" for d in required_dangers(found.policy, found.config))
    lines.append(f"dangers reached (transitions): {danger_text}")
    missing = found.missing_dangers()
    if missing:
        lines.append("NOT REACHED: " + ", ".join(missing) + " (a proof under these bounds says little)")
    if found.drains_unsettled:
        lines.append(f"{found.drains_unsettled} drain(s) found no fixed point")
    return "\n".join(lines)


def to_json(found: Exploration) -> dict:
    return {
        "policy": found.policy.name,
        "config": {
            "capacity": found.config.capacity, "jobs": found.config.jobs,
            "max_attempts": found.config.max_attempts, "lease": found.config.lease,
            "horizon": found.config.horizon, "janitors": found.config.janitors,
        },
        "max_depth": found.max_depth,
        "symmetry": found.symmetry,
        "outcome": found.outcome().value,
        "verdicts": {name: item.outcome.value for name, item in found.results.items()},
        "shortest_steps": {name: item.depth for name, item in found.results.items() if item.depth is not None},
        "counterexamples": {
            name: counterexample_json(item.counterexample)
            for name, item in found.results.items() if item.counterexample
        },
        "states": found.states,
        "transitions": found.transitions,
        "depth": found.depth,
        "seconds": round(found.seconds, 3),
        "states_per_second": round(found.states_per_second),
        "fingerprint_bits": found.fingerprint_bits,
        "collision_probability": found.collision_probability,
        "visited_bytes": found.visited_bytes,
        "exhausted": found.exhausted,
        "stopped_by": found.stopped_by,
        "unfaithful": found.unfaithful,
        "faithfulness_checks": found.faithfulness_checks,
        "renamings_checked": found.renamings_checked,
        "processes": found.processes,
        "partitioned_on": found.partitioned_on,
        "one_process_because": found.one_process_because,
        "whole_worlds_because": found.whole_worlds_because,
        "policy_calls_checked": found.policy_calls_checked,
        "dangers_reached": {d.name: found.reached[d.name] for d in required_dangers(found.policy, found.config)},
    }
