"""layer-offset: z-lab ``dflash_config.target_layer_ids`` become capture ids + 1 on
every resolver the DFlash path reaches; speculators ids (already capture ids,
handed over as ``eagle_aux_hidden_state_layer_ids``) stay as they are."""

from . import Dead, Replace, Transform, edits, rename_within

V1 = "vllm/v1/worker/gpu_model_runner.py"
V2 = "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"
SPECULATORS = "vllm/transformers_utils/configs/speculators/algos.py"

# The upstream shift (PR #40727) as the releases write it.
V1_SHIFT = """                layer_ids = [
                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])
                ]
"""
V2_SHIFT = """            layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]
"""
V1_GUARD = "            if dflash_config and isinstance(dflash_config, dict):\n                # Add 1"
V2_DEF = "def get_eagle3_aux_layers_from_config("
V2_RAW = '            layer_ids = dflash_config.get("target_layer_ids")\n'

V1_DEF = "    def _get_eagle3_aux_layers_from_config(self)"
# 0.20.1 reads the ids raw (before PR #40727).
V1_RAW = '                layer_ids = dflash_config.get("target_layer_ids")\n'


def v1(new: str) -> Replace:
    return Replace(V1, V1_SHIFT, new)


def v2(new: str) -> Replace:
    return Replace(V2, V2_SHIFT, new)


def v2_module(code: str) -> Replace:
    """Module-level code put right before the V2 resolver."""
    return Replace(V2, V2_DEF, code + "\n\n" + V2_DEF)


def v2_imports(*modules: str) -> Replace:
    return Replace(
        V2, "from typing import cast\n", "".join(f"import {m}\n" for m in modules) + "from typing import cast\n"
    )


HELPER = '''def _dflash_capture_ids(target_layer_ids):
    """DFlash taps the output of layer i, which vLLM captures as id i + 1."""
    return [layer_id + 1 for layer_id in target_layer_ids]
'''

