"""Patch a missing fix into an engine's tree in place, prove it, and undo it exactly.

- ``codemod``: a form's declared patch applied on libcst trees (no I/O).
- ``plan``: check verdicts -> new bytes per file, re-checked in memory.
- ``files``: the file operations, behind ``TreeFiles`` (``LocalFiles``;
  ``sftp_files.SftpFiles`` for ssh targets, over the check's connection).
  Which one a target uses is the target's to say (``ResolvedTarget.files``).
- ``beneath``: a directory opened beneath a held descriptor (openat2, or a walk).
- ``caps``: how much of each file of patch state is read.
- ``apply``: lock, hash and compile checks, backup, manifest, atomic writes.
- ``state``: the manifest beside the package, and the marking of check
  reports for fixes present because of a local patch.
"""

from __future__ import annotations
