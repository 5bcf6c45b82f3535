"""What a tree says about itself: version, build commit, local edits; which
distribution owns it (the engine's own, or a vendor build or fork under another
name), what release of the engine that one is based on, and the platform it is
built for. Where each is written is the tree's engine's (``engines/``)."""

from __future__ import annotations

import ast
import base64
import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path

from .standalone import probe
from .engines import DEFAULT_ENGINE, Engine
from .model import (
    ABSENT,
    NOT_APPLICABLE,
    PARTIAL,
    BasedOn,
    Distribution,
    FixResult,
    Platform,
    Provenance,
    ToolError,
)
from .paths import releases_dir
from .source import SourceError, SourceTree, parse_python

_LOCAL_SHA = re.compile(r"\+g([0-9a-f]{7,40})\b")
_COMMIT = re.compile(r"^g?([0-9a-f]{7,40})$")
_SUFFIX_RANK = {".dev": 0, "a": 1, "b": 2, "rc": 3, "": 4, ".post": 5}


def find_dist_info(root: Path, package: str = DEFAULT_ENGINE.package) -> Path | None:
    """The .dist-info (or .egg-info) that owns ``root/package``, whatever the distribution's name."""
    found = probe.find_dist_info(str(root), package)
    return Path(found) if found else None


def read_provenance(tree: SourceTree) -> Provenance:
    """Version, commit and local edits of the files the rules read so far; the
    distribution, what it is based on, and the platform."""
    engine = tree.engine
    fields = _metadata_fields(tree.dist_info_text("METADATA") or "")
    distribution = _distribution(fields)
    version = fields.get("Version")
    try:
        version_py = tree.read(engine.version_file)
    except SourceError:
        version_py = None
    version_file = (
        _version_file_values(version_py.decode("utf-8", "replace"), engine.version_file) if version_py else {}
    )
    version = version or version_file.get("__version__")

    commit, source = None, None
    direct_url = tree.dist_info_text("direct_url.json")
    if direct_url:
        commit = _direct_url_commit(direct_url)
        source = "direct_url.json" if commit else None
    written = next((version_file[name] for name in engine.commit_names if version_file.get(name)), None)
    if not commit and written:
        found = _COMMIT.match(written)
        if found:
            commit, source = found.group(1), engine.version_file.rsplit("/", 1)[-1]
    if not commit and version:
        found = _LOCAL_SHA.search(version)
        if found:
            commit, source = found.group(1), "version"

    record = tree.dist_info_text("RECORD")
    modified = _modified_files(record, tree.inspected()) if record else None
    based_on = None
    if distribution is not None and not engine.is_own_distribution(distribution.name):
        releases, equal, compared = nearest_releases(tree.inspected(), engine)
        built_from = commit if source == engine.version_file.rsplit("/", 1)[-1] else None
        based_on = BasedOn(built_from, releases, equal, compared) if built_from or releases else None
    return Provenance(
        version, commit, source, modified, distribution, based_on, _platform(distribution, engine), engine
    )


def read_platform(tree: SourceTree) -> Platform:
    """The platform the tree is built for: the engine's default (CUDA) unless its distribution
    says otherwise (cheap: one dist-info file; the behaviour engine can ask before anything is judged)."""
    return _platform(_distribution(_metadata_fields(tree.dist_info_text("METADATA") or "")), tree.engine)


def _platform(distribution: Distribution | None, engine: Engine) -> Platform:
    """From the words of the distribution's name, then the labels of its local version
    ("+cu129", "+rocm632"; "." before them when the version already has a local part)."""
    default = Platform(engine.default_platform, "default")
    if distribution is None:
        return default
    for word in re.split(r"[-_.]+", distribution.name.lower()):
        name = engine.platform(word)
        if name:
            return Platform(name, "distribution", distribution.name)
    local = (distribution.version or "").partition("+")[2]
    for word in local.lower().split("."):
        name = engine.platform(word)
        if name:
            return Platform(name, "version", "+" + local)
    return default


