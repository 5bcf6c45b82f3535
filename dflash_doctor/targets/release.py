"""A released vLLM wheel, downloaded with pip into the user cache; and the
transformers wheel a vLLM requires, fetched the same way.

Only ``vllm/**/*.py`` and the dist-info are kept (about a quarter of the
wheel); the wheel itself is deleted. A second check of the same release
reads the cache and touches no network. Of a transformers wheel only the
sources its config classes live in are kept (``TRANSFORMERS_KEPT``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from ..model import ToolError
from ..paths import cache_dir, is_offline, write_atomically
from ..terminal import progress
from . import ResolvedTarget
from .path import PathTarget

RELEASE = re.compile(r"\d+(\.\d+){1,3}((a|b|rc|\.post|\.dev)\d+)?")
DOWNLOAD_TIMEOUT_S = 1800
COMPLETE = ".complete"
POLL_S = 0.2


def canonical_release(version: str) -> str:
    """The one spelling a release is checked and cached under: the tag form
    ``v0.20.1`` is ``0.20.1``, and ``0.20`` is ``0.20.0`` (the same release
    for the package index, PEP 440)."""
    text = version[1:] if version[:1] in ("v", "V") else version
    if not RELEASE.fullmatch(text):
        raise ToolError(f"not a release version: {version!r} (expected e.g. 0.20.1)")
    numbers, suffix = re.fullmatch(r"([\d.]+?)((?:a|b|rc|\.post|\.dev)\d+)?", text).groups()
    parts = [str(int(part)) for part in numbers.split(".")]
    while len(parts) > 3 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts + ["0"] * (3 - len(parts))) + (suffix or "")


def release_tree(version: str) -> Path:
    """The extracted tree of ``vllm==version``, downloading it if needed."""
    version = canonical_release(version)
    dest = cache_dir() / "releases" / version
    if (dest / COMPLETE).is_file():
        return dest
    if is_offline():
        raise ToolError(f"vLLM release {version} is not in the cache, and --offline fetches nothing")
    with _staging() as staging:
        with progress(f"vllm {version}: downloading the wheel", transfer=True) as update:
            wheel = _download(version, staging, update)
            update(description=f"vllm {version}: extracting the .py files")
            tree = staging / "tree"
            _extract(wheel, tree)
        return _publish(tree, dest, version)


# The transformers sources behaviour reads: the config base, the auto mapping, each model's config module.
TRANSFORMERS_KEPT = ("transformers/*.py", "transformers/models/auto/*.py", "transformers/models/*/configuration_*.py")


def transformers_tree(requirement: str) -> tuple[Path, str]:
    """The extracted sources of the newest transformers wheel satisfying
    ``requirement`` (a PEP 508 requirement on transformers, as a vLLM wheel states
    it), and its version: pip resolves it the first time, the user cache answers
    after that (``transformers/resolved/<sha256 of the requirement>`` names the version)."""
    root = cache_dir() / "transformers"
    pointer = root / "resolved" / hashlib.sha256(requirement.encode()).hexdigest()[:32]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        version = pointer.read_text(encoding="utf-8").strip()
        if RELEASE.fullmatch(version) and (root / version / COMPLETE).is_file():
            return root / version, version
    if is_offline():
        raise ToolError(f"no transformers satisfying {requirement!r} is in the cache, and --offline fetches nothing")
    with _staging() as staging:
        with progress(f"{requirement}: downloading the wheel", transfer=True) as update:
            wheel = _pip_download("transformers", requirement, staging, update)
            version = wheel.name.split("-")[1] if wheel.name.count("-") >= 2 else ""
            if not RELEASE.fullmatch(version):
                raise ToolError(f"pip downloaded {wheel.name} for {requirement}")
            tree = staging / "tree"
            _extract(wheel, tree, TRANSFORMERS_KEPT)
        dest = _publish(tree, root / version, version)
    try:
        pointer.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(pointer, version + "\n")
    except OSError as exc:
        raise ToolError(f"cannot write the cache file {pointer}: {exc.strerror or exc}") from None
    return dest, version


@contextlib.contextmanager
def _staging():
    """A fresh directory under the cache's ``tmp`` (the same file system as the cache)."""
    staging_root = cache_dir() / "tmp"
    try:
        staging_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(f"cannot create the cache directory {staging_root}: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(dir=staging_root) as staging:
        yield Path(staging)


def _publish(tree: Path, dest: Path, version: str) -> Path:
    """Move a complete extracted ``tree`` to ``dest``, unless another run got there first."""
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


def _download(version: str, staging: Path, update) -> Path:
    """The wheel of ``vllm==version`` (``_pip_download``), checked to be that release."""
    wheel = _pip_download("vllm", f"vllm=={version}", staging, update)
    try:
        same = canonical_release(wheel.name.split("-")[1]) == version
    except (IndexError, ToolError):
        same = False
    if not same:
        raise ToolError(f"pip downloaded {wheel.name} for vllm=={version}")
    return wheel


def _pip_download(project: str, requirement: str, staging: Path, update) -> Path:
    """pip downloads the newest wheel of ``project`` satisfying ``requirement`` into
    ``staging/wheel``. Its unpack directory is under ``staging/pip-tmp`` (TMPDIR),
    so the growing file there is the progress, and the size pip announces
    ("Downloading ... (250.3 MB)") the total; its debug log (``--log``) says
    whether an index could not be reached."""
    into, temp, log = staging / "wheel", staging / "pip-tmp", staging / "pip.log"
    temp.mkdir()
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--progress-bar", "off", "--log", str(log),
        "--dest", str(into), requirement,
    ]
    # Appending: the child shares each file's offset with the reads here.
    with open(staging / "pip.out", "a+b") as out, open(staging / "pip.err", "a+b") as err:
        try:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    env={**os.environ, "TMPDIR": str(temp)})
        except OSError as exc:
            raise ToolError(f"cannot run pip: {exc.strerror or exc}") from None
        try:
            deadline = time.monotonic() + DOWNLOAD_TIMEOUT_S
            done = 0
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise ToolError(f"downloading {requirement} took longer than {DOWNLOAD_TIMEOUT_S} s")
                done = max(done, _downloaded(temp, project))  # pip moves the finished file out of sight
                update(completed=done, total=_announced_size(out))
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        errors = err.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        unreachable = unreachable_index(log)
        if unreachable:
            raise ToolError(f"{unreachable}, so {requirement} could not be downloaded: {UNREACHABLE_HINT}")
        if "No matching distribution" in errors or "Could not find a version" in errors:
            if project == "vllm":
                raise ToolError(f"vLLM release {requirement.split('==')[-1]} is not on the package index")
            raise ToolError(f"no wheel of {requirement} is on the package index")
        if "No module named pip" in errors:
            raise ToolError(f"pip is not available in this interpreter; it is needed to download {requirement}")
        lines = [line for line in errors.splitlines() if line.strip() and not line.startswith("WARNING")]
        raise ToolError(f"pip could not download {requirement}: {lines[-1] if lines else 'exit ' + str(proc.returncode)}")
    wheels = sorted(into.glob(f"{project}-*.whl"))
    if not wheels:
        raise ToolError(f"pip downloaded no wheel for {requirement}")
    size = wheels[0].stat().st_size
    update(completed=size, total=size)
    return wheels[0]


