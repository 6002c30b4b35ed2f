"""Seeded-bug plug-ins: fence's safe abandon-fenced (or another named base) with one bug each.

Each module is written as a user would write a plug-in, only through fence's
public protocols (``from fence import ...``), and says at its top which
invariant the bug breaks and with which base policy fence checks it. They are
checked by tests/test_seeded_bugs.py through the ``fence check`` command, in
the ``FILE.py:ATTR`` form a user would type.
"""
