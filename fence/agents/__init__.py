"""fence.agents: strands-agents Agents as the workers of fence's fleet.

Everything here imports strands, so nothing in ``fence`` imports this package;
``import fence`` works without the ``agents`` extra. The layout:

* ``scripted``     ScriptedModel: a strands Model that replays scripted turns, offline
* ``probes``       the SDK assumptions fence relies on, each a function returning a Finding
* ``budget``       TokenBudget: a pure ledger of tokens, settled with actual usage
* ``fleet``        FleetShell (real threads, the real clock, one lock, a log); Fleet: agents under the ledger
* ``token_fleet``  agent workers sharing a TokenBudget: reserve, run under limits, settle actual usage
* ``cli``          ``fence probe-sdk``
"""
