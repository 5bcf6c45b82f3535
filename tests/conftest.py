"""Shared fixtures: real vLLM release trees (downloaded once, cached) and
small trees built from them for altered-code tests.

A test's tier is written on it (``pytest.mark.release``, ``pytest.mark.slow``;
see tests/tiers.py), so ``pytest -m "not release and not slow"`` is the fast
tier and ``pytest -m "not release"`` never downloads or reads a wheel. The
``release`` and ``mini_tree`` fixtures and the helpers that start real servers
fail a test without its marker; every test not marked ``release`` runs with an
empty cache and pip pointed at nothing, so one that reads a wheel some other
way (``check --release``) fails too. ``run_cli`` runs a command in the test process (a Python
start costs a third of a second per command); ``run_process`` starts
the real entry point where the process itself is what a test proves.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from hypothesis import settings

import tiers
from dflash_doctor.behaviour.transformers import requires
from dflash_doctor.cli import main
from dflash_doctor.paths import cache_dir
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.release import release_tree, transformers_tree
from dflash_doctor.targets.ssh import SshOptions
from gitrepos import Repo, build_vllm_like
from http_index import WHEEL, Index, build_wheel
from sshd import SshServer, client_env, keygen

# The fuzz tests' depth: "thorough" (the default: the README's test command and CI) or, with
# DFLASH_DOCTOR_FUZZ=quick, for the fast tier while you work (pytest's hypothesis plugin is off).
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.register_profile("quick", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("DFLASH_DOCTOR_FUZZ", "thorough"))

# The rule texts and applicability of the small demo rules that tests write.
DEMO_RULE_PREAMBLE = """
what = "w"
why = "y"
remedy = "r"
[headlines]
present = "p"
absent = "a"
partial = "pa"
not-applicable = "na"
unknown = "u"
[applies]
file = "vllm/config/speculative.py"
symbol = "SpeculativeConfig"
literal = "dflash"
remedy = "i"
"""

# Files a check of these releases reads, plus what makes a tree a tree.
TREE_FILES = ["vllm/__init__.py", "vllm/_version.py"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """``tiers.require`` checks the markers of the test being run (fixtures of any scope included)."""
    tiers.running = item
    try:
        return (yield)
    finally:
        tiers.running = None


@pytest.fixture(scope="session", autouse=True)
def no_results_cache():
    """Every check in the tests evaluates the rules; the results cache has its own test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
        yield


@pytest.fixture(scope="session")
def empty_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("empty-cache")


@pytest.fixture(autouse=True)
def no_wheels_unless_marked(request, empty_cache, monkeypatch):
    """A test not marked ``release`` gets an empty cache and an index that does not answer."""
    if request.node.get_closest_marker("release") is not None:
        yield
        return
    monkeypatch.setenv("DFLASH_DOCTOR_CACHE", str(empty_cache))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no extra index or link from a pip.conf
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    yield
    assert not (empty_cache / "releases").exists() and not (empty_cache / "tmp").exists(), (
        f"{request.node.nodeid} reached for a vLLM wheel: mark it release"
    )


@pytest.fixture(scope="session")
def release():
    """``release("0.20.1")`` -> the extracted tree of that real wheel."""

    def tree(version: str) -> Path:
        tiers.require("release", f"reads the vLLM {version} wheel")
        return release_tree(version)

    return tree


def rule_files() -> list[str]:
    return sorted({relpath for rule in load_rules() for relpath in rule.files})


@pytest.fixture
def mini_tree(tmp_path):
    """``mini_tree("0.22.0")`` -> a copy of the files the rules read, with dist-info."""

    def build(version: str, name: str = "tree") -> Path:
        tiers.require("release", f"reads the vLLM {version} wheel")
        source = release_tree(version)
        dest = tmp_path / f"{name}-{version}"
        for relpath in TREE_FILES + rule_files():
            if (source / relpath).is_file():
                (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / relpath, dest / relpath)
        for dist_info in source.glob("vllm-*.dist-info"):
            shutil.copytree(dist_info, dest / dist_info.name)
        return dest

    return build


