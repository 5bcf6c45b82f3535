"""swa-config: each draft layer's sliding window and causality, resolved from the
drafter config (``layer_types`` / ``sliding_window``, or ``dflash_config.use_swa``
/ ``swa_window_size``), must reach that layer's ``Attention``; the chain is
config -> resolver -> decoder layer -> attention."""

import dataclasses
import textwrap

from . import Dead, Replace, Transform, edits, replace_span

QD = "vllm/model_executor/models/qwen3_dflash.py"

# 0.33.0
RESOLVE = "        sliding_window, causal = _resolve_layer_attention(config, layer_idx)\n"
LAYER_KW = "            sliding_window=sliding_window,\n            causal=causal,\n"
ATTN_KW = "            per_layer_sliding_window=sliding_window,\n"
ATTN_CALL = """        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.scaling,
            num_kv_heads=self.num_kv_heads,
            cache_config=cache_config,
            quant_config=quant_config,
            per_layer_sliding_window=sliding_window,
            prefix=f"{prefix}.attn",
            attn_type=attn_type,
            sinks=self.attention_sink_bias,
        )
"""
IS_SLIDING = "        is_sliding = layer_types[layer_idx] == _SLIDING_ATTENTION\n"
SLIDING_BRANCH = """    if layer_types is None or (use_swa and not any_sliding):
        is_sliding = use_swa
    else:
"""
WINDOW_START = "    sliding_window = None\n    if is_sliding:\n"
LOOKUP = """        sliding_window = dflash_config.get(
            "swa_window_size", getattr(config, "sliding_window", None)
        )
"""
MIXED = """        if (
            0 < num_sliding < len(layer_types)
            and not get_current_vllm_config().use_v2_model_runner
        ):
"""
DEAD_MIXED = textwrap.indent(MIXED, "    ") + "                pass\n"
USE_SWA = '    use_swa = dflash_config.get("use_swa", False)\n'
CAUSAL_BODY = """    is_causal = getattr(config, "is_causal", None)
    if is_causal is not None:
        return bool(is_causal)
    override = (getattr(config, "dflash_config", None) or {}).get("causal")
    if override is not None:
        return bool(override)
    layer_types = getattr(config, "layer_types", None)
    if not layer_types:
        return False
    return layer_types[layer_idx] == _SLIDING_ATTENTION
"""
CAUSAL_LAST = "    return layer_types[layer_idx] == _SLIDING_ATTENTION\n"
MODEL_LAYER_IDX = "                    layer_idx=layer_idx,\n"


RESOLVER_START = "def _resolve_layer_attention("
RESOLVER_END = "class DFlashQwen3Attention("

# Per-layer windows written anew, each in its own style, after upstream's
# _resolve_layer_attention is taken out; causality stays with the tree's
# _dflash_layer_causal, and the runners' support for per-layer windows is the tree's.
MIXED_ERROR = '''"DFlash drafters that mix sliding and full layers need VLLM_USE_V2_MODEL_RUNNER=1"'''
WINDOW_ERROR = '''"a sliding DFlash layer needs dflash_config.swa_window_size or sliding_window"'''

DATACLASS_STYLE = f'''@dataclasses.dataclass(frozen=True)
class _DraftLayerAttention:
    """How one draft layer attends: its sliding window (None: full) and causality."""

    sliding_window: int | None
    causal: bool

    @classmethod
    def of(cls, config: Qwen3Config, layer_idx: int) -> "_DraftLayerAttention":
        dflash_config = getattr(config, "dflash_config", None) or {{}}
        layer_types = getattr(config, "layer_types", None)
        use_swa = dflash_config.get("use_swa", False)
        flags = [kind == _SLIDING_ATTENTION for kind in layer_types or ()]
        if any(flags) and not all(flags) and not get_current_vllm_config().use_v2_model_runner:
            raise NotImplementedError({MIXED_ERROR})
        if layer_types is None or (use_swa and not any(flags)):
            sliding = bool(use_swa)
        else:
            sliding = flags[layer_idx]
        window = None
        if sliding:
            window = dflash_config.get("swa_window_size", getattr(config, "sliding_window", None))
            if window is None:
                raise ValueError({WINDOW_ERROR})
        return cls(window, _dflash_layer_causal(config, layer_idx))


'''
DATACLASS_CALL = (
    "        attention = _DraftLayerAttention.of(config, layer_idx)\n"
    "        sliding_window, causal = attention.sliding_window, attention.causal\n"
)

