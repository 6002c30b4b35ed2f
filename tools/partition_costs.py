"""Where the partitioned walk's time goes, by CPU seconds and counts: the measurement issue 28 asks for first.

Why: on a shared two-core machine a wall-clock speed-up measures the neighbours as much as the
walk (a partition busy 46 s of CPU took 196 s of wall time at a load average of 5). What two
partitions need to be 1.6x faster than one process is known by parts instead: the CPU both
spend against one process's (extra work), the rounds' CPU on the slower partition against the
mean (imbalance), and each round's wall time against each partition's busy time (waiting at the
level's barrier, transport included). This runs the partitioned walk on processes and prints
those, a line per level with ``--levels``, and with ``--one-process`` the one-process walk's CPU
and the speed-up the CPU figures allow (one process's CPU over the summed critical path).

    python tools/partition_costs.py [--bound 2x2x2:2] [--policy abandon-fenced] [--one-process] [--levels]
                                    [--in-turn] [--two-at-once]

Two more figures split extra CPU by its cause (``--one-process`` needed): ``--in-turn`` runs both
partitions in this process, one after the other, never two at once: their CPU over one process's is
the partitions' own extra work (counts, memory layout). ``--two-at-once`` runs two one-process walks
at once in two processes: one's CPU over one process's alone is what running two at once costs on
this machine (shared caches and memory bandwidth, the host's scheduling), with no partitioning at all.

The walks are the library's own (``explore_partitioned``'s coordinator and transport); only the
reports each round returns are read. Other processes on the machine still stretch CPU seconds
(caches, memory bandwidth), so compare runs paired, one after the other.
"""

from __future__ import annotations

import argparse
import time

from fence.cli.arguments import explorer_bound
from fence.explore.partitioned import coordinate
from fence.explore.results import Exploration
from fence.explore.transports import ProcessTransport, delivered
from fence.explore.walk import INVARIANTS, explore
from fence.model.policies import POLICIES


class RecordingTransport(ProcessTransport):
    """Processes as ``explore_partitioned`` starts them; each round's reports, wall time and bytes kept."""

    def __init__(self, count: int, setup: tuple) -> None:
        super().__init__(count, setup)
        self.rounds: list[tuple[float, list[dict], int]] = []

    def round(self, expand, known, seconds_left):
        started = time.perf_counter()
        reports = super().round(expand, known, seconds_left)
        sent = sum(len(batch) for batches in self.incoming for batch in batches)
        self.rounds.append((time.perf_counter() - started, reports, sent))
        return reports


def partitioned_costs(policy, config, partitions: int) -> tuple[Exploration, RecordingTransport, float]:
    """The partitioned walk with symmetry, as ``explore_partitioned`` runs it; and the coordinator's CPU."""
    cpu_started = time.process_time()
    result = Exploration(policy, config, None, True, processes=partitions)
    transport = RecordingTransport(partitions, (policy, config, True, INVARIANTS))
    try:
        coordinate(result, transport, INVARIANTS, max_depth=None, time_budget=None, progress=None,
                   started=time.perf_counter())
    finally:
        transport.close()
    return result, transport, time.process_time() - cpu_started


class InTurn:
    """The partitions in this process, each round's one after the other: a transport with no concurrency."""

    def __init__(self, count: int, setup: tuple) -> None:
        from fence.explore.partition import Partition

        self.partitions = [Partition(index, count, *setup) for index in range(count)]
        self.incoming: list[list[bytes]] = [[] for _ in range(count)]

    def round(self, expand, known, seconds_left):
        reports, self.incoming = delivered([partition.advance(batches, expand, known, seconds_left)
                                            for partition, batches in zip(self.partitions, self.incoming)])
        return reports

    def close(self) -> None:
        pass


