"""fence: when is it safe to give capacity back, and to retry?

The public surface: the model's names below, ``fence.guard`` (what a task adds
around its side effect), ``fence.testing`` and its pytest plugin (fence in a
user's own tests), ``fence.targets`` (real job systems, and the API to write
one's own), and the ``fence`` command.

Inside, the packages are floors, lowest first; a module imports only from its
own floor and the floors below (``tests/test_layers.py``):

* ``base/``      errors, copy on write, evidence files, output directories, a process pool
* ``model/``     the ledger, destination, policies, janitor, worker, world, observer,
                 invariants, and the plug-in protocols: the one model every engine drives
* ``backends/``  the ledger and destination on SQLite and PostgreSQL; then ``guard``
* ``search/``    the Hypothesis machines, the minimiser and the one replay loop, lockstep,
                 counterexample files
* ``explore/``   the exhaustive explorer: proofs within bounds, shortest counterexamples
* ``checking/``  verdicts, and both engines on a policy and its plug-ins
* ``live/``      the model's parts on real threads and OS processes, judged as facts
* ``targets/``   real job systems driven as the model's ledger (public)
* ``agents/``    strands-agents workers under the ledger, a scripted model, SDK probes
* ``bench/``     benchmarks that write their figures into evidence/
* ``cli/``       the ``fence`` command
* ``testing``, ``pytest_plugin``: the public front for users' own tests

Each package's ``__init__`` lists its modules and what they hold.
"""

from fence.model.destination import AttemptState, CommitResult, Destination, Effect, Guards, TicketService
from fence.base.errors import (
    BackendError, BadInput, CapacityExhausted, FenceError, IllegalMove, PluginBroken, StaleAttempt, WitnessRequired,
)
from fence.model.janitor import Janitor
from fence.model.ledger import TRANSITIONS, Ledger, Move, Reservation, ReservationState
from fence.model.policies import (
    POLICIES,
    Abandon,
    Decision,
    Evidence,
    JanitorPolicy,
    Naive,
    Policy,
    Reconcile,
    Witness,
    fenced,
    with_shared_identity,
)

__all__ = [
    "Abandon", "AttemptState", "BackendError", "BadInput", "CapacityExhausted", "CommitResult", "Decision",
    "Destination", "Effect", "Evidence", "FenceError", "Guards", "IllegalMove", "Janitor",
    "JanitorPolicy", "Ledger", "Move", "Naive", "POLICIES", "PluginBroken", "Policy", "Reconcile", "Reservation",
    "ReservationState", "StaleAttempt", "TRANSITIONS", "TicketService", "Witness",
    "WitnessRequired", "fenced", "with_shared_identity",
]
