"""A fixed workload: prompts from a JSONL file sent to an OpenAI-compatible
API with bounded concurrency and a timeout per request (stdlib only)."""

from __future__ import annotations

import dataclasses
import http.client
import json
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..model import ToolError
from .http import Refused, excerpt, fetch
from .metrics import failure, http_get


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
    except (ValueError, KeyError, TypeError, RecursionError):
        raise ToolError(f"{url} did not answer an OpenAI model list") from None
    if not all(isinstance(model, str) for model in models):
        raise ToolError(f"{url} did not answer an OpenAI model list (a model id is not a string)")
    if len(models) != 1:
        raise ToolError(f"{url} serves {len(models)} models ({excerpt(', '.join(models))}): give --model")
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
    body = {
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        **prompt.body,
        "model": settings.model,
    }
    request = urllib.request.Request(
        f"{settings.base_url}/{prompt.endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    answer = json.loads(fetch(request, settings.timeout))
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")


def _tokens(usage: dict, key: str) -> int:
    """A token count of ``usage``: 0 when absent; anything but a whole number of tokens is a bad answer."""
    value = usage.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        raise ValueError(f"usage.{key} is not a token count")
    return value


def _failure(exc: Exception, timeout: float) -> str:
    if isinstance(exc, (ValueError, TypeError, RecursionError)):
        return "answer is not an OpenAI completion"
    return failure(exc, timeout)


def send_prompts(prompts: tuple[Prompt, ...], settings: LoadSettings, on_done: Callable[[], None]) -> LoadResult:
    """Send every prompt (at most ``concurrency`` at a time); failures are
    counted, not raised: the measurement still covers what was answered."""
    started = time.monotonic()
    errors: list[str] = []
    prompt_tokens = completion_tokens = 0

    def one(prompt: Prompt) -> tuple[int, int] | str:
        try:
            return _send(prompt, settings)
        except (OSError, ValueError, TypeError, RecursionError, Refused, http.client.HTTPException) as exc:
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
