"""A server's launch flags as the user gives them to ``config --launch-flags``: the
command line itself (``"--speculative-algorithm DFLASH ..."``), or ``@FILE``, a file
holding it (a shell script, a compose or systemd line; backslash-continued lines and
``#`` comments are read as a shell reads them). Split as a POSIX shell splits words;
``--flag value`` and ``--flag=value`` alike. What the flags mean is the lint's."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

from ..model import ToolError
from ..paths import read_file

MAX_LAUNCH_BYTES = 1024 * 1024  # a launch script; a larger file is not one
MAX_WORDS = 10_000


@dataclasses.dataclass(frozen=True)
class LaunchFlags:
    """Each ``--flag`` with the word after it (None: the flag ends the line or another flag follows)."""

    source: str  # "--launch-flags" or the file read
    flags: tuple[tuple[str, str | None], ...]

    def value(self, *names: str) -> str | None:
        """The last value given under any of ``names`` (argparse keeps the last), or None."""
        found = [value for flag, value in self.flags if flag in names]
        return found[-1] if found else None

    def given(self, *names: str) -> bool:
        return any(flag in names for flag, _ in self.flags)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "flags": [{"flag": flag, "value": value} for flag, value in self.flags]}


def read_launch_flags(text: str) -> LaunchFlags:
    """``--launch-flags TEXT`` or ``--launch-flags @FILE``; a ToolError for what cannot be read or split."""
    source = "--launch-flags"
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        raw = read_file(path, MAX_LAUNCH_BYTES, "launch flags file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(f"launch flags file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        source = str(path)
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=False)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = []
        for word in lexer:
            words.append(word)
            if len(words) > MAX_WORDS:
                raise ToolError(f"{source}: more than {MAX_WORDS} words: not a launch command")
    except ValueError as exc:  # an unclosed quote
        raise ToolError(f"{source}: cannot split the flags as a shell would ({exc})") from None
    return LaunchFlags(source, _pairs(words))


def _pairs(words: list[str]) -> tuple[tuple[str, str | None], ...]:
    pairs: list[tuple[str, str | None]] = []
    for index, word in enumerate(words):
        if not word.startswith("--") or word == "--":
            continue
        if "=" in word:
            flag, value = word.split("=", 1)
            pairs.append((flag, value))
            continue
        following = words[index + 1] if index + 1 < len(words) else None
        pairs.append((word, None if following is None or following.startswith("--") else following))
    return tuple(pairs)