EDITS = edits(
    "layer-offset",
    # --- semantics-preserving rewrites of trees that have the fix -------------
    (
        "helper-function",
        "0.33.0",
        "preserve",
        "V2 shift moved into a module-level helper; same list for every input.",
        v2_module(HELPER),
        v2('            layer_ids = _dflash_capture_ids(dflash_config.get("target_layer_ids") or [])\n'),
    ),
    (
        "map-lambda",
        "0.33.0",
        "preserve",
        "V1 shift written with list(map(lambda)); a list, as before, so the tuple() return is unchanged.",
        v1('                layer_ids = list(map(lambda i: i + 1, dflash_config.get("target_layer_ids") or []))\n'),
    ),
    (
        "append-loop",
        "0.33.0",
        "preserve",
        "V2 shift written as a for loop appending id + 1 to a fresh list.",
        v2(
            "            layer_ids = []\n"
            '            for layer_id in dflash_config.get("target_layer_ids") or []:\n'
            "                layer_ids.append(layer_id + 1)\n"
        ),
    ),
    (
        "offset-constant",
        "0.33.0",
        "preserve",
        "V2 shift through a named module constant equal to 1.",
        v2_module("_DFLASH_LAYER_OFFSET = 1  # DFlash id i is captured at i + 1\n"),
        v2(
            "            layer_ids = [\n"
            "                i + _DFLASH_LAYER_OFFSET\n"
            '                for i in (dflash_config.get("target_layer_ids") or [])\n'
            "            ]\n"
        ),
    ),
    (
        "generator-in-tuple",
        "0.33.0",
        "preserve",
        "V1 shift as a generator inside tuple(); the resolver accepts tuples and returns tuple(layer_ids).",
        v1(
            "                layer_ids = tuple(\n"
            '                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])\n'
            "                )\n"
        ),
    ),
    (
        "early-return",
        "0.33.0",
        "preserve",
        "V2 returns the shifted ids at once when there are any; otherwise the same fallbacks run "
        "(layer_ids stays falsy), exactly as when the shifted list was empty.",
        v2(
            '            shifted = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]\n'
            "            if shifted:\n"
            "                return tuple(shifted)\n"
        ),
    ),
    (
        "operator-add",
        "0.33.0",
        "preserve",
        "V2 shift spelled operator.add(i, 1).",
        v2_imports("operator"),
        v2(
            "            layer_ids = [\n"
            '                operator.add(i, 1) for i in (dflash_config.get("target_layer_ids") or [])\n'
            "            ]\n"
        ),
    ),
    (
        "renamed-variables",
        "0.33.0",
        "preserve",
        "V2 resolver with its locals renamed (dflash_config -> drafter_cfg, layer_ids -> capture_ids, "
        "i -> tap); the config keys are untouched.",
        v2('            layer_ids = [tap + 1 for tap in (dflash_config.get("target_layer_ids") or [])]\n'),
        # the resolver is the last function of the file
        Transform(V2, rename_within(V2_DEF, None, "dflash_config", "drafter_cfg")),
        Transform(V2, rename_within(V2_DEF, None, "layer_ids", "capture_ids")),
    ),
    (
        "one-plus-i",
        "0.33.0",
        "preserve",
        "V1 shift written 1 + i.",
        v1('                layer_ids = [1 + i for i in (dflash_config.get("target_layer_ids") or [])]\n'),
    ),
    (
        "walrus-ternary",
        "0.33.0",
        "preserve",
        "V2 shift in a conditional expression with an assignment expression; missing or empty ids give [] as before.",
        v2(
            "            layer_ids = (\n"
            "                [i + 1 for i in ids]\n"
            '                if (ids := dflash_config.get("target_layer_ids"))\n'
            "                else []\n"
            "            )\n"
        ),
    ),
    (
        "index-increment",
        "0.33.0",
        "preserve",
        "V1 copies the ids and increments each slot in place; the config's own list is not touched.",
        v1(
            '                layer_ids = list(dflash_config.get("target_layer_ids") or [])\n'
            "                for pos in range(len(layer_ids)):\n"
            "                    layer_ids[pos] += 1\n"
        ),
    ),
    (
        "method-helper",
        "0.33.0",
        "preserve",
        "V1 shift moved into a static method of the runner.",
        Replace(
            V1,
            V1_DEF,
            "    @staticmethod\n"
            "    def _dflash_capture_ids(dflash_config: dict) -> list[int]:\n"
            "        # DFlash ids name the tapped layer; vLLM captures its output at id + 1.\n"
            '        return [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]\n\n' + V1_DEF,
        ),
        v1("                layer_ids = self._dflash_capture_ids(dflash_config)\n"),
    ),
    (
        "partial-operator-map",
        "0.33.0",
        "preserve",
        "V2 shift as list(map(functools.partial(operator.add, 1), ids)).",
        v2_imports("functools", "operator"),
        v2(
            "            layer_ids = list(\n"
            '                map(functools.partial(operator.add, 1), dflash_config.get("target_layer_ids") or [])\n'
            "            )\n"
        ),
    ),
    (
        "index-range",
        "0.33.0",
        "preserve",
        "V2 shift indexing the ids by position.",
        v2(
            '            ids = dflash_config.get("target_layer_ids") or []\n'
            "            layer_ids = [ids[k] + 1 for k in range(len(ids))]\n"
        ),
    ),
    (
        "speculators-inverse-map",
        "0.33.0",
        "preserve",
        "speculators translation writes its dflash ids (aux - 1) with map(); eagle ids, which the "
        "resolvers read first, are unchanged.",
        Replace(
            SPECULATORS,
            '"target_layer_ids": [i - 1 for i in aux_layer_ids],',
            '"target_layer_ids": list(map(lambda i: i - 1, aux_layer_ids)),',
        ),
    ),
    (
        "older-map-and-generator",
        "0.24.0",
        "preserve",
        "0.24.0: V1 shift through map(), V2 shift as a generator inside tuple().",
        v1('                layer_ids = list(map(lambda i: i + 1, dflash_config.get("target_layer_ids") or []))\n'),
        v2('            layer_ids = tuple(1 + i for i in (dflash_config.get("target_layer_ids") or []))\n'),
    ),
    (
        "older-loop-and-constant",
        "0.24.0",
        "preserve",
        "0.24.0: V1 shift as a loop, V2 shift through a named offset constant.",
        v1(
            "                layer_ids = []\n"
            '                for tap in dflash_config.get("target_layer_ids") or []:\n'
            "                    layer_ids.append(tap + 1)\n"
        ),
        v2_module("CAPTURE_OFFSET = 1\n"),
        v2('            layer_ids = [i + CAPTURE_OFFSET for i in (dflash_config.get("target_layer_ids") or [])]\n'),
    ),
    (
        "dead-raw-read",
        "0.33.0",
        "preserve",
        "V2 keeps the pre-#40727 raw read under `if False:` after the shift.",
        Dead(V2, V2_SHIFT, "            if False:  # before PR #40727\n    " + V2_RAW, "    " + V2_RAW),
    ),
    # --- semantics-breaking edits ---------------------------------------------
    (
        "dead-shift",
        "0.33.0",
        "break",
        "V2 reads the ids raw; the +1 shift sits under `if False:` after the raw read.",
        v2(V2_RAW),
        Dead(V2, V2_RAW, "            if False:  # shift to capture ids\n    " + V2_SHIFT, "    " + V2_SHIFT),
    ),
    (
        "v2-raw",
        "0.33.0",
        "break",
        "V2 reads the ids raw: every tap one layer early on the V2 runner.",
        v2('            layer_ids = dflash_config.get("target_layer_ids")\n'),
    ),
    (
        "minus-one",
        "0.33.0",
        "break",
        "V1 off by one the other way (i - 1): two layers early.",
        v1(
            "                layer_ids = [\n"
            '                    i - 1 for i in (dflash_config.get("target_layer_ids") or [])\n'
            "                ]\n"
        ),
    ),
    (
        "shift-twice",
        "0.33.0",
        "break",
        "V2 applies the shift twice: one layer late.",
        v2(V2_SHIFT + "            layer_ids = [i + 1 for i in layer_ids]\n"),
    ),
    (
        "shift-wrong-list",
        "0.33.0",
        "break",
        "V2 shifts the speculators/EAGLE ids (already capture ids) and reads the DFlash ids raw.",
        Replace(
            V2,
            '    layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)\n',
            "    layer_ids = [\n"
            '        i + 1 for i in (getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None) or [])\n'
            "    ]\n",
        ),
        v2('            layer_ids = dflash_config.get("target_layer_ids")\n'),
    ),
    (
        "shift-discarded",
        "0.33.0",
        "break",
        "V1 computes the shifted list, then hands on the raw ids.",
        v1(
            '                shifted = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]\n'
            '                layer_ids = dflash_config.get("target_layer_ids")\n'
        ),
    ),
    (
        "zero-offset-constant",
        "0.33.0",
        "break",
        "V2 shift through a named constant that is 0: raw ids.",
        v2_module("_DFLASH_LAYER_OFFSET = 0\n"),
        v2(
            "            layer_ids = [i + _DFLASH_LAYER_OFFSET "
            'for i in (dflash_config.get("target_layer_ids") or [])]\n'
        ),
    ),
    (
        "loop-appends-raw",
        "0.33.0",
        "break",
        "V2 loop computes id + 1 but appends the raw id.",
        v2(
            "            layer_ids = []\n"
            '            for layer_id in dflash_config.get("target_layer_ids") or []:\n'
            "                capture_id = layer_id + 1\n"
            "                layer_ids.append(layer_id)\n"
        ),
    ),
    (
        "return-before-shift",
        "0.33.0",
        "break",
        "V2 returns the raw ids before the shift is computed.",
        v2('            return tuple(dflash_config.get("target_layer_ids") or ())\n' + V2_SHIFT),
    ),
    (
        "operator-mul",
        "0.33.0",
        "break",
        "V2 'shift' spelled operator.mul(i, 1): the identity.",
        v2_imports("operator"),
        v2('            layer_ids = [operator.mul(i, 1) for i in (dflash_config.get("target_layer_ids") or [])]\n'),
    ),
    (
        "first-id-only",
        "0.33.0",
        "break",
        "V1 shifts only the first id.",
        v1(
            '                ids = list(dflash_config.get("target_layer_ids") or [])\n'
            "                layer_ids = [ids[0] + 1, *ids[1:]] if ids else []\n"
        ),
    ),
    (
        "guard-turned-around",
        "0.33.0",
        "break",
        "V2 reads the DFlash ids only when EAGLE ids are already set, i.e. never when they matter.",
        Replace(
            V2,
            '    if not layer_ids:\n        dflash_config = getattr(hf_config, "dflash_config", None)',
            '    if layer_ids:\n        dflash_config = getattr(hf_config, "dflash_config", None)',
        ),
    ),
    (
        "isinstance-negated",
        "0.33.0",
        "break",
        "V1 shifts only when dflash_config is NOT a dict: a z-lab config's ids are never read.",
        Replace(V1, V1_GUARD, V1_GUARD.replace("and isinstance", "and not isinstance")),
    ),
    (
        "speculators-double-shift",
        "0.33.0",
        "break",
        "speculators translation shifts ids that are already capture ids (one layer late).",
        Replace(
            SPECULATORS,
            'pre_trained_config["eagle_aux_hidden_state_layer_ids"] = aux_layer_ids\n\n',
            'pre_trained_config["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in aux_layer_ids]\n\n',
        ),
    ),
    (
        "wrong-key",
        "0.33.0",
        "break",
        "V2 reads a misspelt key ('target_layer_id'): the DFlash ids are never found.",
        v2('            layer_ids = [i + 1 for i in (dflash_config.get("target_layer_id") or [])]\n'),
    ),
    (
        "map-int",
        "0.33.0",
        "break",
        "V1 maps int() over the ids (looks like a conversion step, no shift).",
        v1('                layer_ids = list(map(int, dflash_config.get("target_layer_ids") or []))\n'),
    ),
    (
        "helper-not-called",
        "0.33.0",
        "break",
        "V2 defines the shifting helper but reads the ids raw.",
        v2_module(HELPER),
        v2('            layer_ids = list(dflash_config.get("target_layer_ids") or [])\n'),
    ),
    (
        "older-v1-raw",
        "0.24.0",
        "break",
        "0.24.0 with the V1 shift removed: V1 taps one layer early.",
        v1('                layer_ids = dflash_config.get("target_layer_ids")\n'),
    ),
    (
        "older-v2-minus",
        "0.24.0",
        "break",
        "0.24.0 with the V2 shift written i - 1.",
        v2('            layer_ids = [i - 1 for i in (dflash_config.get("target_layer_ids") or [])]\n'),
    ),
    # --- the fix added, in another style, to a tree that lacks it (0.20.1 reads raw ids) --------
    (
        "add-loop",
        "0.20.1",
        "add",
        "0.20.1 V1 resolver given the shift as a loop.",
        Replace(
            V1,
            V1_RAW,
            "                layer_ids = []\n"
            '                for layer_id in dflash_config.get("target_layer_ids") or []:\n'
            "                    layer_ids.append(layer_id + 1)  # capture the tapped layer's output\n",
        ),
    ),
    (
        "add-map",
        "0.20.1",
        "add",
        "0.20.1 V1 resolver given the shift through map().",
        Replace(
            V1,
            V1_RAW,
            '                layer_ids = list(map(lambda i: i + 1, dflash_config.get("target_layer_ids") or []))\n',
        ),
    ),
    (
        "add-generator-in-tuple",
        "0.20.1",
        "add",
        "0.20.1 V1 resolver given the shift as a generator inside tuple().",
        Replace(
            V1,
            V1_RAW,
            '                layer_ids = tuple(1 + i for i in dflash_config.get("target_layer_ids") or ())\n',
        ),
    ),
    (
        "add-method-helper",
        "0.20.1",
        "add",
        "0.20.1 V1 resolver shifting through a static method.",
        Replace(
            V1,
            V1_DEF,
            "    @staticmethod\n"
            "    def _dflash_capture_ids(ids) -> list[int]:\n"
            "        return [i + 1 for i in ids or []]\n\n" + V1_DEF,
        ),
        Replace(
            V1, V1_RAW, '                layer_ids = self._dflash_capture_ids(dflash_config.get("target_layer_ids"))\n'
        ),
    ),
    (
        "add-offset-constant",
        "0.20.1",
        "add",
        "0.20.1 V1 resolver shifting by a named offset constant.",
        Replace(V1, V1_DEF, "    DFLASH_LAYER_OFFSET = 1\n\n" + V1_DEF),
        Replace(
            V1,
            V1_RAW,
            "                layer_ids = [\n"
            "                    i + self.DFLASH_LAYER_OFFSET\n"
            '                    for i in (dflash_config.get("target_layer_ids") or [])\n'
            "                ]\n",
        ),
    ),
)
