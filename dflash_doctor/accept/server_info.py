"""A server's own JSON account of itself (``Metrics.server_info``, e.g. SGLang's
``GET /server_info``): the launch arguments that say what it drafts with, and a
running average acceptance length since it started (the last resort of accept:
no counts behind it)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from ..engines import Engine
from ..model import ToolError
from .http import excerpt
from .metrics import http_get, server_origin


@dataclasses.dataclass(frozen=True)
class ServerState:
    """What the server says about itself; each field None when it does not say."""

    url: str
    version: str | None
    algorithm: str | None  # the speculative algorithm it was launched with
    block_size: int | None  # tokens per verify step (the drafter's block)
    drafter: str | None  # the drafter model's path or name
    average: float | None  # mean acceptance length since the start; None before the first step

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "version": self.version,
            "algorithm": self.algorithm,
            "block_size": self.block_size,
            "drafter": self.drafter,
        }


def read_server_info(url: str, engine: Engine, timeout: float) -> ServerState:
    """The engine's server-info endpoint at the origin of ``url``: a ToolError when it
    cannot be read, is not the engine's answer, or speculative decoding is off
    (``metrics.NotServed`` when the server does not serve it)."""
    assert engine.metrics is not None and engine.metrics.server_info is not None
    names = engine.metrics.server_info
    info_url = server_origin(url) + names.path
    body = http_get(info_url, timeout)
    try:
        info: Any = json.loads(body)
    except (ValueError, RecursionError):  # not JSON (or an integer past Python's digit limit), or nested too deep
        raise ToolError(f"{info_url} did not answer JSON") from None
    states = info.get(names.states) if isinstance(info, dict) else None
    if not isinstance(states, list) or not states or not all(isinstance(state, dict) for state in states):
        raise ToolError(f"{info_url} has no {names.states}: not an {engine.display} {names.path} answer")
    # The launch arguments sit at the top level; older answers repeated some in each state.
    algorithm = info.get(names.algorithm, states[0].get(names.algorithm))
    if algorithm is None or (isinstance(algorithm, str) and algorithm.upper() in ("", "NONE")):
        raise ToolError(f"{info_url}: speculative decoding is not enabled on this server ({names.algorithm} is none)")
    averages = [_average(state.get(names.average), info_url, names.average) for state in states]
    # Before the first verify step the key is left out (or 0): an acceptance length is never below 1.
    measured = [value for value in averages if value is not None and value >= 1]
    return ServerState(
        url=info_url,
        version=_text(info.get(names.version)),
        algorithm=_text(algorithm),
        block_size=_whole(info.get(names.block)),
        drafter=_text(info.get(names.drafter)),
        average=sum(measured) / len(measured) if measured else None,  # one state per data-parallel rank
    )


def _average(value: Any, url: str, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ToolError(f"{url}: {key} is not a finite number: {excerpt(repr(value))}")
    return float(value)


def _text(value: Any) -> str | None:
    """A string the server gave, cut to a sane length; None for anything else."""
    return excerpt(value, 200) if isinstance(value, str) and value else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 4096 else None
