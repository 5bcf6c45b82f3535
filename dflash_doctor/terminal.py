"""Rich output rendered to text for a terminal (rich itself honours NO_COLOR)."""

from __future__ import annotations

import io
import shutil


def terminal_text(*renderables) -> str:
    """The renderables printed one after another, as wide as the terminal."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=shutil.get_terminal_size((160, 24)).columns)
    for renderable in renderables:
        console.print(renderable)
    return buffer.getvalue()
