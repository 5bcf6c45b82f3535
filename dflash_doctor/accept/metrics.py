"""Reading acceptance from a server: vLLM's Prometheus spec-decode counters
(parsed with prometheus_client's text parser) or SGLang's /server_info.

Only the sample lines of the series read here reach the parser, each with a
bounded number of labels (its cost grows with labels times line length), and
at most MAX_SERIES_LINES of them: the parse is linear in the body.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..model import ToolError
from .http import Refused, excerpt, fetch

if TYPE_CHECKING:
    from prometheus_client.samples import Sample

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POSITION)
# Histogram of prompt lengths of finished requests: its _sum and _count give
# the mean prompt length of the traffic the counters saw.
PROMPT_TOKENS = "vllm:request_prompt_tokens"
PROMPT_SERIES = (PROMPT_TOKENS + "_sum", PROMPT_TOKENS + "_count")

SERIES = tuple(counter + suffix for counter in COUNTERS for suffix in ("_total", "_created")) + PROMPT_SERIES

MODEL_LABEL = "model_name"
POSITION_LABEL = "position"
# Caps (docs/security.md, "Metrics"): vLLM labels its series with model_name,
# engine and position; per engine and model it exposes 2 x (3 + k) + 2 of these
# lines for k speculative tokens, and DFlash drafts at most a block of 16.
MAX_LABELS = 32
MAX_SERIES_LINES = 10_000
MAX_POSITION = 1024
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

# (series name as exposed, sorted label pairs)
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def check_url(url: str, option: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ToolError(f"{option} must be an http:// or https:// URL, not {url!r}")
    return url


def metrics_endpoint(url: str) -> str:
    """A bare server address means its ``/metrics``."""
    return url.rstrip("/") + "/metrics" if urllib.parse.urlsplit(url).path in ("", "/") else url


def server_origin(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.scheme}://{parsed.netloc}"


def http_get(url: str, timeout: float) -> bytes:
    """The body of a 2xx answer within ``timeout`` seconds overall; anything else is a ToolError naming the URL."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain, application/json"})
    try:
        return fetch(request, timeout)
    except (OSError, Refused, http.client.HTTPException) as exc:
        raise ToolError(f"cannot read {url}: {failure(exc, timeout)}") from None


def failure(exc: Exception, timeout: float) -> str:
    """Why a request failed, in words; what the server sent only as a short sanitized excerpt."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {excerpt(str(exc.reason), 40)}"
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, urllib.error.URLError):
        if isinstance(exc.reason, TimeoutError):
            return f"no answer within {timeout:g} s"
        return str(getattr(exc.reason, "strerror", None) or exc.reason)
    if isinstance(exc, Refused):
        return str(exc)
    if isinstance(exc, http.client.HTTPException):
        return f"not a valid HTTP answer ({type(exc).__name__})"
    return str(getattr(exc, "strerror", None) or exc)


@dataclasses.dataclass(frozen=True)
class Scrape:
    """The spec-decode series of one scrape, by series, with their creation times."""

    url: str
    taken_at: float  # time.monotonic()
    values: Mapping[SeriesKey, float]
    created: Mapping[SeriesKey, float]  # the counter's _created sample, when exposed


def series_lines(text: str, url: str) -> str:
    """The sample lines of the series read here, refused past the caps. Comments and
    other series never reach the parser (a sample keeps its name without its TYPE line)."""
    kept = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = METRIC_NAME.match(line)
        if name is None or line[name.end() : name.end() + 1] not in ("{", " ", "\t"):
            first = text.strip().splitlines()[0]
            raise ToolError(
                f"{url} did not answer Prometheus text ('{excerpt(line)}' is not a sample; first line: "
                f"'{excerpt(first)}')"
            )
        if name.group() not in SERIES:
            continue
        if line.count("=") > MAX_LABELS:
            raise ToolError(
                f"{url}: a {name.group()} line has more than {MAX_LABELS} labels (the cap on labels per line)"
            )
        kept.append(line)
        if len(kept) > MAX_SERIES_LINES:
            raise ToolError(f"{url}: more than {MAX_SERIES_LINES} spec-decode sample lines (the cap on series lines)")
    return "\n".join(kept) + "\n"


def parse_exposition(text: str, url: str) -> tuple[dict[SeriesKey, float], dict[SeriesKey, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[SeriesKey, float] = {}
    created: dict[SeriesKey, float] = {}
    lines = series_lines(text, url)
    try:
        for family in text_string_to_metric_families(lines):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                for counter in COUNTERS:
                    if sample.name == counter + "_total":
                        if counter == ACCEPTED_PER_POSITION:
                            _position(sample.labels.get(POSITION_LABEL), url)
                        values[(counter, labels)] = _count(sample, url)
                    elif sample.name == counter + "_created":
                        created[(counter, labels)] = _count(sample, url)
                if sample.name in PROMPT_SERIES:
                    values[(sample.name, labels)] = _count(sample, url)
    except ValueError as exc:
        first_line = text.strip().splitlines()[0]  # a line was kept: the text is not blank
        raise ToolError(
            f"{url} did not answer Prometheus text ({excerpt(str(exc))}; first line: '{excerpt(first_line)}')"
        ) from None
    return values, created


def _count(sample: Sample, url: str) -> float:
    """A counter's value (or creation time): finite and not negative, else the data is bad."""
    value = sample.value
    if not math.isfinite(value) or value < 0:
        raise ToolError(f"{url}: {sample.name} is {value}: a counter is a finite number, never negative")
    return value