KWARGS_STYLE = f'''def _draft_attention_kwargs(config: Qwen3Config, layer_idx: int) -> dict:
    """Keyword arguments for one draft layer's attention: window and causality."""
    dflash_config = getattr(config, "dflash_config", None) or {{}}
    layer_types = getattr(config, "layer_types", None)
    use_swa = dflash_config.get("use_swa", False)
    if layer_types is None:
        sliding = bool(use_swa)
    else:
        num_sliding = layer_types.count(_SLIDING_ATTENTION)
        if 0 < num_sliding < len(layer_types):
            if not get_current_vllm_config().use_v2_model_runner:
                raise NotImplementedError({MIXED_ERROR})
        if use_swa and num_sliding == 0:
            sliding = True
        else:
            sliding = layer_types[layer_idx] == _SLIDING_ATTENTION
    window = (
        dflash_config.get("swa_window_size", getattr(config, "sliding_window", None))
        if sliding
        else None
    )
    if sliding and window is None:
        raise ValueError({WINDOW_ERROR})
    return {{"sliding_window": window, "causal": _dflash_layer_causal(config, layer_idx)}}


'''

EARLY_RETURN_STYLE = f'''def _layer_sliding_window(config: Qwen3Config, layer_idx: int) -> int | None:
    """This draft layer's sliding window, or None for full attention."""
    dflash_config = getattr(config, "dflash_config", None) or {{}}
    layer_types = getattr(config, "layer_types", None)
    use_swa = dflash_config.get("use_swa", False)
    if layer_types is not None:
        kinds = set(layer_types)
        mixed = _SLIDING_ATTENTION in kinds and len(kinds) > 1
        if mixed and not get_current_vllm_config().use_v2_model_runner:
            raise NotImplementedError({MIXED_ERROR})
    if layer_types is not None and not (use_swa and _SLIDING_ATTENTION not in kinds):
        if layer_types[layer_idx] != _SLIDING_ATTENTION:
            return None
    elif not use_swa:
        return None
    window = dflash_config.get("swa_window_size", getattr(config, "sliding_window", None))
    if window is None:
        raise ValueError({WINDOW_ERROR})
    return window


'''

MATCH_STYLE = f"""def _layer_window(config: Qwen3Config, layer_idx: int) -> int | None:
    dflash_config = getattr(config, "dflash_config", None) or {{}}
    use_swa = dflash_config.get("use_swa", False)
    match getattr(config, "layer_types", None):
        case None:
            sliding = bool(use_swa)
        case layer_types:
            flags = [kind == _SLIDING_ATTENTION for kind in layer_types]
            if any(flags) and not all(flags) and not get_current_vllm_config().use_v2_model_runner:
                raise NotImplementedError({MIXED_ERROR})
            sliding = True if use_swa and not any(flags) else flags[layer_idx]
    if not sliding:
        return None
    window = dflash_config.get("swa_window_size", getattr(config, "sliding_window", None))
    if window is None:
        raise ValueError({WINDOW_ERROR})
    return window


"""
SPLIT_CALL = (
    "        sliding_window = {}(config, layer_idx)\n        causal = _dflash_layer_causal(config, layer_idx)\n"
)


def resolver_rewritten(code: str) -> Transform:
    """Upstream's _resolve_layer_attention taken out, ``code`` in its place."""
    return Transform(QD, replace_span(RESOLVER_START, RESOLVER_END, code))


