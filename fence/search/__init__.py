"""Search by sampling: the Hypothesis machines over the model, and what is done with what they find.

* ``machines``        ``RuleBasedStateMachine`` models of the world (``stateful/`` collects them for pytest)
* ``draws``           Hypothesis draws that depend on the seed and the strategies, not on source text
* ``minimise``        the one replay loop (``play``) and a found counterexample cut short on the same world
* ``lockstep``        two worlds driven by the same actions and compared after every step
* ``counterexample``  a counterexample's steps, Mermaid diagram and JSON file, read back and replayed

Imports from ``fence.model`` and ``fence.base`` only.
"""