def _downloaded(temp: Path, project: str) -> int:
    """Bytes of the wheel pip is writing (in its unpack directory)."""
    total = 0
    with contextlib.suppress(OSError):  # pip removes its unpack directories while this looks
        for unpack in os.scandir(temp):
            with contextlib.suppress(OSError):
                for entry in os.scandir(unpack.path):
                    if entry.name.startswith(f"{project}-") and entry.name.endswith(".whl"):
                        total += entry.stat().st_size
    return total


_ANNOUNCED = re.compile(rb"Downloading \S+ \((\d+(?:\.\d+)?) (bytes|kB|MB|GB)\)")
_UNITS = {b"bytes": 1, b"kB": 1e3, b"MB": 1e6, b"GB": 1e9}


def _announced_size(out) -> float | None:
    """The size pip announced on its standard output (rounded to its unit), None before it did."""
    out.seek(0)
    found = _ANNOUNCED.search(out.read(65536))
    return float(found.group(1)) * _UNITS[found.group(2)] if found else None


UNREACHABLE_HINT = "check the network, or the index pip uses (PIP_INDEX_URL, pip.conf)"
_FETCH_FAILED = re.compile(r"Could not fetch URL (\S+?): (.*?)(?: - skipping)?$", re.MULTILINE)


def unreachable_index(log: Path) -> str | None:
    """"the package index <url> cannot be reached (<why>)" when pip's debug
    log records an index it could not fetch, else None."""
    try:
        with open(log, "rb") as handle:
            text = handle.read(4 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    found = _FETCH_FAILED.search(text)
    if found is None:
        return None
    url, why = found.groups()
    cause = re.search(r">[:,] '?([^'\"]+)", why)  # urllib3 wraps the cause: "...Error('<conn object>: <cause>')"
    return f"the package index {url} cannot be reached ({(cause.group(1) if cause else why).strip()[:200]})"


def _extract(wheel: Path, tree: Path, kept: tuple[str, ...] = ("vllm/**.py",)) -> None:
    """The wheel's files matching a pattern of ``kept`` and its dist-info (``*`` stays
    within a directory, ``**`` crosses them)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                name = member.filename
                keep = any(_matches(name, pattern) for pattern in kept) or (
                    name.split("/", 1)[0].endswith(".dist-info")
                )
                if keep and ".." not in name.split("/"):
                    archive.extract(member, tree)
    except zipfile.BadZipFile:
        raise ToolError(f"the downloaded wheel {wheel.name} is not a valid zip archive") from None


def _matches(name: str, pattern: str) -> bool:
    if "**" in pattern:
        return fnmatch.fnmatchcase(name, pattern.replace("**", "*"))
    return name.count("/") == pattern.count("/") and fnmatch.fnmatchcase(name, pattern)


class ReleaseTarget:
    def __init__(self, version: str) -> None:
        self.version = canonical_release(version)

    def resolve(self) -> ResolvedTarget:
        tree = release_tree(self.version)
        resolved = PathTarget(tree, kind="release", details=(("release", self.version),)).resolve()
        # The tree is the tool's cached copy: the release is named by its version (the SARIF category).
        return dataclasses.replace(resolved, info=dataclasses.replace(resolved.info, name=self.version))
