"""Lint a drafter config: one pass each for its format, layer ids, layers, mask
and block size, and causality; each finding says what to do about it.

Whether vLLM sees the window of the sliding layers is read, where a vLLM tree is
checked, from the hf_config the behaviour run built with that tree's config
class (``behaviour/hf_config.py``): the object the verdict comes from, so the
two cannot disagree. Alone (``config``), the lint says what Transformers'
Qwen2/Qwen3 configs do with the file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines import DEFAULT_ENGINE
from ..model import EXIT_MISSING, EXIT_OK, ToolError, exit_code_for
from .config import (
    FULL,
    LAYER_TYPES,
    MAX_DRAFT_LAYERS,
    SLIDING,
    SPECULATORS,
    UNKNOWN_FORMAT,
    ZLAB,
    DraftConfig,
    TargetLayers,
    draft_layer_count,
    first_given,
    int_list,
    load_draft_config,
    load_target_layers,
    target_layer_count,
)

if TYPE_CHECKING:
    from .config import HfView

ERROR = "error"

# add(severity, code, message, fix): one finding, as each pass reports it
Add = Callable[[str, str, str, str], None]
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)
DFLASH_SPECULATOR_TYPES = ("dflash", "dflash2")

from .launch import LaunchFlags  # noqa: E402

EnginePass = Callable[[DraftConfig, TargetLayers | None, LaunchFlags | None, Add], None]


@dataclasses.dataclass(frozen=True)
class EngineLint:
    """What an engine other than the default makes of the file and of its launch flags, in the
    engine's own pass file (``draft/<engine>.py``): the generic findings its pass says in its own
    terms (code, severity), the pass, and what tells its launch flags. The default engine's are
    the generic passes themselves."""

    engine: str
    replaced: frozenset[tuple[str, str]]
    lint: EnginePass
    says: Callable[[LaunchFlags], bool]


from . import sglang  # noqa: E402 - it reads the severities and EngineLint above

ENGINE_LINTS: dict[str, EngineLint] = {each.engine: each for each in (sglang.LINT,)}


def lint_engine(told: str, flags: LaunchFlags | None) -> str:
    """The engine to lint for: ``told`` (``--engine``, an engine's name), or for ``auto`` the engine whose
    launch flags were given, else vLLM; a ToolError for flags of no engine whose flags are read."""
    from ..model import from_option

    readers = ", ".join(sorted(ENGINE_LINTS))
    if told != "auto":
        name = from_option(told).name
        if flags is not None and name not in ENGINE_LINTS:
            raise ToolError(f"--launch-flags: only the launch flags of {readers} are linted, not {name}'s")
        return name
    if flags is None:
        return DEFAULT_ENGINE.name
    found = [name for name, each in ENGINE_LINTS.items() if each.says(flags)]
    if len(found) != 1:
        raise ToolError(
            f"--launch-flags: no speculative flags of {readers} in them (--speculative-algorithm, "
            "--speculative-draft-model-path, --speculative-num-draft-tokens): give them, or --engine"
        )
    return found[0]


@dataclasses.dataclass(frozen=True)
class Finding:
    severity: str
    code: str
    message: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return {"severity": self.severity, "code": self.code, "message": self.message, "fix": self.fix}


@dataclasses.dataclass(frozen=True)
class LintReport:
    config: DraftConfig
    target: TargetLayers | None  # from --target-config, else num_target_layers in the config
    findings: tuple[Finding, ...]
    hf: HfView | None = None  # the hf_config a checked vLLM builds from the file, when there is one
    engine: str = DEFAULT_ENGINE.name  # the engine the file is linted for (``config --engine``)
    launch: LaunchFlags | None = None  # the engine's launch flags linted with it (``config --launch-flags``)

    @property
    def errors(self) -> int:
        return sum(finding.severity == ERROR for finding in self.findings)

    @property
    def warnings(self) -> int:
        return sum(finding.severity == WARNING for finding in self.findings)

    @property
    def exit_code(self) -> int:
        """0 no error finding, 1 any (warnings and notes never fail)."""
        return exit_code_for(EXIT_MISSING if finding.severity == ERROR else EXIT_OK for finding in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.config.path),
            "format": self.config.format,
            "target_layers": None if self.target is None else self.target.to_json(),
            "findings": [finding.to_json() for finding in self.findings],
            "errors": self.errors,
            "warnings": self.warnings,
            "hf_config": None if self.hf is None else self.hf.source.to_json(),
            "engine": self.engine,
            "launch_flags": None if self.launch is None else self.launch.to_json(),
        }


def lint_report(
    path: Path, target_config: Path | None = None, engine: str = DEFAULT_ENGINE.name, flags: LaunchFlags | None = None
) -> LintReport:
    """Load and lint a drafter config for ``engine`` (with its launch ``flags``); raises ToolError when a
    file cannot be read."""
    config = load_draft_config(path)
    target = load_target_layers(target_config) if target_config is not None else None
    known = target_layer_count(config, target)
    return LintReport(config, known, lint(config, target, None, engine, flags), engine=engine, launch=flags)


def with_hf(report: LintReport, hf: HfView) -> LintReport:
    """The report again, its window finding read from the hf_config a vLLM tree built
    (``report.target`` stands for --target-config: the config's own count agrees with itself)."""
    findings = lint(report.config, report.target, hf, report.engine, report.launch)
    return dataclasses.replace(report, findings=findings, hf=hf)


def lint(
    config: DraftConfig,
    target: TargetLayers | None = None,
    hf: HfView | None = None,
    engine: str = DEFAULT_ENGINE.name,
    flags: LaunchFlags | None = None,
) -> tuple[Finding, ...]:
    """Every finding, most severe first; ``target`` comes from --target-config;
    ``hf``: the hf_config a checked vLLM builds from the file; ``engine``'s own pass adds its findings."""
    findings: list[Finding] = []

    def add(severity: str, code: str, message: str, fix: str) -> None:
        findings.append(Finding(severity, code, message, fix))

    _lint_format(config, add)
    _lint_ids(config, target, add)
    _lint_layers(config, add, hf)
    _lint_mask_and_block(config, add)
    _lint_causality(config, add)
    if engine in ENGINE_LINTS:
        own = ENGINE_LINTS[engine]
        findings[:] = [finding for finding in findings if (finding.code, finding.severity) not in own.replaced]
        own.lint(config, target_layer_count(config, target), flags, add)
    order = {severity: rank for rank, severity in enumerate(SEVERITIES)}
    return tuple(sorted(findings, key=lambda f: order[f.severity]))


def _lint_format(config: DraftConfig, add: Add) -> None:
    data = config.data
    if config.format == ZLAB:
        add(
            INFO,
            "format",
            "z-lab/SpecForge format: dflash_config.target_layer_ids are 0-based target layers; "
            "vLLM must capture id + 1",
            "",
        )
        if "aux_hidden_state_layer_ids" in data or "eagle_aux_hidden_state_layer_ids" in data:
            add(
                WARNING,
                "format-mixed",
                "the config also sets (eagle_)aux_hidden_state_layer_ids, which vLLM reads before dflash_config and "
                "uses unshifted",
                "keep one: dflash_config.target_layer_ids (raw) or eagle_aux_hidden_state_layer_ids (already +1)",
            )
    elif config.format == SPECULATORS:
        kind = data.get("speculators_model_type")
        add(INFO, "format", "speculators format: aux_hidden_state_layer_ids are vLLM capture ids (already +1)", "")
        if kind not in DFLASH_SPECULATOR_TYPES:
            add(
                ERROR,
                "speculators-type",
                f"speculators_model_type is {kind!r}, not one of {', '.join(DFLASH_SPECULATOR_TYPES)}: not a DFlash "
                "drafter",
                'set "speculators_model_type": "dflash" (or use a DFlash checkpoint)',
            )
        if isinstance(data.get("dflash_config"), dict) and "target_layer_ids" in data["dflash_config"]:
            add(
                WARNING,
                "format-mixed",
                "the config has both speculators aux_hidden_state_layer_ids and dflash_config.target_layer_ids; vLLM "
                "translates the speculators ids and ignores the other",
                "remove dflash_config.target_layer_ids",
            )
        if not isinstance(data.get("transformer_layer_config"), dict):
            add(
                ERROR,
                "missing-key",
                "speculators config without a transformer_layer_config object",
                "add transformer_layer_config (the draft layers' config)",
            )
    else:
        add(
            ERROR,
            "format",
            "neither dflash_config.target_layer_ids (z-lab/SpecForge) nor aux_hidden_state_layer_ids (speculators): "
            "the tapped target layers are not stated",
            "add dflash_config.target_layer_ids (0-based target layers the drafter was trained on)",
        )


def _lint_ids(config: DraftConfig, target: TargetLayers | None, add: Add) -> None:
    if config.format == UNKNOWN_FORMAT:
        return
    key = "aux_hidden_state_layer_ids" if config.format == SPECULATORS else "dflash_config.target_layer_ids"
    ids = config.layer_ids
    if not int_list(ids) or not ids:
        add(
            ERROR,
            "ids-invalid",
            f"{key} must be a non-empty list of integers, got {json.dumps(ids)}",
            f"write {key} as a list of layer indices",
        )
        return
    if len(set(ids)) != len(ids):
        add(WARNING, "ids-duplicate", f"{key} repeats a layer: {ids}", "list each tapped layer once")
    if ids != sorted(ids):
        add(
            WARNING,
            "ids-order",
            f"{key} is not ascending: {ids} (the drafter concatenates taps in list order)",
            "keep the order the drafter was trained with; check it",
        )
    declared = config.data.get("num_target_layers")
    if target is not None and isinstance(declared, int) and declared != target.count:
        add(
            ERROR,
            "target-layers-mismatch",
            f"num_target_layers is {declared} but the target config has {target.count} layers: this drafter was "
            "trained for another target",
            "use the drafter trained for this target model",
        )
    known = target_layer_count(config, target)
    if known is None:
        add(
            INFO,
            "ids-range-unchecked",
            f"the target's layer count is unknown, so {key} is not range-checked",
            "pass --target-config TARGET/config.json",
        )
        return
    # z-lab ids tap layer outputs 0..N-1; capture ids run 1..N (N: output of the last layer).
    low, high = (0, known.count - 1) if config.format == ZLAB else (1, known.count)
    outside = [i for i in ids if not low <= i <= high]
    if outside:
        add(
            ERROR,
            "ids-out-of-range",
            f"{key} {outside} outside {low}..{high} for a {known.count}-layer target ({known.source})",
            f"use layer ids in {low}..{high}; a drafter for another target does not fit this one",
        )
    elif high in ids:
        add(
            INFO,
            "ids-last-layer",
            f"{key} taps the target's last layer ({high}): vLLM captures it as the final layer's output "
            "before the norm",
            "right for vLLM; other runtimes have mishandled the last-layer tap",
        )


def _lint_layers(config: DraftConfig, add: Add, hf: HfView | None) -> None:
    layout = config.layout
    where = "transformer_layer_config." if config.format == SPECULATORS else ""
    count = draft_layer_count(layout)
    if count is None:
        add(
            ERROR,
            "missing-key",
            f"{where}num_hidden_layers is missing or not a number of draft layers (1..{MAX_DRAFT_LAYERS})",
            f"set {where}num_hidden_layers to the number of draft layers",
        )
    kinds = layout.get("layer_types")
    if kinds is not None:
        if not isinstance(kinds, list):
            add(
                ERROR,
                "layer-types-invalid",
                f"{where}layer_types must be a list",
                f"write {where}layer_types as a list of {' / '.join(LAYER_TYPES)}",
            )
            kinds = None
        else:
            bad = sorted({str(k) for k in kinds if k not in LAYER_TYPES})
            if bad:
                add(
                    ERROR,
                    "layer-types-invalid",
                    f"{where}layer_types has unknown values {bad}",
                    f"use only {' / '.join(LAYER_TYPES)}",
                )
            if count is not None and len(kinds) != count:
                add(
                    ERROR,
                    "layer-types-length",
                    f"{where}layer_types has {len(kinds)} entries for {count} layers",
                    f"give exactly one layer type per draft layer ({count})",
                )
    use_swa = bool(config.dflash_config.get("use_swa", False))
    sliding = kinds is not None and SLIDING in kinds
    if kinds and sliding and FULL in kinds:
        add(
            INFO,
            "mixed-layers",
            "the drafter mixes sliding and full attention layers: vLLM needs the V2 model runner for it",
            "run a vLLM whose V2 runner supports mixed drafters (`dflash-doctor check --draft-config` says whether a "
            "vLLM does)",
        )
    if use_swa and not sliding:
        add(
            INFO,
            "use-swa",
            "dflash_config.use_swa is true and no layer_types entry is sliding: every draft layer is sliding",
            "",
        )
    swa_window = config.dflash_config.get("swa_window_size")
    top_window = layout.get("sliding_window")
    window = first_given(swa_window, top_window)
    if sliding or use_swa:
        if window is None:
            add(
                ERROR,
                "window-missing",
                "sliding layers but no window: neither dflash_config.swa_window_size nor sliding_window is set",
                f"set {where}sliding_window to the window the drafter was trained with",
            )
        elif not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            add(
                ERROR,
                "window-invalid",
                f"the sliding window must be a positive integer, got {json.dumps(window)}",
                "set the window in tokens, e.g. 2048",
            )
        elif swa_window is None:
            _lint_window_seen(config, layout, window, add, hf)
    elif window is not None and kinds is not None:
        add(
            INFO,
            "window-unused",
            f"a sliding window ({window}) is set but no layer is sliding",
            "check layer_types if a layer should be sliding",
        )


NULLED_FIX = 'set "use_sliding_window": true (or give dflash_config.swa_window_size)'


def _lint_window_seen(config: DraftConfig, layout: dict[str, Any], window: int, add: Add, hf: HfView | None) -> None:
    """Whether the window, given only as ``sliding_window``, reaches vLLM: from the
    hf_config a checked tree built (``hf``), else from what Transformers' Qwen2/Qwen3
    configs do with ``use_sliding_window``."""
    state = "false" if layout.get("use_sliding_window") is False else "not set"
    if hf is None:
        if config.format == ZLAB and layout.get("use_sliding_window") is not True:
            add(
                WARNING,
                "window-nulled",
                f"use_sliding_window is {state} (Transformers' Qwen2/Qwen3 configs default it to false): "
                "Transformers then sets sliding_window to None, and vLLM sees no window for the sliding layers",
                NULLED_FIX,
            )
        return
    source = hf.source
    known, seen = hf.value("sliding_window")
    if not known:
        add(INFO, "window-unchecked", f"whether this vLLM sees the sliding window cannot be told: {source.reason}", "")
    elif seen is None:
        add(
            WARNING,
            "window-nulled",
            f"use_sliding_window is {state}: {source.config_class} (transformers {source.transformers}) "
            "sets sliding_window to None, and vLLM sees no window for the sliding layers",
            NULLED_FIX,
        )
    elif seen != window:
        add(
            WARNING,
            "window-changed",
            f"{source.config_class} (transformers {source.transformers}) turns sliding_window {window} into "
            f"{json.dumps(seen)}: vLLM sees that window for the sliding layers",
            "give the window in dflash_config.swa_window_size",
        )


def _lint_mask_and_block(config: DraftConfig, add: Add) -> None:
    data = config.data
    nested = config.dflash_config.get("mask_token_id")
    top = data.get("mask_token_id")
    if nested is None and top is None:
        where = "mask_token_id" if config.format == SPECULATORS else "dflash_config.mask_token_id"
        add(
            ERROR,
            "mask-missing",
            "no mask_token_id (dflash_config or top level): the drafter's mask token is unknown",
            f"set {where} to the tokenizer's mask token id",
        )
    elif nested is not None and top is not None and nested != top:
        add(
            ERROR,
            "mask-conflict",
            f"dflash_config.mask_token_id {nested} differs from top-level mask_token_id {top}",
            "keep one mask_token_id",
        )
    else:
        mask = first_given(nested, top)
        if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
            add(
                ERROR,
                "mask-invalid",
                f"mask_token_id must be a token id, got {json.dumps(mask)}",
                "set mask_token_id to an integer token id",
            )
    top_block, nested_block = data.get("block_size"), config.dflash_config.get("block_size")
    if top_block is not None and nested_block is not None and top_block != nested_block:
        add(
            ERROR,
            "block-conflict",
            f"block_size {top_block} differs from dflash_config.block_size {nested_block}",
            "keep one block_size",
        )
        return
    block = config.block_size
    if block is None:
        add(
            WARNING,
            "block-missing",
            "no block_size (top level or dflash_config): num_speculative_tokens cannot be derived",
            "set block_size to the drafter's training block size",
        )
        return
    if not isinstance(block, int) or isinstance(block, bool) or block < 2:
        add(
            ERROR,
            "block-invalid",
            f"block_size must be an integer >= 2, got {json.dumps(block)}",
            "set block_size to the training block size, e.g. 16",
        )
        return
    tokens = block - 1
    if config.format == SPECULATORS:
        stated = _speculative_tokens(data)
        anchor = bool(data.get("sample_from_anchor", False))
        wanted = block if anchor else tokens
        if stated is not None and stated != wanted:
            add(
                WARNING,
                "spec-tokens-mismatch",
                f"speculators_config proposes {stated} speculative tokens, but block_size {block} gives {wanted}",
                f"use num_speculative_tokens {wanted}",
            )
        tokens = wanted
    add(
        INFO,
        "num-speculative-tokens",
        f"block_size {block}: launch with num_speculative_tokens = {tokens}",
        f'--speculative-config \'{{"method": "dflash", "num_speculative_tokens": {tokens}, ...}}\'',
    )


def _speculative_tokens(data: dict[str, Any]) -> int | None:
    try:
        value = data["speculators_config"]["proposal_methods"][0]["speculative_tokens"]
    except (KeyError, IndexError, TypeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lint_causality(config: DraftConfig, add: Add) -> None:
    layout = config.layout
    if layout.get("is_causal") is not None:
        add(
            INFO,
            "causal-override",
            f"is_causal is {json.dumps(layout['is_causal'])}: every draft layer is "
            f"{'causal' if layout['is_causal'] else 'non-causal'} (older vLLM releases ignore this key; "
            "`dflash-doctor check --draft-config` shows what a vLLM makes of it)",
            "right if the drafter was trained that way",
        )
    if config.dflash_config.get("causal") is not None:
        add(
            INFO,
            "causal-override",
            f"dflash_config.causal is {json.dumps(config.dflash_config['causal'])}: it overrides causality of every "
            "draft layer",
            "right if the drafter was trained that way",
        )
    if config.format == SPECULATORS and config.data.get("sliding_window_non_causal") is not None:
        flag = config.data["sliding_window_non_causal"]
        add(
            INFO,
            "causal-override",
            f"sliding_window_non_causal is {json.dumps(flag)}: vLLM's speculators translation sets "
            f"dflash_config.causal = {json.dumps(not flag)}",
            "right if the drafter was trained that way",
        )