def run_process(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m dflash_doctor args`` in its own process: for tests where the
    process is the point (its imports, exit at interpreter shutdown, signals, limits)."""
    return subprocess.run(
        [sys.executable, "-m", "dflash_doctor", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``dflash-doctor args`` in this process: ``cli.main`` with the words, the
    environment ``env`` (all of it, as a child would get it) and ``cwd``, an empty
    standard input, and standard output and error captured as a pipe carries them."""
    out, err = io.BytesIO(), io.BytesIO()
    with pytest.MonkeyPatch.context() as patch:
        if env is not None:
            for key in set(os.environ) - set(env):
                patch.delenv(key)
            for key, value in env.items():
                patch.setenv(key, value)
        if cwd is not None:
            patch.chdir(cwd)
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
        patch.setattr(sys, "stdout", io.TextIOWrapper(out, encoding="utf-8", write_through=True))
        patch.setattr(
            sys, "stderr", io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
        )
        with pytest.raises(SystemExit) as ended:
            main([os.fspath(arg) for arg in args])
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()  # before the wrappers go and close them
    return subprocess.CompletedProcess(["dflash-doctor", *args], ended.value.code, stdout, stderr)


def check_json(*args: str, **kwargs) -> tuple[int, dict]:
    proc = run_cli("check", *args, "--format", "json", **kwargs)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def statuses(report: dict) -> dict[str, str]:
    return {fix["id"]: fix["status"] for fix in report["fixes"]}


def assert_error(proc, fragment: str) -> None:
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dflash-doctor: error: ") and fragment in lines[0], lines


class ProbeAnswerOf:
    """A target judged from a collector answer holding ``tree``'s .py files, as
    ``--from-probe`` reads one (structure only: nothing runs the tree's code)."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree

    def resolve(self):
        from dflash_doctor.targets.snapshot import snapshot_target

        files = {str(p.relative_to(self.tree)): p.read_bytes() for p in self.tree.rglob("*.py")}
        answer = {
            "root": str(self.tree),
            "files": {k: v.decode("latin-1") for k, v in files.items()},
            "sha256": {k: hashlib.sha256(v).hexdigest() for k, v in files.items()},
        }
        return snapshot_target(answer, "probe", "probe file x")


# -- what the test modules share: environments, interpreters, reports ------------------------------

THREE = ("0.20.1", "0.22.0", "0.33.0")
RESOLVERS = ("vllm/v1/worker/gpu_model_runner.py", "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py")
SHIFT = 'i + 1 for i in (dflash_config.get("target_layer_ids") or [])'  # the shift of layer ids the fix adds
CACHING = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}  # conftest turns caches off
ANCESTRY_SCHEMA = json.loads(
    (Path(__file__).resolve().parent.parent / "schemas" / "ancestry-v1.schema.json").read_text()
)
HOSTILE_TEXT = "\x1b]0;pwned\x07\x1b[2J\x00\x9b\u202e\u2066\ufffe"  # no line break: str.splitlines would end the line


def env_for(cache: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
    return {**env, "DFLASH_DOCTOR_CACHE": str(cache), **extra}


def unreachable_index_env(cache: Path) -> dict:
    """pip pointed at a port on 127.0.0.1 where nothing listens, with no other index or link."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in env_for(cache).items() if not k.startswith("PIP_")}
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": f"http://127.0.0.1:{port}/simple",
        "PIP_RETRIES": "0",
    }


def pip_env(tmp_path: Path, index_url: str | None = None) -> dict[str, str]:
    """Only this index (else a closed port), no pip configuration, every cache under tmp_path."""
    env = unreachable_index_env(tmp_path / "cache")
    if index_url is not None:
        env["PIP_INDEX_URL"] = index_url
    return {**env, "PIP_CACHE_DIR": str(tmp_path / "pip-cache"), "PIP_DEFAULT_TIMEOUT": "10"}


