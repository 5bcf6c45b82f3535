"""The drafter's own config: load it (``config``), lint it (``lint``), and render the lint (``render``)."""
