"""The capture-position question on a tree written here (our own toy target models, not SGLang's
code): the hook Python keeps runs, the tap is read from the holding model's loop, and hostile
shapes (a hook that never returns, bases that name each other, a hook that recurses through the
model it holds) end bounded, as an answer or ``unknown`` with the reason, never a guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_doctor.behaviour.capture import MAX_DEPTH, evaluate
from dflash_doctor.draft.config import TargetLayers
from dflash_doctor.engines import SGLANG
from dflash_doctor.isolation.sandbox import session
from dflash_doctor.rulefile import load_rules
from dflash_doctor.rules import Capture
from dflash_doctor.source import DirectoryTree

MODELS = """
class ToyModel:
    def __init__(self, config):
        self.layers = []
        self.layers_to_capture = []

    def forward(self, x):
        aux = []
        for i in range(len(self.layers)):
            if i in self.layers_to_capture:
                aux.append(x)
            x = self.layers[i](x)
        return x, aux


class AfterModel(ToyModel):
    def forward(self, x):
        aux = []
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i in self.layers_to_capture:
                aux.append(x)
        return x, aux


class ToyForCausalLM:
    def __init__(self, config):
        self.model = ToyModel(config)

    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


class AfterForCausalLM(ToyForCausalLM):
    def __init__(self, config):
        self.model = AfterModel(config)

    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = list(layer_ids)


class ShadowedForCausalLM(ToyForCausalLM):
    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = [i + 1 for i in layer_ids]

    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = list(layer_ids)


class SpinForCausalLM(ToyForCausalLM):
    def set_dflash_layers_to_capture(self, layer_ids):
        while True:
            pass


class EchoForCausalLM(ToyForCausalLM):
    def __init__(self, config):
        self.model = EchoForCausalLM(config)

    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.set_dflash_layers_to_capture(layer_ids)


class CycleA(CycleB):
    pass


class CycleB(CycleA):
    def set_dflash_layers_to_capture(self, layer_ids):
        pass


class OwnIndexModel(ToyModel):  # a layer keeps its own index; the ids are a set
    def forward(self, x):
        aux = []
        for layer in self.layers:
            x = layer(x)
            if layer.layer_id in self.layers_to_capture:
                aux.append(x)
        return x, aux


class OwnIndexForCausalLM(ToyForCausalLM):
    def __init__(self, config):
        self.model = OwnIndexModel(config)

    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = set(reversed(layer_ids))


class UnknownAttributeModel(OwnIndexModel):  # an attribute the rule does not name as the layer's index
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            if layer.group in self.layers_to_capture:
                x = x + 0
        return x


class UnknownAttributeForCausalLM(OwnIndexForCausalLM):
    def __init__(self, config):
        self.model = UnknownAttributeModel(config)


class LoopedModel(ToyModel):  # runs its layers twice; ids count the unrolled depth
    def forward(self, x):
        aux = []
        for loop in range(2):
            for i in range(len(self.layers)):
                depth = loop * len(self.layers) + i
                x = self.layers[i](x, aux if depth in self.layers_to_capture else None)
        return x, aux


class LoopedForCausalLM(ToyForCausalLM):
    def __init__(self, config):
        self.model = LoopedModel(config)


class AliasModel(ToyModel):  # the list read through a name; the tap handed to the next layer or taken after
    def forward(self, x, early):
        aux = []
        captures = self.layers_to_capture or ()
        for i in range(len(self.layers)):
            x = self.layers[i](x, aux if early and i - 1 in captures else None)
            if not early and i in captures:
                aux.append(x)
        return x, aux


class AliasForCausalLM(AfterForCausalLM):
    def __init__(self, config):
        self.model = AliasModel(config)


class ForwardModel(ToyModel):  # the test before the layer, whose forward is called by name
    def forward(self, x):
        aux = []
        for i in range(len(self.layers)):
            if i in self.layers_to_capture:
                x, snapshot = self.layers[i].boundary.snapshot(x)
                aux.append(snapshot)
            layer = self.layers[i]
            x = layer.forward(x)
        return x, aux


class ForwardForCausalLM(ToyForCausalLM):
    def __init__(self, config):
        self.model = ForwardModel(config)


EntryClass = [
    ToyForCausalLM, AfterForCausalLM, ShadowedForCausalLM, SpinForCausalLM, EchoForCausalLM, CycleA,
    OwnIndexForCausalLM, UnknownAttributeForCausalLM, LoopedForCausalLM, AliasForCausalLM, ForwardForCausalLM,
]
"""
IDS = (1, 9, 17)
# Modules beside toy.py: classes that only inherit a hook, through an absolute import, a relative one
# and a class of a subpackage; a subpackage's own EntryClass (the engine does not import it); a model
# that never reads the capture; one that taps through super().forward; one whose __init__ builds
# its model in the base's __init__ in one branch; and a pooling model the engine never generates with.
REGISTERED = {
    "sglang/srt/models/inherit.py": """
from sglang.srt.models.toy import ToyForCausalLM
from .toy import AfterForCausalLM, ToyModel
from sglang.srt.models.common.middle import MiddleForCausalLM


