"""Container images read without a daemon: registry, OCI layout, docker archive.

Data flows one way: a source gives verified manifests and blob streams
(``interface``), the layers are filtered as they stream (``layers``), and the
files the image's Python would import become a tree on disk (``extract``).
"""
