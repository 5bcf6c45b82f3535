"""Running the stdlib probe and reading its answer (local, ssh, probe files).

The answer comes from a machine or file that may be hostile: its size is
capped before and after decompression, and every field is type-checked before
anything reads it."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import zlib
from collections.abc import Iterable
from pathlib import Path

from ..engines import DEFAULT_ENGINE, Engine
from ..model import ToolError
from ..standalone.probe import MARKER
from ..rules import Rule, reference_configs
from ..source import search_name

# The transformers files a collector sends beside the engine's tree (``collected_files``).
INIT = "transformers/__init__.py"
AUTO_FILES = ("transformers/models/auto/configuration_auto.py", "transformers/models/auto/auto_mappings.py")
_MODULE = re.compile(r"[a-z0-9_]{1,64}")
MIB = 1024 * 1024
# The most a probe may print: a real answer for every rule is well under 1 MiB.
MAX_OUTPUT_BYTES = 32 * MIB
# The most its compressed answer may expand to (the probe sends files of up to 8 MiB).
MAX_ANSWER_BYTES = 64 * MIB

_TEXT = (str,)
_MAYBE_TEXT = (str, type(None))
# Field: (types of the value, types of a mapping's values; None when not a mapping).
_FIELDS = {
    "error": (_TEXT, None),
    "python": (_TEXT, None),
    "python_version": (_TEXT, None),
    "host": (_TEXT, None),
    "root": (_TEXT, None),
    "package": (_TEXT, None),
    "package_dir": (_TEXT, None),
    "version": (_MAYBE_TEXT, None),
    "dist_info": (_MAYBE_TEXT, None),
    "files": ((dict,), _MAYBE_TEXT),
    "sha256": ((dict,), _TEXT),
    "file_errors": ((dict,), _TEXT),
    "dist_info_files": ((dict,), _TEXT),
    "search": ((dict,), (list,)),
    "found": ((list,), None),
}


def probe_source() -> str:
    return Path(__file__).resolve().parent.parent.joinpath("standalone", "probe.py").read_text(encoding="utf-8")


def collected_files(model_types: Iterable[str]) -> list[str]:
    """The transformers files a collector sends beside the vLLM tree's, for these model types:
    the version, the auto mapping, the helpers config classes call, and each type's module."""
    files = [INIT, *AUTO_FILES, "transformers/configuration_utils.py", "transformers/modeling_rope_utils.py"]
    return files + [
        f"transformers/models/{kind}/configuration_{kind}.py"
        for kind in sorted(set(model_types))
        if _MODULE.fullmatch(kind)
    ]


def probe_request(rules: tuple[Rule, ...], engine: Engine = DEFAULT_ENGINE) -> dict:
    """The engine's package, the files the rules read, the transformers files beside them that
    build the reference drafters' configs, and the anchors the probe must search for if moved."""
    rules = tuple(rule for rule in rules if rule.engine == engine.name)  # another engine's rules read nothing here
    files = {relpath for rule in rules for relpath in rule.files}  # anchors, applicability, behaviour
    # the package __init__.py files Python runs before each of them (a rebinding there replaces their code)
    files |= {
        "/".join(relpath.split("/")[:depth]) + "/__init__.py"
        for relpath in set(files)
        for depth in range(1, relpath.count("/") + 1)
    }
    files |= set(
        collected_files(
            str(d.data["model_type"]) for _, d in reference_configs() if isinstance(d.data.get("model_type"), str)
        )
    )
    anchors = {(a.file, search_name(a.symbol)) for rule in rules for a in rule.anchors if not a.optional}
    anchors |= {(rule.applies.file, search_name(rule.applies.symbol)) for rule in rules}
    return {
        "package": engine.package,
        "version_file": engine.version_file,
        "files": sorted(files | {engine.version_file}),
        "anchors": sorted(map(list, anchors)),
    }


def answered(output: bytes) -> bool:
    """Whether ``output`` holds a whole marked line (a staged collector's first part)."""
    at = output.rfind(MARKER.encode())
    return at >= 0 and b"\n" in output[at:]


def held_back(answer: dict) -> set[str]:
    """The files a staged collector hashed but has not sent yet."""
    return set(answer.get("sha256", {})) - set(answer.get("files", {}))


def encode_request(request: dict) -> str:
    return base64.b64encode(json.dumps(request).encode()).decode("ascii")


def read_probe_file(path: Path) -> str:
    """A probe answer file: a regular file (never a FIFO or device), read up to the output cap."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ToolError(f"probe file {path} is not a regular file")
            data = handle.read(MAX_OUTPUT_BYTES + 1)
    except OSError as exc:
        raise ToolError(f"cannot read probe file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_OUTPUT_BYTES:
        raise ToolError(f"probe file {path} is larger than {MAX_OUTPUT_BYTES // MIB} MiB: not a probe answer")
    return data.decode("utf-8", "replace")


def parse_probe_output(stdout: str, who: str) -> dict:
    """The last marked line of the probe's output; junk before it is ignored."""
    for line in reversed(stdout.splitlines()):
        if not line.startswith(MARKER):
            continue
        payload = line[len(MARKER) :].strip()
        try:
            if not payload.startswith("{"):
                payload = _inflate(base64.b64decode(payload, validate=True), who).decode("utf-8")
            answer = json.loads(payload)
        except (ValueError, RecursionError, zlib.error):
            break
        if isinstance(answer, dict):
            return _checked(answer, who)
        break
    raise ToolError(f"{who} did not answer the probe (printed {len(stdout)} bytes without a probe result)")


def _inflate(data: bytes, who: str) -> bytes:
    """zlib data expanded to at most MAX_ANSWER_BYTES: a bomb stops at the cap."""
    inflater = zlib.decompressobj()
    expanded = inflater.decompress(data, MAX_ANSWER_BYTES)
    if inflater.unconsumed_tail:
        raise ToolError(f"{who}: the probe answer expands past {MAX_ANSWER_BYTES // MIB} MiB: refused")
    if not inflater.eof:
        raise ValueError("truncated")
    return expanded


def _checked(answer: dict, who: str) -> dict:
    """The answer when every known field has its type; else a ToolError naming the field."""
    for field, (kinds, values) in _FIELDS.items():
        if field not in answer:
            continue
        value = answer[field]
        good = isinstance(value, kinds) and (
            values is None
            or isinstance(value, dict)
            and all(isinstance(k, str) and isinstance(v, values) for k, v in value.items())
        )
        if good and field == "search":
            good = all(isinstance(item, str) for items in value.values() for item in items)
        if good and field == "found":
            good = all(isinstance(item, str) for item in value)
        if not good:
            raise ToolError(f"{who}: the probe answer is malformed: field {field!r} has the wrong type")
    return answer