def in_turn_cpu(policy, config, partitions: int) -> tuple[float, Exploration]:
    """CPU seconds of the partitioned walk with its partitions in this process, in turn (gc off, as in theirs)."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    cpu_started = time.process_time()
    result = Exploration(policy, config, None, True, processes=partitions)
    try:
        coordinate(result, InTurn(partitions, (policy, config, True, INVARIANTS)), INVARIANTS, max_depth=None,
                   time_budget=None, progress=None, started=time.perf_counter())
    finally:
        if enabled:
            gc.enable()
    return time.process_time() - cpu_started, result


def two_at_once_cpu(policy, config) -> list[float]:
    """CPU seconds of each of two one-process walks run at once in two forked processes."""
    import os

    readers = []
    for _ in range(2):
        reader, writer = os.pipe()
        if os.fork() == 0:  # the child walks, writes its CPU seconds and leaves at once
            os.close(reader)
            cpu_started = time.process_time()
            explore(policy, config, symmetry=True)
            os.write(writer, repr(time.process_time() - cpu_started).encode())
            os._exit(0)
        os.close(writer)
        readers.append(reader)
    seconds = []
    for reader in readers:
        with os.fdopen(reader) as answer:
            seconds.append(float(answer.read()))
    os.wait()
    os.wait()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bound", type=explorer_bound, default=explorer_bound("2x2x2:2"))
    parser.add_argument("--policy", choices=sorted(POLICIES), default="abandon-fenced")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--one-process", action="store_true", help="also walk in one process, for its CPU")
    parser.add_argument("--levels", action="store_true", help="a line per level")
    parser.add_argument("--in-turn", action="store_true", help="also the partitions in this process, in turn")
    parser.add_argument("--two-at-once", action="store_true", help="also two one-process walks at once")
    args = parser.parse_args()
    policy = POLICIES[args.policy]
    result, transport, coordinator_cpu = partitioned_costs(policy, args.bound, args.partitions)
    rounds = transport.rounds
    count = args.partitions
    cpu = [sum(reports[at]["cpu_seconds"] for _, reports, _ in rounds) for at in range(count)]
    busy = [sum(reports[at]["busy_seconds"] for _, reports, _ in rounds) for at in range(count)]
    waited = [sum(wall - reports[at]["busy_seconds"] for wall, reports, _ in rounds) for at in range(count)]
    critical = sum(max(report["cpu_seconds"] for report in reports) for _, reports, _ in rounds)
    if args.levels:
        print("level  states per partition  CPU s per partition  busy s per partition  round wall s  bytes sent")
        for level, (wall, reports, sent) in enumerate(rounds):
            print(f"{level:5d}  {[r['accepted'] for r in reports]}  {[round(r['cpu_seconds'], 2) for r in reports]}"
                  f"  {[round(r['busy_seconds'], 2) for r in reports]}  {wall:.2f}  {sent}")
    print(f"{args.policy} {args.bound.capacity}x{args.bound.jobs}x{args.bound.max_attempts} h{args.bound.horizon}: "
          f"{result.states} states, {result.transitions} transitions, {len(rounds)} rounds, {count} partitions")
    for at in range(count):
        last = rounds[-1][1][at]
        print(f"partition {at}: CPU {cpu[at]:.2f} s, busy {busy[at]:.2f} s, waited {waited[at]:.2f} s; "
              f"{last['rebuilt']} Worlds replayed, {last['replayed_steps']} steps replayed; "
              f"peak {last['peak_bytes'] / 2**20:.0f} MiB")
    summed = sum(cpu)
    print(f"summed CPU {summed:.2f} s; critical path (each round's slowest partition) {critical:.2f} s, "
          f"imbalance {critical - summed / count:.2f} s ({(critical * count / summed - 1) * 100:.1f}%); "
          f"coordinator CPU {coordinator_cpu:.2f} s; bytes sent {sum(sent for _, _, sent in rounds)}")
    if args.one_process:
        cpu_started = time.process_time()
        alone = explore(policy, args.bound, symmetry=True)
        one = time.process_time() - cpu_started
        assert (alone.states, alone.transitions) == (result.states, result.transitions)
        print(f"one process CPU {one:.2f} s; summed/one {summed / one:.3f}; "
              f"speed-up the CPU allows (one / critical path) {one / critical:.2f}x")
        if args.in_turn:
            seconds, in_turn = in_turn_cpu(policy, args.bound, count)
            assert (in_turn.states, in_turn.transitions) == (result.states, result.transitions)
            print(f"partitions in turn in one process CPU {seconds:.2f} s; in turn/one {seconds / one:.3f} "
                  "(the partitions' own extra work)")
        if args.two_at_once:
            both = two_at_once_cpu(policy, args.bound)
            print(f"two one-process walks at once CPU {both[0]:.2f} s and {both[1]:.2f} s; at once/one "
                  f"{sum(both) / 2 / one:.3f} (what running two at once costs here)")


if __name__ == "__main__":
    main()
