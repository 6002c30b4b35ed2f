"""The model: the one world every engine drives, and the plug-in points users bring their own code to.

* ``ledger``       reservations, their states and the one table of legal moves (``Ledger``, ``Move``)
* ``destination``  the ticket service and its guards: the fence on the key, the witness of attempts
* ``policies``     the janitor policies behind one small protocol (``JanitorPolicy``, ``POLICIES``)
* ``janitor``      the janitor's scan, probe and settle steps
* ``worker``       the worker's life as one table (phases, moves, the confirm rule)
* ``protocol``     a plug-in's answers checked where fence receives them (``PluginBroken``)
* ``plugins``      a user's policy, destination or ledger loaded from ``MODULE:ATTR`` / ``FILE.py:ATTR``
* ``policy_twins`` a user's policy whose every call is made twice, for the explorer's keyed engine
* ``observer``     the one observer of ground truth: facts recorded, findings per invariant
* ``world``        workers, a lossy network, janitors, one ledger and one destination (``World``,
                   ``ModelConfig``, ``Action``)
* ``state_table``  every field of a World declared once (``WORLD_STATE``): its copy, fingerprint and the
                   explorer's key parts, memo details and generic key are written from it
* ``key_pieces``   what each field adds to the explorer's keys and memo details, and why the key may merge it
* ``invariants``   the seven named invariants and the dangerous interleavings a verdict must reach
* ``restore``      plug-ins whose state lives on a server, copied by dumping and restored by loading

The public names (``fence.Ledger``, ``fence.Policy``, ``fence.TicketService`` ...)
are re-exported by ``fence`` itself; this package imports only from ``fence.base``.
"""
