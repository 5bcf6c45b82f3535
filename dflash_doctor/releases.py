"""The release matrix: an engine's releases × fixes, each cell the verdict of a real check.

Releases come from the package index (``pip index versions vllm``, or the
engine's distribution); each one is checked on its wheel (``release_tree``: fetched once, ``.py`` files and
dist-info kept), ``JOBS`` releases at a time. The report of every release is cached in
``<cache>/matrix/`` (an engine's own ``cache`` directory first), keyed by release, rules content and tool version, so a
second run checks nothing. With ``--offline`` the matrix covers the releases
already in the cache, and says so; an index that does not answer is an error.
A release where a fix is unknown is listed as not judged and left out of the
recommendation (``present_from``, the bottom line).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import __version__
from .check import run_check
from .engines import DEFAULT_ENGINE, Engine
from .model import EXIT_ERROR, EXIT_OK, PRESENT, UNKNOWN, BottomLine, ToolError, engine_json, exit_code_for
from .provenance import version_key
from .paths import cache_dir, OFFLINE, caches_disabled, releases_dir, write_atomically
from .reporters.layout import OUTDENT, Line, render, width_of, words, wrap
from .reporters.table import LABEL, STYLES
from .rules import Rule
from .targets.pip_index import UNREACHABLE_HINT, unreachable_index
from .targets.release import COMPLETE, RELEASE, ReleaseTarget, canonical_release
from .terminal import clean

INDEX_TIMEOUT_S = 20
JOBS = 4  # releases fetched and checked at once


def rules_digest(rules: Iterable[Rule]) -> str:
    digest = hashlib.sha256()
    for rule in sorted(rules, key=lambda rule: rule.id):
        digest.update(rule.id.encode() + b"\0" + rule.source.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Row:
    release: str
    statuses: tuple[tuple[str, str], ...]  # (fix id, verdict)
    cached: bool
    commit: str | None = None
    error: str = ""

    def status(self, fix_id: str) -> str | None:
        return dict(self.statuses).get(fix_id)

    def judged(self, fix_ids: Iterable[str]) -> bool:
        """Checked, and every one of these fixes has an answer (none unknown)."""
        return not self.error and all(self.status(fix_id) not in (None, UNKNOWN) for fix_id in fix_ids)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"release": self.release, "cached": self.cached}
        if self.error:
            data["error"] = self.error
        else:
            data["commit"] = self.commit
            data["fixes"] = dict(self.statuses)
        return data


@dataclasses.dataclass(frozen=True)
class Matrix:
    rules: tuple[Rule, ...]
    rows: tuple[Row, ...]  # oldest first
    index_note: str  # where the list of releases came from
    rules_digest: str
    engine: Engine = DEFAULT_ENGINE

    @property
    def fix_ids(self) -> tuple[str, ...]:
        return tuple(rule.id for rule in self.rules)

    @property
    def exit_code(self) -> int:
        return exit_code_for(EXIT_ERROR if row.error else EXIT_OK for row in self.rows)

    def present_from(self, fix_ids: Iterable[str]) -> str | None:
        """The oldest judged release from which every later judged release has all these fixes present;
        a release that could not be checked, or where one of them is unknown, is skipped."""
        fix_ids = tuple(fix_ids)
        since = None
        for row in self.rows:
            if not row.judged(fix_ids):
                continue
            if all(row.status(fix_id) == PRESENT for fix_id in fix_ids):
                since = since or row.release
            else:
                since = None
        return since

    @property
    def unjudged(self) -> tuple[str, ...]:
        """Checked releases where some fix is unknown: listed, and left out of the recommendation."""
        return tuple(row.release for row in self.rows if not row.error and not row.judged(self.fix_ids))

    @property
    def summary(self) -> BottomLine:
        """The matrix's bottom line: the release from which every fix is present, in every later judged release."""
        return BottomLine.needing(
            self.fix_ids,
            [self.present_from(self.fix_ids)],
            selected=len(self.fix_ids),
            checked=True,
            engine=self.engine,
        )

    def to_json(self) -> dict[str, Any]:
        fixes = []
        for rule in self.rules:
            checked = [row.release for row in self.rows if row.judged([rule.id])]
            since = self.present_from([rule.id])
            fixes.append(
                {
                    "id": rule.id,
                    "title": rule.title,
                    "present_from": since,
                    "present_in_oldest_checked": bool(checked) and since == checked[0],
                    "first_release_in_rules": rule.first_release,
                }
            )
        return {
            "schema": "dflash-doctor/releases/v1",
            "tool_version": __version__,
            "rules_digest": self.rules_digest,
            "engine": self.engine.name,
            "releases_from": self.index_note,
            "fixes": fixes,
            "all_present_from": self.present_from(self.fix_ids),
            "releases": [row.to_json() for row in self.rows],
            "unjudged": list(self.unjudged),
            "summary": self.summary.to_json(),
            "exit_code": self.exit_code,
        }


