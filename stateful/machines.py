"""The Hypothesis machines, under the name this repository's tests import them by.

The code lives in ``fence.search.machines`` so that an installed fence carries it
(``fence verdicts`` and ``fence check`` run it) without a top-level package
named ``stateful`` in the wheel; ``stateful/`` stays the repository's home for
the machines' own tests (``stateful/test_machines.py``).
"""

from fence.search.machines import KIND, PICK, FleetMachine, InvariantViolation, Survey, machine_for  # noqa: F401
