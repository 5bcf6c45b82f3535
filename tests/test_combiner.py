"""How what a tree's code does and how it reads combine into a fix's status, on
trees written here (no wheel): the layer-offset rule, through the public check
entry point, asserting only the final status.

The snippets are written for these tests, in the shapes the rule describes.
"""

import textwrap
from pathlib import Path

import pytest

from dflash_doctor.check import run_check
from dflash_doctor.rulefile import select
from dflash_doctor.targets.path import PathTarget

SPECULATIVE = "vllm/config/speculative.py"
V1 = "vllm/v1/worker/gpu_model_runner.py"
V2 = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"

CONFIG_WITH_DFLASH = """
class SpeculativeConfig:
    method: str = "eagle"

    def uses_aux_layers(self) -> bool:
        return self.method in ("eagle3", "dflash")
"""
CONFIG_WITHOUT_DFLASH = """
class SpeculativeConfig:
    method: str = "eagle"

    def uses_aux_layers(self) -> bool:
        return self.method == "eagle3"
"""

# The body of a resolver that reads DFlash layer ids, by how it reads them.
SHIFTED = '[i + 1 for i in (dflash.get("target_layer_ids") or [])]'
RAW = 'dflash.get("target_layer_ids")'
ODD = 'read_ids(dflash, key="target_layer_ids")'  # a form the rule does not know


def v1_resolver(read: str) -> str:
    return f"""
class GPUModelRunner:
    def _get_eagle3_aux_layers_from_config(self):
        hf = self.speculative_config.draft_model_config.hf_config
        ids = getattr(hf, "eagle_aux_hidden_state_layer_ids", None)
        if not ids:
            dflash = getattr(hf, "dflash_config", None)
            if dflash:
                ids = {read}
        return tuple(ids) if ids else None
"""


def v2_resolver(read: str) -> str:
    return f"""
def get_eagle3_aux_layers_from_config(spec_config):
    hf = spec_config.draft_model_config.hf_config
    dflash = getattr(hf, "dflash_config", None) or {{}}
    ids = {read}
    return tuple(ids) if ids else None
"""


V1_EAGLE_ONLY = """
class GPUModelRunner:
    def _get_eagle3_aux_layers_from_config(self):
        hf = self.speculative_config.draft_model_config.hf_config
        return tuple(getattr(hf, "eagle_aux_hidden_state_layer_ids", None) or ()) or None
"""


# What behaviour reads besides the fix's own code: the config it builds, and a
# V2 runner that this tree does not have.
BASE = {
    "vllm/__init__.py": "",
    "vllm/config/vllm.py": "class VllmConfig:\n    pass\n",
    "vllm/v1/worker/gpu/spec_decode/__init__.py": (
        'def init_speculator(vllm_config):\n    raise NotImplementedError("this tree has no V2 speculator")\n'
    ),
}


def status(root: Path, files: dict[str, str]) -> str:
    files = {**BASE, **files}
    for relpath, text in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(textwrap.dedent(text).lstrip())
    [fix] = run_check(PathTarget(root), select(["layer-offset"])).fixes
    return fix.status


@pytest.mark.parametrize(
    "files, expected",
    [
        pytest.param(
            {V1: v1_resolver(SHIFTED)}, "present", id="the one runner shifts, the optional V2 resolver absent"
        ),
        pytest.param({V1: v1_resolver(SHIFTED), V2: v2_resolver(SHIFTED)}, "present", id="both resolvers shift"),
        pytest.param({V1: v1_resolver(RAW)}, "absent", id="the one runner reads raw ids"),
        pytest.param({V1: v1_resolver(RAW), V2: v2_resolver(RAW)}, "absent", id="both resolvers read raw ids"),
        # This tree has no V2 runner: its resolver never runs, whatever its code reads.
        pytest.param(
            {V1: v1_resolver(SHIFTED), V2: v2_resolver(RAW)}, "present", id="a raw resolver no runner reaches"
        ),
        pytest.param(
            {V1: v1_resolver(RAW), V2: v2_resolver(SHIFTED)}, "absent", id="a shifted resolver no runner reaches"
        ),
        pytest.param({V1: V1_EAGLE_ONLY}, "absent", id="the one runner never reads DFlash ids"),
        pytest.param(
            {V1: V1_EAGLE_ONLY, V2: v2_resolver(SHIFTED)},
            "absent",
            id="behaviour observes the defect where the forms read present: behaviour decides",
        ),
        pytest.param({V1: v1_resolver(ODD)}, "unknown", id="code neither behaviour nor the forms can follow"),
        pytest.param(
            {V1: v1_resolver(ODD), V2: v2_resolver(SHIFTED)},
            "unknown",
            id="one site nobody can follow outweighs a present one",
        ),
        pytest.param({V2: v2_resolver(SHIFTED)}, "unknown", id="the required site is missing"),
        pytest.param(
            {V1: "class GPUModelRunner:\n    def _get_eagle3_aux_layers_from_config(self)\n"},
            "unknown",
            id="the required site does not parse",
        ),
    ],
)
def test_site_verdicts_combine_into_the_fix_status(tmp_path, files, expected):
    assert status(tmp_path, {SPECULATIVE: CONFIG_WITH_DFLASH, **files}) == expected


def test_a_vllm_without_dflash_is_not_applicable_whatever_its_resolvers_say(tmp_path):
    assert status(tmp_path, {SPECULATIVE: CONFIG_WITHOUT_DFLASH, V1: v1_resolver(RAW)}) == "not-applicable"


def test_a_vllm_without_a_speculative_config_is_unknown(tmp_path):
    assert (
        status(tmp_path, {SPECULATIVE: "class OtherConfig:\n    method = 'dflash'\n", V1: v1_resolver(SHIFTED)})
        == "unknown"
    )
