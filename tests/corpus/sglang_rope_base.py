"""rope-base in SGLang: each draft attention layer (``DFlashAttention``, built by
``DFlashDecoderLayer``) hands ``get_rope`` the base its drafter's config states.
Under transformers 5 a config has no ``rope_theta`` attribute (it is in
``rope_parameters``), so 0.5.11-0.5.12's ``getattr(config, "rope_theta",
1000000)`` gives every drafter 1e6; 0.5.13 reads ``get_rope_config``."""

from . import Dead, Replace, Transform, edits, rename_within

DF = "sglang/srt/models/dflash.py"

# 0.5.11 (the attribute read)
ATTRIBUTE_READ = """        rope_theta = float(getattr(config, "rope_theta", 1000000))
        rope_scaling = getattr(config, "rope_scaling", None)
"""
IMPORT_511 = "from sglang.srt.layers.rotary_embedding import get_rope\n"
# 0.5.16, 0.5.23 (through get_rope_config)
CONFIG_READ = "        rope_theta, rope_scaling = get_rope_config(config)\n"
BASE_KW = "            base=rope_theta,\n"
CALL_516 = """        self.rotary_emb = get_rope(
            head_dim,
            rotary_dim=head_dim,
            max_position=max_position_embeddings,
            base=rope_theta,
            rope_scaling=rope_scaling,
            is_neox_style=rope_is_neox_style,
        )
"""
ATTENTION_516 = "class DFlashAttention(nn.Module):\n"
HELPER = '''def _draft_rope(config):
    """The drafter's RoPE base and parameters, rope_parameters first (transformers 5)."""
    parameters = getattr(config, "rope_parameters", None)
    if parameters is not None:
        return parameters["rope_theta"], parameters
    return getattr(config, "rope_theta", 10000), getattr(config, "rope_scaling", None)


'''

UTILS = "sglang/srt/speculative/dflash_utils.py"
IMPORT_UTILS = "from sglang.srt.speculative.dflash_utils import (\n"
UTILS_HELPER = '''

def draft_rope(config: Any):
    """The drafter's RoPE base and parameters as transformers 5 holds them (rope_parameters)."""
    parameters = _cfg_get(config, "rope_parameters", None)
    if parameters is not None:
        return parameters["rope_theta"], parameters
    return _cfg_get(config, "rope_theta", 10000), _cfg_get(config, "rope_scaling", None)
'''


EDITS = edits(
    "rope-base",
    (
        "get-rope-config-added",
        "0.5.11",
        "add",
        "0.5.11's attribute read replaced by get_rope_config, which this release already has",
        Replace(DF, IMPORT_511, IMPORT_511 + "from sglang.srt.utils.hf_transformers_utils import get_rope_config\n"),
        Replace(DF, ATTRIBUTE_READ, CONFIG_READ),
    ),
    (
        "rope-parameters-read-added",
        "0.5.11",
        "add",
        "the base read from rope_parameters in place, the attribute only as the fallback",
        Replace(
            DF,
            ATTRIBUTE_READ,
            '        rope_parameters = getattr(config, "rope_parameters", None) or {}\n'
            '        rope_theta = float(rope_parameters.get("rope_theta", getattr(config, "rope_theta", 1000000)))\n'
            '        rope_scaling = getattr(config, "rope_scaling", None)\n',
        ),
    ),
    (
        "attribute-read",
        "0.5.16",
        "break",
        "get_rope_config replaced by 0.5.11's getattr of rope_theta: every drafter gets 1e6",
        Replace(DF, CONFIG_READ, ATTRIBUTE_READ),
    ),
    (
        "read-in-a-helper",
        "0.5.16",
        "preserve",
        "the read moved into a module-level helper of its own, rope_parameters first",
        Replace(DF, ATTENTION_516, HELPER + ATTENTION_516),
        Replace(DF, CONFIG_READ, "        rope_theta, rope_scaling = _draft_rope(config)\n"),
    ),
    (
        "base-positional",
        "0.5.16",
        "preserve",
        "get_rope given head size, rotary dim, max position and base positionally",
        Replace(
            DF,
            CALL_516,
            "        self.rotary_emb = get_rope(\n"
            "            head_dim, head_dim, max_position_embeddings, rope_theta,\n"
            "            rope_scaling=rope_scaling, is_neox_style=rope_is_neox_style,\n"
            "        )\n",
        ),
    ),
    (
        "literal-base",
        "0.5.16",
        "break",
        "get_rope handed the literal 1e6 whatever the config read",
        Replace(DF, BASE_KW, "            base=1000000,\n"),
    ),
    (
        "qwen3-default-base",
        "0.5.16",
        "break",
        "the attribute read with a Qwen3.5 default (1e7): right for 1e7 drafters, wrong for MiMo's 1e4",
        Replace(DF, CONFIG_READ, ATTRIBUTE_READ.replace("1000000", "10000000")),
    ),
    (
        "dead-attribute-read",
        "0.5.16",
        "preserve",
        "0.5.11's attribute read put after get_rope_config under `if False:`: it never runs",
        Dead(
            DF,
            CONFIG_READ,
            "        if False:\n" + ATTRIBUTE_READ.replace("        ", "            "),
            ATTRIBUTE_READ.replace("        ", "            "),
        ),
    ),
    (
        "attribute-read-newest",
        "0.5.23",
        "break",
        "get_rope_config replaced by the getattr of rope_theta in the newest release read",
        Replace(DF, CONFIG_READ, ATTRIBUTE_READ),
    ),
    (
        "renamed-base",
        "0.5.23",
        "preserve",
        "the base and parameters renamed within DFlashAttention.__init__",
        Transform(DF, rename_within("class DFlashAttention(", "    def _build_qkv_proj(", "rope_theta", "draft_base")),
    ),
    (
        "read-moved-to-dflash-utils",
        "0.5.23",
        "preserve",
        "the read written anew as a helper in speculative/dflash_utils.py and imported where the layer is built",
        Transform(UTILS, lambda text: text + UTILS_HELPER),
        Replace(DF, IMPORT_UTILS, IMPORT_UTILS + "    draft_rope,\n"),
        Replace(
            DF,
            CONFIG_READ,
            "        rope_theta, rope_scaling = draft_rope(config)\n",
        ),
    ),
    (
        "read-moved-imported-locally",
        "0.5.23",
        "preserve",
        "as read-moved-to-dflash-utils, the helper imported inside DFlashAttention.__init__ "
        "(as SGLang imports kernels)",
        Transform(UTILS, lambda text: text + UTILS_HELPER),
        Replace(
            DF,
            CONFIG_READ,
            "        from sglang.srt.speculative.dflash_utils import draft_rope\n\n"
            "        rope_theta, rope_scaling = draft_rope(config)\n",
        ),
    ),
    (
        "rope-parameters-direct",
        "0.5.23",
        "preserve",
        "the base read from config.rope_parameters directly (transformers 5 always sets it)",
        Replace(
            DF,
            CONFIG_READ,
            '        rope_scaling = config.rope_parameters\n        rope_theta = rope_scaling["rope_theta"]\n',
        ),
    ),
    (
        "backbone-base",
        "0.5.23",
        "break",
        "get_rope handed MiMo's dflash_config.backbone_rotary_base (the target's) when it is set",
        Replace(
            DF,
            "            base=rope_theta,\n            rope_scaling=rope_scaling,\n",
            '            base=(getattr(config, "dflash_config", None) or {}).get("backbone_rotary_base", rope_theta),\n'
            "            rope_scaling=rope_scaling,\n",
        ),
    ),
    engine="sglang",
)
