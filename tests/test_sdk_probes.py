"""The strands-agents behaviours fence relies on, probed against the installed SDK.

If a future SDK changes one of them, the test named after that assumption fails
first and its message shows what the SDK did instead.
"""

import subprocess
import sys

import pytest

pytest.importorskip("strands", reason="strands-agents is in the test extra: pip install -e '.[test]'")

from strands import Agent  # noqa: E402

from fence.agents import probes  # noqa: E402
from fence.agents.scripted import ScriptedModel, ScriptExhausted, Turn  # noqa: E402


# Any attempt to open a connection fails the test (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_network")


def check(finding):
    assert finding.held, f"SDK assumption broke: {finding.assumption}\nobserved: {finding.observed}"


def test_concurrent_calls_on_one_agent_throw():
    """A second concurrent invocation of one Agent raises ConcurrencyException with the SDK's message."""
    check(probes.probe_concurrent_calls_throw())


def test_inflight_token_runs_the_model_once():
    """Two callers with the same inflight idempotency_token share one model run, one result and one usage."""
    check(probes.probe_token_dedupes_inflight())


def test_limits_are_per_instance_not_per_fleet():
    """Two Agents each capped at one turn both run to limit_turns: no budget is shared between them."""
    check(probes.probe_limits_are_per_instance())


def test_token_is_not_durable_and_ignored_when_reentrant():
    """The same token after completion runs again, and UNSAFE_REENTRANT ignores the token."""
    check(probes.probe_token_is_not_durable())


def test_scripted_model_replays_text_tool_use_and_usage():
    """An Agent on a ScriptedModel runs the scripted tool call, then the text turn, reporting the scripted usage."""
    from strands import tool

    seen = []

    @tool
    def create_ticket(key: str) -> str:
        """Create the ticket for key."""
        seen.append(key)
        return f"ticket {key}"

    model = ScriptedModel(
        [
            Turn.call("create_ticket", {"key": "job-7"}, input_tokens=300, output_tokens=48),
            Turn.say("ticket job-7 written", input_tokens=400, output_tokens=200),
        ]
    )
    result = Agent(model=model, tools=[create_ticket], callback_handler=None)("write job-7")
    assert seen == ["job-7"]
    assert result.stop_reason == "end_turn" and str(result).strip() == "ticket job-7 written"
    assert result.metrics.accumulated_usage["totalTokens"] == 948
    assert model.calls == 2


def test_scripted_model_says_when_the_script_runs_out():
    """A model call past the last scripted turn raises ScriptExhausted naming the call number."""
    model = ScriptedModel([Turn.say("only one")])
    agent = Agent(model=model, callback_handler=None)
    agent("first")
    with pytest.raises(ScriptExhausted, match="model call 2: the script has only 1 turns"):
        agent("second")


def test_probe_sdk_command_prints_findings_and_exits_0():
    """`fence probe-sdk` prints a versioned header and every finding, and exits 0 when all hold."""
    result = subprocess.run(
        [sys.executable, "-m", "fence.cli.main", "probe-sdk"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    packages = next(line for line in lines if line.startswith("# packages:"))
    assert lines[0].startswith("# command: fence probe-sdk") and "strands-agents 1.62.0" in packages
    assert sum("[HOLDS ]" in line for line in lines) == len(probes.PROBES)
    assert lines[-1] == f"all {len(probes.PROBES)} assumptions fence relies on hold"


def test_probe_sdk_without_strands_is_one_line_and_exit_2():
    """Without strands installed, `fence probe-sdk` says how to install it on one line and exits 2."""
    hide_strands = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'strands' or name.startswith('strands.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import fence\n"
        "from fence.cli.main import main\n"
        "sys.exit(main(['probe-sdk']))\n"
    )
    result = subprocess.run([sys.executable, "-c", hide_strands], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install -e '.[agents]'" in lines[0]
