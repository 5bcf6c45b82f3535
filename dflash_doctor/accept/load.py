"""A fixed workload: prompts from a JSONL file sent to an OpenAI-compatible
API with bounded concurrency and a timeout per request (stdlib only)."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..model import ToolError
from .metrics import http_get


@dataclasses.dataclass(frozen=True)
class Prompt:
    endpoint: str  # "chat/completions" or "completions"
    body: dict[str, Any]  # request fields from the file; model and defaults are added when sent


def read_prompts(path: Path) -> tuple[Prompt, ...]:
    """One prompt per line: a JSON string (one user message), or an object with
    ``messages`` (chat), ``prompt`` (completion) or ``turns`` (its first turn as
    the user message, as in the z-lab benchmark files). Other fields of an
    object (max_tokens, chat_template_kwargs, ...) go into the request."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ToolError(f"--prompts: no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"--prompts: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ToolError(f"{where}: not JSON: {exc.msg}") from None
        prompts.append(_prompt(item, where))
    if not prompts:
        raise ToolError(f"{path}: no prompts")
    return tuple(prompts)


def _prompt(item: Any, where: str) -> Prompt:
    if isinstance(item, str):
        return Prompt("chat/completions", {"messages": [{"role": "user", "content": item}]})
    if not isinstance(item, dict):
        raise ToolError(f"{where}: a prompt is a JSON string or object")
    if isinstance(item.get("messages"), list) and item["messages"]:
        return Prompt("chat/completions", item)
    if isinstance(item.get("prompt"), str):
        return Prompt("completions", item)
    turns = item.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str):
        body = {key: value for key, value in item.items() if key != "turns"}
        return Prompt("chat/completions", {**body, "messages": [{"role": "user", "content": turns[0]}]})
    raise ToolError(f"{where}: needs 'messages', 'prompt' or 'turns'")


def api_base(url: str) -> str:
    """``http://host:8000`` and ``http://host:8000/v1/`` both mean ``.../v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def served_model(base: str, timeout: float) -> str:
    """The one model the API serves (``GET /models``)."""
    url = base + "/models"
    try:
        models = [entry["id"] for entry in json.loads(http_get(url, timeout))["data"]]
    except (ValueError, KeyError, TypeError):
        raise ToolError(f"{url} did not answer an OpenAI model list") from None
    if len(models) != 1:
        raise ToolError(f"{url} serves {len(models)} models ({', '.join(models)}): give --model")
    return models[0]


@dataclasses.dataclass(frozen=True)
class LoadResult:
    base_url: str
    model: str
    prompts: int
    answered: int
    errors: tuple[str, ...]  # one per failed prompt
    prompt_tokens: int
    completion_tokens: int
    seconds: float

    @property
    def mean_prompt_tokens(self) -> float | None:
        return self.prompt_tokens / self.answered if self.answered and self.prompt_tokens else None

    def to_json(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "model": self.model,
            "prompts": self.prompts,
            "answered": self.answered,
            "failed": len(self.errors),
            "errors": sorted(set(self.errors)),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 3),
        }


@dataclasses.dataclass(frozen=True)
class LoadSettings:
    base_url: str
    model: str
    temperature: float
    max_tokens: int
    concurrency: int
    timeout: float


def _send(prompt: Prompt, settings: LoadSettings) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of the answer's usage, 0 when absent."""
    body = {"temperature": settings.temperature, "max_tokens": settings.max_tokens, **prompt.body, "model": settings.model}
    request = urllib.request.Request(
        f"{settings.base_url}/{prompt.endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=settings.timeout) as response:
        answer = json.loads(response.read())
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _failure(exc: Exception, timeout: float) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, urllib.error.URLError):
        return str(getattr(exc.reason, "strerror", None) or exc.reason)
    if isinstance(exc, (ValueError, TypeError)):
        return "answer is not an OpenAI completion"
    return str(exc)


def send_prompts(prompts: tuple[Prompt, ...], settings: LoadSettings, on_done: Callable[[], None]) -> LoadResult:
    """Send every prompt (at most ``concurrency`` at a time); failures are
    counted, not raised: the measurement still covers what was answered."""
    started = time.monotonic()
    errors: list[str] = []
    prompt_tokens = completion_tokens = 0

    def one(prompt: Prompt) -> tuple[int, int] | str:
        try:
            return _send(prompt, settings)
        except (OSError, ValueError, TypeError) as exc:  # URLError and timeouts are OSErrors
            return _failure(exc, settings.timeout)
        finally:
            on_done()

    with ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        for outcome in pool.map(one, prompts):
            if isinstance(outcome, str):
                errors.append(outcome)
            else:
                prompt_tokens += outcome[0]
                completion_tokens += outcome[1]
    return LoadResult(
        base_url=settings.base_url,
        model=settings.model,
        prompts=len(prompts),
        answered=len(prompts) - len(errors),
        errors=tuple(errors),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        seconds=time.monotonic() - started,
    )
