"""What SGLang makes of a drafter config and of its own launch flags (``config --engine
sglang``), each pitfall read from its wheels 0.5.11-0.5.23 (``sglang/srt/speculative/
dflash_utils.py``, ``dflash_worker.py``/``dflash_worker_v2.py``, ``server_args.py`` and
the target models' ``set_dflash_layers_to_capture``); the code here is this tool's own."""

from __future__ import annotations

import json

from ..engines import SGLANG
from .config import SLIDING, SPECULATORS, ZLAB, DraftConfig, TargetLayers, draft_layer_count, int_list
from .launch import LaunchFlags
from .lint import ERROR, INFO, WARNING, Add, EngineLint  # lint reads this module after defining them

# The generic findings this pass says in SGLang's terms instead: (code, severity).
REPLACED = frozenset(
    {("format", INFO), ("num-speculative-tokens", INFO), ("ids-last-layer", INFO), ("mixed-layers", INFO)}
)

ALGORITHM = ("--speculative-algorithm",)
DRAFT_MODEL = ("--speculative-draft-model-path", "--speculative-draft-model")  # 0.5.11 and 0.5.23 both alias it
DRAFT_TOKENS = ("--speculative-num-draft-tokens",)
BLOCK = ("--speculative-dflash-block-size",)  # 0.5.11-0.5.23: "Alias of --speculative-num-draft-tokens for DFLASH"
WINDOW = ("--speculative-draft-window-size", "--speculative-dflash-draft-window-size")  # 0.5.23, 0.5.11 names
STEPS = ("--speculative-num-steps", "--speculative-eagle-topk")
FLAGS = ALGORITHM + DRAFT_MODEL + DRAFT_TOKENS + BLOCK + WINDOW
# Targets whose model appends the last layer's output after its layer loop (mimo_v2.py, from 0.5.20).
LAST_LAYER_TAKEN = ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM")
DEFAULT_MASK_TOKEN = "<|MASK|>"  # dflash_utils.DEFAULT_DFLASH_MASK_TOKEN


def says_sglang(flags: LaunchFlags) -> bool:
    """Whether the flags are SGLang's (its speculative flags; vLLM's is --speculative-config)."""
    return flags.given(*FLAGS)


