"""Where an engine reports speculative-decoding acceptance on a running server, as data.

``accept`` reads these names and names no engine: the Prometheus counters (sampled
twice they give a rate over a window), a gauge where an engine has one, and a JSON
endpoint of the server's own state and launch arguments.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """A JSON endpoint describing the running server (``GET <path>``)."""

    path: str  # "/server_info"
    states: str  # the key of the list of per-scheduler states
    average: str  # a state's running average acceptance length since the server started
    algorithm: str  # the launch argument naming the speculative algorithm (top level, or in a state)
    block: str  # the launch argument: tokens per verify step (the drafter's block)
    drafter: str  # the launch argument: the drafter model's path or name
    version: str  # the engine version
    average_span: str  # what the running average covers, in words for a report's note


@dataclasses.dataclass(frozen=True)
class Metrics:
    """Series names as exposed, without the counters' ``_total``/``_created`` suffixes.

    ``drafts`` counts drafting steps (one per request per step); ``accepted`` counts
    accepted draft tokens, or, when ``bonus_counted``, every token generated (accepted
    drafts plus the one token each step adds), so accepted drafts = accepted - drafts.
    ``prompt_sum``/``prompt_count`` (full sample names) give the mean prompt length
    of the same traffic."""

    prefix: str  # every series the engine exposes starts with it: what tells the engine of an endpoint
    drafts: str
    accepted: str
    bonus_counted: bool
    prompt_sum: str
    prompt_count: str
    model_label: str  # the label naming the served model
    at_finish: bool = False  # the counters advance when a request finishes (not at each step)
    draft_tokens: str | None = None  # tokens drafted (None: derived from the block, when known)
    per_position: str | None = None  # accepted draft tokens per position (label ``position``)
    gauge: str | None = None  # the mean acceptance length of a recent interval (a fallback: no counts behind it)
    gauge_span: str = ""  # what the gauge covers, in words for a report's note
    server_info: ServerInfo | None = None

    def counters(self) -> tuple[str, ...]:
        return tuple(name for name in (self.drafts, self.accepted, self.draft_tokens, self.per_position) if name)
