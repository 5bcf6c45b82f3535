"""Reading acceptance from a server's Prometheus endpoint (prometheus_client's text
parser), by the names the engine's descriptor gives (``Engine.metrics``): which
engine serves is told by the prefix of the series it exposes.

Only the sample lines of the series read here reach the parser, each with a
bounded number of labels (its cost grows with labels times line length), and
at most MAX_SERIES_LINES of them: the parse is linear in the body.
"""

from __future__ import annotations

import dataclasses
import http.client
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..engines import ENGINES, Engine
from ..engines.metrics import Metrics
from ..model import ToolError
from .http import Refused, excerpt, fetch

if TYPE_CHECKING:
    from prometheus_client.samples import Sample

READ = tuple(engine for engine in ENGINES.values() if engine.metrics is not None)  # the engines accept reads


def kept_series(metrics: Metrics) -> tuple[str, ...]:
    """The sample names read of an engine's endpoint."""
    counters = tuple(counter + suffix for counter in metrics.counters() for suffix in ("_total", "_created"))
    return counters + (metrics.prompt_sum, metrics.prompt_count) + ((metrics.gauge,) if metrics.gauge else ())


def _metrics(engine: Engine) -> Metrics:
    if engine.metrics is None:
        raise ToolError(f"accept cannot read {engine.display} servers (its metrics are not described)")
    return engine.metrics


SERIES = tuple(name for engine in READ for name in kept_series(_metrics(engine)))
PREFIXES = tuple(_metrics(engine).prefix for engine in READ)

POSITION_LABEL = "position"
# Caps (docs/security.md, "Metrics"): vLLM labels its series with model_name,
# engine and position; per engine and model it exposes 2 x (3 + k) + 2 of these
# lines for k speculative tokens, and DFlash drafts at most a block of 16. SGLang
# labels its series with model_name, engine_type, ranks and custom labels.
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
    except urllib.error.HTTPError as exc:
        error = NotServed if exc.code == 404 else ToolError
        raise error(f"cannot read {url}: {failure(exc, timeout)}") from None
    except (OSError, Refused, http.client.HTTPException) as exc:
        raise ToolError(f"cannot read {url}: {failure(exc, timeout)}") from None


class NotServed(ToolError):
    """The server answered 404: it does not serve the endpoint (SGLang without --enable-metrics has no /metrics)."""


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
    """The series of one scrape that accept reads, by series, with their creation times."""

    url: str
    taken_at: float  # time.monotonic()
    values: Mapping[SeriesKey, float]  # counters by name without _total; other samples by their name
    created: Mapping[SeriesKey, float]  # the counter's _created sample, when exposed
    prefixes: frozenset[str] = frozenset()  # the engines' series prefixes seen in the body


def series_lines(text: str, url: str) -> tuple[str, frozenset[str]]:
    """The sample lines of the series read here, refused past the caps, and the engine
    prefixes the body's series names start with. Comments and other series never reach
    the parser (a sample keeps its name without its TYPE line)."""
    kept = []
    prefixes: set[str] = set()
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
        prefixes.update(prefix for prefix in PREFIXES if name.group().startswith(prefix))
        if name.group() not in SERIES:
            continue
        if line.count("=") > MAX_LABELS:
            raise ToolError(
                f"{url}: a {name.group()} line has more than {MAX_LABELS} labels (the cap on labels per line)"
            )
        kept.append(line)
        if len(kept) > MAX_SERIES_LINES:
            raise ToolError(f"{url}: more than {MAX_SERIES_LINES} spec-decode sample lines (the cap on series lines)")
    return "\n".join(kept) + "\n", frozenset(prefixes)


COUNTER_NAMES = tuple(name for engine in READ for name in _metrics(engine).counters())
PER_POSITION = tuple(name for engine in READ if (name := _metrics(engine).per_position))