def qd(find: str, replace: str, count: int = 1) -> Replace:
    return Replace(QD, find, replace, count)


def positional_attention(window: str, soft_cap: str) -> Replace:
    """Attention(num_heads, head_size, scale, num_kv_heads, alibi_slopes, use_alibi_sqrt,
    cache_config, quant_config, logits_soft_cap, per_layer_sliding_window, prefix, attn_type)."""
    return qd(
        ATTN_CALL,
        f"""        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.scaling,
            self.num_kv_heads,
            None,
            None,
            cache_config,
            quant_config,
            {soft_cap},
            {window},
            f"{{prefix}}.attn",
            attn_type,
            sinks=self.attention_sink_bias,
        )
""",
    )


EDITS = edits(
    "swa-config",
    # --- semantics-preserving rewrites of 0.33.0 --------------------------------
    (
        "attention-kwargs-dict",
        "0.33.0",
        "preserve",
        "the window reaches Attention through a **kwargs dict.",
        qd(
            ATTN_CALL,
            """        attn_options = dict(
            num_kv_heads=self.num_kv_heads,
            cache_config=cache_config,
            quant_config=quant_config,
            per_layer_sliding_window=sliding_window,
            prefix=f"{prefix}.attn",
            attn_type=attn_type,
            sinks=self.attention_sink_bias,
        )
        self.attn = Attention(self.num_heads, self.head_dim, self.scaling, **attn_options)
""",
        ),
    ),
    (
        "attention-positional",
        "0.33.0",
        "preserve",
        "Attention called positionally, the window in the per_layer_sliding_window slot (0.33.0 signature).",
        positional_attention(window="sliding_window", soft_cap="None"),
    ),
    (
        "literal-layer-type",
        "0.33.0",
        "preserve",
        "the sliding predicate inlined with the string literal instead of the module constant.",
        qd(IS_SLIDING, '        is_sliding = layer_types[layer_idx] == "sliding_attention"\n'),
    ),
    (
        "window-helper",
        "0.33.0",
        "preserve",
        "the window lookup moved into a helper function.",
        qd(
            "def _resolve_layer_attention(",
            "def _configured_window(config, dflash_config):\n"
            '    return dflash_config.get("swa_window_size", getattr(config, "sliding_window", None))\n\n\n'
            "def _resolve_layer_attention(",
        ),
        qd(LOOKUP, "        sliding_window = _configured_window(config, dflash_config)\n"),
    ),
    (
        "causal-elif-chain",
        "0.33.0",
        "preserve",
        "_dflash_layer_causal as an if/elif chain over the same precedence (is_causal, dflash causal, layer_types).",
        qd(
            CAUSAL_BODY,
            """    is_causal = getattr(config, "is_causal", None)
    override = (getattr(config, "dflash_config", None) or {}).get("causal")
    layer_types = getattr(config, "layer_types", None)
    if is_causal is not None:
        return bool(is_causal)
    elif override is not None:
        return bool(override)
    elif not layer_types:
        return False
    else:
        return layer_types[layer_idx] == _SLIDING_ATTENTION
""",
        ),
    ),
    (
        "window-ternary",
        "0.33.0",
        "preserve",
        "the window as a conditional expression; the missing-window error is kept.",
        qd(
            WINDOW_START + LOOKUP,
            """    sliding_window = (
        dflash_config.get("swa_window_size", getattr(config, "sliding_window", None))
        if is_sliding
        else None
    )
    if is_sliding:
""",
        ),
    ),
    (
        "layer-renamed",
        "0.33.0",
        "preserve",
        "the decoder layer names the resolved window `window`.",
        qd(RESOLVE, "        window, causal = _resolve_layer_attention(config, layer_idx)\n"),
        qd(LAYER_KW, "            sliding_window=window,\n            causal=causal,\n"),
    ),
    (
        "attention-reads-attribute",
        "0.33.0",
        "preserve",
        "Attention gets self.sliding_window, set from the argument on the line before.",
        qd(ATTN_KW, "            per_layer_sliding_window=self.sliding_window,\n"),
    ),
    (
        "resolver-early-return",
        "0.33.0",
        "preserve",
        "the resolver returns (None, causal) early for a full-attention layer.",
        qd(
            WINDOW_START,
            "    if not is_sliding:\n        return None, _dflash_layer_causal(config, layer_idx)\n" + WINDOW_START,
        ),
    ),
    (
        "mixed-any-all",
        "0.33.0",
        "preserve",
        "the mixed sliding/full test written with any()/all(): same as 0 < num_sliding < len.",
        qd(
            MIXED,
            """        if (
            any(lt == _SLIDING_ATTENTION for lt in layer_types)
            and not all(lt == _SLIDING_ATTENTION for lt in layer_types)
            and not get_current_vllm_config().use_v2_model_runner
        ):
""",
        ),
    ),
    (
        "window-if-in",
        "0.33.0",
        "preserve",
        "the window lookup as an explicit `in` test instead of dict.get with a default.",
        qd(
            LOOKUP,
            """        if "swa_window_size" in dflash_config:
            sliding_window = dflash_config["swa_window_size"]
        else:
            sliding_window = getattr(config, "sliding_window", None)
""",
        ),
    ),
    (
        "resolved-indexed",
        "0.33.0",
        "preserve",
        "the decoder layer keeps the resolver's tuple and indexes it.",
        qd(RESOLVE, "        resolved = _resolve_layer_attention(config, layer_idx)\n"),
        qd(LAYER_KW, "            sliding_window=resolved[0],\n            causal=resolved[1],\n"),
    ),
    (
        "operator-eq",
        "0.33.0",
        "preserve",
        "the sliding predicate spelled operator.eq.",
        qd("import io\n", "import io\nimport operator\n"),
        qd(IS_SLIDING, "        is_sliding = operator.eq(layer_types[layer_idx], _SLIDING_ATTENTION)\n"),
    ),
    (
        "constant-renamed",
        "0.33.0",
        "preserve",
        "the layer-type constant renamed everywhere.",
        qd("_SLIDING_ATTENTION", "_SWA_LAYER_TYPE", count=4),
    ),
    (
        "layer-kwargs-dict",
        "0.33.0",
        "preserve",
        "the decoder layer hands window and causality to the attention through a **kwargs dict.",
        qd(LAYER_KW, '            **{"sliding_window": sliding_window, "causal": causal},\n'),
    ),
    (
        "use-swa-elif",
        "0.33.0",
        "preserve",
        "the use_swa / layer_types choice as an elif chain (a truthy use_swa makes every layer sliding, as before).",
        qd(
            SLIDING_BRANCH,
            """    if layer_types is None:
        is_sliding = use_swa
    elif use_swa and not any_sliding:
        is_sliding = True
    else:
""",
        ),
    ),
    # --- semantics-breaking edits of 0.33.0 --------------------------------------
    (
        "comparison-turned",
        "0.33.0",
        "break",
        "the sliding predicate turned around: full layers get the window, sliding ones none.",
        qd(IS_SLIDING, "        is_sliding = layer_types[layer_idx] != _SLIDING_ATTENTION\n"),
    ),
    (
        "attention-window-none",
        "0.33.0",
        "break",
        "the window is computed and stored, then handed to Attention as None.",
        qd(ATTN_KW, "            per_layer_sliding_window=None,\n"),
    ),
    (
        "layer-passes-none",
        "0.33.0",
        "break",
        "the decoder layer resolves the window, then passes sliding_window=None on.",
        qd(LAYER_KW, "            sliding_window=None,\n            causal=causal,\n"),
    ),
    (
        "layer-index-zero",
        "0.33.0",
        "break",
        "the resolver is asked about layer 0 for every layer: a mixed drafter's full layer gets a window.",
        qd(RESOLVE, "        sliding_window, causal = _resolve_layer_attention(config, 0)\n"),
    ),
    (
        "layer-index-reversed",
        "0.33.0",
        "break",
        "the resolver is handed the mirrored layer index.",
        qd(
            RESOLVE,
            "        sliding_window, causal = _resolve_layer_attention(\n"
            "            config, config.num_hidden_layers - 1 - layer_idx\n"
            "        )\n",
        ),
    ),
    (
        "return-before-window",
        "0.33.0",
        "break",
        "the resolver returns before computing the window: every layer runs full attention.",
        qd(WINDOW_START, "    return None, _dflash_layer_causal(config, layer_idx)\n" + WINDOW_START),
    ),
    (
        "window-never-reaches-attention",
        "0.33.0",
        "break",
        "the window is resolved per layer but not passed to the attention (its default is None).",
        qd(LAYER_KW, "            causal=causal,\n"),
    ),
    (
        "use-swa-wrong-key",
        "0.33.0",
        "break",
        "use_swa read from a key MiMo-style configs do not have: their layers run full attention.",
        qd(USE_SWA, '    use_swa = dflash_config.get("use_sliding_window", False)\n'),
    ),
    (
        "mixed-always-refused",
        "0.33.0",
        "break",
        "mixed sliding/full drafters refused on every runner (the V2 condition is gone).",
        qd(MIXED, "        if 0 < num_sliding < len(layer_types):\n"),
    ),
    (
        "dead-mixed-v2-check",
        "0.33.0",
        "break",
        "mixed drafters refused on every runner; the V2 condition sits under `if False:` beside the refusal.",
        qd(MIXED, "        if 0 < num_sliding < len(layer_types):\n"),
        Dead(
            QD,
            "        any_sliding = num_sliding > 0\n",
            "        if False:  # V2 takes mixed drafters\n" + DEAD_MIXED,
            DEAD_MIXED,
        ),
    ),
    (
        "dead-attention-without-window",
        "0.33.0",
        "preserve",
        "an Attention built without a window sits after the live one, under `if False:`.",
        Dead(
            QD,
            ATTN_CALL,
            "        if False:  # before per-layer windows\n"
            "            self.attn = Attention(self.num_heads, self.head_dim, self.scaling)\n",
            "            self.attn = Attention(self.num_heads, self.head_dim, self.scaling)\n",
        ),
    ),
    (
        "mixed-check-inverted",
        "0.33.0",
        "break",
        "the runner condition turned around: mixed drafters refused on V2, accepted on V1.",
        qd(
            MIXED,
            """        if (
            0 < num_sliding < len(layer_types)
            and get_current_vllm_config().use_v2_model_runner
        ):
""",
        ),
    ),
    (
        "kwargs-built-not-passed",
        "0.33.0",
        "break",
        "a kwargs dict with the window is built, but Attention is called without it.",
        qd(
            ATTN_CALL,
            "        attn_options = dict(per_layer_sliding_window=sliding_window)\n" + ATTN_CALL.replace(ATTN_KW, ""),
        ),
    ),
    (
        "model-layer-index-zero",
        "0.33.0",
        "break",
        "the model builds every decoder layer with layer_idx=0.",
        qd(MODEL_LAYER_IDX, "                    layer_idx=0,\n"),
    ),
    (
        "use-swa-inverted",
        "0.33.0",
        "break",
        "without layer_types, use_swa is read inverted.",
        qd(SLIDING_BRANCH, SLIDING_BRANCH.replace("is_sliding = use_swa", "is_sliding = not use_swa")),
    ),
    (
        "positional-wrong-slot",
        "0.33.0",
        "break",
        "Attention called positionally with the window in the logits_soft_cap slot and None as the window.",
        positional_attention(window="None", soft_cap="sliding_window"),
    ),
    # --- per-layer windows written anew in other styles, upstream's resolver taken out ------
    (
        "add-dataclass",
        "0.33.0",
        "add",
        "a frozen dataclass with a classmethod resolves each layer's window (same rules: layer_types, "
        "use_swa, swa_window_size before sliding_window, mixed only on V2); causality from the tree's helper.",
        qd("import io\n", "import dataclasses\nimport io\n"),
        resolver_rewritten(DATACLASS_STYLE),
        qd(RESOLVE, DATACLASS_CALL),
    ),
    (
        "add-kwargs-helper",
        "0.33.0",
        "add",
        "a helper returns the attention's window and causality as keyword arguments, splatted into the call.",
        resolver_rewritten(KWARGS_STYLE),
        qd(RESOLVE, ""),
        qd(LAYER_KW, "            **_draft_attention_kwargs(config, layer_idx),\n"),
    ),
    (
        "add-early-returns",
        "0.33.0",
        "add",
        "a window-only function with early returns (set of layer kinds for the mixed test); "
        "causality from the tree's helper.",
        resolver_rewritten(EARLY_RETURN_STYLE),
        qd(RESOLVE, SPLIT_CALL.format("_layer_sliding_window")),
    ),
    (
        "add-match",
        "0.33.0",
        "add",
        "a window function written with a match statement on layer_types.",
        resolver_rewritten(MATCH_STYLE),
        qd(RESOLVE, SPLIT_CALL.format("_layer_window")),
    ),
    (
        "add-dataclass-0.26",
        "0.26.0",
        "add",
        "0.26.0 with its resolver replaced by the dataclass form.",
        qd("import io\n", "import dataclasses\nimport io\n"),
        resolver_rewritten(DATACLASS_STYLE),
        qd(RESOLVE, DATACLASS_CALL),
    ),
    (
        "add-early-returns-0.26",
        "0.26.0",
        "add",
        "0.26.0 with its resolver replaced by the early-return window function.",
        resolver_rewritten(EARLY_RETURN_STYLE),
        qd(RESOLVE, SPLIT_CALL.format("_layer_sliding_window")),
    ),
)

