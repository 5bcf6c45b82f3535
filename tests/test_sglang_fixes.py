"""SGLang's fixes judged on its real wheels (issue 23, "Tests"): every release on
the package index, from the last without DFlash (0.5.10.post1) to the newest.

One ``releases --engine sglang --format json`` run judges every row; each
release's own check then says who decided (behaviour) and which reference
drafter fails, per layer and part. The releases read by hand (their
``models/dflash.py`` and ``speculative/dflash_utils.py``) are asserted exactly; a
release newer than those is asserted only to be judged, by behaviour, so the
next release needs no change here."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest

from conftest import check_json, run_cli
from dflash_doctor.check import run_check
from dflash_doctor.engines import SGLANG
from dflash_doctor.model import ABSENT, NOT_APPLICABLE, PARTIAL, PRESENT, UNKNOWN, FixResult
from dflash_doctor.provenance import version_key
from dflash_doctor.releases import in_range, index_releases
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.release import ReleaseTarget, release_tree

pytestmark = pytest.mark.release  # real SGLang wheels, fetched once into the user cache

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
LAST_WITHOUT, NEWEST_READ = "0.5.10.post1", "0.5.23"
FIXES = ("rope-base", "swa-config")

# The words reasons use for each reference drafter (rules/reference/drafters/names.toml).
WORDS = {
    "zlab-mixed": "z-lab drafters mixing sliding and full layers",
    "zlab-full": "z-lab drafters with full attention only",
    "sliding-noncausal": "drafters with only sliding, non-causal layers",
    "mimo-swa": "MiMo drafters with a dflash_config sliding window",
}
THREE = ("zlab-mixed", "sliding-noncausal", "mimo-swa")  # the reference drafters that state a window and a base


def releases_from(first: str, last: str) -> tuple[str, ...]:
    """The releases read by hand from ``first`` to ``last``, post releases included."""
    read = (
        "0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 "
        "0.5.20 0.5.21 0.5.22 0.5.23"
    ).split()
    return tuple(v for v in read if version_key(first) <= version_key(v) <= version_key(last))


# What the code of each release does, read in its wheel, as (status, {(drafter, part) that fails}):
# rope-base: 0.5.11-0.5.12.post1 read float(getattr(config, "rope_theta", 1000000)), and transformers 5
# configs have no rope_theta attribute, so every drafter gets 1e6; from 0.5.13 get_rope_config reads
# rope_parameters first.
ROPE = {
    **{v: (ABSENT, {(name, "rotary-base") for name in THREE}) for v in releases_from("0.5.11", "0.5.12.post1")},
    **{v: (PRESENT, set()) for v in releases_from("0.5.13", NEWEST_READ)},
}
# swa-config: to 0.5.13.post1 every layer is RadixAttention(attn_type=ENCODER_ONLY) without a window
# (so z-lab's sliding layers, causal by default, also run non-causally);
# 0.5.14-0.5.17 take windows from layer_types but build every sliding layer DECODER (causal) whatever
# is_causal says; from 0.5.18 _get_dflash_attention_type honours is_causal. No release reads a MiMo
# dflash_config.use_swa (swa_window_size only for Nemotron-3.5 drafters with sliding layer_types), so
# the MiMo drafter, which has no layer_types, runs every layer without its window.
SWA = {
    **{
        v: (ABSENT, {(name, "sliding-window") for name in THREE} | {("zlab-mixed", "causality")})
        for v in releases_from("0.5.11", "0.5.13.post1")
    },
    **{
        v: (PARTIAL, {("sliding-noncausal", "causality"), ("mimo-swa", "sliding-window")})
        for v in releases_from("0.5.14", "0.5.17")
    },
    **{v: (PARTIAL, {("mimo-swa", "sliding-window")}) for v in releases_from("0.5.18", NEWEST_READ)},
}
KNOWN = {"rope-base": ROPE, "swa-config": SWA}


@pytest.fixture(scope="module")
def matrix() -> dict:
    """One ``releases`` run over every SGLang release on the index from the last without DFlash."""
    proc = run_cli("releases", "--engine", "sglang", "--from", LAST_WITHOUT, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, json.loads((SCHEMAS / "releases-v1.schema.json").read_text()))
    return data


@pytest.fixture(scope="module")
def checks(matrix: dict) -> dict[str, dict[str, FixResult]]:
    """Each release's own check of SGLang's two fixes: who decided, the reason, the observations."""
    rules = tuple(rule for rule in load_rules() if rule.engine == SGLANG.name and rule.id in FIXES)
    assert sorted(rule.id for rule in rules) == list(FIXES)
    return {
        row["release"]: {fix.id: fix for fix in run_check(ReleaseTarget(row["release"], SGLANG), rules).fixes}
        for row in matrix["releases"]
    }


def test_the_matrix_judges_every_sglang_release_on_the_index(matrix: dict) -> None:
    rows = [row["release"] for row in matrix["releases"]]
    assert matrix["engine"] == "sglang" and matrix["releases_from"] == "package index"
    assert rows == in_range(index_releases(SGLANG), LAST_WITHOUT, None, SGLANG)  # every one, in index order
    assert rows[0] == LAST_WITHOUT and set(releases_from("0.5.11", NEWEST_READ)) <= set(rows)
    assert all("error" not in row for row in matrix["releases"]), matrix["releases"]


@pytest.mark.parametrize("fix_id", FIXES)
def test_each_release_gets_the_verdict_its_code_earns_by_behaviour(fix_id: str, matrix: dict, checks: dict) -> None:
    seen = []
    for row in matrix["releases"]:
        release, status = row["release"], row["fixes"][fix_id]
        fix = checks[release][fix_id]
        assert fix.status == status, (release, fix.reason)  # the matrix says what the release's check says
        seen.append(release)
        if release == LAST_WITHOUT:
            assert status == NOT_APPLICABLE, (release, fix.reason)
            continue
        assert fix.decided_by == "behaviour", (release, fix.decided_by, fix.reason)
        if release not in KNOWN[fix_id]:  # newer than the releases read: judged, by behaviour
            assert version_key(release) > version_key(NEWEST_READ) and status != UNKNOWN, (release, fix.reason)
            continue
        expected, failing = KNOWN[fix_id][release]
        failed = {(item.config, item.part) for item in fix.behaviour.observations if item.ok is False}
        assert (status, failed) == (expected, failing), (release, fix.reason)
        if failing:
            fails = fix.reason.split("fails for ", 1)[1].split("; works for ")[0]
            named = {name for name in WORDS if WORDS[name] in fails}
            assert named == {name for name, _ in failing}, (release, fix.reason)
        assert all(item.ok is not None for item in fix.behaviour.observations if item.config in THREE), release
    assert set(KNOWN[fix_id]) <= set(seen)


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.20.1", "0.26.0", "0.34.0"])
def test_the_rope_question_asked_of_vllm_finds_its_base_built_as_the_config_states(
    version: str, tmp_path: Path
) -> None:
    """The same RoPE question, asked of vLLM through the extra rule (not a default fix): the base in the
    rope_parameters each draft layer hands get_rope is the drafter's (1e7, 1e4), decided by behaviour; and
    the same tree with that read replaced by a literal 1e6 (an SGLang 0.5.11-like defect) is absent."""
    extra = Path(__file__).resolve().parent.parent / "rules" / "extra"
    env = {**os.environ, "DFLASH_DOCTOR_RULES": str(extra)}
    tree = release_tree(version)
    proc = run_cli("check", "--path", str(tree), "--only", "rope-base", "--format", "json", env=env)
    (fix,) = json.loads(proc.stdout)["fixes"]
    assert (fix["status"], fix["decided_by"]) == (PRESENT, "behaviour"), fix["reason"]
    assert proc.returncode == 0
    broken = tmp_path / "tree"
    shutil.copytree(tree, broken)
    drafter = broken / "vllm/model_executor/models/qwen3_dflash.py"
    text = drafter.read_text(encoding="utf-8")
    assert text.count("rope_parameters=rope_parameters,") == 1
    text = text.replace("rope_parameters=rope_parameters,", 'rope_parameters={"rope_theta": 1000000},')
    compile(text, str(drafter), "exec")
    drafter.write_text(text, encoding="utf-8")
    proc = run_cli("check", "--path", str(broken), "--only", "rope-base", "--format", "json", env=env)
    (fix,) = json.loads(proc.stdout)["fixes"]
    assert (fix["status"], fix["decided_by"]) == (ABSENT, "behaviour"), fix["reason"]
    assert "the RoPE base of layer 0 is 1000000" in fix["reason"]


@pytest.mark.release
def test_cache_drop_is_what_the_trees_own_is_eagle_answers_for_dflash(tmp_path: Path) -> None:
    """SGLang's cache-drop, by behaviour: 0.5.11's is_eagle() is false for DFLASH (present, the reason saying
    so); the same tree with DFLASH counted among the EAGLE members is absent; with is_eagle asking
    something the stand-ins cannot tell, unknown."""
    tree = tmp_path / "tree"
    shutil.copytree(release_tree("0.5.11", SGLANG), tree)
    spec_info = tree / "sglang/srt/speculative/spec_info.py"
    text = spec_info.read_text(encoding="utf-8")
    eagle = "return self == SpeculativeAlgorithm.EAGLE or self == SpeculativeAlgorithm.EAGLE3"
    assert text.count(eagle) == 1

    def cache_drop(code: str) -> dict:
        compile(code, str(spec_info), "exec")
        spec_info.write_text(code, encoding="utf-8")
        proc = run_cli("check", "--path", str(tree), "--engine", "sglang", "--only", "cache-drop", "--format", "json")
        (fix,) = json.loads(proc.stdout)["fixes"]
        return fix

    fix = cache_drop(text)
    assert (fix["status"], fix["decided_by"]) == (PRESENT, "behaviour")
    assert "is False for SpeculativeAlgorithm.DFLASH" in fix["behaviour"]["reason"]
    fix = cache_drop(text.replace(eagle, eagle + " or self == SpeculativeAlgorithm.DFLASH"))
    assert (fix["status"], fix["decided_by"]) == (ABSENT, "behaviour")
    fix = cache_drop(text.replace(eagle, "return self.value in EAGLE_VALUES"))
    assert fix["status"] == UNKNOWN


# layer-offset: what each release's hooks tap, per target architecture, for a z-lab drafter
# (id L needs hidden_states[L + 1]). qwen3_5_text.py's Qwen3_5ForCausalLM: absent to 0.5.17,
# unshifted in 0.5.18, a shifted def then an unshifted def that replaces it in 0.5.19-0.5.21
# (Python keeps the last), the duplicate removed in 0.5.22 (PR #38096). Muse Glimmer (0.5.18 on)
# hands the ids on unshifted to a model that taps before each layer; Llama shifts them.
TEXT_TAPS = {"0.5.18": (False, 121), "0.5.19": (False, 149), "0.5.21": (False, 149), "0.5.22": (True, 114)}


def capture_observations(version: str) -> tuple[dict, dict[str, dict]]:
    code, report = check_json("--release", version, "--engine", "sglang", "--only", "layer-offset")
    fix = report["fixes"][0]
    assert fix["decided_by"] == "behaviour", fix
    seen = {item["note"].split(" ", 1)[0] + "@" + item["setting"]: item for item in fix["behaviour"]["observations"]}
    return fix, {key: item for key, item in seen.items() if item["config"] == "zlab-mixed"}


MUSE = {"MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration"}
TEXT = {"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}  # the MoE text model inherits the text hook
LAYER = {
    **{v: (PRESENT, set()) for v in releases_from("0.5.11", "0.5.17")},
    **{v: (PARTIAL, MUSE | TEXT) for v in releases_from("0.5.18", "0.5.21")},
    **{v: (PARTIAL, MUSE) for v in releases_from("0.5.22", NEWEST_READ)},
}
# Recorded, not judged: the draft models (EAGLE, NextN, MTP) that inherit a target's hook but never
# read the capture, and (0.5.19 on) LFM2's bidirectional embedding model, which SGLang's own
# is_generation_model never generates with (its inherited hook would tap one layer early).
TAPS_NOTHING = {
    "LlamaForCausalLMEagle",
    "LlamaForCausalLMEagle3",
    "MistralForCausalLMEagle",
    "DeepseekV3ForCausalLMNextN",
}
NOT_GENERATIVE = {"Lfm2BidirectionalModel"}


def test_layer_offset_is_judged_per_release_on_every_architecture_the_release_registers(matrix: dict) -> None:
    """Every SGLang release's layer-offset, by behaviour, with the architectures that tap one layer
    early; every architecture's tap is read (Inkling's layer ids, Nanbeige's unrolled depth,
    NemotronH's boundary capture, Kimi K3's DSPARK taps) but the one whose forward never taps."""
    (rule,) = (rule for rule in load_rules() if rule.engine == SGLANG.name and rule.id == "layer-offset")
    for row in matrix["releases"]:
        release, status = row["release"], row["fixes"]["layer-offset"]
        (fix,) = run_check(ReleaseTarget(release, SGLANG), (rule,)).fixes
        assert fix.status == status, (release, fix.reason)
        if release == LAST_WITHOUT:
            assert status == NOT_APPLICABLE
            continue
        assert fix.decided_by == "behaviour" and fix.behaviour is not None, (release, fix.reason)
        judged = [item for item in fix.behaviour.observations if item.config in ("zlab-mixed", "zlab-full")]
        judged = [item for item in judged if item.part == "capture-position"]
        assert not [item.note for item in judged if item.ok is None], release  # every architecture's tap is read
        recorded = [item for item in fix.behaviour.observations if item.config == "zlab-mixed"]
        assert TAPS_NOTHING <= {item.setting for item in recorded if item.part == "taps-nothing"}, release
        pooling = {item.setting for item in recorded if item.part == "not-generative"}
        assert pooling == (NOT_GENERATIVE if version_key(release) >= version_key("0.5.19") else set()), release
        if release not in LAYER:
            assert version_key(release) > version_key(NEWEST_READ) and status != UNKNOWN, (release, fix.reason)
            continue
        expected, failing = LAYER[release]
        assert (status, {item.setting for item in judged if item.ok is False}) == (expected, failing), release


@pytest.mark.parametrize("version", list(TEXT_TAPS))
def test_layer_offset_runs_each_architectures_hook_the_def_python_keeps(version: str) -> None:
    fix, seen = capture_observations(version)
    ok, line = TEXT_TAPS[version]
    text = [
        item for item in seen.values() if item["setting"] == "Qwen3_5ForCausalLM" and "qwen3_5_text.py" in item["note"]
    ]
    assert len(text) == 1 and f"qwen3_5_text.py:{line})" in text[0]["note"], text
    assert text[0]["ok"] is ok and text[0]["expected"] == [2, 17, 32, 47, 62]
    assert text[0]["observed"] == ([2, 17, 32, 47, 62] if ok else [1, 16, 31, 46, 61])
    muse = [item for item in seen.values() if item["setting"] == "MuseGlimmerForCausalLM"]
    assert len(muse) == 1 and muse[0]["ok"] is False and muse[0]["observed"] == [1, 16, 31, 46, 61]
    llama = [item for item in seen.values() if item["setting"] == "LlamaForCausalLM"]
    assert len(llama) == 1 and llama[0]["ok"] is True and "taps each listed layer's input" in llama[0]["note"]
    # Some architectures tap right and some one layer early: partial, naming the ones that fail.
    assert fix["status"] == PARTIAL and "MuseGlimmerForCausalLM" in fix["reason"]
    assert ("Qwen3_5ForCausalLM" in fix["reason"].split("; works for")[0]) is not ok


QWEN36 = Path(__file__).resolve().parent / "data" / "drafters" / "qwen3.6-27b-dflash.json"


def layer_offset_for(version: str, drafter: Path, target: dict, tmp_path: Path) -> dict:
    """The layer-offset of ``check --release`` with the drafter's config and ``target`` as its target config."""
    (tmp_path / "target.json").write_text(json.dumps(target))
    code, report = check_json(
        "--release", version, "--engine", "sglang", "--only", "layer-offset",
        "--draft-config", str(drafter), "--target-config", str(tmp_path / "target.json"),
    )  # fmt: skip
    assert code == report["exit_code"]
    (fix,) = report["fixes"]
    return fix


