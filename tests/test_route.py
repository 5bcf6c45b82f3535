"""What vLLM runs, not a model of the releases the rules were written from:
the runners a tree really has, and gaps the tree's own code catches. Each edit
is asserted to apply and compile, and changes what vLLM would run."""

import ast
from pathlib import Path

import pytest

from dflash_doctor.check import run_check
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.path import PathTarget

V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
V2_RESOLVER = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"


def verdicts(tree: Path) -> dict:
    return {fix.id: fix for fix in run_check(PathTarget(tree), load_rules()).fixes}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"the edit does not apply to {path}"
    path.write_text(text.replace(old, new))
    ast.parse(path.read_text())  # the edited tree still compiles


@pytest.mark.release
def test_a_runner_the_tree_lacks_is_never_modelled(mini_tree, monkeypatch):
    """0.34.0 removed the V1 model runner: a tree without it is judged on the V2
    runner alone (it was unknown: the V1 resolver "not found anywhere")."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    (tree / V1_RUNNER).unlink()
    fixes = verdicts(tree)
    fix = fixes["layer-offset"]
    assert (fix.status, fix.decided_by) == ("present", "behaviour"), fix.reason
    assert {item.runner for item in fix.behaviour.observations} == {"v2"}
    swa = fixes["swa-config"]
    assert {item.runner for item in swa.behaviour.observations} == {"v2"}
    assert swa.behaviour.status == "present"


@pytest.mark.release
def test_a_gap_the_trees_code_catches_is_still_a_gap(mini_tree, monkeypatch):
    """A bare ``except`` around the real route would let the stand-in choose the
    fallback branch (the raw ids: absent); vLLM on a GPU runs the route itself,
    so the answer is unknown, naming what was caught."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    assert verdicts(tree)["layer-offset"].status == "present"
    edit(
        tree / V2_RESOLVER,
        "    hf_config = spec_config.draft_model_config.hf_config\n    layer_ids = getattr(",
        "    hf_config = spec_config.draft_model_config.hf_config\n"
        "    try:\n        torch.cuda.synchronize()\n    except:  # noqa: E722\n"
        "        return tuple(hf_config.dflash_config.get('target_layer_ids') or ())\n"
        "    layer_ids = getattr(",
    )
    fix = verdicts(tree)["layer-offset"]
    assert fix.status == "unknown", fix.reason
    assert "caught by the tree's own code" in fix.reason
