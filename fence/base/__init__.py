"""The ground floor: what every layer above may use, and which knows nothing of the model.

* ``errors``    the exceptions fence raises (``fence`` re-exports the public ones)
* ``copying``   copy on write for fence's own parts, and the one rule for deep-copying a user's
* ``evidence``  the header every evidence/ file starts with, and its atomic writer
* ``output``    where a command's files go (``--out``, ``--record``, a fresh temporary directory)
* ``pool``      tasks on worker processes that a Ctrl-C stops at once and quietly

Nothing here imports from another fence package.
"""
