"""Bytes moved and time for `check --release` from an empty cache: range reads beside the full download.

nginx on 127.0.0.1 serves a vLLM wheel as a simple index, paced to ``--rate``
(nginx ``limit_rate``, per connection: 50 MB/s by default, an operator's link)
and counting the bytes of every answer in its access log. The wheel is a real
one (``--wheel``, e.g. from ``pip download vllm==0.34.0 --no-deps``) or, without
it, one built from the cached release tree (its Python files and dist-info with
a correct RECORD) padded with incompressible members to ``--size-mb``. Each
round runs, as fresh processes, interleaved, with a cache holding only the
transformers the release needs:

- the fetch alone (``release_tree``) by range reads, then ``check --release V --only layer-offset``;
- the same with ``--full-wheel`` (the whole wheel, as before range reads).

The bytes are those of the fetch, as nginx counts them.

    python benchmarks/bench_release_bytes.py --wheel vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl [--runs 2]

``--plan FROM TO`` instead asks the index pip is configured with, for each
release in the range, what a range read would move (reading only each wheel's
tail and central directory): what ``releases`` fetches from an empty cache.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from nginx_index import NginxIndex, build_wheel

from dflash_doctor.behaviour.transformers import requires
from dflash_doctor.paths import cache_dir
from dflash_doctor.targets.release import release_tree, transformers_tree

FETCH = "import sys; from dflash_doctor.targets.release import release_tree; release_tree(sys.argv[1])"
FULL = (
    "import sys; from dflash_doctor.paths import FULL_WHEEL; from dflash_doctor.targets.release import release_tree\n"
    "with FULL_WHEEL.on(): release_tree(sys.argv[1])"
)


def run(command: list[str], cache: Path, url: str) -> float:
    """Wall seconds of one process with this cache and only this index."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PIP_") and k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
    }
    env.update(
        DFLASH_DOCTOR_CACHE=str(cache),
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=url,
        PIP_CACHE_DIR=str(cache / "pip-cache"),
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1, 2):
        raise SystemExit(f"{command} failed: {proc.stderr[-500:]}")
    return seconds


def plan_on_index(first: str, last: str) -> None:
    """For each release from ``first`` to ``last`` on the index pip is configured with: the wheel's size and the
    bytes a range read of it moves (its tail, central directory, RECORD and the spans of the members kept),
    reading only the tail and the central directory."""
    from dflash_doctor.releases import in_range, index_releases
    from dflash_doctor.targets.pip_index import locate
    from dflash_doctor.engines import VLLM
    from dflash_doctor.targets.release import is_kept
    from dflash_doctor.targets.wheel_http import RangeSource, open_wheel
    from dflash_doctor.targets.wheel_ranges import members, spans

    wanted = functools.partial(is_kept, VLLM.kept())
    whole = moved = 0
    for version in in_range(index_releases(), first, last):
        located = locate("vllm", f"vllm=={version}")
        read: list[int] = []  # the bytes of the tail and the central directory, as they arrive
        opened = open_wheel(
            located, lambda read=read, **fields: read.append(fields.get("advance", 0)), time.monotonic() + 600
        )
        if not isinstance(opened, RangeSource):
            raise SystemExit(f"{located.shown} does not honour range requests")
        kept = [member for member in members(opened, located.filename) if wanted(member.name)]  # the RECORD too
        size = sum(read) + sum(opened.fetched(start, end) for start, end, _ in spans(kept))
        whole, moved = whole + opened.size, moved + size
        print(
            f"{version:>8}: wheel {opened.size / 1e6:6.1f} MB, range read {size / 1e6:5.1f} MB "
            f"({size / opened.size:5.1%})"
        )
        located.session.close()
    print(f"   total: wheels {whole / 1e9:.2f} GB, range reads {moved / 1e6:.0f} MB ({moved / whole:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheel", type=Path, help="a real vLLM wheel (else one is built from the cached tree)")
    parser.add_argument("--version", default="0.34.0", help="the release of the built wheel")
    parser.add_argument("--size-mb", type=int, default=239, help="the built wheel's size (0.34.0's is 239 MB)")
    parser.add_argument("--rate", default="50m", help="nginx limit_rate (bytes per second per connection)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--plan",
        nargs=2,
        metavar=("FROM", "TO"),
        help="instead: what range reads would move for each release on the configured index",
    )
    args = parser.parse_args()
    if args.plan:
        plan_on_index(*args.plan)
        return
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        if args.wheel is not None:
            wheel, version = args.wheel.resolve(), args.wheel.name.split("-")[1]
        else:
            version = args.version
            tree = release_tree(version)
            python = sum(p.stat().st_size for p in tree.rglob("*.py")) // 4 >> 20  # deflate takes ~3/4 off
            wheel = build_wheel(
                work / f"vllm-{version}-py3-none-any.whl", tree, version, blobs=max(8, args.size_mb - python)
            )
        tree = release_tree(version)
        transformers_tree(requires((tree / f"vllm-{version}.dist-info" / "METADATA").read_text(encoding="utf-8")))
        server = NginxIndex(work / "nginx", [wheel], rate=args.rate)
        figures: dict[str, list[tuple[float, float, int, int]]] = {"ranges": [], "full": []}
        check = ["-m", "dflash_doctor", "check", "--release", version, "--only", "layer-offset", "--format", "json"]
        try:
            for round_ in range(args.runs):
                for way, extra in (("ranges", []), ("full", ["--full-wheel"])):
                    caches = [work / f"{kind}-{way}-{round_}" for kind in ("fetch", "check")]
                    for cache in caches:
                        cache.mkdir()
                        (cache / "transformers").symlink_to(cache_dir() / "transformers")
                    before, asked = server.file_bytes(), len(server.requests())
                    # The fetch alone (release_tree; --full-wheel's mode is the check's option: FULL below).
                    fetch = run(["-c", FETCH if way == "ranges" else FULL, version], caches[0], server.url)
                    moved, requests = server.file_bytes() - before, len(server.requests()) - asked
                    seconds = run(check + extra, caches[1], server.url)
                    figures[way].append((fetch, seconds, moved, requests))
        finally:
            server.close()
    size = wheel.stat().st_size if args.wheel is not None else None
    print(
        f"wheel: {args.wheel.name if args.wheel else f'built from the cached {version} tree'}"
        f"{f', {size / 1e6:.1f} MB' if size else ''}; nginx limit_rate {args.rate}; {args.runs} runs, medians"
    )
    full_bytes = statistics.median(moved for _, _, moved, _ in figures["full"])
    for way, rows in figures.items():
        fetch, seconds, moved, requests = (statistics.median(row[i] for row in rows) for i in range(4))
        print(
            f"{way:>6}: {moved / 1e6:6.1f} MB in {requests:.0f} requests ({moved / full_bytes:6.1%} of the full "
            f"download); fetch {fetch:5.2f} s; check --release from an empty cache {seconds:5.2f} s"
        )


if __name__ == "__main__":
    main()