# A target config of our own: a 64-layer model under the architecture it names.
TARGETS = [
    ("0.5.19", "Qwen3_5ForCausalLM", ABSENT),  # the unshifted def Python keeps taps one layer early
    ("0.5.22", "Qwen3_5ForCausalLM", PRESENT),
    ("0.5.19", "LlamaForCausalLM", PRESENT),
    ("0.5.19", "MuseGlimmerForCausalLM", ABSENT),
    ("0.5.19", "NoSuchModelForCausalLM", UNKNOWN),
    ("0.5.23", "MistralForCausalLM", PRESENT),  # its module inherits Llama's hook without defining one
]


@pytest.mark.parametrize(("version", "architecture", "expected"), TARGETS)
def test_with_a_target_config_layer_offset_is_the_verdict_for_that_architecture(
    version: str, architecture: str, expected: str, tmp_path: Path
) -> None:
    """--target-config narrows the per-architecture question to the architectures the target's
    config names: the release's partial becomes that target's present or absent, the user's
    drafter tapping on the target's layer count; a name no class of the tree is registered under
    is unknown, with the reason."""
    target = {"architectures": [architecture], "num_hidden_layers": 64}
    fix = layer_offset_for(version, QWEN36, target, tmp_path)
    assert fix["status"] == expected, fix["reason"]
    settings = {item["setting"] for item in fix["behaviour"]["observations"] if item["observed"] is not None}
    if expected == UNKNOWN:
        assert "no class this tree registers as the target config's NoSuchModelForCausalLM" in fix["reason"]
        return
    assert settings == {architecture}, settings
    mine = [item for item in fix["behaviour"]["observations"] if item["config"].startswith("user:")]
    assert [item["expected"] for item in mine] == [[2, 17, 32, 47, 62]]
    assert (mine[0]["observed"] == [2, 17, 32, 47, 62]) is (expected == PRESENT)


