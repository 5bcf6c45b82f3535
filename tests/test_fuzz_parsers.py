"""Fuzzing the parsers of untrusted data (issue 20) with hypothesis: drafter configs,
waivers, hosts files, metrics expositions and image manifests. The property: a result
or a ToolError (one line, exit 3), never another exception, in bounded memory
(tracemalloc's peak). The image merge is also checked against a plain model of it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import string
import tarfile
import tempfile
import tracemalloc
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_doctor.accept.metrics import SERIES, READ, counts_between, counts_since_start, parse_exposition
from dflash_doctor.targets.selection import read_hosts_file
from dflash_doctor.draft.lint import lint_report
from dflash_doctor.images.archive import ArchiveSource
from dflash_doctor.images.layers import LayerIndex
from dflash_doctor.images.layout import LayoutSource
from dflash_doctor.images.manifest import resolve_image
from dflash_doctor.images.merge import merge
from dflash_doctor.model import ToolError
from dflash_doctor.waivers import load_waivers

FUZZ = settings(deadline=None)  # as many examples as the profile says (conftest.py)
PEAK = 64 * 1024 * 1024


def result_or_tool_error(run) -> None:
    """``run()`` returns or raises ToolError, within PEAK bytes of Python allocations."""
    tracemalloc.start()
    try:
        run()
    except ToolError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < PEAK, peak


def scratch_file(data: bytes | str, name: str = "file") -> tuple[tempfile.TemporaryDirectory, Path]:
    directory = tempfile.TemporaryDirectory()
    path = Path(directory.name) / name
    path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    return directory, path


# JSON: what configs and manifests hold, and what a hostile one puts there.
HUGE_INTS = st.sampled_from([2**63, -(2**63) - 1, 10**4299, -(10**300)])
SCALARS = st.none() | st.booleans() | st.integers() | HUGE_INTS | st.floats() | st.text(max_size=20)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


# -- drafter configs ---------------------------------------------------------------------------

DRAFTER_KEYS = [
    "architectures",
    "model_type",
    "num_hidden_layers",
    "layer_types",
    "sliding_window",
    "block_size",
    "dflash_config",
    "speculators_model_type",
    "aux_hidden_state_layer_ids",
    "transformer_layer_config",
    "num_target_layers",
    "is_causal",
    "sliding_window_non_causal",
]
DFLASH_KEYS = ["target_layer_ids", "block_size", "use_swa", "swa_window_size", "causal"]
DRAFTER = st.fixed_dictionaries(
    {},
    optional={
        **{key: JSON for key in DRAFTER_KEYS},
        "dflash_config": st.fixed_dictionaries({}, optional={key: JSON for key in DFLASH_KEYS}) | JSON,
    },
)
DRAFTER_TEXT = (
    DRAFTER.map(json.dumps)
    | st.integers(0, 3000).map(nested)
    | st.text(max_size=200)
    | st.sampled_from(['{"n": 1' + "0" * 5000 + "}", "[" * 100_000, '{"a": NaN, "b": Infinity}'])
)


@FUZZ
@given(DRAFTER_TEXT)
def test_drafter_configs_are_a_lint_report_or_one_line(text):
    directory, path = scratch_file(text, "config.json")
    with directory:

        def run() -> None:
            report = lint_report(path)
            report.config.expected_aux_layer_ids()
            report.config.expected_layers()

        result_or_tool_error(run)


# -- waivers ---------------------------------------------------------------------------------

TOML_VALUES = st.sampled_from(
    [
        '"cache-drop"',
        '"layer-offset"',
        '"swa-config"',
        '"gpu-*"',
        '"\\u001b[2J"',
        "2026-09-30",
        "2026-02-30",
        "1979-05-27T07:32:00Z",
        "1" + "0" * 5000,
        "-1",
        "true",
        "[1, [2, [3]]]",
        "{a = 1}",
        '"""\nmany\n"""',
        "nan",
        "inf",
        "[" * 3000 + "]" * 3000,
        "'literal'",
        '""',
        "0x1F",
    ]
)
TOML_KEYS = st.sampled_from(["id", "reason", "target", "until", "extra", '"quoted key"', "a.b"])
WAIVER = st.lists(st.tuples(TOML_KEYS, TOML_VALUES), max_size=5).map(
    lambda pairs: "".join(f"{k} = {v}\n" for k, v in pairs)
)
WAIVERS_TEXT = (
    st.lists(WAIVER, max_size=3).map(lambda tables: "".join(f"[[waiver]]\n{t}" for t in tables))
    | st.text(max_size=200)
    | st.sampled_from(["waiver = 5", "[waiver]\nid = 1", "x." * 3000 + "y = 1"])
)


@FUZZ
@given(WAIVERS_TEXT)
def test_waivers_are_waivers_or_one_line(text):
    directory, path = scratch_file(text, "waivers.toml")
    with directory:
        result_or_tool_error(lambda: load_waivers(path, {"cache-drop", "layer-offset", "swa-config"}))


# -- hosts files -----------------------------------------------------------------------------

LABEL = st.text(string.ascii_letters + string.digits + "-_é", min_size=0, max_size=70)
HOST = st.builds(
    lambda user, labels, port: f"{user}{'.'.join(labels)}{port}",
    st.sampled_from(["", "root@", "a@b@"]),
    st.lists(LABEL, min_size=1, max_size=4),
    st.sampled_from(["", ":22", ":99999", ":"]),
)
HOSTS_TEXT = st.lists(HOST | st.text(max_size=40), max_size=8).map("\n".join)


@FUZZ
@given(HOSTS_TEXT)
def test_hosts_files_are_hosts_a_resolver_takes_or_one_line(text):
    directory, path = scratch_file(text, "hosts")
    with directory:
        hosts: list[str] = []
        result_or_tool_error(lambda: hosts.extend(read_hosts_file(path)))
        for host in hosts:  # what the ssh client hands the resolver: its idna codec must take it
            name = host.rpartition("@")[2]
            (name[1:].partition("]")[0] if name.startswith("[") else name.partition(":")[0]).encode("idna")


# -- metrics ---------------------------------------------------------------------------------

LABEL_VALUE = st.text(max_size=12).map(lambda v: v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
POSITION = st.sampled_from(
    ["0", "3", "15", "1023", "1024", "99999999999", "²", "٣", "-1", "", "0x1", " 1"]
) | st.integers(0, 2000).map(str)
LABELS = st.dictionaries(st.sampled_from(["model_name", "engine", "position", "le", "x"]), LABEL_VALUE, max_size=4)
SAMPLE = st.builds(
    lambda name, labels, position, value: (
        name + "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, **position}.items()) + "} " + value
    ),
    st.sampled_from(SERIES + ("vllm:num_requests_running", "vllm:cache_config_info", "sglang:num_running_reqs")),
    LABELS,
    st.dictionaries(st.just("position"), POSITION, max_size=1),
    st.sampled_from(["1", "0", "3.5", "-5", "NaN", "+Inf", "1e999", "x", "1 123", ""]),
)
LINES = st.lists(
    SAMPLE
    | st.sampled_from(["# HELP x y", "# TYPE vllm:spec_decode_num_drafts counter", "", "<html>"])
    | st.text(max_size=30),
    max_size=12,
).map("\n".join)
WIDE = st.integers(0, 2000).map(
    lambda n: "vllm:spec_decode_num_drafts_total{" + ",".join(f'l{i}="v"' for i in range(n)) + "} 1"
)


@FUZZ
@given(LINES | WIDE, LINES)
def test_metrics_are_counts_or_one_line(first, second):
    def run() -> None:
        before = parse_exposition(first, "http://127.0.0.1/metrics")
        after = parse_exposition(second, "http://127.0.0.1/metrics")
        for engine in READ:  # the same series read by each engine's names
            counts_since_start(before, engine)
            counts_between(before, after, engine)

    result_or_tool_error(run)


# -- image manifests -------------------------------------------------------------------------

DIGEST = "sha256:" + "a" * 64
DESCRIPTOR = st.fixed_dictionaries(
    {},
    optional={
        "mediaType": JSON | st.sampled_from(["application/vnd.oci.image.layer.v1.tar+gzip"]),
        "digest": JSON | st.just(DIGEST),
        "size": JSON,
        "platform": JSON,
        "annotations": JSON,
    },
)
MANIFEST = st.fixed_dictionaries(
    {},
    optional={
        "mediaType": JSON
        | st.sampled_from(["application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json"]),
        "manifests": st.lists(DESCRIPTOR, max_size=3) | JSON,
        "layers": st.lists(DESCRIPTOR, max_size=3) | JSON,
        "config": DESCRIPTOR | JSON,
    },
)
CONFIG = st.fixed_dictionaries(
    {},
    optional={
        "config": st.fixed_dictionaries({}, optional={"Labels": JSON, "Env": JSON}) | JSON,
        "os": JSON,
        "architecture": JSON,
        "rootfs": JSON,
    },
)


def blob(directory: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (directory / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (directory / "blobs" / "sha256" / digest).write_bytes(data)
    return "sha256:" + digest


@FUZZ
@given(MANIFEST, MANIFEST, CONFIG, st.sampled_from(["index", "manifest", "nested", "huge"]))
def test_image_manifests_are_an_image_or_one_line(top, inner, config, shape):
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        config_digest = blob(directory, json.dumps(config).encode())
        if isinstance(inner.get("config"), dict):
            inner["config"] = {**inner["config"], "digest": config_digest}
        inner_digest = blob(directory, json.dumps(inner).encode())
        if shape == "index" and isinstance(top.get("manifests"), list):
            top["manifests"] = [{**m, "digest": inner_digest} if isinstance(m, dict) else m for m in top["manifests"]]
        top_bytes = {"nested": b"[" * 50_000, "huge": b'{"layers": [1' + b"0" * 5000 + b"]}"}.get(
            shape, json.dumps(top).encode()
        )
        top_digest = blob(directory, top_bytes)
        (directory / "index.json").write_text(
            json.dumps({"manifests": [{"digest": top_digest, "mediaType": top.get("mediaType")}]})
        )
        result_or_tool_error(lambda: resolve_image(LayoutSource(str(directory)), "linux/amd64"))


def tar_bytes(members: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


ARCHIVE_ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "Config": JSON | st.just("config.json"),
        "Layers": JSON | st.just(["l.tar"]),
        "RepoTags": JSON | st.just(["team/vllm:v1"]),
    },
)


@FUZZ
@given(st.lists(ARCHIVE_ENTRY, max_size=3) | JSON, CONFIG, st.booleans())
@example([{}, {"RepoTags": ["\n"]}], {}, False)  # a tag holding a newline, named in the error (found by the fuzz)
def test_docker_archive_manifests_are_an_image_or_one_line(listing, config, gzipped):
    data = tar_bytes(
        {"manifest.json": json.dumps(listing).encode(), "config.json": json.dumps(config).encode(), "l.tar": b""}
    )
    directory, path = scratch_file(gzip.compress(data) if gzipped else data, "image.tar")
    with directory:

        def run() -> None:
            source = ArchiveSource(str(path))
            try:
                resolve_image(source, "linux/amd64")
            finally:
                source.close()

        result_or_tool_error(run)


# -- the merge -------------------------------------------------------------------------------

PART = st.sampled_from(["a", "b", "vllm", "bin"])
PATH = st.lists(PART, min_size=1, max_size=4).map("/".join)
LAYER = st.builds(
    lambda entries, deleted, opaque: LayerIndex({p: ("file", p) for p in entries}, tuple(deleted), tuple(opaque)),
    st.lists(PATH, max_size=6),
    st.lists(PATH, max_size=3),
    st.lists(PATH | st.just(""), max_size=2),
)


def plain_merge(indexes: list[LayerIndex]) -> dict:
    """The OCI rules, spelled out: opaque directories, then whiteouts, then the layer's own entries."""
    view: dict = {}

    def drop_under(directory: str) -> None:
        for path in [p for p in view if directory == "" or p.startswith(directory + "/")]:
            del view[path]

    for index in indexes:
        for directory in index.opaque:
            drop_under(directory)
        for path in index.deleted:
            view.pop(path, None)
            drop_under(path)
        for path, entry in index.entries.items():
            drop_under(path)
            view[path] = entry
    return view


@FUZZ
@given(st.lists(LAYER, max_size=4))
def test_the_merge_is_the_plain_oci_merge(indexes):
    """Only where a layer holds a file and, later in the same layer, a path under it does the
    tree differ (tar cannot hold both): such layers are left out here."""
    indexes = [
        i
        for i in indexes
        if not any(
            posixpath.dirname(p).startswith(q)
            for p in i.entries
            for q in i.entries
            if p != q and (p + "/").startswith(q + "/")
        )
    ]
    assert merge(indexes) == plain_merge(indexes)
