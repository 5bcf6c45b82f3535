"""What a tree says about itself: version, build commit, local edits."""

from __future__ import annotations

import ast
import base64
import csv
import io
import json
import re
from pathlib import Path

from .model import Provenance
from .source import SourceError, SourceTree, parse_python

_LOCAL_SHA = re.compile(r"\+g([0-9a-f]{7,40})\b")
_COMMIT = re.compile(r"^g?([0-9a-f]{7,40})$")


def find_dist_info(root: Path, package: str = "vllm") -> Path | None:
    """The ``vllm-*.dist-info`` directory beside the package, if any."""
    candidates = sorted(root.glob(f"{package}-*.dist-info"))
    return candidates[-1] if candidates else None


def read_provenance(tree: SourceTree) -> Provenance:
    """Version, commit and local edits of the files the rules read so far."""
    metadata = tree.dist_info_text("METADATA")
    version = _metadata_version(metadata) if metadata else None
    try:
        version_py = tree.read("vllm/_version.py")
    except SourceError:
        version_py = None
    version_file = _version_file_values(version_py.decode("utf-8", "replace")) if version_py else {}
    version = version or version_file.get("__version__")

    commit, source = None, None
    direct_url = tree.dist_info_text("direct_url.json")
    if direct_url:
        commit = _direct_url_commit(direct_url)
        source = "direct_url.json" if commit else None
    if not commit and version_file.get("__commit_id__"):
        found = _COMMIT.match(version_file["__commit_id__"])
        if found:
            commit, source = found.group(1), "_version.py"
    if not commit and version:
        found = _LOCAL_SHA.search(version)
        if found:
            commit, source = found.group(1), "version"

    record = tree.dist_info_text("RECORD")
    modified = _modified_files(record, tree.inspected()) if record else None
    return Provenance(version, commit, source, modified)


def _direct_url_commit(text: str) -> str | None:
    """``vcs_info.commit_id`` when it is a commit sha; None for anything else the file holds."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to be a direct_url.json
        return None
    vcs_info = data.get("vcs_info") if isinstance(data, dict) else None
    commit = vcs_info.get("commit_id") if isinstance(vcs_info, dict) else None
    found = _COMMIT.match(commit) if isinstance(commit, str) else None
    return found.group(1) if found else None


def _metadata_version(metadata: str) -> str | None:
    for line in metadata.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    return None


def _version_file_values(text: str) -> dict[str, str]:
    """String assignments in ``_version.py``, read without executing it."""
    values: dict[str, str] = {}
    try:
        tree = parse_python(text, "vllm/_version.py")
    except SyntaxError:
        return values
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = node.value.value
    return values


def record_digest(sha256_hex: str) -> str:
    """The RECORD spelling of a sha256: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).rstrip(b"=").decode()


def _modified_files(record: str, inspected: dict[str, str]) -> tuple[str, ...]:
    expected: dict[str, str] = {}
    for row in csv.reader(io.StringIO(record)):
        if len(row) >= 2 and row[1].startswith("sha256="):
            expected[row[0]] = row[1][len("sha256="):]
    return tuple(
        sorted(path for path, digest in inspected.items() if path in expected and expected[path] != record_digest(digest))
    )
