"""Patch a missing fix into a vLLM tree in place, prove it, and undo it exactly.

- ``codemod``: a form's declared patch applied on libcst trees (no I/O).
- ``plan``: check verdicts -> new bytes per file, re-checked in memory.
- ``files``: the file operations, behind ``TreeFiles`` (``LocalFiles``;
  ``sftp_files.SftpFiles`` for ssh targets, over the check's connection).
- ``apply``: lock, hash and compile checks, backup, manifest, atomic writes.
- ``state``: the manifest beside the package, and the marking of check
  reports for fixes present because of a local patch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import ToolError

if TYPE_CHECKING:
    from ..targets import ResolvedTarget
    from .files import TreeFiles


def files_for(resolved: ResolvedTarget, ssh_client=None) -> TreeFiles:
    """Where patch and restore write for this target; an ssh target's tree is
    written over ``ssh_client``, the open connection its probe ran on."""
    from ..source import DirectoryTree
    from .files import LocalFiles

    if isinstance(resolved.tree, DirectoryTree):
        return LocalFiles(resolved.tree.root)
    if resolved.info.kind == "ssh" and ssh_client is not None:
        from .sftp_files import SftpFiles

        python = dict(resolved.info.details)["python"]
        return SftpFiles(ssh_client, resolved.tree.root, python, resolved.info.location)
    raise ToolError(f"patch and restore do not support {resolved.info.kind} targets")
