"""Lines laid out for a width: sentences wrap at spaces, a path or a name never breaks.

A line is a list of segments, ``(text, style)``; ``text`` is already clean
(dflash_doctor.terminal). A token is one unbreakable piece: a word of a
sentence, a ``file:line``, a host. A token wider than the room left is put
whole on a line of its own, never cut; one wider than any line that holds
spaces is split at them, so what the terminal itself wraps to column 0 never
holds a space (it cannot pass for a fix's first line). Width ``None`` (plain
text, piped) wraps nothing: each call gives one line. Continuation lines are
always indented, so only the text a reporter starts a line with (a header, a
fix id, a host) stands at column 0.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable

Segment = tuple[str, str]
Line = list[Segment]
Token = tuple[str, str]  # (text, style), laid out whole
OUTDENT = 4  # where a token too wide for its column starts its own line


def words(text: str, style: str = "") -> list[Token]:
    """A sentence as tokens, one per word; a run of spaces inside the text (column padding) is kept."""
    return [(word.removesuffix(" "), style) for word in re.findall(r"\S+ *", text)]


def width_of(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def wrap(tokens: Iterable[Token], width: int | None, first: Line, indent: int, gap: str = " ") -> list[Line]:
    """``tokens`` after the segments ``first``, continued at column ``indent``, ``gap`` between tokens on a line;
    a token too wide for the lines at ``indent`` starts a line of its own at ``OUTDENT``."""
    lines: list[Line] = []
    line, used, empty = list(first), sum(width_of(text) for text, _ in first) if width else 0, True
    pending = list(tokens)[::-1]
    while pending:
        text, style = pending.pop()
        size = width_of(text) if width else 0
        if width and size > width - OUTDENT and " " in text.strip(" "):  # too wide for any line: split at its spaces
            pending += words(text, style)[::-1]
            continue
        if width and used + (0 if empty else len(gap)) + size > width:
            lead = indent if indent + size <= width else min(indent, OUTDENT)
            if not empty or used > lead:
                if not empty or text_of(line):  # a line with text stays; blank room is dropped
                    lines.append(line)
                line, used, empty = [(" " * lead, "")], lead, True
        if not empty:
            line.append((gap, ""))
            used += len(gap)
        line.append((text, style))
        used, empty = used + size, False
    lines.append(line)
    return lines


def text_of(line: Line) -> str:
    return "".join(text for text, _ in line).rstrip()


def render(lines: list[Line], styled: bool) -> str:
    """The lines as text; ``styled`` adds rich's colours (rich honours NO_COLOR)."""
    if not styled:
        return "".join(text_of(line) + "\n" for line in lines)
    from rich.console import Console
    from rich.text import Text

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True)
    for line in lines:
        text = Text.assemble(*line)
        text.rstrip()
        console.print(text, soft_wrap=True)
    return buffer.getvalue()
