"""Registry credentials as docker keeps them, and the challenge a registry answers with.

``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``): ``auths``
entries, and ``credHelpers``/``credsStore`` through ``docker-credential-NAME get``.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

from .interface import ImageError

DOCKER_HUB = "docker.io"
DOCKER_HUB_KEY = "https://index.docker.io/v1/"
DOCKER_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}
HELPER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
HELPER_TIMEOUT_S = 30
CHALLENGE_PARAM = re.compile(r'(\w+)=(?:"([^"]*)"|([^\s,]*))')

Credentials = tuple[str, str]


def docker_config_path() -> Path:
    directory = os.environ.get("DOCKER_CONFIG")
    return (Path(directory) if directory else Path.home() / ".docker") / "config.json"


def _host_of(key: str) -> str:
    """An ``auths`` key as a host: scheme and path dropped (docker accepts both spellings)."""
    host = re.sub(r"^[a-z]+://", "", key.strip()).split("/", 1)[0]
    return DOCKER_HUB if host in DOCKER_HUB_ALIASES else host


def credentials_for(registry: str) -> Credentials | None:
    """User and secret for ``registry`` (host[:port], ``docker.io`` for Docker Hub), or None."""
    path = docker_config_path()
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        raise ImageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(config, dict):
        raise ImageError(f"{path} is not a JSON object")
    host = _host_of(registry)
    helpers = config.get("credHelpers") or {}
    helper = helpers.get(registry) if isinstance(helpers, dict) else None
    if helper is None and isinstance(helpers, dict):
        helper = next((name for key, name in helpers.items() if _host_of(key) == host), None)
    auths = config.get("auths") or {}
    entry = (
        next((value for key, value in auths.items() if _host_of(key) == host), None)
        if isinstance(auths, dict)
        else None
    )
    if isinstance(entry, dict) and (entry.get("auth") or entry.get("username")):
        return _from_entry(entry, path, host)
    helper = helper or config.get("credsStore")
    if isinstance(helper, str) and helper:
        return _from_helper(helper, DOCKER_HUB_KEY if host == DOCKER_HUB else registry)
    return None


def _from_entry(entry: dict, path: Path, host: str) -> Credentials:
    if entry.get("username"):
        return str(entry["username"]), str(entry.get("password") or "")
    try:
        user, sep, secret = base64.b64decode(str(entry["auth"]), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        sep = ""
    if not sep:
        raise ImageError(f"{path}: the auth entry for {host} is not base64 of user:password")
    return user, secret


def _from_helper(name: str, server: str) -> Credentials | None:
    if not HELPER_NAME.match(name):
        raise ImageError(f"{docker_config_path()}: not a credential helper name: {name!r}")
    program = f"docker-credential-{name}"
    try:
        proc = subprocess.run([program, "get"], input=server, capture_output=True, text=True, timeout=HELPER_TIMEOUT_S)
    except FileNotFoundError:
        raise ImageError(f"credential helper {program} (configured in {docker_config_path()}) is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise ImageError(f"credential helper {program} did not answer within {HELPER_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        if "not found" in (proc.stdout + proc.stderr).lower():
            return None
        last = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1]
        raise ImageError(f"credential helper {program} failed: {last}")
    try:
        answer = json.loads(proc.stdout)
        return str(answer["Username"]), str(answer["Secret"])
    except (ValueError, KeyError, TypeError, RecursionError):
        raise ImageError(f"credential helper {program} did not answer with Username and Secret") from None


def basic_header(credentials: Credentials) -> str:
    return "Basic " + base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode("ascii")


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="...",scope="..."`` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3) for m in CHALLENGE_PARAM.finditer(rest)
    }
    return scheme.lower(), params