def guessed_ids(target_layers: int, draft_layers: int) -> tuple[int, ...] | None:
    """The 0-based target layers SGLang taps when a config states none: one in the middle for one
    draft layer, else the draft layers spread evenly from layer 1 to layer N - 4 (the count N - 3,
    rounded half to even); None where SGLang refuses (fewer than 4 target layers)."""
    if draft_layers == 1:
        return (target_layers // 2,)
    first, last = 1, target_layers - 3
    if last < first:
        return None
    return tuple(round(first + step * (last - first) / (draft_layers - 1)) for step in range(draft_layers))


def _read_ids(config: DraftConfig) -> object:
    """The ids SGLang reads: dflash_config.target_layer_ids, else a top-level target_layer_ids."""
    nested = config.dflash_config.get("target_layer_ids")
    return nested if nested is not None else config.data.get("target_layer_ids")


def lint_sglang(config: DraftConfig, target: TargetLayers | None, flags: LaunchFlags | None, add: Add) -> None:
    """Every SGLang finding, through ``add``; ``flags``: the launch flags given, if any."""
    _ids(config, target, add)
    _mask(config, add)
    _windows(config, add)
    block = (
        config.block_size if isinstance(config.block_size, int) and not isinstance(config.block_size, bool) else None
    )
    if flags is None:
        if block is not None and block >= 2:
            add(
                INFO,
                "sglang-block",
                f"block_size {block}: SGLang's --speculative-num-draft-tokens is the block size itself (not block size "
                "- 1); left out, SGLang reads block_size from the drafter",
                "--speculative-algorithm DFLASH --speculative-draft-model-path DRAFTER "
                f"--speculative-num-draft-tokens {block}",
            )
        return
    _flags(flags, block, config, add)


def _ids(config: DraftConfig, target: TargetLayers | None, add: Add) -> None:
    ids = _read_ids(config)
    if ids is None:
        draft_layers = draft_layer_count(config.layout)
        unread = (
            " (SGLang does not read speculators' aux_hidden_state_layer_ids)" if config.format == SPECULATORS else ""
        )
        if target is None or draft_layers is None:
            guess = ": give --target-config to see the layers it picks"
        else:
            picked = guessed_ids(target.count, draft_layers)
            guess = (
                f": for a {target.count}-layer target and {draft_layers} draft layers it taps {list(picked)}"
                if picked is not None
                else f": for a {target.count}-layer target it refuses to start (it needs 4 target layers)"
            )
        add(
            WARNING,
            "sglang-guessed-ids",
            f"no dflash_config.target_layer_ids (nor a top-level target_layer_ids){unread}: SGLang guesses the tapped "
            f"layers from the layer counts{guess}; a guess is not what the drafter was trained on, and a wrong one "
            "loads cleanly and collapses acceptance (sglang issue #37475)",
            "add dflash_config.target_layer_ids: the 0-based target layers the drafter was trained on",
        )
        return
    if config.format == ZLAB:
        add(
            INFO,
            "format",
            "z-lab/SpecForge format: SGLang reads dflash_config.target_layer_ids as 0-based target layers, and each "
            "target's capture hook captures id + 1",
            "",
        )
    if not isinstance(ids, list) or not int_list(ids) or target is None or target.count - 1 not in ids:
        return
    last = target.count - 1
    taken = sorted(set(LAST_LAYER_TAKEN) & set(target.architectures))
    if taken:
        add(
            WARNING,
            "sglang-last-layer",
            f"the ids tap the target's last layer ({last}): {taken[0]} captures it after its layer loop from SGLang "
            "0.5.20; earlier releases fail at start",
            "serve it with SGLang 0.5.20 or later",
        )
        return
    add(
        ERROR,
        "sglang-last-layer",
        f"the ids tap the target's last layer ({last}): SGLang captures before layer id + 1 = {last + 1}, which no "
        f"{target.count}-layer target has: the server fails (IndexError at start on Qwen3.5 targets, "
        "sglang issue #32204); only MiMo-V2 targets take it, from 0.5.20",
        "retrain without the last layer, or serve the drafter on another engine",
    )


def _mask(config: DraftConfig, add: Add) -> None:
    if config.dflash_config.get("mask_token_id") is not None or config.data.get("mask_token_id") is None:
        return
    token = config.dflash_config.get("mask_token", DEFAULT_MASK_TOKEN)
    add(
        WARNING,
        "sglang-mask-top-level",
        "mask_token_id is only at the top level: SGLang reads it there from 0.5.18 on; 0.5.11-0.5.17 read it only "
        f"under dflash_config, ignore this one and look up dflash_config.mask_token ({json.dumps(token)}) in the "
        "tokenizer, adding it when missing: another id than the drafter was trained with",
        "move mask_token_id into dflash_config (every release reads it there)",
    )


def _windows(config: DraftConfig, add: Add) -> None:
    layout = config.layout
    kinds = layout.get("layer_types")
    sliding = isinstance(kinds, list) and SLIDING in kinds
    use_swa = bool(config.dflash_config.get("use_swa", False))
    if (use_swa or "swa_window_size" in config.dflash_config) and not sliding:
        add(
            WARNING,
            "sglang-swa-unread",
            "dflash_config.use_swa / swa_window_size (MiMo style) are never read by SGLang (swa_window_size only for "
            "Nemotron-3.5 drafters, from 0.5.20): this drafter runs every layer as full attention, without its window",
            'give layer_types ("sliding_attention" per sliding layer) and sliding_window: '
            "SGLang reads them from 0.5.14",
        )
    if sliding:
        add(
            INFO,
            "sglang-windows",
            "sliding layers: SGLang builds per-layer windows from layer_types and sliding_window from 0.5.14; "
            "0.5.11-0.5.13 run every draft layer as full non-causal attention",
            "check the install: `dflash-doctor check --engine sglang ...`",
        )


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() and len(text) < 7 else None


def _flags(flags: LaunchFlags, block: int | None, config: DraftConfig, add: Add) -> None:
    algorithm = flags.value(*ALGORITHM)
    if algorithm is None or algorithm.upper() != "DFLASH":
        said = "is not given" if algorithm is None else f"is {json.dumps(algorithm)}"
        add(
            ERROR,
            "sglang-algorithm",
            f"--speculative-algorithm {said}: SGLang runs a DFlash drafter only with DFLASH",
            "--speculative-algorithm DFLASH",
        )
    if flags.value(*DRAFT_MODEL) is None:
        add(
            ERROR,
            "sglang-draft-model",
            "no --speculative-draft-model-path: DFLASH refuses to start without the drafter",
            "--speculative-draft-model-path DRAFTER (a directory or a hub name)",
        )
    _draft_tokens(flags, block, add)
    window = flags.value(*WINDOW)
    if window is not None:
        swa = bool(config.dflash_config.get("use_swa")) or SLIDING in (config.layout.get("layer_types") or [])
        add(
            WARNING if swa else INFO,
            "sglang-window-flag",
            f"the draft window flag ({window}) bounds the target tokens the draft worker keeps in its KV cache: it "
            "is not the drafter's per-layer sliding window",
            "give the drafter's window in its config (layer_types and sliding_window)" if swa else "",
        )
    for name in STEPS:
        value = flags.value(name)
        if value is not None and value != "1":
            add(INFO, "sglang-steps", f"{name} {value}: DFLASH overrides it to 1 (and only logs it)", f"drop {name}")


def _draft_tokens(flags: LaunchFlags, block: int | None, add: Add) -> None:
    tokens, alias = flags.value(*DRAFT_TOKENS), flags.value(*BLOCK)
    if tokens is not None and alias is not None and tokens != alias:
        add(
            ERROR,
            "sglang-draft-tokens",
            f"--speculative-num-draft-tokens {tokens} and --speculative-dflash-block-size {alias} differ: SGLang "
            "refuses to start",
            "give one of them, the drafter's block size",
        )
        return
    given = tokens if tokens is not None else alias
    if given is None:
        add(
            INFO,
            "sglang-draft-tokens",
            "no --speculative-num-draft-tokens: SGLang reads block_size from the drafter (16 when it cannot)",
            "",
        )
        return
    count = _number(given)
    if count is None or count < 1:
        add(
            ERROR,
            "sglang-draft-tokens",
            f"--speculative-num-draft-tokens is {json.dumps(given)}, not a number of tokens",
            "--speculative-num-draft-tokens BLOCK_SIZE",
        )
        return
    if block is None or count == block:
        return
    fix = f"--speculative-num-draft-tokens {block}"
    if count > block:
        add(
            ERROR,
            "sglang-draft-tokens",
            f"--speculative-num-draft-tokens {count} is past the drafter's block size {block}: SGLang verifies "
            f"{count} tokens a step, positions the drafter was never trained on, and only logs the mismatch",
            fix,
        )
        return
    habit = " (block size - 1: vLLM's num_speculative_tokens)" if count == block - 1 else ""
    add(
        WARNING,
        "sglang-draft-tokens",
        f"--speculative-num-draft-tokens {count}{habit}: for SGLang the flag IS the block size, here {block}; it "
        f"drafts a block of {count} and only logs the mismatch, capping the acceptance length at {count}",
        fix,
    )


LINT: EngineLint = EngineLint(SGLANG.name, REPLACED, lint_sglang, says_sglang)
