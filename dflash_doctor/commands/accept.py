from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..engines import ENGINE_NAMES
from .options import emit


class Format(str, Enum):
    table = "table"
    json = "json"


def accept(
    metrics_url: Optional[str] = typer.Option(
        None,
        "--metrics-url",
        help="The server's Prometheus endpoint (vLLM or SGLang), e.g. http://HOST:8000/metrics, or its bare address "
        "(its /metrics is read; SGLang's /server_info too).",
    ),
    engine: str = typer.Option(
        "auto",
        "--engine",
        help="The engine serving: auto (told by the series the endpoint exposes; an SGLang server without "
        f"--enable-metrics by its /server_info), {ENGINE_NAMES}.",
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="Only this served model (label model_name); also the model prompts are sent to."
    ),
    window: Optional[float] = typer.Option(
        None, "--window", help="Two samples this many seconds apart: report what happened in between."
    ),
    prompts: Optional[Path] = typer.Option(
        None, "--prompts", help="JSONL of prompts to send between the two samples (a fixed workload)."
    ),
    base_url: Optional[str] = typer.Option(
        None, "--base-url", help="OpenAI-compatible API for --prompts (default: the source server's /v1)."
    ),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Prompts in flight at once."),
    max_tokens: int = typer.Option(
        512, "--max-tokens", min=1, help="max_tokens of each prompt (a prompt's own value wins)."
    ),
    request_timeout: float = typer.Option(
        300.0,
        "--request-timeout",
        min=0.001,
        help="Seconds for each prompt's whole request (connect, headers, answer).",
    ),
    timeout: float = typer.Option(
        10.0,
        "--timeout",
        min=0.001,
        help="Seconds for the whole request to the metrics or server_info endpoint (not per read).",
    ),
    drafter: Optional[str] = typer.Option(
        None, "--drafter", help="Judge against this drafter's published figures, e.g. Qwen3-8B-DFlash-b16."
    ),
    dataset: Optional[str] = typer.Option(
        None, "--dataset", help="The published figure for this dataset (gsm8k, humaneval, mt-bench, ...)."
    ),
    temperature: float = typer.Option(
        0.0,
        "--temperature",
        min=0.0,
        help="Sampling temperature of the traffic: selects the figures and is sent with --prompts.",
    ),
    min_drafts: int = typer.Option(
        100, "--min-drafts", min=1, help="Fewer drafts than this are too little data to judge."
    ),
    format: Format = typer.Option(Format.table, "--format", help="table or json."),
    output: Optional[Path] = typer.Option(
        None, "--output", help="Write the report to this file instead of standard output."
    ),
) -> int:
    """Measure acceptance on a running server. Says which defect the numbers point to.

    Exit: 0 within the expected band (or no collapse without --drafter), 1 below it,
    2 too little data, 3 the endpoint could not be read.
    """
    from .. import api
    from ..accept import AcceptOptions
    from ..accept.report import render

    options = AcceptOptions(
        metrics_url=metrics_url,
        model=model,
        window=window,
        prompts=prompts,
        base_url=base_url,
        concurrency=concurrency,
        max_tokens=max_tokens,
        request_timeout=request_timeout,
        timeout=timeout,
        drafter=drafter,
        dataset=dataset,
        temperature=temperature,
        min_drafts=min_drafts,
        progress=sys.stderr.isatty(),
        engine=engine,
    )
    report = api.accept(options)
    emit(render(report, format.value, terminal=output is None and sys.stdout.isatty()), output)
    return report.exit_code


def register(app: typer.Typer) -> None:
    app.command()(accept)