def scrape(url: str, timeout: float) -> Scrape:
    body = http_get(url, timeout)
    taken_at = time.monotonic()
    text = body.decode("utf-8", errors="replace")
    values, created = parse_exposition(text, url)
    if not any(key[0] == DRAFTS for key in values):
        raise ToolError(
            f"{url} has no {DRAFTS}_total counter: speculative decoding is not enabled on this server, "
            "its stats are off (--disable-log-stats), or this is not a vLLM metrics endpoint"
        )
    return Scrape(url, taken_at, values, created)


def models_in(sample: Scrape) -> list[str]:
    return sorted({dict(labels).get(MODEL_LABEL, "") for name, labels in sample.values if name == DRAFTS})


def select_model(sample: Scrape, model: str | None) -> Scrape:
    """Only the series of one served model (label ``model_name``); all when None."""
    if model is None:
        return sample
    keep = {key for key in sample.values if dict(key[1]).get(MODEL_LABEL) == model}
    if not any(key[0] == DRAFTS for key in keep):
        seen = ", ".join(excerpt(name) or "(no model_name label)" for name in models_in(sample))
        raise ToolError(f"{sample.url} has no spec-decode counters for model {model!r} (models: {seen})")
    return dataclasses.replace(
        sample,
        values={key: value for key, value in sample.values.items() if key in keep},
        created={key: value for key, value in sample.created.items() if key in keep},
    )


@dataclasses.dataclass(frozen=True)
class Counts:
    """Spec-decode counts summed over engines (and models, unless filtered)."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...]
    prompt_tokens: float | None  # over finished requests, when the server exposes the histogram
    requests: float | None


def _sum_counts(values: Mapping[SeriesKey, float]) -> Counts:
    totals = {name: 0.0 for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, *PROMPT_SERIES)}
    per_position: dict[int, float] = {}
    for (name, labels), value in values.items():
        if name == ACCEPTED_PER_POSITION:
            position = dict(labels).get(POSITION_LABEL)
            if position is not None:  # checked by _position as it was parsed
                per_position[int(position)] = per_position.get(int(position), 0.0) + value
        else:
            totals[name] += value
    has_prompts = any(name in PROMPT_SERIES for name, _ in values)
    return Counts(
        drafts=totals[DRAFTS],
        draft_tokens=totals[DRAFT_TOKENS],
        accepted=totals[ACCEPTED],
        accepted_per_position=tuple(per_position.get(p, 0.0) for p in range(max(per_position, default=-1) + 1)),
        prompt_tokens=totals[PROMPT_SERIES[0]] if has_prompts else None,
        requests=totals[PROMPT_SERIES[1]] if has_prompts else None,
    )


def _position(label: str | None, url: str) -> None:
    """A per-position counter's ``position`` (when given): ASCII digits below MAX_POSITION, else bad data."""
    if label is None:
        return
    if not (label.isascii() and label.isdigit()) or len(label) > len(str(MAX_POSITION)) or int(label) >= MAX_POSITION:
        raise ToolError(
            f'{url}: {ACCEPTED_PER_POSITION}_total has position="{excerpt(label, 20)}": a position is a number of '
            f"speculative tokens, below {MAX_POSITION} (the cap on positions)"
        )


def counts_since_start(sample: Scrape) -> Counts:
    return _sum_counts(sample.values)


def counts_between(before: Scrape, after: Scrape) -> tuple[Counts, bool]:
    """What happened between two scrapes, and whether the server restarted.

    A counter that went backwards, vanished, or whose ``_created`` time
    changed means the server restarted in between: then, as Prometheus'
    ``increase()`` does, everything counted since the restart is the increase
    (never a negative count), and the older counts are gone.
    """
    restarted = any(after.values.get(key, -1.0) < value for key, value in before.values.items()) or any(
        key in after.created and after.created[key] != created for key, created in before.created.items()
    )
    if restarted:
        return _sum_counts(after.values), True
    return _sum_counts({key: value - before.values.get(key, 0.0) for key, value in after.values.items()}), False


@dataclasses.dataclass(frozen=True)
class SglangReading:
    url: str
    acceptance_length: float | None  # None: no verify step recorded yet


def read_sglang(url: str, timeout: float) -> SglangReading:
    """``internal_states[0].avg_spec_accept_length`` of ``GET /server_info``:
    a running average since the server started, without counts."""
    info_url = (
        url if url.rstrip("/").endswith(("/server_info", "/get_server_info")) else url.rstrip("/") + "/server_info"
    )
    body = http_get(info_url, timeout)
    try:
        info: Any = json.loads(body)
    except (ValueError, RecursionError):  # not JSON (or an integer past Python's digit limit), or nested too deep
        raise ToolError(f"{info_url} did not answer JSON") from None
    states = info.get("internal_states") if isinstance(info, dict) else None
    if not isinstance(states, list) or not states or not isinstance(states[0], dict):
        raise ToolError(f"{info_url} has no internal_states: not an SGLang server_info answer")
    state = states[0]
    algorithm = state.get("speculative_algorithm", info.get("speculative_algorithm", ""))
    if algorithm is None or (isinstance(algorithm, str) and algorithm.upper() == "NONE"):
        raise ToolError(
            f"{info_url}: speculative decoding is not enabled on this server (speculative_algorithm is none)"
        )
    value = state.get("avg_spec_accept_length")
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    ):
        raise ToolError(f"{info_url}: avg_spec_accept_length is not a finite number: {excerpt(repr(value))}")
    # Before the first verify step SGLang leaves the key out (or reports 0):
    # an acceptance length is never below 1.
    return SglangReading(info_url, float(value) if value is not None and value >= 1 else None)