# The published Muse Glimmer DFlash2 drafter (DFlash2DraftModel) states HF layer-output ids. From 0.5.19
# SGLang's worker adds one to them for a Muse Glimmer target (its _map_muse_target_layer_ids) before the
# hook, which hands them on as they are to a model that taps before each layer; 0.5.18 has no such map.
# The same ids in a DFlashDraftModel drafter are not mapped, so they tap one layer early on every release.
MUSE_DFLASH2 = Path(__file__).resolve().parent / "data" / "drafter-configs" / "z-lab__Muse-Glimmer-30B-DFlash2.json"
MAPPED = [
    ("0.5.18", "DFlash2DraftModel", ABSENT),
    ("0.5.19", "DFlash2DraftModel", PRESENT),
    ("0.5.23", "DFlash2DraftModel", PRESENT),
    ("0.5.23", "DFlashDraftModel", ABSENT),
]


@pytest.mark.parametrize(("version", "architecture", "expected"), MAPPED)
def test_layer_offset_runs_the_workers_id_map_on_the_drafter_and_target_configs(
    version: str, architecture: str, expected: str, tmp_path: Path
) -> None:
    drafter = tmp_path / "drafter.json"
    drafter.write_text(json.dumps({**json.loads(MUSE_DFLASH2.read_text()), "architectures": [architecture]}))
    # our own target config: the Muse Glimmer text model's type, its 52 layers
    target = {"architectures": ["MuseGlimmerForCausalLM"], "model_type": "muse_glimmer", "num_hidden_layers": 52}
    fix = layer_offset_for(version, drafter, target, tmp_path)
    assert fix["status"] == expected, fix["reason"]
    (mine,) = [item for item in fix["behaviour"]["observations"] if item["config"].startswith("user:")]
    assert mine["expected"] == [2, 14, 26, 38, 50]
    assert mine["observed"] == ([2, 14, 26, 38, 50] if expected == PRESENT else [1, 13, 25, 37, 49])
    assert ("_map_muse_target_layer_ids" in mine["note"]) is (expected == PRESENT)


