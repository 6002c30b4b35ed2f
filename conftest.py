"""Test-wide settings: Hypothesis profiles and the --run-slow switch.

Profiles (choose with FENCE_PROFILE=dev|ci|thorough; CI sets ci):
  dev       quick local runs, random seeds, examples remembered in .hypothesis/
  ci        derandomised, so the gate finds the same counterexamples on every run
  thorough  ten times the examples, for a night run or before changing a policy
"""

import os
import socket

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("dev", max_examples=100, stateful_step_count=30, **_COMMON)
settings.register_profile(
    "ci", max_examples=100, stateful_step_count=30, derandomize=True, database=None, print_blob=True, **_COMMON
)
settings.register_profile("thorough", max_examples=1000, stateful_step_count=50, **_COMMON)
settings.load_profile(os.environ.get("FENCE_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        # The marker itself, not item.keywords: keywords also holds parameter
        # ids, so a test parametrised with an id containing "slow" was skipped.
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test: nothing at run time may reach the network."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
