"""The reference drafter configs shipped with the rules (rules/reference/drafters)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from ..rules import rules_dir

if TYPE_CHECKING:  # rules are validated against the names on every run, warm ones included: stay light
    from ..draft.config import DraftConfig


def reference_dir() -> Path:
    return rules_dir() / "reference" / "drafters"


@cache
def reference_names() -> tuple[str, ...]:
    return tuple(sorted(path.stem for path in reference_dir().glob("*.json")))


@cache
def reference_configs() -> tuple[tuple[str, DraftConfig], ...]:
    from ..draft.config import load_draft_config

    return tuple((name, load_draft_config(reference_dir() / f"{name}.json")) for name in reference_names())