def parse_exposition(text: str, url: str) -> Scrape:
    """The series read here (of every engine accept reads); ``taken_at`` is left 0."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[SeriesKey, float] = {}
    created: dict[SeriesKey, float] = {}
    lines, prefixes = series_lines(text, url)
    try:
        for family in text_string_to_metric_families(lines):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                if sample.name.endswith("_total") and sample.name[: -len("_total")] in COUNTER_NAMES:
                    counter = sample.name[: -len("_total")]
                    if counter in PER_POSITION:
                        _position(counter, sample.labels.get(POSITION_LABEL), url)
                    values[(counter, labels)] = _count(sample, url)
                elif sample.name.endswith("_created") and sample.name[: -len("_created")] in COUNTER_NAMES:
                    created[(sample.name[: -len("_created")], labels)] = _count(sample, url)
                elif sample.name in SERIES:  # a prompt series or a gauge
                    values[(sample.name, labels)] = _count(sample, url)
    except ValueError as exc:
        first_line = text.strip().splitlines()[0]  # a line was kept: the text is not blank
        raise ToolError(
            f"{url} did not answer Prometheus text ({excerpt(str(exc))}; first line: '{excerpt(first_line)}')"
        ) from None
    return Scrape(url, 0.0, values, created, prefixes)


def _count(sample: Sample, url: str) -> float:
    """A counter's value (or creation time, or a gauge's value): finite and not negative, else the data is bad."""
    value = sample.value
    if not math.isfinite(value) or value < 0:
        raise ToolError(f"{url}: {sample.name} is {value}: a counter is a finite number, never negative")
    return value


def scrape(url: str, timeout: float) -> Scrape:
    body = http_get(url, timeout)
    taken_at = time.monotonic()
    return dataclasses.replace(parse_exposition(body.decode("utf-8", errors="replace"), url), taken_at=taken_at)


def engine_of(sample: Scrape, told: Engine | None) -> Engine:
    """The engine whose series the endpoint exposes: ``told`` (``--engine``) must be it."""
    found = [engine for engine in READ if _metrics(engine).prefix in sample.prefixes]
    if told is not None:
        prefix = _metrics(told).prefix
        if told not in found:
            raise ToolError(
                f"{sample.url} exposes no {prefix} series: not a {told.display} metrics endpoint "
                f"(it exposes series of {_named(found, ' and ')})"
            )
        return told
    if not found:
        raise ToolError(
            f"{sample.url} exposes no series of {_named(list(READ), ' or ')}: not the metrics endpoint of an engine "
            "accept reads"
        )
    if len(found) > 1:
        raise ToolError(f"{sample.url} exposes series of {_named(found, ' and ')}: give --engine")
    return found[0]


def _named(engines: list[Engine], joint: str) -> str:
    return joint.join(f"{engine.display} ({_metrics(engine).prefix})" for engine in engines) or "no engine"


def has_drafts(sample: Scrape, engine: Engine) -> bool:
    return any(name == _metrics(engine).drafts for name, _ in sample.values)


def require_drafts(sample: Scrape, engine: Engine) -> None:
    """An engine whose counters exist from its start (at 0) has speculative decoding off without them."""
    if not has_drafts(sample, engine):
        raise ToolError(
            f"{sample.url} has no {_metrics(engine).drafts}_total counter: speculative decoding is not enabled on "
            f"this server, its stats are off (--disable-log-stats), or this is not a {engine.display} metrics endpoint"
        )


def models_in(sample: Scrape, engine: Engine) -> list[str]:
    label = _metrics(engine).model_label
    return sorted({dict(labels).get(label, "") for _, labels in sample.values})


def select_model(sample: Scrape, engine: Engine, model: str | None) -> Scrape:
    """Only the series of one served model (the engine's model label); all when None. An
    endpoint that exposes series of other models only has none for ``model``."""
    if model is None or not sample.values:
        return sample
    label = _metrics(engine).model_label
    keep = {key for key in sample.values if dict(key[1]).get(label) == model}
    if not keep:
        seen = ", ".join(excerpt(name) or f"(no {label} label)" for name in models_in(sample, engine))
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
    draft_tokens: float | None  # None: the engine does not count them
    accepted: float  # accepted draft tokens (the bonus token of each step not included)
    accepted_per_position: tuple[float, ...]
    prompt_tokens: float | None  # over finished requests, when the server exposes them
    requests: float | None


def _sum_counts(values: Mapping[SeriesKey, float], metrics: Metrics, url: str) -> Counts:
    def total(name: str | None) -> float:
        return sum(value for (series, _), value in values.items() if series == name)

    drafts, accepted = total(metrics.drafts), total(metrics.accepted)
    if metrics.bonus_counted:
        if accepted < drafts:
            raise ToolError(
                f"{url}: {metrics.accepted}_total ({accepted:g}) is below {metrics.drafts}_total ({drafts:g}): "
                "every drafting step emits at least one token"
            )
        accepted -= drafts
    per_position: dict[int, float] = {}
    for (name, labels), value in values.items():
        position = dict(labels).get(POSITION_LABEL)
        if name == metrics.per_position and position is not None:  # checked by _position as it was parsed
            per_position[int(position)] = per_position.get(int(position), 0.0) + value
    has_prompts = any(name in (metrics.prompt_sum, metrics.prompt_count) for name, _ in values)
    return Counts(
        drafts=drafts,
        draft_tokens=total(metrics.draft_tokens) if metrics.draft_tokens else None,
        accepted=accepted,
        accepted_per_position=tuple(per_position.get(p, 0.0) for p in range(max(per_position, default=-1) + 1)),
        prompt_tokens=total(metrics.prompt_sum) if has_prompts else None,
        requests=total(metrics.prompt_count) if has_prompts else None,
    )


def _position(counter: str, label: str | None, url: str) -> None:
    """A per-position counter's ``position`` (when given): ASCII digits below MAX_POSITION, else bad data."""
    if label is None:
        return
    if not (label.isascii() and label.isdigit()) or len(label) > len(str(MAX_POSITION)) or int(label) >= MAX_POSITION:
        raise ToolError(
            f'{url}: {counter}_total has position="{excerpt(label, 20)}": a position is a number of '
            f"speculative tokens, below {MAX_POSITION} (the cap on positions)"
        )


def counts_since_start(sample: Scrape, engine: Engine) -> Counts:
    return _sum_counts(sample.values, _metrics(engine), sample.url)


def counts_between(before: Scrape, after: Scrape, engine: Engine) -> tuple[Counts, bool]:
    """What happened between two scrapes, and whether the server restarted.

    A counter that went backwards, vanished, or whose ``_created`` time
    changed means the server restarted in between: then, as Prometheus'
    ``increase()`` does, everything counted since the restart is the increase
    (never a negative count), and the older counts are gone. A gauge is no count:
    its value is never compared.
    """
    metrics = _metrics(engine)
    counted = {key: value for key, value in after.values.items() if key[0] != metrics.gauge}
    earlier = {key: value for key, value in before.values.items() if key[0] != metrics.gauge}
    restarted = any(counted.get(key, -1.0) < value for key, value in earlier.items()) or any(
        key in after.created and after.created[key] != created for key, created in before.created.items()
    )
    if restarted:
        return _sum_counts(counted, metrics, after.url), True
    delta = {key: value - earlier.get(key, 0.0) for key, value in counted.items()}
    return _sum_counts(delta, metrics, after.url), False


def gauge_mean(sample: Scrape, engine: Engine) -> float | None:
    """The mean of the engine's acceptance gauge over its series (one per scheduler); None when it has
    none, or none at 1 or more (an acceptance length is never below 1: 0 is a scheduler without drafts)."""
    name = _metrics(engine).gauge
    readings = [value for (series, _), value in sample.values.items() if series == name and value >= 1]
    return sum(readings) / len(readings) if readings else None