def index_releases(engine: Engine = DEFAULT_ENGINE) -> list[str]:
    """Every final release of the engine the configured package index lists, oldest first;
    ToolError when it cannot say."""
    project = engine.distribution
    with tempfile.TemporaryDirectory(prefix="dflash-doctor-") as temp:
        log = Path(temp) / "pip.log"
        command = [
            sys.executable,
            "-m",
            "pip",
            "index",
            "versions",
            project,
            "--disable-pip-version-check",
            "--timeout",
            str(INDEX_TIMEOUT_S),
            "--retries",
            "1",
            "--log",
            str(log),
        ]
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=INDEX_TIMEOUT_S * 4, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise ToolError(f"pip index versions {project} did not answer within {INDEX_TIMEOUT_S * 4} s") from None
        except OSError as exc:
            raise ToolError(f"cannot run pip: {exc.strerror or exc}") from None
        for line in proc.stdout.splitlines():
            if line.startswith("Available versions:"):
                versions = [v.strip() for v in line.split(":", 1)[1].split(",")]
                return sorted((v for v in versions if RELEASE.fullmatch(v)), key=version_key)
        try:
            unreachable = unreachable_index(log.read_text(encoding="utf-8", errors="replace")[: 4 << 20])
        except OSError:
            unreachable = None
    if unreachable:
        raise ToolError(f"{unreachable}: {UNREACHABLE_HINT}")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    raise ToolError(f"pip index versions {project}: {errors[-1] if errors else 'exit ' + str(proc.returncode)}")


def cached_releases(digest: str, engine: Engine = DEFAULT_ENGINE) -> list[str]:
    """Releases answerable without the network: a cached matrix row, or an extracted wheel."""
    names = [path.name.rsplit("-", 2)[0] for path in _matrix_dir(engine).glob(f"*-{digest[:16]}-{__version__}.json")]
    names += [path.parent.name for path in releases_dir(engine).glob(f"*/{COMPLETE}")]
    found = set()
    for name in names:
        with contextlib.suppress(ToolError):
            found.add(canonical_release(name))  # a tree an older version cached as 0.20 is 0.20.0
    return sorted(found, key=version_key)


def in_range(
    versions: Iterable[str], first: str | None, last: str | None, engine: Engine = DEFAULT_ENGINE
) -> list[str]:
    """The versions from ``first`` to ``last``. By default from the last of ``versions`` before the engine's
    first release with DFlash (its fixes not-applicable: where DFlash starts shows), else from that first one."""
    versions = sorted(versions, key=version_key)
    if first is None:
        before = [v for v in versions if version_key(v) < version_key(engine.first_dflash)]
        first = before[-1] if before else engine.first_dflash
    low = version_key(first)
    high = version_key(last) if last else None
    if high is not None and high < low:
        raise ToolError(f"--from {first} is newer than --to {last}")
    return [v for v in versions if version_key(v) >= low and (high is None or version_key(v) <= high)]


