"""Running git on a repository that may be hostile: one runner, bounded, with
nothing the repository configures allowed to run a command."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ..model import ToolError


class GitFailure(ToolError):
    """A git command failed, timed out or printed too much; the message says which and why.
    Callers that can say more catch it; uncaught, it is a one-line error like any other."""


# Every git call is bounded: one deadline for the whole call (a fetch gets longer),
# and a cap on what it prints (stderr beyond its cap is dropped).
GIT_TIMEOUT_S = 120.0
FETCH_TIMEOUT_S = 600.0
OUTPUT_LIMIT = 64 << 20  # vLLM's whole first-parent log is ~2 MB
_STDERR_LIMIT = 64 << 10
ALLOWED_PROTOCOLS = ("https", "ssh", "file")

# Given in the environment (command-line scope), so they win over every
# configuration file, the repository's own included: nothing the repository
# configures runs a command. Filters and merge drivers it defines are emptied by
# name (Repository._neutral_config), diffs run with NO_EXTERNAL_DIFF, and a set
# remote.<name>.uploadpack, which no override beats, is refused before fetching.
SAFE_CONFIG = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", os.devnull),
    ("core.pager", "cat"),
    ("core.sshCommand", "ssh -o BatchMode=yes"),
    ("core.askPass", ""),
    ("core.gitProxy", ""),
    ("core.alternateRefsCommand", ""),
    ("credential.helper", ""),
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("protocol.allow", "never"),
    *((f"protocol.{name}.allow", "always") for name in ALLOWED_PROTOCOLS),
)
_SAFE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "GIT_OPTIONAL_LOCKS": "0",
}
# Inherited variables that would point git at another repository, index or command.
_DROPPED_ENV = {
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_GRAFT_FILE",
    "GIT_REPLACE_REF_BASE",
    "GIT_EXTERNAL_DIFF",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
}
NO_EXTERNAL_DIFF = ("--no-ext-diff", "--no-textconv")
# git's stock advice after a failed remote call: says nothing about the cause.
_BOILERPLATE = ("Please make sure you have the correct access rights", "and the repository exists.")


def _environment(config: Sequence[tuple[str, str]], env: dict[str, str] | None) -> dict[str, str]:
    pairs = [*SAFE_CONFIG, *config]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG") and k not in _DROPPED_ENV}
    environment.update(_SAFE_ENV, GIT_CONFIG_COUNT=str(len(pairs)))
    for number, (key, value) in enumerate(pairs):
        environment[f"GIT_CONFIG_KEY_{number}"] = key
        environment[f"GIT_CONFIG_VALUE_{number}"] = value
    environment.update(env or {})
    return environment


def _cause(stderr: bytearray) -> str:
    """What git said went wrong, in one line."""
    lines = []
    for line in stderr.decode(errors="replace").splitlines():
        line = line.strip()
        for prefix in ("fatal: ", "error: "):
            line = line.removeprefix(prefix)
        if line and not line.startswith(("hint:", *_BOILERPLATE)):
            lines.append(line)
    text = "; ".join(dict.fromkeys(lines))
    return text if len(text) <= 600 else text[:600] + "..."


def run_git(
    cwd: Path | str,
    *args: str,
    env: dict[str, str] | None = None,
    config: Sequence[tuple[str, str]] = (),
    stdin: bytes = b"",
    source: Sequence[str] | None = None,
    ok: Sequence[int] = (0,),
    timeout: float = GIT_TIMEOUT_S,
    limit: int = OUTPUT_LIMIT,
) -> str:
    """stdout of ``git args`` in ``cwd``, with SAFE_CONFIG and ``config`` over every
    configuration file; the one way dflash-doctor runs git.

    ``source``: the arguments of a git command whose stdout is this one's stdin
    (``stdin`` then feeds that one). GitFailure unless the exit status is in ``ok``,
    after ``timeout`` seconds for the whole call, or past ``limit`` bytes of stdout;
    the commands are then killed with everything they started.
    """
    environment = _environment(config, env)
    deadline = time.monotonic() + timeout
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryFile() as feed:
        feed.write(stdin)
        feed.seek(0)
        try:
            upstream: IO[bytes] = feed
            for command in [c for c in (source, args) if c is not None]:
                proc = subprocess.Popen(
                    ["git", "--no-pager", *command],
                    cwd=cwd,
                    env=environment,
                    stdin=upstream,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
                procs.append(proc)
                if upstream is not feed:
                    upstream.close()  # the next command holds it now
                upstream = _piped(proc.stdout)
            out, errors = _collect(procs, deadline, limit, f"git {args[0]}", timeout)
        except OSError as exc:
            raise ToolError(f"cannot run git: {exc.strerror} (ancestry and patch --repo need git on PATH)") from None
        finally:
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                for stream in (proc.stdout, proc.stderr):
                    if stream:
                        stream.close()
    if procs[-1].returncode not in ok:
        raise GitFailure(f"git {args[0]}: {_cause(errors[-1]) or f'exit {procs[-1].returncode}'}")
    if source is not None and procs[0].returncode:  # procs[0] ran source
        raise GitFailure(f"git {source[0]}: {_cause(errors[0]) or f'exit {procs[0].returncode}'}")
    return out.decode(errors="surrogateescape")  # bytes round-trip: a diff read here is applied as it was


def _piped(stream: IO[bytes] | None) -> IO[bytes]:
    assert stream is not None  # Popen's stdout and stderr are PIPE
    return stream


def _collect(
    procs: list[subprocess.Popen[bytes]], deadline: float, limit: int, name: str, timeout: float
) -> tuple[bytearray, list[bytearray]]:
    """The last command's stdout and every command's stderr, read until they end and exit."""
    stdout = _piped(procs[-1].stdout)
    stderrs = [_piped(proc.stderr) for proc in procs]
    buffers: dict[IO[bytes], bytearray] = {stdout: bytearray(), **{stderr: bytearray() for stderr in stderrs}}
    streams = {stream.fileno(): stream for stream in buffers}
    expired = GitFailure(f"{name}: timed out after {timeout:g} s")
    with selectors.DefaultSelector() as selector:
        for stream in buffers:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise expired
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                stream = streams[key.fd]
                buffer = buffers[stream]
                if not chunk:
                    selector.unregister(stream)
                elif stream is stdout:
                    if len(buffer) + len(chunk) > limit:
                        raise GitFailure(f"{name}: printed more than {limit} bytes")
                    buffer += chunk
                else:
                    buffer += chunk[: max(_STDERR_LIMIT - len(buffer), 0)]
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            raise expired from None
    return buffers[stdout], [buffers[stderr] for stderr in stderrs]


class Repository:
    """A git repository, and how the ladder calls git in it (through ``run_git``)."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        if not path.exists():
            raise ToolError(f"no such repository: {path}")
        if not path.is_dir():
            raise ToolError(f"not a git repository: {path}")
        self.cwd = path
        # Only ``path`` itself is a repository, never a directory above it.
        self.env = {"GIT_CEILING_DIRECTORIES": str(path.resolve().parent)}
        self.config: tuple[tuple[str, str], ...] = ()
        try:
            git_dir, common, in_git_dir, shallow = self.lines(
                "rev-parse",
                "--path-format=absolute",
                "--git-dir",
                "--git-common-dir",
                "--is-inside-git-dir",
                "--is-shallow-repository",
            )
            top = None if in_git_dir == "true" else self.git("rev-parse", "--show-toplevel").strip()
        except GitFailure as exc:
            if "dubious ownership" in str(exc):
                raise ToolError(
                    f"{path} belongs to another user and git refuses to open it (a safe.directory exception in your "
                    "git configuration does not apply: dflash-doctor reads none); run as its owner, or own a copy"
                ) from None
            raise ToolError(f"not a git repository: {path} ({exc})") from None
        self.git_dir = Path(git_dir)
        self.worktree = Path(top) if top else None
        self.location = str(self.worktree or self.git_dir)
        self.objects_dir = Path(common) / "objects"
        self.cache_dir = Path(common) / "dflash-doctor"
        self.shallow = shallow == "true"
        self.config = self._neutral_config()
        self._throw_away: _ThrowAway | None = None

    def _neutral_config(self) -> tuple[tuple[str, str], ...]:
        """Every filter and merge driver the repository defines, emptied: ``.gitattributes``
        or ``.git/info/attributes`` may select any of them for any file."""
        names = self.git(
            "config",
            "-z",
            "--name-only",
            "--get-regexp",
            r"^(filter\..+\.(clean|smudge|process)|merge\..+\.driver)$",
            ok=(0, 1),
        )
        keys = [key for key in names.split("\0") if key]
        filters = sorted({key[len("filter.") : key.rindex(".")] for key in keys if key.startswith("filter.")})
        return tuple((key, "") for key in keys) + tuple((f"filter.{name}.required", "false") for name in filters)

    def refuse_upload_pack(self) -> None:
        """Before git may fetch (``--fetch``, or a partial clone fetching on demand):
        ``remote.<name>.uploadpack`` runs as a local command for a file remote, and its
        first value wins over any override, so a repository that sets one is refused."""
        names = self.git("config", "-z", "--name-only", "--get-regexp", r"^remote\..+\.uploadpack$", ok=(0, 1))
        found = [key for key in names.split("\0") if key]
        if found:
            raise ToolError(
                f"{self.location} sets {found[0]}, a command git would run on this machine when fetching; "
                f"dflash-doctor does not fetch in such a repository: remove it (git -C {self.location} config "
                f"--unset-all {found[0]})"
            )

    def git(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        stdin_text: str | None = None,
        source: Sequence[str] | None = None,
        ok: Sequence[int] = (0,),
        timeout: float = GIT_TIMEOUT_S,
    ) -> str:
        """stdout of ``git args`` (``run_git`` with this repository's settings)."""
        stdin = (stdin_text or "").encode(errors="surrogateescape")
        return run_git(
            self.cwd,
            *args,
            env={**self.env, **(env or {})},
            config=self.config,
            stdin=stdin,
            source=source,
            ok=ok,
            timeout=timeout,
        )

    def lines(self, *args: str) -> list[str]:
        return [line for line in self.git(*args).splitlines() if line]

    @functools.cached_property
    def is_partial_clone(self) -> bool:
        """A promisor clone fetches absent blobs on demand, i.e. over the network."""
        found = self.git("config", "--get-regexp", r"^(extensions\.partialclone|remote\..*\.promisor)$", ok=(0, 1))
        return bool(found.strip())

    def throw_away(self) -> _ThrowAway:
        if self._throw_away is None:
            self._throw_away = _ThrowAway(self)
        return self._throw_away

    def close(self) -> None:
        if self._throw_away is not None:
            self._throw_away.close()
            self._throw_away = None


