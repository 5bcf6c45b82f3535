"""swa-config in SGLang: each draft layer's window and causality, from the
drafter config (``layer_types`` / ``sliding_window`` and ``is_causal``, or a
MiMo ``dflash_config.use_swa`` / ``swa_window_size``), must reach that layer's
``RadixAttention`` (``sliding_window_size``, the window less the current token;
``attn_type`` DECODER causal, ENCODER_ONLY not). The chain is config ->
``_get_dflash_layer_attention_params`` -> ``DFlashAttention`` -> ``RadixAttention``,
each layer built by ``DFlashDraftModel`` with its own index.

No SGLang release has the fix whole (none reads ``use_swa``): the edits that keep
or break it start from 0.5.23 with the MiMo window added (``MIMO_ADDED``, itself
the ``mimo-window-added`` edit), so that every one of them moves a tree that is
present."""

from . import Dead, Replace, Transform, edits, replace_span

DF = "sglang/srt/models/dflash.py"

# 0.5.23 (0.5.18 on): windows from layer_types, causality from is_causal, no MiMo window
PARAMS_HEAD = """    layer_types = get_dflash_layer_types(config)
    if layer_types is None:
        return -1, AttentionType.ENCODER_ONLY
"""
MIMO_READ = """    dflash_config = getattr(config, "dflash_config", None) or {}
    if dflash_config.get("use_swa") and "sliding_attention" not in (layer_types or ()):
        window = int(dflash_config["swa_window_size"]) - 1
        return window, _get_dflash_attention_type(config, default=AttentionType.ENCODER_ONLY)
"""
MIMO_ADDED = Replace(
    DF, PARAMS_HEAD, PARAMS_HEAD.replace("    if layer_types is None:\n", MIMO_READ + "    if layer_types is None:\n")
)
WINDOW_KW = "            sliding_window_size=self.sliding_window_size,\n"
ATTN_CALL_523 = """        self.attn = RadixAttention(
            num_heads=self.num_heads,
            head_dim=head_dim,
            scaling=self.scaling,
            num_kv_heads=self.num_kv_heads,
            layer_id=layer_id,
            sliding_window_size=self.sliding_window_size,
            attn_type=self.attn_type,
            quant_config=quant_config,
        )
"""
PARAMS_CALL = """        self.sliding_window_size, self.attn_type = _get_dflash_layer_attention_params(
            config, layer_id
        )
"""
FULL_DEFAULT = "config, default=AttentionType.ENCODER_ONLY\n        )\n    if layer_type"
SLIDING_DEFAULT = "config, default=AttentionType.DECODER\n        )\n    raise ValueError("
IS_CAUSAL = '    is_causal = getattr(text_config, "is_causal", None)\n'

# 0.5.16 (0.5.14-0.5.17): sliding layers always DECODER, full layers always ENCODER_ONLY
FULL_516 = '    if layer_type == "full_attention":\n        return -1, AttentionType.ENCODER_ONLY\n'
SLIDING_516 = "        return sliding_window_size, AttentionType.DECODER\n"
PARAMS_516 = """def _get_dflash_layer_attention_params(
    config, layer_id: int
) -> Tuple[int, AttentionType]:
    text_config = config.get_text_config()
    is_causal = getattr(text_config, "is_causal", None)
    layer_types = get_dflash_layer_types(config)
    dflash_config = getattr(config, "dflash_config", None) or {}
    if dflash_config.get("use_swa") and "sliding_attention" not in (layer_types or ()):
        window, causal = int(dflash_config["swa_window_size"]) - 1, False
    elif layer_types is None or layer_types[layer_id] == "full_attention":
        window, causal = -1, False
    elif layer_types[layer_id] == "sliding_attention":
        window, causal = get_dflash_attention_sliding_window_size(config), True
    else:
        raise ValueError(f"Unsupported DFLASH draft layer type {layer_types[layer_id]!r}.")
    if is_causal is not None:
        causal = bool(is_causal)
    return window, AttentionType.DECODER if causal else AttentionType.ENCODER_ONLY


"""

