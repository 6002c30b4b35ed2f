"""The ``fence`` command: one parser, and each subcommand's handler.

* ``main``                 the parser and the handlers of ``verdicts``, ``check``, ``explore``, ``bench``, ``db``
* ``arguments``            the option types: each turns a typo into one clear line, never a run
* ``experiments_command``  ``fence experiments`` and ``fence replay`` (the real-clock commands)
* ``targets_command``      ``fence targets``: real job systems under the machines

The top floor: it may import from every package below. Exit codes are in
docs/reference/cli.md.
"""
