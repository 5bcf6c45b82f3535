"""The measured numbers, as read from a server (before any judgement)."""

from __future__ import annotations

import dataclasses

VLLM_METRICS = "vllm-metrics"
SGLANG_SERVER_INFO = "sglang-server-info"


@dataclasses.dataclass(frozen=True)
class Measurement:
    """``drafts`` (and the other counts) are None for SGLang, which reports no counts."""

    source: str  # VLLM_METRICS or SGLANG_SERVER_INFO
    url: str
    model: str | None
    acceptance_length: float | None  # None: no drafts recorded
    draft_acceptance_rate: float | None
    per_position: tuple[float, ...]
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    window_s: float | None  # None: totals (or SGLang's average) since the server started
    restarted: bool
    mean_prompt_tokens: float | None