def plan(
    first: str | None, last: str | None, offline: bool, digest: str, engine: Engine = DEFAULT_ENGINE
) -> tuple[list[str], str]:
    """The releases to put in the matrix, and where their list came from."""
    # A bad bound is an error before any network use; v0.20.1 and 0.20 mean 0.20.1 and 0.20.0.
    first, last = (canonical_release(bound) if bound is not None else None for bound in (first, last))
    if not offline:  # an index that does not answer is an error (naming it): only --offline settles for the cache
        try:
            listed = index_releases(engine)
        except ToolError as exc:
            raise ToolError(f"{exc}; or pass --offline for the releases already in the cache") from None
        releases = in_range(listed, first, last, engine)
        if not releases:
            raise ToolError(
                f"the package index lists no {engine.display} release from {first or engine.first_dflash} to "
                f"{last or 'the newest'}"
            )
        return releases, "package index"
    releases = in_range(cached_releases(digest, engine), first, last, engine)
    if not releases:
        raise ToolError(f"cannot list {engine.display} releases (--offline) and no release in the range is cached")
    return releases, "cache only (--offline)"


def _matrix_dir(engine: Engine) -> Path:
    return cache_dir() / engine.cache / "matrix"


def _row_path(release: str, digest: str, engine: Engine) -> Path:
    return _matrix_dir(engine) / f"{release}-{digest[:16]}-{__version__}.json"


def release_row(release: str, rules: tuple[Rule, ...], digest: str, engine: Engine = DEFAULT_ENGINE) -> Row:
    """One release's verdicts: from the matrix cache, else by checking its wheel."""
    use_cache = not caches_disabled()
    path = _row_path(release, digest, engine)
    if use_cache:
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
            return _row(release, report, cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass

    try:
        report = run_check(ReleaseTarget(release, engine), rules).to_json()
    except ToolError as exc:
        return Row(release, (), cached=False, error=str(exc))
    judged = all(fix["status"] != UNKNOWN for fix in report["fixes"])
    if use_cache and (judged or not OFFLINE):  # offline, an unknown may be what could not be fetched
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(report))
        except (OSError, ToolError):
            pass  # a cache that cannot be written only costs time
    return _row(release, report, cached=False)


def release_rows(
    releases: list[str],
    rules: tuple[Rule, ...],
    digest: str,
    update: Callable[..., None],
    engine: Engine = DEFAULT_ENGINE,
) -> list[Row]:
    """``release_row`` of each release, ``JOBS`` at a time (their downloads, and their checks), in the order given;
    ``update`` says how many are done and which are being checked. Each runs in a copy of this context: a
    progress bar shown here shows theirs below it."""
    running: list[str] = []
    lock = threading.Lock()

    def one(release: str) -> Row:
        with lock:
            running.append(release)
            update(description=f"{engine.distribution} {', '.join(running)}")
        try:
            return release_row(release, rules, digest, engine)
        finally:
            with lock:
                running.remove(release)

    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, release) for release in releases]
        for done, _ in enumerate(concurrent.futures.as_completed(futures), 1):
            update(completed=done)
    return [future.result() for future in futures]


def _row(release: str, report: dict[str, Any], cached: bool) -> Row:
    statuses = tuple((fix["id"], fix["status"]) for fix in report["fixes"])
    return Row(release, statuses, cached=cached, commit=engine_json(report)["commit"])


# Rendering ------------------------------------------------------------------------------------


def _cells(matrix: Matrix, row: Row) -> list[str]:
    if row.error:
        return [f"error: {clean(row.error)}"] + [""] * (len(matrix.fix_ids) - 1)
    return [row.status(fix_id) or "-" for fix_id in matrix.fix_ids]


def _all_present(matrix: Matrix, row: Row) -> str:
    if not row.error and not row.judged(matrix.fix_ids):
        return "not judged"
    return "yes" if not row.error and all(row.status(f) == PRESENT for f in matrix.fix_ids) else ""


