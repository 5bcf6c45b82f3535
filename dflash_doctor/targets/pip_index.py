"""Which wheel pip would download, and an HTTP session that fetches it as pip would.

pip itself answers: its ``download`` command parses the user's configuration
(pip.conf, ``PIP_*`` variables: index URL, extra indexes, find-links, cert,
client cert, proxy, timeout, retries, trusted hosts, keyring provider), builds
its session (credentials from the index URLs, netrc or keyring) and its package
finder, and the finder picks the wheel ``pip download --no-deps --only-binary
:all:`` would. Nothing here reads a pip configuration file itself. pip never
prompts (``--no-input``) and its HTTP cache is not used (a range answer is
not cacheable, and the cache holds the extracted tree).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

from ..model import ToolError

UNREACHABLE_HINT = "check the network, or the index pip uses (PIP_INDEX_URL, pip.conf)"
_FETCH_FAILED = re.compile(r"Could not fetch URL (\S+?): (.*?)(?: - skipping)?$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Located:
    """The wheel pip chose: its URL (credentials included, as pip would send them), file name,
    the sha256 the index states for it (None when it states none), and pip's session."""

    url: str
    filename: str
    sha256: str | None
    session: Any  # pip's PipSession (a requests.Session)

    @property
    def shown(self) -> str:
        """The URL without credentials, for messages."""
        from pip._internal.utils.misc import redact_auth_from_url

        return redact_auth_from_url(self.url)


def locate(project: str, requirement: str, missing: str | None = None) -> Located:
    """The newest wheel of ``project`` satisfying ``requirement`` (PEP 508) on the indexes pip is
    configured with; a ToolError saying an index cannot be reached, or that no wheel matches
    (``missing``, else a sentence naming the requirement)."""
    try:
        from pip._internal.commands import create_command
        from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        raise ToolError(f"pip is not available in this interpreter; it is needed to download {requirement}") from None
    try:
        specifier = Requirement(requirement).specifier
    except InvalidRequirement:
        raise ToolError(f"not a requirement pip can read: {requirement!r}") from None
    said = io.StringIO()
    try:
        command: Any = create_command("download")
        # What pip says of a configuration it cannot read (on either stream) is the error's reason.
        with _LOCK, contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            options, _ = command.parse_args(
                ["--no-deps", "--only-binary", ":all:", "--no-cache-dir", "--no-input", "--disable-pip-version-check"]
            )
        session = command._build_session(options)
        finder = command._build_package_finder(options, session)
    except SystemExit:
        lines = [line for line in said.getvalue().splitlines() if line.strip() and not line.startswith("Usage")]
        raise ToolError(
            f"pip cannot read its configuration: {lines[-1].strip() if lines else 'no reason given'}"
        ) from None
    except (AttributeError, TypeError) as exc:  # a pip whose internals differ from those of pip 21 to 25
        raise ToolError(f"this pip cannot be asked which wheel to fetch ({exc}); {UNREACHABLE_HINT}") from None
    with _pip_log() as log:
        best = finder.find_best_candidate(project, specifier).best_candidate
    if best is None:
        session.close()
        unreachable = unreachable_index("\n".join(log))
        if unreachable:
            raise ToolError(f"{unreachable}, so {requirement} could not be downloaded: {UNREACHABLE_HINT}")
        raise ToolError(missing or f"no wheel of {requirement} is on the package index")
    link = best.link
    sha256 = link.hash if link.hash_name == "sha256" else None
    return Located(link.url_without_fragment, link.filename, sha256, session)


_LOCK = threading.Lock()
_QUIET = logging.NullHandler()  # pip's warnings (retries) never reach standard error


@contextlib.contextmanager
def _pip_log() -> Iterator[list[str]]:
    """pip's log messages of this thread while it looks (its debug log names an index it could not fetch);
    nothing of it reaches standard error."""
    lines: list[str] = []
    me = threading.get_ident()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.thread == me:
                with contextlib.suppress(Exception):
                    lines.append(record.getMessage())

    logger, handler = logging.getLogger("pip"), Collect(logging.DEBUG)
    with _LOCK:
        logger.addHandler(_QUIET)
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    try:
        yield lines
    finally:
        with _LOCK:
            logger.removeHandler(handler)


def unreachable_index(text: str) -> str | None:
    """ "the package index <url> cannot be reached (<why>)" when pip's debug
    log ``text`` records an index it could not fetch, else None."""
    found = _FETCH_FAILED.search(text)
    if found is None:
        return None
    url, why = found.groups()
    # urllib3 wraps the cause: "...(Caused by NewConnectionError('<conn object>: <cause>'))", or
    # "(Caused by SSLError(SSLCertVerificationError(1, '<cause>')))".
    cause = re.search(r">[:,] '?([^'\"]+)", why) or re.search(r"Caused by .*'([^']+)'\)+$", why)
    return f"the package index {url} cannot be reached ({(cause.group(1) if cause else why).strip()[:200]})"
