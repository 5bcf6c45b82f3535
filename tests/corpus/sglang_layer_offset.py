"""layer-offset in SGLang. First the text-only Qwen3.5/3.6 target (``Qwen3_5ForCausalLM`` in
``qwen3_5_text.py``): its ``set_dflash_layers_to_capture`` must hand the z-lab ids on + 1 to
the inner model, which captures before each layer. 0.5.18 hands them on as they are; 0.5.19 -
0.5.21 have the shifted hook and, after it in the class body, an older unshifted ``def`` that
replaces it; 0.5.22 and later only the shifted one (PR #38096). Then the loops of other
targets, whose capture tests read a layer's position in other shapes: Inkling's
``layer.layer_id`` after the layer's call, Kimi K3's DSPARK taps through a name bound to the
list, NemotronH's test before a layer called by ``forward``, Nanbeige's unrolled depth. Each
edit is also asserted to apply and compile (``Edit.apply``)."""

from . import Replace, edits

TEXT = "sglang/srt/models/qwen3_5_text.py"

# 0.5.22, 0.5.23 (the shifted hook, as released)
SHIFTED_CALL = """        self.model.set_dflash_layers_to_capture(
            [layer_id + 1 for layer_id in layer_ids]
        )
"""
# 0.5.18 - 0.5.21 (the unshifted hook)
UNSHIFTED_CALL = "        self.model.set_dflash_layers_to_capture(layers_to_capture)\n"
UNSHIFTED_DEF = """    def set_dflash_layers_to_capture(self, layers_to_capture: list[int]):
        if not self.pp_group.is_last_rank:
            return
        if layers_to_capture is None:
            raise ValueError(
                "DFLASH requires explicit layer ids for aux hidden capture."
            )
        self.capture_aux_hidden_states = True
        self.model.set_dflash_layers_to_capture(layers_to_capture)
"""
# our own short hooks, put beside the released one
OLD_HOOK = """    def set_dflash_layers_to_capture(self, taps):
        self.capture_aux_hidden_states = True
        self.model.set_dflash_layers_to_capture(taps)

"""
NEW_HOOK = """    def set_dflash_layers_to_capture(self, taps):
        self.capture_aux_hidden_states = True
        self.model.set_dflash_layers_to_capture([tap + 1 for tap in taps])

"""
FORWARD = "    @torch.no_grad()\n    def forward(\n"
HOOK_522 = "    def set_dflash_layers_to_capture(self, layer_ids: list[int]) -> None:\n"

