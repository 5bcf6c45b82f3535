"""``dflash-doctor accept``: measure speculative-decoding acceptance on a running
server (its Prometheus counters, by the names its engine's descriptor gives; a
gauge or the server's own account of itself where there are none), optionally under
a fixed workload, and say which defect the numbers point to."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..engines import Engine, named
from ..model import from_option
from ..model import ToolError
from . import metrics
from .diagnose import diagnose
from .load import LoadResult, LoadSettings, api_base, read_prompts, send_prompts, served_model
from .measurement import GAUGE, METRICS, SERVER_INFO, Measurement
from .server_info import ServerState, read_server_info
from .reference import Expected, expected_for, load_reference, no_figures
from .report import AcceptReport

if TYPE_CHECKING:
    from rich.progress import Progress


@dataclasses.dataclass(frozen=True)
class AcceptOptions:
    metrics_url: str | None
    model: str | None
    window: float | None
    prompts: Path | None
    base_url: str | None
    concurrency: int
    max_tokens: int
    request_timeout: float
    timeout: float
    drafter: str | None
    dataset: str | None
    temperature: float
    min_drafts: int
    progress: bool  # a progress display on standard error (a terminal)
    engine: str = "auto"  # --engine: auto (told by the series the server exposes), or an engine's name


class _Quiet:
    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def prompts(self, total: int) -> Callable[[], None]:
        return lambda: None


class _Shown:
    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    def wait(self, seconds: float) -> None:
        task = self._progress.add_task("waiting for the second sample", total=seconds)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(0.1, left))
            self._progress.update(task, completed=seconds - max(0.0, end - time.monotonic()))

    def prompts(self, total: int) -> Callable[[], None]:
        task = self._progress.add_task("prompts answered", total=total)
        return lambda: self._progress.advance(task)


@contextlib.contextmanager
def _progress(shown: bool) -> Iterator[_Quiet | _Shown]:
    if not shown:
        yield _Quiet()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        yield _Shown(progress)


def _validate(options: AcceptOptions) -> str:
    """The metrics URL; bad combinations fail before anything is sent."""
    if not options.metrics_url:
        raise ToolError("give --metrics-url: the server's address (its /metrics is read) or its metrics endpoint")
    url = metrics.metrics_endpoint(metrics.check_url(options.metrics_url, "--metrics-url"))
    if options.base_url:
        metrics.check_url(options.base_url, "--base-url")
    if options.window is not None and options.window <= 0:
        raise ToolError("--window must be more than 0 seconds")
    if options.base_url and not options.prompts:
        raise ToolError("--base-url is where --prompts are sent: give --prompts too")
    if options.dataset and not options.drafter:
        raise ToolError("--dataset selects a published figure of a drafter: give --drafter too")
    return url


def _load(options: AcceptOptions, source_url: str, progress: _Quiet | _Shown) -> Callable[[], LoadResult | None]:
    """A function that sends the workload (nothing without --prompts); the
    prompts file, the API and its model are checked now."""
    if options.prompts is None:
        return lambda: None
    prompts = read_prompts(options.prompts)
    base = api_base(options.base_url or metrics.server_origin(source_url))
    model = options.model or served_model(base, options.timeout)
    settings = LoadSettings(
        base, model, options.temperature, options.max_tokens, options.concurrency, options.request_timeout
    )

    def send() -> LoadResult:
        result = send_prompts(prompts, settings, progress.prompts(len(prompts)))
        if not result.answered:
            raise ToolError(f"none of the {result.prompts} prompts was answered by {base}: {result.errors[0]}")
        return result

    return send


@dataclasses.dataclass(frozen=True)
class _Read:
    measurement: Measurement
    load: LoadResult | None
    server: ServerState | None


def _measure(
    options: AcceptOptions,
    url: str,
    told: Engine | None,
    send: Callable[[], LoadResult | None],
    progress: _Quiet | _Shown,
) -> _Read:
    try:
        before = metrics.scrape(url, options.timeout)
    except metrics.NotServed as missing:  # no metrics endpoint: an engine that describes itself elsewhere may answer
        described = [engine for engine in ([told] if told else metrics.READ) if _server_info(engine)]
        if len(described) != 1:
            raise
        return _from_server_info(options, url, described[0], None if told else missing, send)
    engine = metrics.engine_of(before, told)
    if not _server_info(engine):
        metrics.require_drafts(before, engine)
    before = metrics.select_model(before, engine, options.model)
    load = None
    if options.window is None and options.prompts is None:
        after, counts, restarted, window = before, metrics.counts_since_start(before, engine), False, None
    else:
        load = send()
        left = (options.window or 0.0) - (time.monotonic() - before.taken_at)
        if left > 0:
            progress.wait(left)
        after = metrics.select_model(metrics.scrape(url, options.timeout), engine, options.model)
        counts, restarted = metrics.counts_between(before, after, engine)
        window = after.taken_at - before.taken_at
    server = _server_state(url, engine, options.timeout)
    gauge = metrics.gauge_mean(after, engine)
    if metrics.has_drafts(after, engine) or (gauge is None and (server is None or server.average is None)):
        block = server.block_size if server else None
        return _Read(_from_counts(engine, url, options.model, counts, restarted, window, load, block), load, server)
    source, length = (GAUGE, gauge) if gauge is not None else (SERVER_INFO, server.average if server else None)
    return _Read(_without_counts(engine, source, url, options.model, length, load), load, server)


def _server_info(engine: Engine) -> bool:
    return engine.metrics is not None and engine.metrics.server_info is not None


def _server_state(url: str, engine: Engine, timeout: float) -> ServerState | None:
    """What the server says about itself, where the engine has such an endpoint and the server serves it."""
    if not _server_info(engine):
        return None
    try:
        return read_server_info(url, engine, timeout)
    except metrics.NotServed:
        return None


def _from_server_info(
    options: AcceptOptions,
    url: str,
    engine: Engine,
    missing: metrics.NotServed | None,
    send: Callable[[], LoadResult | None],
) -> _Read:
    """No metrics endpoint: the running average the engine's own endpoint gives, read before the workload
    (is it the engine's, drafting?) and again after it. ``missing``: the metrics endpoint's 404, said instead
    when the engine was guessed and neither is served."""
    try:
        server = read_server_info(url, engine, options.timeout)
    except metrics.NotServed:
        if missing is not None:
            raise missing from None
        raise
    load = send()
    if load is not None:
        server = read_server_info(url, engine, options.timeout)
    return _Read(_without_counts(engine, SERVER_INFO, server.url, options.model, server.average, load), load, server)


def _from_counts(
    engine: Engine,
    url: str,
    model: str | None,
    counts: metrics.Counts,
    restarted: bool,
    window: float | None,
    load: LoadResult | None,
    block: int | None,
) -> Measurement:
    drafts = counts.drafts
    mean_prompt: float | None
    if counts.requests and counts.prompt_tokens is not None:  # the two are given together
        mean_prompt = counts.prompt_tokens / counts.requests
    else:
        mean_prompt = load.mean_prompt_tokens if load else None
    draft_tokens = counts.draft_tokens
    if draft_tokens is None and block is not None:
        draft_tokens = drafts * (block - 1)  # each verify step checks block - 1 drafted tokens (SGLang's own rate)
    return Measurement(
        engine=engine.name,
        source=METRICS,
        url=url,
        model=model,
        acceptance_length=1 + counts.accepted / drafts if drafts else None,
        draft_acceptance_rate=min(1.0, counts.accepted / draft_tokens) if draft_tokens else None,
        per_position=tuple(accepted / drafts for accepted in counts.accepted_per_position) if drafts else (),
        drafts=round(drafts),
        draft_tokens=None if draft_tokens is None else round(draft_tokens),
        accepted_tokens=round(counts.accepted),
        window_s=window,
        restarted=restarted,
        mean_prompt_tokens=mean_prompt,
    )


def _without_counts(
    engine: Engine, source: str, url: str, model: str | None, length: float | None, load: LoadResult | None
) -> Measurement:
    return Measurement(
        engine=engine.name,
        source=source,
        url=url,
        model=model,
        acceptance_length=length,
        draft_acceptance_rate=None,
        per_position=(),
        drafts=None,
        draft_tokens=None,
        accepted_tokens=None,
        window_s=None,
        restarted=False,
        mean_prompt_tokens=load.mean_prompt_tokens if load else None,
    )


def _notes(read: _Read, expected: Expected | None, from_server: bool) -> tuple[str, ...]:
    measurement, server = read.measurement, read.server
    described = named(measurement.engine).metrics
    notes = []
    if measurement.restarted:
        notes.append(
            "The server restarted between the two samples (its counters went backwards or were re-created): "
            "the figures cover only the time since the restart."
        )
    if described is not None and measurement.source == METRICS and described.at_finish and measurement.drafts:
        notes.append(
            f"{named(measurement.engine).display} counts a request's drafting steps and tokens when the request "
            "finishes: requests still running at the last sample are not in the figures."
        )
    if described is not None and measurement.source == GAUGE:
        notes.append(
            f"The server exposes no {described.drafts}_total counter (older releases lack it, or no request has "
            f"finished yet): the figure is its gauge {described.gauge}, which covers only {described.gauge_span}, "
            "carries no counts and keeps its last value while the server is idle (it is read at the last sample, "
            "whatever --window)."
        )
    if described is not None and described.server_info is not None and measurement.source == SERVER_INFO:
        notes.append(
            f"The figure is the server's running average ({described.server_info.average} of "
            f"{described.server_info.path}), without counts: it covers {described.server_info.average_span}, "
            "and how much traffic is behind it is unknown."
        )
    if server is not None and server.algorithm is not None and server.algorithm.lower() != "dflash":
        notes.append(
            f"The server drafts with {server.algorithm}, not DFlash: the published DFlash figures do not apply."
        )
    if expected is not None:
        if from_server and server is not None:
            notes.append(
                f"Judged against the figures of {expected.drafter}, the drafter the server names ({server.drafter})."
            )
        positions = len(measurement.per_position) or (server.block_size - 1 if server and server.block_size else 0)
        if positions and positions < expected.block_size - 1:
            notes.append(
                f"The server drafts {positions} tokens per step; the published figures were measured with "
                f"{expected.block_size - 1} (block size {expected.block_size}), and fewer draft tokens cap the "
                f"acceptance length at {positions + 1}: compare with care."
            )
        if expected.note:
            notes.append(f"{expected.drafter}: {expected.note}.")
    return tuple(notes)


def _expected(
    options: AcceptOptions, given: Expected | None, server: ServerState | None
) -> tuple[Expected | None, str, bool]:
    """The figure to judge against (``given``: the --drafter's), why there is none for a --drafter given,
    and whether the drafter was the one the server names (no --drafter: its lowest figure, when it has one)."""
    if options.drafter:
        return given, "" if given else no_figures(options.drafter), False
    if server is None or server.drafter is None:
        return None, "", False
    try:  # a path or a hub name: its last part is the drafter's name
        expected = expected_for(server.drafter.rstrip("/").rsplit("/", 1)[-1], None, options.temperature)
    except ToolError:  # figures at another temperature only: nothing to compare with
        return None, "", False
    return expected, "", expected is not None


def run_accept(options: AcceptOptions) -> AcceptReport:
    url = _validate(options)
    told = None if options.engine == "auto" else from_option(options.engine)
    reference = load_reference()
    # a --dataset or --temperature the --drafter has no figure for fails before anything is sent
    given = expected_for(options.drafter, options.dataset, options.temperature) if options.drafter else None
    with _progress(options.progress) as progress:
        send = _load(options, url, progress)
        read = _measure(options, url, told, send, progress)
    expected, missing, from_server = _expected(options, given, read.server)
    diagnosis = diagnose(read.measurement, expected, reference.judgement, options.min_drafts, missing)
    notes = _notes(read, expected, from_server)
    return AcceptReport(read.measurement, expected, diagnosis, read.load, notes, __version__, read.server)
