"""The environment of a Python interpreter, asked with the stdlib probe."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..engines import DEFAULT_ENGINE, Engine
from ..model import TargetInfo, ToolError
from ..provenance import find_dist_info
from ..source import DirectoryTree
from . import ResolvedTarget, local
from .path import package_root
from .probing import parse_probe_output, probe_source

PROBE_TIMEOUT_S = 60


def locate_in(python: str, engine: Engine) -> dict:
    """The collector's answer, run by ``python``, on where the engine's package is (``error`` when it is not there)."""
    who = f"interpreter {python}"
    try:
        proc = subprocess.run(
            # -I -S: none of the environment's .pth files or sitecustomize runs (probe.add_site_dirs).
            [python, "-I", "-S", "-", "locate", engine.package],
            input=probe_source(),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            errors="replace",
        )
    except FileNotFoundError:
        raise ToolError(f"{who} not found") from None
    except PermissionError:
        raise ToolError(f"{who} is not executable") from None
    except OSError as exc:
        raise ToolError(f"{who} cannot be run: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{who} did not answer within {PROBE_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no error output"])[-1]
        raise ToolError(f"{who} failed (exit {proc.returncode}): {last}")
    return parse_probe_output(proc.stdout, who)


class InterpreterTarget:
    def __init__(self, python: str, engine: Engine = DEFAULT_ENGINE, answer: dict | None = None) -> None:
        self.python = python
        self.engine = engine
        self.answer = answer  # what ``locate_in`` answered already (detecting the engine), else asked on resolving

    def resolve(self) -> ResolvedTarget:
        who = f"interpreter {self.python}"
        answer = self.answer if self.answer is not None else locate_in(self.python, self.engine)
        if answer.get("error"):
            raise ToolError(f"{who}: {answer['error']} (point at it with --python, --path, --release or --host)")
        if not answer.get("package_dir"):
            raise ToolError(f"{who}: the probe answer names no package directory")
        package_dir = Path(answer["package_dir"])
        root = package_root(package_dir, self.engine)
        dist_info = Path(answer["dist_info"]) if answer.get("dist_info") else find_dist_info(root, self.engine.package)
        details = (("python", str(answer.get("python") or self.python)),)
        return local(
            DirectoryTree(root, dist_info, self.engine), TargetInfo("python", str(root), details, directory=True)
        )
