"""Text for a terminal: untrusted strings made inert, rich output rendered, progress bars (rich itself honours NO_COLOR).

Every string that comes from a tree, a host, a file or an endpoint goes
through ``clean`` (plain text) or ``literal`` (a rich cell) before it is
printed: a control character (ESC, CSI, OSC, BEL, CR, LF, C1, bidi
overrides) is shown as its escape (``\\x1b``), so it can neither drive the
terminal nor start a fake line, and a rich cell never reads it as markup.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import io
import re
import shutil
import sys
from collections.abc import Callable, Iterator

# C0 (with TAB and LF), DEL, C1, and the bidi embeddings/overrides/isolates that reorder what is shown.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(value: object, keep: str = "") -> str:
    """``str(value)`` with every control character but those in ``keep`` shown as its escape:
    one line unless ``keep`` holds a line break (``"\n\t"`` for a diff on a terminal)."""
    return _CONTROL.sub(lambda match: match.group() if match.group() in keep else _escaped(match), str(value))


def literal(value: object, style: str = ""):
    """A rich Text of ``clean(value)``: printed as is, never read as markup or emoji codes."""
    from rich.text import Text

    return Text(clean(value), style=style)


def columns() -> int:
    """The terminal's width (``COLUMNS`` first), 160 when it cannot be told."""
    return shutil.get_terminal_size((160, 24)).columns


def terminal_text(*renderables) -> str:
    """The renderables printed one after another, as wide as the terminal."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=columns())
    for renderable in renderables:
        console.print(renderable)
    return buffer.getvalue()


_SHOWN: contextvars.ContextVar = contextvars.ContextVar("progress", default=None)


@contextlib.contextmanager
def progress(description: str, total: float | None = None, transfer: bool = False) -> Iterator[Callable[..., None]]:
    """``update(completed=..., total=..., description=...)`` of a rich progress
    bar on standard error when it is a terminal, else a no-op. A bar opened
    while another is shown joins it as one more line; ``transfer`` shows the
    size done of the total and the speed instead of a count."""
    if not sys.stderr.isatty():
        yield lambda **fields: None
        return
    shown = _SHOWN.get()
    if shown is not None:
        task = shown.add_task(description, total=total, transfer=transfer)
        try:
            yield functools.partial(shown.update, task)
        finally:
            shown.remove_task(task)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), _amount(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        token = _SHOWN.set(bar)
        try:
            task = bar.add_task(description, total=total, transfer=transfer)
            yield functools.partial(bar.update, task)
        finally:
            _SHOWN.reset(token)


def _amount():
    """A column with ``done/total`` for counts, ``12.3/250.3 MB 10.2 MB/s`` for transfers."""
    from rich.progress import DownloadColumn, MofNCompleteColumn, ProgressColumn, TransferSpeedColumn
    from rich.text import Text

    class Amount(ProgressColumn):
        def __init__(self) -> None:
            super().__init__()
            self.count, self.size, self.speed = MofNCompleteColumn(), DownloadColumn(), TransferSpeedColumn()

        def render(self, task):
            if task.fields.get("transfer"):
                return Text.assemble(self.size.render(task), " ", self.speed.render(task))
            return self.count.render(task)

    return Amount()
