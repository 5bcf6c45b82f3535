"""The reference drafter configs shipped with the rules (rules/reference/drafters)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..model import ToolError
from ..rules import rules_dir

if TYPE_CHECKING:  # rules are validated against the names on every run, warm ones included: stay light
    from ..draft.config import DraftConfig


def reference_dir() -> Path:
    return rules_dir() / "reference" / "drafters"


@cache
def reference_names() -> tuple[str, ...]:
    return tuple(sorted(path.stem for path in reference_dir().glob("*.json")))


@cache
def reference_words() -> dict[str, str]:
    """Each reference config's readable name (names.toml), for the reasons people read."""
    path = reference_dir() / "names.toml"
    try:
        words = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ToolError(f"{path.name}: cannot load the reference drafter names: {exc}") from None
    missing = [name for name in reference_names() if not isinstance(words.get(name), str) or not words[name].strip()]
    if missing:
        raise ToolError(f"{path.name}: no readable name for {', '.join(missing)}")
    return words


@cache
def reference_configs() -> tuple[tuple[str, DraftConfig], ...]:
    from ..draft.config import load_draft_config  # warm runs: as DraftConfig above

    return tuple((name, load_draft_config(reference_dir() / f"{name}.json")) for name in reference_names())
