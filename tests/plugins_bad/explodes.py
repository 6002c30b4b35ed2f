"""A plug-in module that fails while it is imported."""

raise RuntimeError("importing this module fails")
