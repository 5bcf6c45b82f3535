"""Behaviour: verdicts decided by running the tree's own DFlash code.

Running it: ``definitions`` locates definitions in the tree and copies them,
``program`` builds one program from them (a name it cannot copy is a gap),
``plan`` chooses the calls, ``stubs`` builds the objects they run on, and
``compute`` runs them once in the sandbox (``isolation/sandbox.py``) for every
drafter config, ``interpret`` reading the outcomes into ``computed.Computed``;
``construct`` builds the drafter's layers from the tree's own classes.

Judging it: each rule declares an end-to-end question (``[behaviour]`` in its
TOML file); ``observe`` answers every question kind from that one run on the
reference drafter configs (plus the user's), ``decide`` turns a rule's
observations into a verdict by its chain and alternatives, and ``combine``
puts that verdict beside what the code's forms say: behaviour decides,
structure explains.
"""