EDITS = edits(
    "layer-offset",
    (
        "shift-written-one-plus",
        "0.5.22",
        "preserve",
        "the +1 written 1 + layer_id",
        Replace(TEXT, SHIFTED_CALL, "        self.model.set_dflash_layers_to_capture([1 + i for i in layer_ids])\n"),
    ),
    (
        "older-unshifted-def-before",
        "0.5.22",
        "preserve",
        "an unshifted def of the same name put before the shifted one: the later, shifted def replaces it",
        Replace(TEXT, HOOK_522, OLD_HOOK + HOOK_522),
    ),
    (
        "shift-removed",
        "0.5.22",
        "break",
        "the +1 removed: the ids handed on as they are, every tap one layer early",
        Replace(TEXT, SHIFTED_CALL, "        self.model.set_dflash_layers_to_capture(layer_ids)\n"),
    ),
    (
        "unshifted-def-after",
        "0.5.23",
        "break",
        "an unshifted def of the same name put after the shifted one (0.5.19's layout): Python keeps it",
        Replace(TEXT, FORWARD, OLD_HOOK + FORWARD),
    ),
    (
        "shift-added",
        "0.5.18",
        "add",
        "the +1 added to 0.5.18's hook (what dflash-doctor's patch writes)",
        Replace(
            TEXT,
            UNSHIFTED_CALL,
            "        self.model.set_dflash_layers_to_capture([layer_id + 1 for layer_id in layers_to_capture])\n",
        ),
    ),
    (
        "shadowing-def-removed",
        "0.5.19",
        "add",
        "the later unshifted def removed, as PR #38096 did: the shifted def runs",
        Replace(TEXT, "\n" + UNSHIFTED_DEF, ""),
    ),
    (
        "shadowing-def-shifted",
        "0.5.21",
        "add",
        "the later def kept, its ids handed on + 1: both defs shift",
        Replace(
            TEXT,
            UNSHIFTED_CALL,
            "        self.model.set_dflash_layers_to_capture([layer_id + 1 for layer_id in layers_to_capture])\n",
        ),
    ),
    (
        "shifted-def-after-the-unshifted",
        "0.5.19",
        "add",
        "the defs swapped: a shifted def of our own put after the unshifted one replaces it",
        Replace(TEXT, FORWARD, NEW_HOOK + FORWARD),
    ),
    engine="sglang",
    setting="Qwen3_5ForCausalLM",  # the target architecture these edits touch; the tree's others are as released
)
EDITS += edits(
    "layer-offset",
    (
        "inkling-tap-one-early",
        "0.5.23",
        "break",
        "Inkling's test after the layer's call asks for the next layer's id: each tap one layer early",
        Replace(
            "sglang/srt/models/inkling.py",
            "and layer.layer_id in self._dflash_layers_to_capture",
            "and layer.layer_id + 1 in self._dflash_layers_to_capture",
        ),
    ),
    engine="sglang",
    setting="InklingForConditionalGeneration",
)
EDITS += edits(
    "layer-offset",
    (
        "kimi-captures-as-a-set",
        "0.5.23",
        "preserve",
        "Kimi K3's name for the DSPARK list bound to a set of it: the same taps",
        Replace(
            "sglang/srt/models/kimi_k3.py",
            "captures = self.dspark_layers_to_capture or ()",
            "captures = set(self.dspark_layers_to_capture or ())",
        ),
    ),
    engine="sglang",
    setting="KimiK3LinearForCausalLM",
)
EDITS += edits(
    "layer-offset",
    (
        "nemotron-test-for-the-next-layer",
        "0.5.23",
        "break",
        "NemotronH's test before the layer asks for the next layer's id: each tap two layers early",
        Replace(
            "sglang/srt/models/nemotron_h.py",
            "            if i in self.layers_to_capture:\n",
            "            if i + 1 in self.layers_to_capture:\n",
        ),
    ),
    engine="sglang",
    setting="NemotronHForCausalLM",
)
EDITS += edits(
    "layer-offset",
    (
        "nanbeige-depth-written-the-other-way",
        "0.5.23",
        "preserve",
        "Nanbeige's unrolled depth written i + loop * layers: the same taps",
        Replace(
            "sglang/srt/models/nanbeige.py",
            "logical_id = loop_idx * num_physical_layers + i",
            "logical_id = i + loop_idx * num_physical_layers",
        ),
    ),
    engine="sglang",
    setting="NanbeigeForCausalLM",
)
# Architectures whose module only inherits the hook: the registry's modules are searched for the
# classes that have it (Mistral inherits Llama's shifted hook).
MISTRAL = "class MistralForCausalLM(LlamaForCausalLM):\n    pass\n"


def mistral_hook(ids: str) -> Replace:
    """Mistral's class given a hook of its own that stores ``ids`` (written over ``layer_ids``)."""
    hook = (
        "    def set_dflash_layers_to_capture(self, layer_ids):\n"
        "        self.capture_aux_hidden_states = True\n"
        f"        self.model.layers_to_capture = {ids}\n"
    )
    return Replace("sglang/srt/models/mistral.py", MISTRAL, MISTRAL.replace("    pass\n", hook))


EDITS += edits(
    "layer-offset",
    (
        "mistral-own-hook-without-the-shift",
        "0.5.23",
        "break",
        "Mistral overrides the hook it inherits with one that stores the ids as they are: each tap one layer early",
        mistral_hook("list(layer_ids)"),
    ),
    (
        "mistral-hook-shifted-again",
        "0.5.23",
        "preserve",
        "Mistral overrides the hook with its own + 1, written k + 1: the same taps",
        mistral_hook("[k + 1 for k in layer_ids]"),
    ),
    engine="sglang",
    setting="MistralForCausalLM",
)
