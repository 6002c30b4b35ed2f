"""``python -m fence``: the ``fence`` command, from whichever fence is imported."""

import sys

from fence.cli.main import command

if __name__ == "__main__":  # importing this module (conftest imports every module) runs nothing
    sys.exit(command())
