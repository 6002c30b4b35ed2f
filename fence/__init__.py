"""fence: when is it safe to give capacity back, and to retry?

The public surface. The private modules each own one concern:

* ``_ledger``       reservations, their states and the one table of legal moves
* ``_destination``  the ticket service and its guards (fence, fingerprint, witness)
* ``_policies``     the janitor policies, behind one small protocol
* ``_janitor``      the janitor's scan / probe / settle steps
* ``_world``        the model world every engine drives (workers, network, clock)
* ``_invariants``   the named invariants and the dangerous interleavings
* ``_verdicts``     Hypothesis runs turned into a verdict matrix
* ``_minimise``     a found counterexample cut short on the same world
* ``_explore``      the exhaustive explorer over the same world: proofs within bounds,
                    shortest counterexamples
* ``_counterexample`` steps, Mermaid and JSON forms of a counterexample; replay
* ``_bench``        benchmarks that write their figures into evidence/
* ``_evidence``     the one header and the one atomic writer of evidence/ files
* ``_pictures``     timelines of the experiments (matplotlib, optional)
* ``_checking``     both engines on policies and plug-ins, as ``check``, ``verdicts`` and ``testing`` run them
* ``_cli``          the ``fence`` command (``_experiments_cli`` for experiments/replay)
* ``_lockstep``     two worlds driven by the same actions and compared after every step
* ``_observer``     the one observer of ground truth: facts recorded, findings per invariant
* ``_worker``       the worker's life as one table (phases, moves, the confirm rule)
* ``_draws``        Hypothesis draws that ignore source-code constants (reproducible verdicts)
* ``_output``       where a command's files go (--out, --record, a fresh temporary directory)
* ``_pool``         tasks on worker processes that a Ctrl-C stops at once and quietly
* ``_protocol``     a plug-in's answers checked where fence receives them (``PluginBroken``)
* ``live/``         live runs on the real clock, recorded as facts and judged by the same
                    invariants: threads, OS processes under SIGKILL, the article's
                    experiments on either, the fleet bench, the real-clock replay
* ``backends/``     the ledger and destination on SQLite and PostgreSQL (``open_backend``)
* ``targets/``      real job systems (procrastinate) driven as the model's ledger, and
                    judged like it (``fence targets``, ``_targets_cli``)
* ``guard``         public: what a task adds around its side effect (``fence.guard.Guard``)
* ``testing``       public: fence in a user's own tests (``check``; ``pytest_plugin``: ``fence_check``)
* ``agents/``       strands-agents workers under the ledger, a scripted Model, SDK probes
"""

from fence._destination import AttemptState, CommitResult, Destination, Effect, Guards, TicketService
from fence._errors import (
    BackendError, BadInput, CapacityExhausted, FenceError, IllegalMove, PluginBroken, StaleAttempt, WitnessRequired,
)
from fence._janitor import Janitor
from fence._ledger import TRANSITIONS, Ledger, Move, Reservation, ReservationState
from fence._policies import (
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