def test_without_a_target_config_a_drafter_the_id_map_shifts_by_target_is_not_guessed(tmp_path: Path) -> None:
    """The map reads the target's config: without one, the Muse DFlash2 drafter's taps depend on
    which target serves it, so its answer is unknown with the reason, and the reference drafters
    (whose ids no target changes) still judge the release."""
    code, report = check_json(
        "--release", "0.5.23", "--engine", "sglang", "--only", "layer-offset", "--draft-config", str(MUSE_DFLASH2)
    )
    (fix,) = report["fixes"]
    assert fix["status"] == PARTIAL and fix["decided_by"] == "behaviour"
    assert "depend on the target's config, which --target-config gives" in fix["behaviour"]["reason"]
    assert not [item for item in fix["behaviour"]["observations"] if item["config"].startswith("user:") and item["ok"]]


def test_a_target_config_naming_a_flood_of_architectures_is_unknown_not_searched(tmp_path: Path) -> None:
    """A hostile target config (50,000 names, some not names at all, just under the 4 MiB bound) is
    not turned into a package search: layer-offset is unknown, with the reason, and the check ends."""
    names = [f"Arch{i}ForCausalLM" for i in range(50_000)] + ["(.*)+", "x" * 10_000]
    fix = layer_offset_for("0.5.23", QWEN36, {"architectures": names, "num_hidden_layers": 64}, tmp_path)
    assert (tmp_path / "target.json").stat().st_size < 4 * 1024 * 1024
    assert fix["status"] == UNKNOWN and "architectures are not up to 8 class names" in fix["reason"]