# 0.5.11: every layer RadixAttention(attn_type=ENCODER_ONLY), no window
ATTENTION_511 = "class DFlashAttention(nn.Module):\n"
HELPER_511 = '''def _draft_layer_attention(config, layer_id: int):
    """This draft layer's window (the tokens left of the current one; -1: none) and attention type."""
    layer_types = getattr(config, "layer_types", None)
    dflash_config = getattr(config, "dflash_config", None) or {}
    if dflash_config.get("use_swa") and "sliding_attention" not in (layer_types or ()):
        window, causal = int(dflash_config["swa_window_size"]), False
    elif layer_types is not None and layer_types[layer_id] == "sliding_attention":
        window, causal = int(config.sliding_window), True
    else:
        window, causal = 0, False
    is_causal = getattr(config, "is_causal", None)
    if is_causal is not None:
        causal = bool(is_causal)
    return window - 1 if window else -1, AttentionType.DECODER if causal else AttentionType.ENCODER_ONLY


'''
CALL_511 = """        # DFlash uses non-causal attention over the draft block.
        self.attn = RadixAttention(
"""
KIND_511 = "            attn_type=AttentionType.ENCODER_ONLY,\n        )\n"


UTILS = "sglang/srt/speculative/dflash_utils.py"
IMPORT_UTILS = "from sglang.srt.speculative.dflash_utils import (\n"
UTILS_HELPER = '''
from sglang.srt.layers.radix_attention import AttentionType


def dflash_layer_attention(config: Any, layer_id: int):
    """One draft layer's RadixAttention window (the tokens left of the current one; -1: none) and type."""
    kinds = get_dflash_layer_types(config)
    dflash = _cfg_get(config, "dflash_config", None) or {}
    if dflash.get("use_swa") and "sliding_attention" not in (kinds or ()):
        window, causal = int(dflash["swa_window_size"]) - 1, False
    elif kinds is not None and kinds[layer_id] == "sliding_attention":
        window, causal = get_dflash_attention_sliding_window_size(config), True
    else:
        window, causal = -1, False
    explicit = getattr(_get_text_config(config), "is_causal", None)
    if explicit is not None:
        causal = bool(explicit)
    return window, AttentionType.DECODER if causal else AttentionType.ENCODER_ONLY
'''


def on_523(name: str, kind: str, why: str, *changes: object) -> tuple:
    """An edit of 0.5.23 with the MiMo window added first."""
    return (name, "0.5.23", kind, why, MIMO_ADDED, *changes)


