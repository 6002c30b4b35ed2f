"""The ``fence`` command: one parser, and each subcommand's handler.

* ``main``                 the parser (each command's options come from its module below), ``main`` and ``command``
* ``arguments``            the option types: each turns a typo into one clear line, never a run
* ``check_command``        ``fence verdicts`` and ``fence check``; the exit status ``check`` and ``explore`` share
* ``explore_command``      ``fence explore``: every interleaving of one policy within bounds
* ``bench_command``        ``fence bench``: benchmarks that write their figures into evidence/
* ``db_command``           ``fence db``: check or empty a backend's fence tables
* ``experiments_command``  ``fence experiments`` and ``fence replay`` (the real-clock commands)
* ``targets_command``      ``fence targets``: real job systems under the machines

The top floor: it may import from every package below. Exit codes are in
docs/reference/cli.md.
"""
