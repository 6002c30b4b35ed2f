"""Plug-ins that break their protocols, one way each, for tests/test_bad_inputs.py.

Each is named on the command line as FILE.py:ATTR, as a user would, and must
get one line naming the plug-in, the method and what it must return, exit 2.
"""
