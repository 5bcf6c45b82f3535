"""A DFlash drafter's config.json: load it, tell its format, and say what the
drafter was trained with (``lint.py`` checks the file).

Two formats exist (see docs/drafter-config.md):

* z-lab / SpecForge: ``dflash_config.target_layer_ids`` are 0-based target
  layer indices whose output is tapped; vLLM must capture ``id + 1``.
* speculators (``speculators_model_type``): ``aux_hidden_state_layer_ids``
  are already capture ids (shifted +1 by the converter); the attention
  layout lives in ``transformer_layer_config``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..isolation import sandbox
from ..model import ToolError
from ..paths import read_file

ZLAB = "z-lab"
SPECULATORS = "speculators"
UNKNOWN_FORMAT = "unknown"

SLIDING = "sliding_attention"
FULL = "full_attention"
LAYER_TYPES = (SLIDING, FULL)
MAX_CONFIG_BYTES = 4 * 1024 * 1024
# Published model configs nest 3 or 4 levels (text_config.rope_scaling) and hold no
# integer past int64 (the model's own code takes them as C integers).
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_INT = 2**63
MAX_DRAFT_LAYERS = 256  # published drafters have 1 to 8; more is a wrong key, not a drafter


@dataclasses.dataclass(frozen=True)
class TargetLayers:
    """How many decoder layers the target has, and who says so."""

    count: int
    source: str
    architectures: tuple[str, ...] = ()  # the target's model classes, when its config names them
    config: dict[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)  # its config.json

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "source": self.source}


@dataclasses.dataclass(frozen=True)
class DraftConfig:
    path: Path
    data: dict[str, Any] = dataclasses.field(hash=False, compare=False)
    format: str

    @property
    def layout(self) -> dict[str, Any]:
        """The keys describing the draft transformer (top level, or speculators'
        ``transformer_layer_config``)."""
        if self.format == SPECULATORS:
            inner = self.data.get("transformer_layer_config")
            return inner if isinstance(inner, dict) else {}
        return self.data

    @property
    def dflash_config(self) -> dict[str, Any]:
        inner = self.data.get("dflash_config")
        return inner if isinstance(inner, dict) else {}

    @property
    def layer_ids(self) -> Any:
        """The ids as written: z-lab target_layer_ids or speculators aux ids."""
        if self.format == SPECULATORS:
            return self.data.get("aux_hidden_state_layer_ids")
        return self.dflash_config.get("target_layer_ids")

    @property
    def block_size(self) -> Any:
        return first_given(self.data.get("block_size"), self.dflash_config.get("block_size"))

    def rope_base(self) -> float | None:
        """The RoPE base the drafter was trained with: ``rope_parameters.rope_theta`` (transformers 5's
        form), else ``rope_theta``; None when the config states neither (or not as a number)."""
        layout = self.layout
        parameters = layout.get("rope_parameters")
        stated = parameters.get("rope_theta") if isinstance(parameters, dict) else None
        if stated is None:
            stated = layout.get("rope_theta")
        if isinstance(stated, (int, float)) and not isinstance(stated, bool) and stated > 0:
            return float(stated)
        return None

    def expected_aux_layer_ids(self) -> tuple[int, ...] | None:
        """The vLLM capture ids this drafter was trained on; None if the ids are unusable."""
        ids = self.layer_ids
        if not int_list(ids) or not ids:
            return None
        if self.format == ZLAB:
            return tuple(i + 1 for i in ids)
        if self.format == SPECULATORS:
            return tuple(ids)
        return None

    def expected_layers(self) -> list[dict[str, Any]] | None:
        """Per layer, whether it is sliding, and the window and causality the drafter
        was trained with (a sliding layer's window is None when the config states none).

        Reference convention (z-lab DFlash / DFlash-2): a ``sliding_attention``
        layer uses the window (``dflash_config.swa_window_size``, else
        ``sliding_window``) and is causal; a full layer is non-causal;
        ``dflash_config.use_swa`` without sliding layer types makes every layer
        sliding and non-causal; ``is_causal`` and then ``dflash_config.causal``
        override causality for all layers. Speculators configs state causality
        with ``sliding_window_non_causal`` (unknown when absent).
        """
        layout = self.layout
        count = draft_layer_count(layout)
        if count is None:
            return None
        kinds = layout.get("layer_types")
        if kinds is not None and (
            not isinstance(kinds, list) or len(kinds) != count or any(k not in LAYER_TYPES for k in kinds)
        ):
            return None
        use_swa = bool(self.dflash_config.get("use_swa", False))
        window = first_given(self.dflash_config.get("swa_window_size"), layout.get("sliding_window"))
        any_sliding = kinds is not None and SLIDING in kinds
        layers = []
        for index in range(count):
            by_type = kinds is not None and kinds[index] == SLIDING
            sliding = by_type or (use_swa and not any_sliding)
            causal: bool | None = by_type
            if self.format == SPECULATORS:
                flag = self.data.get("sliding_window_non_causal")
                causal = None if flag is None else not flag
            elif layout.get("is_causal") is not None:
                causal = bool(layout["is_causal"])
            elif self.dflash_config.get("causal") is not None:
                causal = bool(self.dflash_config["causal"])
            layers.append(
                {"index": index, "sliding": sliding, "sliding_window": window if sliding else None, "causal": causal}
            )
        return layers


def draft_layer_count(layout: dict[str, Any]) -> int | None:
    """``num_hidden_layers`` when it is a plausible number of draft layers."""
    count = layout.get("num_hidden_layers")
    if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= MAX_DRAFT_LAYERS:
        return None
    return count


def first_given(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def read_json_object(path: Path, what: str) -> tuple[Path, dict[str, Any]]:
    """The JSON object in ``path`` (a file, or a directory holding config.json), refused past
    MAX_CONFIG_DEPTH levels or with an integer past MAX_CONFIG_INT."""
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise ToolError(f"{what} {path.parent} has no config.json")
    raw = read_file(path, MAX_CONFIG_BYTES, what)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ToolError(f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ToolError(f"{what} {path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # Python's limit on the digits of an integer it reads
        raise ToolError(
            f"{what} {path} holds an integer too long to be a config value ({str(exc).split(':')[0]})"
        ) from None
    except RecursionError:
        raise ToolError(f"{what} {path} is nested too deeply to be a model config") from None
    if not isinstance(data, dict):
        raise ToolError(f"{what} {path} holds a JSON {type(data).__name__}, not an object")
    _check_values(data, "", f"{what} {path}")
    return path, data


def _check_values(value: Any, at: str, where: str, depth: int = 0) -> None:
    if depth > MAX_CONFIG_DEPTH:
        raise ToolError(
            f"{where} is nested more than {MAX_CONFIG_DEPTH} levels deep (at {at[:80]}): not a model config"
        )
    if isinstance(value, int) and not isinstance(value, bool) and not -MAX_CONFIG_INT <= value < MAX_CONFIG_INT:
        raise ToolError(
            f"{where}: {at[:80]} is an integer of {len(str(abs(value)))} digits, past any config value (the cap is "
            "2**63)"
        )
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, int):
            inner = f"{at}[{key}]"
        else:  # a key is shown as written when it is a name, else JSON-escaped: a report line stays one line
            shown = key if key.isidentifier() else json.dumps(key)
            inner = f"{at}.{shown}" if at else shown
        _check_values(item, inner, where, depth + 1)


def load_draft_config(path: Path) -> DraftConfig:
    path, data = read_json_object(path, "drafter config")
    architectures = data.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        raise ToolError(
            f"drafter config {path}: architectures is {json.dumps(architectures)[:80]}, not a list of class names"
        )
    return DraftConfig(path, data, detect_format(data))


def detect_format(data: dict[str, Any]) -> str:
    if "speculators_model_type" in data or "aux_hidden_state_layer_ids" in data:
        return SPECULATORS
    if isinstance(data.get("dflash_config"), dict) and "target_layer_ids" in data["dflash_config"]:
        return ZLAB
    return UNKNOWN_FORMAT


def load_target_layers(path: Path) -> TargetLayers:
    """The target's decoder layer count from its config.json (``text_config`` for multimodal models)."""
    path, data = read_json_object(path, "target config")
    for holder, where in ((data, "num_hidden_layers"), (data.get("text_config"), "text_config.num_hidden_layers")):
        count = holder.get("num_hidden_layers") if isinstance(holder, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            named = data.get("architectures")
            architectures = tuple(a for a in named if isinstance(a, str)) if isinstance(named, list) else ()
            return TargetLayers(count, f"{path} ({where})", architectures, data)
    raise ToolError(f"target config {path} has no num_hidden_layers (nor text_config.num_hidden_layers)")


def target_layer_count(config: DraftConfig, target: TargetLayers | None) -> TargetLayers | None:
    if target is not None:
        return target
    count = config.data.get("num_target_layers")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return TargetLayers(count, "num_target_layers in the drafter config")
    return None


# What such classes derive from the file (Qwen2/Qwen3: sliding_window is None unless
# use_sliding_window; layer_types from max_window_layers; transformers 5 moves rope_theta
# into rope_parameters): unknown when the class cannot run.
DERIVED = (
    "sliding_window",
    "layer_types",
    "use_sliding_window",
    "max_window_layers",
    "rope_parameters",
    "rope_theta",
)


@dataclasses.dataclass(frozen=True)
class HfSource:
    """How the drafter's hf_config was built: the class that ran, from which
    transformers (version, and where it came from), or why it could not run."""

    model_type: str | None
    config_class: str | None  # "file:Class"
    transformers: str | None  # version
    transformers_from: str | None
    base: str | None  # how the base class was run
    reason: str | None = None  # why the class did not run (None: it ran)

    def to_json(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "config_class": self.config_class,
            "transformers": self.transformers,
            "transformers_from": self.transformers_from,
            "base": self.base,
            "reason": self.reason,
        }

    def line(self) -> str:
        """One plain line for the report's text."""
        where = f"transformers {self.transformers or 'unknown'}" + (
            f", {self.transformers_from}" if self.transformers_from else ""
        )
        if self.reason is not None:
            return f"hf_config: {', '.join(DERIVED)} unknown: {self.reason} ({where})"
        return f"hf_config: {self.config_class} ({where}); {self.base}"


@dataclasses.dataclass(frozen=True)
class HfView:
    """The drafter's hf_config as vLLM builds it (``data``, for the sandbox: keys in
    ``sandbox.UNKNOWN_KEYS`` are gaps), and how it was built."""

    data: dict[str, Any]
    source: HfSource

    def value(self, key: str) -> tuple[bool, Any]:
        """(known, the value vLLM's code reads for ``key``; None when the object has no such attribute)."""
        if key in self.data.get(sandbox.UNKNOWN_KEYS, {}):
            return False, None
        return True, self.data.get(key)
