"""Text for a terminal: untrusted strings made inert, rich output rendered, progress bars
(rich itself honours NO_COLOR).

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
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.markdown import Markdown
    from rich.progress import Progress, ProgressColumn, Task
    from rich.table import Table
    from rich.text import Text

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


def literal(value: object, style: str = "") -> Text:
    """A rich Text of ``clean(value)``: printed as is, never read as markup or emoji codes."""
    from rich.text import Text

    return Text(clean(value), style=style)


def columns() -> int:
    """The terminal's width (``COLUMNS`` first), 160 when it cannot be told."""
    return shutil.get_terminal_size((160, 24)).columns


_TRAILING = re.compile(r"(?:[ ]|\x1b\[[0-9;]*m)+$", re.MULTILINE)  # spaces (and style codes between them) ending a line


def terminal_text(*renderables: RenderableType) -> str:
    """The renderables printed one after another, as wide as the terminal, without the spaces rich pads a
    table's rows with (a row padded to the last column is one the terminal may take as wrapped)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=columns())
    for renderable in renderables:
        console.print(renderable)
    return _TRAILING.sub(lambda match: match.group().replace(" ", ""), buffer.getvalue())


_SHOWN: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("progress", default=None)


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
    from rich.progress import Progress

    with Progress(_line_column(), console=Console(stderr=True), transient=True, expand=True) as bar:
        token = _SHOWN.set(bar)
        try:
            task = bar.add_task(description, total=total, transfer=transfer)
            yield functools.partial(bar.update, task)
        finally:
            _SHOWN.reset(token)


def _line_column() -> ProgressColumn:
    """The one column of a progress bar: each task's whole line, laid out for the width (``_Line``)."""
    from rich.progress import ProgressColumn

    class LineColumn(ProgressColumn):
        def render(self, task: Task) -> _Line:
            return _Line(task)

    return LineColumn()


class _Line:
    """A task's line: its description, a bar in the room left, the amount (``3/19``, or ``1.2/2.5 MB`` and
    ``10.2 MB/s`` for a transfer) and the time taken. One line whatever the width: the time goes first, then the
    bar, then the speed; nothing is shown of an amount not known yet (no ``0/?``)."""

    def __init__(self, task: Task) -> None:
        self.task = task

    def _amounts(self) -> list[str]:
        """The amount done, then the speed: each left out while it is not known."""
        from rich.filesize import decimal

        task = self.task
        if not task.fields.get("transfer"):
            return [f"{task.completed:g}/{task.total:g}"] if task.total is not None else []
        if task.total is None:
            return [decimal(int(task.completed))] if task.completed else []
        done, total = decimal(int(task.completed)), decimal(int(task.total))
        size = f"{done.split()[0]}/{total}" if done.split()[1] == total.split()[1] else f"{done}/{total}"
        return [size, f"{decimal(int(task.speed))}/s"] if task.speed else [size]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Table]:
        from rich.progress import BarColumn, TimeElapsedColumn
        from rich.table import Table

        task = self.task
        amount, *speed = self._amounts() or [""]
        room = options.max_width - len(task.description) - (len(amount) + 1 if amount else 0)
        tail = [amount] if amount else []
        for optional in (*speed, TimeElapsedColumn().render(task).plain):
            if len(optional) + 1 <= room:
                tail.append(optional)
                room -= len(optional) + 1
        bar = min(40, room - 1) if task.total is not None else 0
        line = Table.grid(padding=(0, 1))
        line.add_column(no_wrap=True, overflow="ellipsis")
        cells: list[RenderableType] = [literal(task.description)]
        if bar >= 10:
            line.add_column(width=bar)
            cells.append(BarColumn(bar_width=bar).render(task))
        for cell in tail:
            line.add_column(no_wrap=True)
            cells.append(cell)
        line.add_row(*cells)
        yield line


def markdown(text: str) -> Markdown:
    """``text`` (Markdown) as rich renders it, except that a table whose words do not fit
    the width becomes one block per row (its first cell, then each other cell under its
    heading), so that no word is cut."""
    from rich.markdown import Markdown, TableElement
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    class Stacking(TableElement):
        def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
            (table,) = super().__rich_console__(console, options)
            assert isinstance(table, Table)  # the one table rich's TableElement renders
            rows = ([self.header.row] if self.header and self.header.row else []) + (
                self.body.rows if self.body else []
            )
            cells = "".join(cell.content.plain for row in rows for cell in row.cells)
            shown = "".join(segment.text for line in console.render_lines(table, options) for segment in line)
            if shown.count("…") == cells.count("…"):  # rich cut no word short
                yield table
                return
            headings = [cell.content for cell in self.header.row.cells] if self.header and self.header.row else []
            for row in self.body.rows if self.body else ():
                first, *rest = [cell.content for cell in row.cells]
                yield Text.assemble(first, style="bold")
                for heading, content in zip(headings[1:], rest):
                    yield Padding(Text.assemble((heading.plain + ": ", "italic"), content), (0, 0, 0, 2))
                yield Text()

    class Rendered(Markdown):
        elements: ClassVar = {**Markdown.elements, "table_open": Stacking}

    return Rendered(text)
