"""``dflash-doctor accept``: measure speculative-decoding acceptance on a running
server (vLLM's Prometheus counters or SGLang's /server_info), optionally under
a fixed workload, and say which defect the numbers point to."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..model import ToolError
from . import metrics
from .diagnose import diagnose
from .load import LoadResult, LoadSettings, api_base, read_prompts, send_prompts, served_model
from .measurement import SGLANG_SERVER_INFO, VLLM_METRICS, Measurement
from .reference import Expected, expected_for, load_reference, no_figures
from .report import AcceptReport

if TYPE_CHECKING:
    from rich.progress import Progress


@dataclasses.dataclass(frozen=True)
class AcceptOptions:
    metrics_url: str | None
    sglang_url: str | None
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
    """The one source URL; bad combinations fail before anything is sent."""
    given = [
        (flag, url) for flag, url in (("--metrics-url", options.metrics_url), ("--sglang", options.sglang_url)) if url
    ]
    if len(given) != 1:
        raise ToolError("give one source: --metrics-url (vLLM) or --sglang (SGLang)")
    flag, url = given[0]
    metrics.check_url(url, flag)
    if flag == "--metrics-url":
        url = metrics.metrics_endpoint(url)
    if options.base_url:
        metrics.check_url(options.base_url, "--base-url")
    if options.window is not None and options.window <= 0:
        raise ToolError("--window must be more than 0 seconds")
    if options.sglang_url and options.window is not None:
        raise ToolError("--window needs --metrics-url: SGLang reports only a running average since it started")
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


def _vllm_measurement(
    options: AcceptOptions, url: str, send: Callable[[], LoadResult | None], progress: _Quiet | _Shown
) -> tuple[Measurement, LoadResult | None]:
    def sample() -> metrics.Scrape:
        return metrics.select_model(metrics.scrape(url, options.timeout), options.model)

    if options.window is None and options.prompts is None:
        return _from_counts(url, options.model, metrics.counts_since_start(sample()), False, None, None), None
    before = sample()
    load = send()
    left = (options.window or 0.0) - (time.monotonic() - before.taken_at)
    if left > 0:
        progress.wait(left)
    after = sample()
    counts, restarted = metrics.counts_between(before, after)
    return _from_counts(url, options.model, counts, restarted, after.taken_at - before.taken_at, load), load


def _from_counts(
    url: str, model: str | None, counts: metrics.Counts, restarted: bool, window: float | None, load: LoadResult | None
) -> Measurement:
    drafts = counts.drafts
    mean_prompt: float | None
    if counts.requests and counts.prompt_tokens is not None:  # the two are given together
        mean_prompt = counts.prompt_tokens / counts.requests
    else:
        mean_prompt = load.mean_prompt_tokens if load else None
    return Measurement(
        source=VLLM_METRICS,
        url=url,
        model=model,
        acceptance_length=1 + counts.accepted / drafts if drafts else None,
        draft_acceptance_rate=counts.accepted / counts.draft_tokens if counts.draft_tokens else None,
        per_position=tuple(accepted / drafts for accepted in counts.accepted_per_position) if drafts else (),
        drafts=round(drafts),
        draft_tokens=round(counts.draft_tokens),
        accepted_tokens=round(counts.accepted),
        window_s=window,
        restarted=restarted,
        mean_prompt_tokens=mean_prompt,
    )


def _sglang_measurement(
    options: AcceptOptions, url: str, send: Callable[[], LoadResult | None]
) -> tuple[Measurement, LoadResult | None]:
    load = send()
    reading = metrics.read_sglang(url, options.timeout)
    measurement = Measurement(
        source=SGLANG_SERVER_INFO,
        url=reading.url,
        model=options.model,
        acceptance_length=reading.acceptance_length,
        draft_acceptance_rate=None,
        per_position=(),
        drafts=None,
        draft_tokens=None,
        accepted_tokens=None,
        window_s=None,
        restarted=False,
        mean_prompt_tokens=load.mean_prompt_tokens if load else None,
    )
    return measurement, load


def _notes(measurement: Measurement, expected: Expected | None) -> tuple[str, ...]:
    notes = []
    if measurement.restarted:
        notes.append(
            "The server restarted between the two samples (its counters went backwards or were re-created): "
            "the figures cover only the time since the restart."
        )
    if measurement.source == SGLANG_SERVER_INFO:
        notes.append(
            "SGLang reports a running average since the server started, without counts: it includes all earlier "
            "traffic, and how much traffic is behind it is unknown."
        )
    if expected is not None:
        positions = len(measurement.per_position)
        if positions and positions < expected.block_size - 1:
            notes.append(
                f"The server drafts {positions} tokens per step; the published figures were measured with "
                f"{expected.block_size - 1} (block size {expected.block_size}), and fewer draft tokens cap the "
                f"acceptance length at {positions + 1}: compare with care."
            )
        if expected.note:
            notes.append(f"{expected.drafter}: {expected.note}.")
    return tuple(notes)


def run_accept(options: AcceptOptions) -> AcceptReport:
    url = _validate(options)
    reference = load_reference()
    expected = expected_for(options.drafter, options.dataset, options.temperature) if options.drafter else None
    with _progress(options.progress) as progress:
        send = _load(options, url, progress)
        if options.metrics_url:
            measurement, load = _vllm_measurement(options, url, send, progress)
        else:
            measurement, load = _sglang_measurement(options, url, send)
    missing = no_figures(options.drafter) if options.drafter and expected is None else ""
    diagnosis = diagnose(measurement, expected, reference.judgement, options.min_drafts, missing)
    return AcceptReport(measurement, expected, diagnosis, load, _notes(measurement, expected), __version__)