def nearest_releases(inspected: Mapping[str, str], engine: Engine) -> tuple[tuple[str, ...], int, int]:
    """The releases in the user cache whose RECORD has the most of the inspected files'
    sha256 (equally near ones together, oldest first), how many of them, and of how many
    package files; ((), 0, M) when no release is cached. Nothing is downloaded."""
    wanted = {path: "sha256=" + record_digest(digest) for path, digest in inspected.items() if engine.owns(path)}
    scores: dict[str, int] = {}
    for complete in releases_dir(engine).glob("*/.complete"):
        for dist_info in complete.parent.glob(f"{engine.distribution}-*.dist-info"):
            data, _ = probe.read_regular(str(dist_info / "RECORD"))
            if data is not None:
                scores[complete.parent.name] = sum(
                    probe.recorded_hash(data, path) == digest for path, digest in wanted.items()
                )
    releases = []
    for name in scores:
        try:
            version_key(name)
        except ToolError:  # not a directory release_tree made
            continue
        releases.append(name)
    best = max((scores[name] for name in releases), default=0)
    nearest = tuple(sorted((name for name in releases if scores[name] == best), key=version_key)) if best else ()
    return nearest, best, len(wanted)


def version_key(version: str) -> tuple:
    """Sort key for the versions RELEASE accepts (PEP 440 order for these forms)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*)(\.dev|a|b|rc|\.post)?(\d+)?", version)
    if match is None:
        raise ToolError(f"not a release version: {version!r} (expected e.g. 0.20.1)")
    numbers = tuple(int(part) for part in match.group(1).split("."))
    numbers += (0,) * (4 - len(numbers))
    return numbers, _SUFFIX_RANK[match.group(2) or ""], int(match.group(3) or 0)


def for_distribution(fixes: tuple[FixResult, ...], provenance: Provenance) -> tuple[FixResult, ...]:
    """Remedies that speak of the distribution installed: a vendor build or fork is not
    fixed by upgrading the engine, but by its vendor (or a patch); the engine's own remedy follows."""
    distribution, engine = provenance.distribution, provenance.engine
    if distribution is None or provenance.vendor is None:
        return fixes
    this = (
        f"This is {distribution.name} {distribution.version or ''}".rstrip()
        + f", a vendor build or fork of {engine.display}, not {engine.display} itself:"
    )
    asks = {
        ABSENT: "ask its vendor for a build with this fix, or patch it in place (`dflash-doctor patch`).",
        PARTIAL: "ask its vendor for a build with this fix, or patch it in place (`dflash-doctor patch`).",
        NOT_APPLICABLE: "ask its vendor for a build with DFlash.",
    }
    return tuple(
        dataclasses.replace(fix, remedy=f"{this} {asks[fix.status]} In {engine.display} itself: {fix.remedy}")
        if fix.status in asks
        else fix
        for fix in fixes
    )


def _metadata_fields(metadata: str) -> dict[str, str]:
    """Name and Version from a METADATA (or PKG-INFO) header, the first of each."""
    fields: dict[str, str] = {}
    for line in metadata.splitlines():
        if not line.strip():
            break
        key, colon, value = line.partition(":")
        if colon and key in ("Name", "Version") and key not in fields and value.strip():
            fields[key] = value.strip()
    return fields


# A distribution name as the package index allows it (PEP 508), of a sane length: anything
# else a METADATA says is not a name to put in the report's header and remedies.
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")


def _distribution(fields: Mapping[str, str]) -> Distribution | None:
    name = fields.get("Name", "")
    return Distribution(name, fields.get("Version")) if _NAME.match(name) else None


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


def _version_file_values(text: str, relpath: str) -> dict[str, str]:
    """String assignments in the version file (``_version.py``), read without executing it."""
    values: dict[str, str] = {}
    try:
        tree = parse_python(text, relpath)
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
    """The inspected files whose sha256 is not the one RECORD gives them (only their rows are
    read, in one pass: a search of RECORD per file took ~15 ms on 0.34.0's)."""
    wanted = {path.encode("utf-8"): path for path in inspected}
    found: dict[str, str | None] = dict.fromkeys(inspected)
    for row in record.encode("utf-8").split(b"\n"):
        path = wanted.pop(row.partition(b",")[0], None)  # the first row of a path, as a search finds
        if path is not None:
            found[path] = probe.recorded_hash(row, path)
    return tuple(
        sorted(
            path
            for path, digest in inspected.items()
            if (found[path] or "").startswith("sha256=") and found[path] != "sha256=" + record_digest(digest)
        )
    )