EDITS = edits(
    "swa-config",
    (
        "per-layer-attention-added",
        "0.5.11",
        "add",
        "a helper of its own gives each layer its window (layer_types or MiMo's dflash_config) and causality",
        Replace(DF, ATTENTION_511, HELPER_511 + ATTENTION_511),
        Replace(
            DF,
            CALL_511,
            "        window, attn_type = _draft_layer_attention(config, layer_id)\n"
            "        self.attn = RadixAttention(\n",
        ),
        Replace(DF, KIND_511, "            sliding_window_size=window,\n            attn_type=attn_type,\n        )\n"),
    ),
    (
        "is-causal-and-mimo-added",
        "0.5.16",
        "add",
        "0.5.16's layer parameters rewritten to honour is_causal and read MiMo's use_swa window",
        Transform(DF, replace_span("def _get_dflash_layer_attention_params(", "class DFlashAttention(", PARAMS_516)),
    ),
    (
        "window-dropped",
        "0.5.16",
        "break",
        "RadixAttention built without sliding_window_size: the z-lab sliding layers lose their window too",
        Replace(DF, WINDOW_KW, ""),
    ),
    (
        "causality-swapped",
        "0.5.16",
        "break",
        "the DECODER / ENCODER_ONLY choice swapped: z-lab's sliding layers run non-causally, its full ones causally",
        Replace(DF, FULL_516, FULL_516.replace("ENCODER_ONLY", "DECODER")),
        Replace(DF, SLIDING_516, SLIDING_516.replace("DECODER", "ENCODER_ONLY")),
    ),
    on_523("mimo-window-added", "add", "a MiMo dflash_config.use_swa read: its swa_window_size for every layer"),
    on_523(
        "window-dropped-newest",
        "break",
        "RadixAttention built without sliding_window_size: every layer runs full attention",
        Replace(DF, WINDOW_KW, ""),
    ),
    on_523(
        "causality-defaults-swapped",
        "break",
        "the legacy defaults swapped: without is_causal, sliding layers run non-causally and full ones causally",
        Replace(DF, FULL_DEFAULT, FULL_DEFAULT.replace("ENCODER_ONLY", "DECODER")),
        Replace(DF, SLIDING_DEFAULT, SLIDING_DEFAULT.replace("DECODER", "ENCODER_ONLY")),
    ),
    on_523(
        "is-causal-ignored",
        "break",
        "is_causal never read (as before 0.5.18): the sliding non-causal drafter runs causally",
        Replace(DF, IS_CAUSAL, "    is_causal = None\n"),
    ),
    on_523(
        "every-layer-id-zero",
        "break",
        "the model builds every decoder layer with layer_id=0: each gets layer 0's window and causality",
        Replace(DF, "                    layer_id=i,\n", "                    layer_id=0,\n"),
    ),
    on_523(
        "window-through-kwargs",
        "preserve",
        "window and attention type handed to RadixAttention through a dict of keyword arguments",
        Replace(
            DF,
            ATTN_CALL_523,
            ATTN_CALL_523.replace(
                "        self.attn = RadixAttention(\n",
                "        attention_kwargs = {\n"
                '            "sliding_window_size": self.sliding_window_size,\n'
                '            "attn_type": self.attn_type,\n'
                "        }\n"
                "        self.attn = RadixAttention(\n",
            )
            .replace(WINDOW_KW, "")
            .replace("            attn_type=self.attn_type,\n", "            **attention_kwargs,\n"),
        ),
    ),
    on_523(
        "parameters-in-locals",
        "preserve",
        "the layer's window and type kept in locals first, then stored and handed on",
        Replace(
            DF,
            PARAMS_CALL,
            "        window, attn_type = _get_dflash_layer_attention_params(config, layer_id)\n"
            "        self.sliding_window_size, self.attn_type = window, attn_type\n",
        ),
        Replace(
            DF,
            WINDOW_KW + "            attn_type=self.attn_type,\n",
            "            sliding_window_size=window,\n            attn_type=attn_type,\n",
        ),
    ),
    on_523(
        "parameters-moved-to-dflash-utils",
        "preserve",
        "window and type chosen by a helper written anew in speculative/dflash_utils.py, "
        "imported where the layer is built",
        Transform(UTILS, lambda text: text + UTILS_HELPER),
        Replace(DF, IMPORT_UTILS, IMPORT_UTILS + "    dflash_layer_attention,\n"),
        Replace(
            DF,
            PARAMS_CALL,
            "        self.sliding_window_size, self.attn_type = dflash_layer_attention(config, layer_id)\n",
        ),
    ),
    on_523(
        "parameters-moved-imported-locally",
        "preserve",
        "as parameters-moved-to-dflash-utils, the helper imported inside DFlashAttention.__init__",
        Transform(UTILS, lambda text: text + UTILS_HELPER),
        Replace(
            DF,
            PARAMS_CALL,
            "        from sglang.srt.speculative.dflash_utils import dflash_layer_attention\n\n"
            "        self.sliding_window_size, self.attn_type = dflash_layer_attention(config, layer_id)\n",
        ),
    ),
    on_523(
        "dead-encoder-only",
        "preserve",
        "0.5.11's windowless ENCODER_ONLY RadixAttention put after the real one under `if False:`: it never runs",
        Dead(
            DF,
            ATTN_CALL_523,
            "        if False:\n"
            "            self.attn = RadixAttention(\n"
            "                num_heads=self.num_heads, head_dim=head_dim, scaling=self.scaling,\n"
            "                num_kv_heads=self.num_kv_heads, layer_id=layer_id, attn_type=AttentionType.ENCODER_ONLY,\n"
            "            )\n",
            "            self.attn = RadixAttention(\n"
            "                num_heads=self.num_heads, head_dim=head_dim, scaling=self.scaling,\n"
            "                num_kv_heads=self.num_kv_heads, layer_id=layer_id, attn_type=AttentionType.ENCODER_ONLY,\n"
            "            )\n",
        ),
    ),
    engine="sglang",
)
