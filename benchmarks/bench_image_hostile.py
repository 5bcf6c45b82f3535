"""`check --image` on the hostile images of issue 20, as fresh processes: wall time and peak RSS.

- whiteouts: one layer of 30,000 vLLM sources in 8,000 directories, one layer whiting
  out the 8,000 directories (the old merge scanned every entry for every whiteout);
- members: one gzip'd layer of 200,000 empty files (tarfile kept every header and its
  gzip reader copied what 64 KB inflate to for every header);

    python benchmarks/bench_image_hostile.py [--runs 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from measure import run_measured  # noqa: E402
from test_image_hostile import SITE, header, raw_image, tar_of  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        layout = Path(scratch) / "oci"
        sources = b"".join(header(f"{SITE}/vllm/d{i % 8000}/f{i}.py".encode(), 0) for i in range(30_000)) + b"\0" * 1024
        whiteouts = tar_of(f"{SITE}/vllm/.wh.d{i}".encode() for i in range(8000))
        raw_image(layout, "whiteouts", [sources, whiteouts])
        raw_image(layout, "members", [tar_of(b"usr/share/m%07d" % i for i in range(200_000))])
        for tag in ("whiteouts", "members"):
            for _ in range(args.runs):
                result = run_measured("check", "--image", f"oci:{layout}:{tag}", timeout=1800)
                print(f"{tag:10} {result.seconds:6.1f} s  {result.peak_rss >> 20:5d} MB  {result.stderr.strip()[:90]}")


if __name__ == "__main__":
    main()
