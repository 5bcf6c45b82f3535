"""A released vLLM wheel, downloaded with pip into the user cache.

Only ``vllm/**/*.py`` and the dist-info are kept (about a quarter of the
wheel); the wheel itself is deleted. A second check of the same release
reads the cache and touches no network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..model import ToolError
from ..paths import cache_dir
from . import ResolvedTarget
from .path import PathTarget

RELEASE = re.compile(r"\d+(\.\d+){1,3}((a|b|rc|\.post|\.dev)\d+)?")
DOWNLOAD_TIMEOUT_S = 1800
COMPLETE = ".complete"


def release_tree(version: str) -> Path:
    """The extracted tree of ``vllm==version``, downloading it if needed."""
    if not RELEASE.fullmatch(version):
        raise ToolError(f"not a release version: {version!r} (expected e.g. 0.20.1)")
    dest = cache_dir() / "releases" / version
    if (dest / COMPLETE).is_file():
        return dest
    staging_root = cache_dir() / "tmp"
    try:
        staging_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(f"cannot create the cache directory {staging_root}: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(dir=staging_root) as staging:
        wheel = _download(version, Path(staging) / "wheel")
        tree = Path(staging) / "tree"
        _extract(wheel, tree)
        (tree / COMPLETE).write_text(version + "\n", encoding="utf-8")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():  # an interrupted earlier run, or a concurrent one
            if (dest / COMPLETE).is_file():
                return dest
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.replace(tree, dest)
        except OSError:
            if not (dest / COMPLETE).is_file():
                raise
    return dest


def _download(version: str, into: Path) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--quiet", "--dest", str(into), f"vllm=={version}",
    ]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ToolError(f"downloading vllm=={version} took longer than {DOWNLOAD_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        if "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr:
            raise ToolError(f"vLLM release {version} is not on the package index")
        if "No module named pip" in proc.stderr:
            raise ToolError("pip is not available in this interpreter; it is needed to download a release")
        lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        raise ToolError(f"pip could not download vllm=={version}: {lines[-1] if lines else 'exit ' + str(proc.returncode)}")
    wheels = sorted(into.glob("vllm-*.whl"))
    if not wheels:
        raise ToolError(f"pip downloaded no wheel for vllm=={version}")
    return wheels[0]


def _extract(wheel: Path, tree: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                name = member.filename
                keep = (name.startswith("vllm/") and name.endswith(".py")) or (
                    name.split("/", 1)[0].endswith(".dist-info")
                )
                if keep and ".." not in name.split("/"):
                    archive.extract(member, tree)
    except zipfile.BadZipFile:
        raise ToolError(f"the downloaded wheel {wheel.name} is not a valid zip archive") from None


class ReleaseTarget:
    def __init__(self, version: str) -> None:
        self.version = version

    def resolve(self) -> ResolvedTarget:
        tree = release_tree(self.version)
        return PathTarget(tree, kind="release", details=(("release", self.version),)).resolve()