def make_venv(where: Path, *paths: Path) -> Path:
    """A real venv whose site-packages sees ``paths`` through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next(where.glob("lib/python3*/site-packages"))
    (site / "extra.pth").write_text("".join(f"{p}\n" for p in paths))
    return where / "bin" / "python"


def ssh_check(client, *args: str) -> subprocess.CompletedProcess:
    return run_cli("check", *client["args"], *args, env=client["env"])


def ancestry_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    proc = run_cli("ancestry", *args, "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, ANCESTRY_SCHEMA)
    return proc.returncode, report


def fleet_validator() -> jsonschema.Draft202012Validator:
    """The fleet report's schema, with the check report's it refers to."""
    from referencing import Registry, Resource

    schemas = Path(__file__).resolve().parent.parent / "schemas"
    fleet, check = (json.loads((schemas / f"{n}-v2.schema.json").read_text()) for n in ("fleet", "check"))
    registry = Registry().with_resource(check["$id"], Resource.from_contents(check))
    return jsonschema.Draft202012Validator(fleet, registry=registry)


def assert_inert_xml(text: str) -> ET.Element:
    """Well-formed for a strict XML parser, and no control, C1, bidi or non-XML character left raw."""
    root = ET.fromstring(text)  # expat: refuses any character XML 1.0 forbids
    raw = re.findall("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]", text)
    assert raw == [], raw
    return root


# -- fixtures the test modules share ---------------------------------------------------------------


@pytest.fixture
def cli(capsys):
    """``cli("accept", ...)``: the command line run in this process (the same
    entry point as ``run_cli`` without a new interpreter per call)."""

    def run(*args: str) -> subprocess.CompletedProcess:
        with pytest.raises(SystemExit) as exited:
            main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, exited.value.code, out.out, out.err)

    return run


@pytest.fixture
def release_cache(tmp_path, release):
    """A cache directory of its own holding the real trees of three releases and
    the transformers each requires (linked from the user cache, not copied):
    ``--offline`` fetches nothing, so what it judges with must be there."""
    root = tmp_path / "cache"
    (root / "releases").mkdir(parents=True)
    for version in THREE:
        tree = release(version)
        (root / "releases" / version).symlink_to(tree)
        metadata = next(tree.glob("vllm-*.dist-info")) / "METADATA"
        transformers_tree(requires(metadata.read_text(encoding="utf-8")))
    (root / "transformers").symlink_to(cache_dir() / "transformers")
    return root


@pytest.fixture
def index():
    """``index(seconds=3)`` -> a package index serving one small wheel (VERSION), slowly."""
    servers = []

    def start(**kwargs) -> Index:
        servers.append(Index({WHEEL: build_wheel()}, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    base = tmp_path_factory.mktemp("keys")
    return {"user": keygen(base / "user"), "stranger": keygen(base / "stranger")}


@pytest.fixture
def server(tmp_path, keys):
    servers = []

    def start(name: str = "sshd", host_key: Path | None = None) -> SshServer:
        srv = SshServer(tmp_path / name, keys["user"], host_key)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


@pytest.fixture
def client(tmp_path, keys):
    """Environment and arguments of a client whose HOME holds nothing."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    env = {**client_env(), "HOME": str(home)}
    known = home / ".ssh" / "known_hosts"
    return {
        "env": env,
        "known": known,
        "home": home,
        "args": ["--identity", str(keys["user"]), "--connect-timeout", "5"],
    }


@pytest.fixture(scope="module")
def remote_python(tmp_path_factory, release) -> Path:
    """A venv on the "host" side whose Python sees the real 0.33.0 tree."""
    return make_venv(tmp_path_factory.mktemp("remote") / "venv", release("0.33.0"))


@pytest.fixture
def host(tmp_path):
    """A real sshd with a user key of its own, and the SshOptions that reach it (behaviour over ssh)."""
    user = keygen(tmp_path / "user")
    srv = SshServer(tmp_path / "sshd", user)
    known = tmp_path / "known_hosts"
    known.write_text(srv.host_public_key_line)
    yield srv, SshOptions(identity=user, known_hosts=known, ssh_config=tmp_path / "none", connect_timeout=5)
    srv.stop()


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    return build_vllm_like(tmp_path_factory.mktemp("vllm-like") / "vllm")


@pytest.fixture
def copy(history, tmp_path):
    """A private copy of the repository (refs/pull and all) for tests that change it."""
    target = tmp_path / "copy"
    shutil.copytree(history.path, target, symlinks=True)
    return Repo(target)
