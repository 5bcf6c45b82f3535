"""Searches of a package directory: for the files defining names, or naming them (the capture
question's registry). The host's collector answers them over ssh (``search``): it refuses any
directory outside the package and floods of names, and from its answer only module files of
the directory searched are taken."""

from __future__ import annotations

from pathlib import Path

from dflash_doctor.engines import SGLANG
from dflash_doctor.source import DirectoryTree, SourceError
from dflash_doctor.standalone.probe import MAX_SEARCH_NAMES, searched
from dflash_doctor.targets.snapshot import SnapshotTree

import pytest


def tree(root: Path) -> Path:
    for relpath, text in {
        "sglang/srt/models/a.py": "class Alpha:\n    pass\n",
        "sglang/srt/models/sub/b.py": "from sglang.srt.models.a import Alpha\nclass Beta(Alpha):\n    pass\n",
        "sglang/srt/other.py": "class Alpha:\n    pass\n# Beta\n",
    }.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    return root


def test_a_search_reads_only_the_directory_asked_and_finds_definitions_or_mentions(tmp_path: Path) -> None:
    local = DirectoryTree(tree(tmp_path), None, SGLANG)
    assert local.files_defining(["Alpha"]) == {"Alpha": ["sglang/srt/other.py", "sglang/srt/models/a.py"]}
    assert local.files_defining(["Alpha"], "sglang/srt/models") == {"Alpha": ["sglang/srt/models/a.py"]}
    mentions = local.files_mentioning(["Alpha", "Beta"], "sglang/srt/models")
    assert mentions == {
        "Alpha": ["sglang/srt/models/a.py", "sglang/srt/models/sub/b.py"],
        "Beta": ["sglang/srt/models/sub/b.py"],
    }
    assert [scan[:3] for scan in local.scans()] == [
        ("sglang", False, ["Alpha"]),
        ("sglang/srt/models", False, ["Alpha"]),
        ("sglang/srt/models", True, ["Alpha", "Beta"]),
    ]


@pytest.mark.parametrize(
    "request_, error",
    [
        ({"names": ["Alpha"], "under": "sglang/../etc"}, "only of a directory of the package"),
        ({"names": ["Alpha"], "under": "/etc"}, "only of a directory of the package"),
        ({"names": ["Alpha"], "under": "vllm"}, "only of a directory of the package"),
        ({"names": ["Alpha"] * (MAX_SEARCH_NAMES + 1), "under": "sglang"}, "at most"),
        ({"names": ["a.b"], "under": "sglang"}, "each an identifier"),
        ({"names": ["x" * 201], "under": "sglang"}, "each an identifier"),
        (["Alpha"], "names a directory and names"),
    ],
)
def test_the_collector_refuses_a_search_outside_the_package_or_of_anything_but_names(
    tmp_path: Path, request_: object, error: str
) -> None:
    answer = searched(str(tree(tmp_path)), "sglang", request_)
    assert error in answer["error"] and "search" not in answer


def test_only_module_files_of_the_directory_searched_are_taken_from_the_hosts_answer(tmp_path: Path) -> None:
    lies = {
        "search": {"Alpha": ["sglang/srt/models/a.py", "sglang/srt/other.py", "../../etc/passwd", 7], "Gamma": ["x"]}
    }
    snapshot = SnapshotTree({"root": str(tmp_path), "files": {}}, SGLANG, searcher=lambda names, under, mentions: lies)
    assert snapshot.files_mentioning(["Alpha"], "sglang/srt/models") == {"Alpha": ["sglang/srt/models/a.py"]}
    refused = SnapshotTree({"root": "", "files": {}}, SGLANG, searcher=lambda *_: {"error": "refused"})
    with pytest.raises(SourceError, match="refused"):
        refused.files_mentioning(["Alpha"], "sglang/srt/models")
    with pytest.raises(SourceError, match="no host to ask"):
        SnapshotTree({"root": "", "files": {}}, SGLANG).files_mentioning(["Alpha"], "sglang/srt/models")