class _ThrowAway:
    """A throw-away bare repository whose object store sits in front of the repository's own.

    ``env`` writes objects there from the repository; ``bare_env`` runs git in the
    throw-away repository itself: no configuration, attributes or hooks of the
    repository apply there, so merges use git's own drivers.
    """

    def __init__(self, repository: Repository) -> None:
        self.repository = repository
        self.directory = tempfile.mkdtemp(prefix="dflash-doctor-objects-")
        object_format = repository.git("rev-parse", "--show-object-format").strip()
        repository.git("init", "--quiet", "--bare", "--template=", f"--object-format={object_format}", self.directory)
        alternates = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repository.objects_dir)}
        self.env = {"GIT_OBJECT_DIRECTORY": str(Path(self.directory) / "objects"), **alternates}
        self.bare_env = {"GIT_DIR": self.directory, **alternates}

    def commit(self, tree: str, parent: str | None = None) -> str:
        who = "dflash-doctor <dflash-doctor@localhost> 0 +0000"
        text = (
            f"tree {tree}\n"
            + (f"parent {parent}\n" if parent else "")
            + f"author {who}\ncommitter {who}\n\nmerge-tree probe\n"
        )
        written = self.repository.git(
            "hash-object", "-w", "-t", "commit", "--stdin", env=self.bare_env, stdin_text=text
        )
        return written.strip()

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class ThreeWay:
    tree: str | None  # the result tree when clean
    conflicts: tuple[str, ...]


def three_way(repository: Repository, base_tree: str, ours_tree: str, theirs_tree: str) -> ThreeWay:
    """Cherry-pick style merge of base->theirs into ours, objects kept out of the repository."""
    throw_away = repository.throw_away()
    base = throw_away.commit(base_tree)
    ours, theirs = throw_away.commit(ours_tree, base), throw_away.commit(theirs_tree, base)
    out = repository.git(
        "merge-tree",
        "--write-tree",
        "-z",
        "--name-only",
        "--no-messages",
        ours,
        theirs,
        env=throw_away.bare_env,
        ok=(0, 1),
    )
    fields = [field for field in out.split("\0") if field]
    conflicts = tuple(dict.fromkeys(fields[1:]))
    return ThreeWay(None if conflicts else fields[0], conflicts)
