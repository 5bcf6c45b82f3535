"""The measured numbers, as read from a server (before any judgement)."""

from __future__ import annotations

import dataclasses

# How the figure was read (the report's source kind is ``<engine>-<how>``):
METRICS = "metrics"  # Prometheus counters: counts over a window, or totals since the start
GAUGE = "gauge"  # the engine's acceptance gauge: a recent interval, no counts
SERVER_INFO = "server-info"  # the engine's running average since the start, no counts


@dataclasses.dataclass(frozen=True)
class Measurement:
    """``drafts`` (and the other counts) are None where the engine's figure has no counts behind it."""

    engine: str  # the engine's name (``engines``)
    source: str  # METRICS, GAUGE or SERVER_INFO
    url: str
    model: str | None
    acceptance_length: float | None  # None: no drafts recorded
    draft_acceptance_rate: float | None
    per_position: tuple[float, ...]
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    window_s: float | None  # None: totals (or an engine's average) since the server started
    restarted: bool
    mean_prompt_tokens: float | None

    @property
    def kind(self) -> str:
        return f"{self.engine}-{self.source}"
