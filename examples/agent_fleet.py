"""A fleet of strands Agent workers sharing a small quota, one crashing, the janitor reconciling.

    python examples/agent_fleet.py              # reconcile: the crash is settled, no duplicate
    python examples/agent_fleet.py naive        # naive: the crashed job's unit is freed and spent again

Runs offline: the Agents use fence's ScriptedModel, so no network and no credentials.
Events are printed as they happen, from the worker and janitor threads.
"""

import sys

from fence import POLICIES
from fence.agents.fleet import Fleet


def main(policy_name: str = "reconcile", *extra: str) -> int:
    if extra or policy_name not in POLICIES:
        given = " ".join((policy_name, *extra))
        print(f"agent_fleet.py: {given!r} is not one policy name; give one of: {', '.join(POLICIES)}", file=sys.stderr)
        return 2
    policy = POLICIES[policy_name]
    jobs = [f"job-{i}" for i in range(1, 7)]
    print(f"policy={policy.name}: {policy.summary}")
    print(f"4 agent workers, a quota of 4 units, {len(jobs)} jobs, lease 0.2s; job-3 crashes after its ticket lands")
    fleet = Fleet(policy, capacity=4, workers=4, lease=0.2, log=lambda event: print(event, flush=True))
    report = fleet.run(jobs, {"job-3": "crash"})
    print("SUMMARY", report.summary())
    print("tickets per job:", report.effects)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
