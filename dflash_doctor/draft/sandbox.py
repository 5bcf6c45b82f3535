"""Run functions taken from a vLLM tree in a separate, isolated interpreter.

The child is ``python -I -S dflash_doctor/draft/harness.py``: no site, no
user environment, small builtins, resource limits, a timer per call and a
timeout for the whole run. Nothing from the inspected tree is imported here.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HARNESS = Path(__file__).with_name("harness.py")
RUN_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 2.0


class SandboxError(Exception):
    """The child did not answer: every probe of the run is unknown."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One top-level statement of the program, and the name it defines."""

    name: str
    source: str


@dataclasses.dataclass(frozen=True)
class Call:
    id: str
    expr: str
    bind: tuple[tuple[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one call gave: a value, an exception, or why the probe cannot know."""

    value: Any = None
    error_type: str | None = None
    error_message: str = ""
    gap: str | None = None
    missing_key: str | None = None
    timeout: bool = False

    @property
    def ok(self) -> bool:
        return self.error_type is None and self.gap is None and self.missing_key is None and not self.timeout

    @property
    def unknowable(self) -> str | None:
        """Why this outcome says nothing about vLLM (None when it does)."""
        if self.gap is not None:
            return f"the code reads {self.gap}, which the probe cannot know"
        if self.missing_key is not None:
            return f"the code reads the config key {self.missing_key!r}, which this drafter config does not set"
        if self.timeout:
            return f"the call did not finish within {CALL_TIMEOUT_S:g} s"
        return None


def run(program: Sequence[Chunk], calls: Sequence[Call], data: dict[str, Any], globals_: dict[str, Any]) -> dict[str, Outcome]:
    """Outcomes by call id. ``globals_`` are stubs bound before the program runs
    (gaps, loggers, envs); a program statement that fails leaves a gap under its name."""
    request = {
        "globals": globals_,
        "program": [{"name": chunk.name, "source": chunk.source} for chunk in program],
        "data": data,
        "calls": [{"id": call.id, "expr": call.expr, "bind": dict(call.bind)} for call in calls],
        "call_timeout_s": CALL_TIMEOUT_S,
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-S", str(HARNESS)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(f"the probe process did not finish within {RUN_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise SandboxError(f"the probe process could not start: {exc.strerror}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise SandboxError(f"the probe process failed (exit {proc.returncode}): {last}")
    try:
        answer = json.loads(proc.stdout)
        results = answer["results"]
    except (ValueError, KeyError, TypeError):
        raise SandboxError("the probe process gave no readable answer") from None
    outcomes = {}
    for call_id, raw in results.items():
        error = raw.get("error") or {}
        outcomes[call_id] = Outcome(
            value=raw.get("value"),
            error_type=error.get("type"),
            error_message=error.get("message", ""),
            gap=raw.get("gap"),
            missing_key=raw.get("missing_key"),
            timeout=bool(raw.get("timeout")),
        )
    return outcomes


# Stub specs understood by the harness (see harness.py).


def data_ref(name: str) -> dict:
    return {"$data": name}


def config_object(label: str, data_name: str) -> dict:
    """A config whose attributes are request data; missing keys raise AttributeError."""
    return {"$obj": label, "data": data_name}


def strict_object(label: str, **attrs: Any) -> dict:
    """An object with exactly these attributes; any other is a gap."""
    return {"$obj": label, "attrs": attrs}


def class_instance(label: str, body: str, **attrs: Any) -> dict:
    return {"$class": label, "body": body, "attrs": attrs}


def gap(label: str) -> dict:
    return {"$gap": label}


def returns(spec: Any) -> dict:
    return {"$returns": spec}


def noop(label: str) -> dict:
    return {"$noop": label}


def unset_env(label: str) -> dict:
    return {"$unset_env": label}
