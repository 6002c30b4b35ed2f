"""How the partitioned walk's owners run and talk: worker processes on this machine over pipes, or Ray actors."""

from __future__ import annotations

import gc
import os

from fence.explore.partition import Partition


class ProcessTransport:
    """Partitions in forked processes on this machine; the coordinator hands each its batches, unread."""

    def __init__(self, count: int, setup: tuple) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        self.pipes, self.processes = [], []
        for index in range(count):
            here, there = context.Pipe()
            process = context.Process(target=_partition_process, args=(there, index, count, setup), daemon=True)
            process.start()
            there.close()
            self.pipes.append(here)
            self.processes.append(process)
        self.incoming: list[list[bytes]] = [[] for _ in range(count)]

    def round(self, expand: bool, known: frozenset, seconds_left: float | None) -> list[dict]:
        for pipe, batches in zip(self.pipes, self.incoming):
            pipe.send((batches, expand, known, seconds_left))
        reports, self.incoming = delivered([_received(pipe) for pipe in self.pipes])
        return reports

    def close(self) -> None:
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except OSError:  # the process is gone already
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()

    def kill(self) -> None:
        for process in self.processes:
            process.kill()


def delivered(replies: list[tuple[dict, list]]) -> tuple[list[dict], list[list]]:
    """The partitions' reports, and each partition's incoming batches for the next round: every partition's reply
    is its report and one batch (or None) per owner."""
    incoming: list[list] = [[] for _ in replies]
    for _report, outgoing in replies:
        for owner, batch in enumerate(outgoing):
            if batch is not None:
                incoming[owner].append(batch)
    return [report for report, _ in replies], incoming


def _received(pipe):
    reply = pipe.recv()
    if isinstance(reply, str):  # a partition's traceback
        raise RuntimeError(f"an explorer partition failed:\n{reply}")
    return reply


def _partition_process(pipe, index: int, count: int, setup: tuple) -> None:
    import signal
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the coordinator's to handle (it kills us)
    gc.disable()  # fence's own parts hold no cycles (see fence.explore.walk._LongLived); this process is the walk's
    try:
        partition = Partition(index, count, *setup)
        while True:
            order = pipe.recv()
            if order is None:
                return
            pipe.send(partition.advance(*order))
    except Exception:
        pipe.send(traceback.format_exc())


class RayTransport:
    """Partitions as Ray actors: each round's batches go from actor to actor through Ray's object store.

    ``address`` is a running cluster's address (as ``ray.init`` takes it), or "local" to start a
    cluster of this machine's own for the walk (no dashboard) and stop it after.
    """

    def __init__(self, count: int, setup: tuple, address: str) -> None:
        import ray

        self.ray = ray
        self.started_here = False
        if not ray.is_initialized():
            if address == "local":
                # Ray starts its workers at niceness 15 (ray-project/ray#24928), to yield to its own daemons
                # and to everything else on the node; on a shared machine the walk's actors then wait behind
                # every other process, and the walk is the job here. A cluster's own setting is its own.
                os.environ.setdefault("RAY_worker_niceness", "0")
                ray.init(num_cpus=count, include_dashboard=False, log_to_driver=False, configure_logging=False,
                         _node_ip_address="127.0.0.1")  # this machine's loopback only
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            self.started_here = True
        actor = ray.remote(num_cpus=1)(RayPartition)
        self.actors = [actor.remote(index, count, setup) for index in range(count)]
        self.incoming: list[list] = [[] for _ in range(count)]

    def round(self, expand: bool, known: frozenset, seconds_left: float | None) -> list[dict]:
        count = len(self.actors)
        calls = [
            actor.advance.options(num_returns=count + 1).remote(expand, known, seconds_left, *batches)
            for actor, batches in zip(self.actors, self.incoming)
        ]
        # Each batch stays in the object store: its reference goes to its owner's next call, and Ray
        # hands the bytes from actor to actor (top-level arguments are fetched before the call runs).
        self.incoming = [[] for _ in range(count)]
        for sender, refs in enumerate(calls):
            for owner in range(count):
                if owner != sender:
                    self.incoming[owner].append(refs[1 + owner])
        return self.ray.get([refs[0] for refs in calls])

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        if self.started_here:
            self.ray.shutdown()

    kill = close


class RayPartition:
    """A ``Partition`` in a Ray actor: an empty batch (this actor's own slot, or nothing to send) is b""."""

    def __init__(self, index: int, count: int, setup: tuple) -> None:
        gc.disable()  # as in a process of ProcessTransport: the actor's process is the walk's
        self.partition = Partition(index, count, *setup)

    def advance(self, expand: bool, known: frozenset, seconds_left, *incoming: bytes):
        report, outgoing = self.partition.advance([batch for batch in incoming if batch], expand, known, seconds_left)
        return (report, *[batch or b"" for batch in outgoing])


def ray_problem(address: str) -> str | None:
    """Why ``--ray ADDRESS`` cannot work (Ray missing, an address that does not parse or answer), or None.

    Checked before the walk: ``ray.init`` on an address nobody listens at retries for minutes.
    """
    import importlib.util
    import socket

    if importlib.util.find_spec("ray") is None:
        return "--ray needs Ray, which is not installed here; install it with: pip install 'fence[ray]'"
    if address in ("local", "auto"):
        return None
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return (f"--ray {address!r} is not an address: give HOST:PORT of the cluster's head (ray start --head "
                "prints it), ray://HOST:PORT for Ray Client, 'auto' for the cluster this machine belongs to, "
                "or 'local' to start one here")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as error:
        return (f"--ray {address}: no Ray cluster answers there ({error.strerror or error}); start one with "
                "'ray start --head' and pass the address it prints, or use --ray local")
    return None
