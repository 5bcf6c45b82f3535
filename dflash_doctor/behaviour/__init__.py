"""Behaviour: verdicts decided by running the tree's own DFlash code.

Each rule declares an end-to-end question (``[behaviour]`` in its TOML file);
``observe`` answers every question kind from one probe run on the reference
drafter configs (plus the user's), ``judge`` turns a rule's observations into
a verdict by its chain and alternatives, and ``combine`` puts that verdict
beside what the code's forms say: behaviour decides, structure explains.
"""
