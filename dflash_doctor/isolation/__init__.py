"""Running a tree's code in an isolated child: ``sandbox.py`` starts the child and
speaks its protocol, ``session.py`` keeps one child for a check's requests. What
the child runs is ``standalone/`` (the harness inside the lockdown)."""