# swa-config's claim is about sliding windows; causality is observed (the report's
# behaviour observations give, per layer, the causality the tree hands the attention
# and the one the drafter expects) but not judged: judging it would change the
# answer of 0.26.0-0.29.0, which run the non-causal reference drafter causally (a
# real, separate defect). These edits change only causality: the verdict must stay
# that of the unedited tree, and the observations must show the change.
OBSERVED = edits(
    "swa-config",
    (
        "causal-dropped",
        "0.33.0",
        "break",
        "the layer's causality is resolved, then passed on as False.",
        qd(LAYER_KW, "            sliding_window=sliding_window,\n            causal=False,\n"),
    ),
    (
        "causal-turned",
        "0.33.0",
        "break",
        "default causality turned around: full layers causal, sliding layers not.",
        qd(CAUSAL_LAST, "    return layer_types[layer_idx] != _SLIDING_ATTENTION\n"),
    ),
)

# No published drafter sets dflash_config.swa_window_size and sliding_window to
# different values, so no reference config tells reading the wrong one apart. A
# user's --draft-config that does (tests/corpus/drafters/) gates the verdict.
DIFFERING_WINDOWS = "mimo-swa-differing-windows.json"
WITH_DRAFT_CONFIG = tuple(
    dataclasses.replace(edit, draft_config=DIFFERING_WINDOWS)
    for edit in edits(
        "swa-config",
        (
            "window-from-top-level-only",
            "0.33.0",
            "break",
            "dflash_config.swa_window_size is ignored; only the top-level sliding_window is read.",
            qd(LOOKUP, '        sliding_window = getattr(config, "sliding_window", None)\n'),
        ),
    )
)