class InheritForCausalLM(ToyForCausalLM):
    pass


class RelativeForCausalLM(AfterForCausalLM):
    pass


class ChainForCausalLM(MiddleForCausalLM):
    pass


class SilentModel:
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class DraftForCausalLM(ToyForCausalLM):
    def __init__(self, config):
        self.model = SilentModel()


class SuperModel(ToyModel):
    def forward(self, x):
        return super().forward(x)


class SuperForCausalLM(ToyForCausalLM):
    def __init__(self, config):
        self.model = SuperModel(config)


class BranchForCausalLM(AfterForCausalLM):
    def __init__(self, config):
        if config.encoder_only:
            self.model = nn.Module()
        else:
            super().__init__(config)


class PoolingForCausalLM(AfterForCausalLM):
    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = [i - 1 for i in layer_ids]


EntryClass = [
    InheritForCausalLM, RelativeForCausalLM, ChainForCausalLM, DraftForCausalLM, SuperForCausalLM,
    BranchForCausalLM, PoolingForCausalLM,
]
""",
    "sglang/srt/layers/capture_mixin.py": """
class CaptureMixin:
    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = [i + 1 for i in layer_ids]
""",
    "sglang/srt/models/mixed.py": """
from sglang.srt.layers.capture_mixin import CaptureMixin
from sglang.srt.models.toy import ToyModel


class MixedForCausalLM(CaptureMixin):
    def __init__(self, config):
        self.model = ToyModel(config)


EntryClass = MixedForCausalLM
""",
    "sglang/srt/models/common/__init__.py": "",
    "sglang/srt/models/common/middle.py": """
from sglang.srt.models.toy import ToyForCausalLM


class MiddleForCausalLM(ToyForCausalLM):
    pass


EntryClass = MiddleForCausalLM
""",
    "sglang/srt/configs/model_config.py": """
def is_generation_model(model_architectures, is_embedding=False):
    if "PoolingForCausalLM" in model_architectures:
        return False
    return not is_embedding
""",
    # the worker's id map: drafters that store layer outputs get one more, on a "toy_outputs" target only
    "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py": """
OUTPUT_DRAFTS = ("OutputsDraftModel",)


def _map_muse_target_layer_ids(*, target_hf_config, draft_hf_config, layer_ids):
    if getattr(target_hf_config, "model_type", None) != "toy_outputs":
        return layer_ids
    named = getattr(draft_hf_config, "architectures", None) or []
    return [k + 1 for k in layer_ids] if any(name in OUTPUT_DRAFTS for name in named) else layer_ids
""",
}


def layer_offset_capture() -> Capture:
    capture = next(r for r in load_rules() if r.engine == "sglang" and r.id == "layer-offset").behaviour.capture
    assert capture is not None
    return capture


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> DirectoryTree:
    root = tmp_path_factory.mktemp("toy")
    models = root / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "toy.py").write_text(MODELS)
    for relpath, text in REGISTERED.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    return DirectoryTree(Path(root), None, SGLANG)


@pytest.fixture(scope="module")
def answer(toy: DirectoryTree) -> dict:
    with session() as run:
        (found,) = evaluate(toy, layer_offset_capture(), [(IDS, 36, {})], run)
    return {tapped.architecture: tapped for tapped in found.architectures}


def test_the_tap_follows_the_hook_python_keeps_and_the_holding_models_loop(answer: dict) -> None:
    wanted = tuple(i + 1 for i in IDS)  # a z-lab id L names hidden_states[L + 1]
    assert answer["ToyForCausalLM"].indices == wanted and answer["ToyForCausalLM"].position == "input"
    assert answer["AfterForCausalLM"].indices == wanted and answer["AfterForCausalLM"].position == "output"
    shadowed = answer["ShadowedForCausalLM"]  # the later, unshifted def replaces the shifted one
    lines = MODELS.splitlines()
    start = lines.index("class ShadowedForCausalLM(ToyForCausalLM):")
    defs = [n + 1 for n in range(start, start + 8) if lines[n].strip().startswith("def set_dflash_layers_to_capture")]
    assert shadowed.indices == IDS and shadowed.place.line == defs[1]


def test_the_shapes_a_loop_tests_a_layers_position_in_are_read(answer: dict) -> None:
    """A layer's own index (named by the rule), the unrolled depth of a model run twice, the list
    read through a name and the ``forward`` of a layer bound by name; the tap is in layer order
    whatever order the hook's set holds the ids in."""
    wanted = tuple(i + 1 for i in IDS)
    taps = {name: (answer[name].indices, answer[name].position) for name in answer}
    assert taps["OwnIndexForCausalLM"] == (wanted, "output")
    assert taps["LoopedForCausalLM"] == (wanted, "input")
    assert taps["AliasForCausalLM"] == (wanted, "output")  # handed to layer i for id i - 1, or taken after layer i
    assert taps["ForwardForCausalLM"] == (wanted, "input")
    unknown = answer["UnknownAttributeForCausalLM"]
    assert unknown.indices is None and "layer.group in self.layers_to_capture" in unknown.reason