def _since_lines(matrix: Matrix) -> list[str]:
    data = matrix.to_json()
    lines = []
    for fix in data["fixes"]:
        since = fix["present_from"]
        if since is None:
            text = "not present in the newest release checked"
        else:
            text = since + (" (or earlier: the oldest release checked)" if fix["present_in_oldest_checked"] else "")
        if since and fix["first_release_in_rules"] not in (None, since) and not fix["present_in_oldest_checked"]:
            text += f" (the rule says {fix['first_release_in_rules']})"
        lines.append(f"{fix['id']}: {text}")
    every = data["all_present_from"]
    lines.append(f"every fix: {every or 'no release checked has them all'}")
    return lines


def _closing_lines(matrix: Matrix) -> list[str]:
    """Where the releases came from, the releases left out of the recommendation, then the bottom line."""
    lines = [f"releases from: {matrix.index_note}"]
    if matrix.unjudged:
        lines.append(f"not judged (a fix unknown; left out of the bottom line): {', '.join(matrix.unjudged)}")
    return lines + [f"bottom line: {matrix.summary.sentence()}"]


def render_plain(matrix: Matrix) -> str:
    header = ["release", *matrix.fix_ids, "all present"]
    body = [[clean(row.release), *_cells(matrix, row), _all_present(matrix, row)] for row in matrix.rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header) - 1)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] for line in [header, *body]
    ]
    lines = [line.rstrip() for line in lines]
    lines += ["", "present from (every later release checked has it):"]
    lines += [f"  {line}" for line in _since_lines(matrix)]
    lines += _closing_lines(matrix)
    return "\n".join(lines) + "\n"


def render_terminal(matrix: Matrix, width: int) -> str:
    """The matrix laid out for a terminal ``width`` columns wide (reporters/layout.py): no line wider, no word
    cut. Where the columns do not fit, each release stands on its own line with its verdicts below it."""
    header = ["release", *matrix.fix_ids, "all present"]
    body = [[clean(row.release), *_cells(matrix, row), _all_present(matrix, row)] for row in matrix.rows]
    sizes = [
        max(width_of(line[i]) for line in [header] + [b for b, row in zip(body, matrix.rows) if not row.error])
        for i in range(len(header))
    ]
    table = sum(sizes) + 2 * (len(sizes) - 1) <= width
    lines: list[Line] = [[(f"{matrix.engine.display} releases × DFlash fixes", "bold")]]
    if table:
        lines.append([(cell.ljust(size + 2), LABEL) for cell, size in zip(header, sizes)])
    for row, cells in zip(matrix.rows, body):
        lead = cells[0].ljust(sizes[0] + 2)
        if row.error:
            lines += wrap(words(cells[1]), width, [(lead if table else cells[0] + "  ", "bold red")], OUTDENT)
        elif table:
            lines.append(
                [(lead, "")]
                + [(cell.ljust(size + 2), STYLES.get(cell, "")) for cell, size in zip(cells[1:], sizes[1:])]
            )
        else:
            verdicts = [(f"{fix_id} {cell}", STYLES.get(cell, "")) for fix_id, cell in zip(matrix.fix_ids, cells[1:])]
            last = {"yes": "all present", "": ""}.get(cells[-1], cells[-1])
            lines += wrap(verdicts + ([(last, "bold")] if last else []), width, [(lead, "bold")], OUTDENT, gap="  ")
    lines += [[], [("present from (every later release checked has it):", "")]]
    for text in _since_lines(matrix):
        lines += wrap(words(text), width, [("  ", "")], 6)
    for text in _closing_lines(matrix):
        lines += wrap(words(text), width, [], OUTDENT)
    return render(lines, True)


def render_markdown(matrix: Matrix) -> str:
    header = ["release", *(f"`{fix_id}`" for fix_id in matrix.fix_ids), "all present"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in matrix.rows:
        cells = [cell.replace("|", "\\|") for cell in _cells(matrix, row)]
        lines.append("| " + " | ".join([row.release, *cells, _all_present(matrix, row)]) + " |")
    lines += ["", "Present from (every later release checked has it):", ""]
    lines += [f"- {line}" for line in _since_lines(matrix)]
    lines += [""] + [f"{line[0].upper()}{line[1:]}." for line in _closing_lines(matrix)]
    return "\n".join(lines) + "\n"
