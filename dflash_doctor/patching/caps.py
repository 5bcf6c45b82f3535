"""How much patch and restore read of the state a tree controls (docs/security.md, "Caps").

Every read checks the size of the opened file (``fstat``, or SFTP's ``stat``
of the open handle) against its cap before reading a byte, then reads at
most the cap + 1, so a sparse giant, or a file that grows while it is read,
is refused with the cap named (exit 3) and nothing is written.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

from ..model import ToolError


@dataclasses.dataclass(frozen=True)
class Cap:
    """How much of a file patch or restore reads: its size is checked on the
    opened file before a byte is read, and at most ``size + 1`` bytes are read
    (a file that grew is refused too). ``whole=False`` reads only the first
    ``size`` bytes (a header) and never refuses."""

    size: int
    what: str  # "the patch manifest", shown in the refusal
    whole: bool = True

    @property
    def limit(self) -> int:
        """The most bytes a read asks for: one past a whole cap tells a file that grew."""
        return self.size + 1 if self.whole else self.size

    def check(self, relpath: str, location: str, size: int) -> None:
        if self.whole and size > self.size:
            raise ToolError(
                f"{relpath} in {location} is over the {_amount(self.size)} cap for {self.what} "
                f"({size} bytes); nothing was changed"
            )

    def names(self, relpath: str, location: str, names: Iterator[str]) -> list[str]:
        """At most ``size`` names of a directory listing, else a refusal."""
        found = list(itertools.islice(names, self.size + 1))
        if len(found) > self.size:
            raise ToolError(
                f"{relpath} in {location} is over the {self.size}-entry cap for {self.what}; nothing was changed"
            )
        return found


def _amount(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size}-byte"


# The largest file a
# fix patches is gpu_model_runner.py: 348,303 bytes in vLLM 0.26.0 (0.33.0:
# 318,987; scheduler.py 180,180; speculative.py 98,355), so 1 MiB leaves 3x for
# growth. A backup holds such a file's original bytes, so it has the same cap.
# A manifest records a few hundred bytes per patched file.
FILE_CAP = Cap(1 << 20, "a file patch or restore writes")
BACKUP_CAP = Cap(FILE_CAP.size, "a patch backup")
MANIFEST_CAP = Cap(64 << 10, "the patch manifest")
PYC_HEADER = Cap(16, "a .pyc header", whole=False)
# A directory patch or restore lists (``backups``, a ``__pycache__``): a real
# __pycache__ holds a few dozen entries per interpreter that ran the tree.
LIST_CAP = Cap(10_000, "a directory patch or restore lists")