def test_hostile_hooks_end_bounded_as_unknown_with_the_reason(answer: dict) -> None:
    spin = answer["SpinForCausalLM"]
    assert spin.indices is None and "did not finish" in spin.reason and not spin.unjudged
    echo = answer["EchoForCausalLM"]  # hands on to a model of its own class, forever: cut at the hop limit
    assert echo.indices is None and echo.reason
    assert "CycleA" in answer and answer["CycleA"].indices is None  # bases that name each other: read once each


def test_every_class_the_registry_registers_with_the_hook_is_asked_inherited_or_not(answer: dict) -> None:
    """The engine imports each module directly in the registry directory and registers its entry
    classes: one that only inherits the hook (from another module, through a relative import or
    a subpackage's class) taps as its base does; a subpackage's own entry is not registered."""
    wanted = tuple(i + 1 for i in IDS)
    assert (answer["InheritForCausalLM"].indices, answer["InheritForCausalLM"].position) == (wanted, "input")
    assert (answer["RelativeForCausalLM"].indices, answer["RelativeForCausalLM"].position) == (wanted, "output")
    assert answer["ChainForCausalLM"].indices == wanted
    assert "MiddleForCausalLM" not in answer
    assert answer["SuperForCausalLM"].indices == wanted  # the loop of the forward super() reaches
    # a module naming neither the hook nor a registry class with it: its base, a mixin outside the registry, has it
    assert (answer["MixedForCausalLM"].indices, answer["MixedForCausalLM"].position) == (wanted, "input")
    branch = answer["BranchForCausalLM"]  # not encoder-only: the base's __init__ builds the model
    assert (branch.indices, branch.holder) == (wanted, "AfterModel")


def test_architectures_that_cannot_draft_silently_wrong_are_recorded_not_judged(answer: dict) -> None:
    silent = answer["DraftForCausalLM"]
    assert (silent.indices, silent.unjudged) == (None, "taps-nothing") and "SilentModel" in silent.reason
    pooling = answer["PoolingForCausalLM"]  # its hook would tap two layers early; the engine never decodes with it
    assert (pooling.indices, pooling.unjudged) == (None, "not-generative") and "is_generation_model" in pooling.reason
    assert all(not answer[name].unjudged for name in ("ToyForCausalLM", "InheritForCausalLM", "ChainForCausalLM"))


def test_a_class_inheriting_the_hook_through_too_many_modules_is_unknown_with_the_reason(tmp_path: Path) -> None:
    """A hostile registry: a chain of 40 modules, each class inheriting the last, ends after
    ``MAX_DEPTH`` rounds as unknown (not a partial list that would leave the deepest out)."""
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "toy.py").write_text(MODELS)
    for n in range(40):
        base = ("sglang.srt.models.toy", "ToyForCausalLM") if n == 0 else (f"sglang.srt.models.m{n - 1}", f"M{n - 1}")
        (models / f"m{n}.py").write_text(f"from {base[0]} import {base[1]}\nclass M{n}({base[1]}):\n    pass\n")
    with session() as run:
        (found,) = evaluate(DirectoryTree(Path(tmp_path), None, SGLANG), layer_offset_capture(), [(IDS, 36, {})], run)
    assert found.architectures == () and f"more than {MAX_DEPTH} modules" in found.reason


def test_the_hook_is_handed_the_ids_the_workers_id_map_makes_of_the_drafters(toy: DirectoryTree) -> None:
    """The rule's id map runs on the drafter's config and the target's: on a target whose config it
    shifts for, a drafter it names is handed one more; without a target config, a drafter whose ids
    depend on the target's is unknown with the reason, and one whose ids do not is judged."""
    outputs, plain = {"architectures": ["OutputsDraftModel"]}, {"architectures": ["PlainDraftModel"]}
    drafters = [(IDS, 36, outputs), (IDS, 36, plain)]
    on = TargetLayers(36, "config.json", ("ToyForCausalLM",), {"model_type": "toy_outputs"})
    off = TargetLayers(36, "config.json", ("ToyForCausalLM",), {"model_type": "toy_inputs"})
    with session() as run:
        shifted, unshifted = evaluate(toy, layer_offset_capture(), drafters, run, on)
        other = evaluate(toy, layer_offset_capture(), drafters, run, off)
        unknown, judged = evaluate(toy, layer_offset_capture(), drafters, run)
    wanted = tuple(i + 1 for i in IDS)  # the toy model taps before each layer, its hook adds one
    assert [tapped.indices for tapped in shifted.architectures] == [tuple(i + 2 for i in IDS)]
    assert "hands the hook" in shifted.note and not unshifted.note
    assert [tapped.indices for tapped in unshifted.architectures] == [wanted]
    assert [[tapped.indices for tapped in answer.architectures] for answer in other] == [[wanted], [wanted]]
    assert unknown.architectures == () and "which --target-config gives" in unknown.reason
    assert {tapped.architecture: tapped.indices for tapped in judged.architectures}["ToyForCausalLM"] == wanted
