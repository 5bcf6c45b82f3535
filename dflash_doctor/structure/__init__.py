"""Structure: reading a tree's code by its form. ``engine.py`` evaluates rules on a
tree (applicability, anchors, forms), ``patterns.py`` matches code patterns on
libcst trees, ``liveness.py`` tells code that never runs, ``rebinding.py`` notices
a definition replaced after it is made, ``affects.py`` holds the drafter tests a
rule's ``[affects]`` names."""
