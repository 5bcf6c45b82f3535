"""What a vLLM tree's own code computes for one drafter config, and where in
the tree that code lives. Nothing is inferred from a version number.

* aux layers: ``GPUModelRunner._get_eagle3_aux_layers_from_config`` (V1) and
  ``get_eagle3_aux_layers_from_config`` (V2) on the drafter's hf_config.
* layers: ``_resolve_layer_attention(config, i)`` for each draft layer, with
  ``get_current_vllm_config()`` answering for the V1 and for the V2 runner.
* runner: ``VLLM_USE_V2_MODEL_RUNNER``'s default (envs.py), the
  ``VllmConfig.use_v2_model_runner`` property, the V1 runner's refusals
  (``if self.<check>(): unsupported.append(...)``), and the speculator the V2
  runner builds for ``method="dflash"`` (``init_speculator``).
* prefix block: the predicate ``Scheduler.__init__`` hands to
  ``KVCacheManager(use_eagle=...)``, evaluated on ``SpeculativeConfig`` with
  ``method="dflash"``.

``compute`` plans the calls (``plan``), builds the stubs they run on
(``stubs``), runs them once for every config and reads the outcomes
(``interpret``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..draft.sandbox import Call, Chunk, Outcome
from ..model import UNKNOWN
from .definitions import Place

if TYPE_CHECKING:
    from .hf_config import HfSource

V1_RESOLVER = ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner._get_eagle3_aux_layers_from_config")
V2_RESOLVER = ("vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "get_eagle3_aux_layers_from_config")
LAYER_RESOLVER = ("vllm/model_executor/models/qwen3_dflash.py", "_resolve_layer_attention")
SPEC_CONFIG = ("vllm/config/speculative.py", "SpeculativeConfig")
VLLM_CONFIG = ("vllm/config/vllm.py", "VllmConfig")
RUNNER_PROPERTY = "use_v2_model_runner"
V1_REFUSALS = "_get_v1_model_runner_unsupported_features"
SPECULATOR_FACTORY = ("vllm/v1/worker/gpu/spec_decode/__init__.py", "init_speculator")
ENVS = "vllm/envs.py"
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
SCHEDULER = ("vllm/v1/core/sched/scheduler.py", "Scheduler.__init__")
SPECULATORS_ALGOS = "vllm/transformers_utils/configs/speculators/algos.py"
OPT_OUT_FIELD = "disable_eagle_block_drop"
MANAGER = "KVCacheManager"
# What the scheduler hands the KV cache manager that changes the last prefix-cache block for a
# drafter: drop it (EAGLE's block drop), or hash it with lookahead tokens (0.33.0's replacement).
HANDED = ("use_eagle", "num_hash_lookahead_tokens")
REFUSALS = ("NotImplementedError", "ValueError")  # deliberate refusals by vLLM code
# Every DFlash release has these; the others are missing from older releases
# (and the V1 resolver from releases that no longer have the V1 runner).
REQUIRED = (SPEC_CONFIG, VLLM_CONFIG, SCHEDULER)
OPTIONAL = (V1_RESOLVER, V2_RESOLVER, LAYER_RESOLVER, SPECULATOR_FACTORY)
RUNNERS = ("v1", "v2")
# A runner exists in a tree when its module (V1) or package (V2) does: a runner the tree lacks is
# never modelled. The rules' behaviour files list them, so a collector sends them.
RUNNER_FILES = {"v1": V1_RESOLVER[0], "v2": "vllm/v1/worker/gpu/__init__.py"}
# Where a program runs: sandbox.run here, or the same request on the host that holds the tree.
Runner = Callable[[Sequence[Chunk], Sequence[Call], dict[str, Any], dict[str, Any]], dict[str, Outcome]]


@dataclasses.dataclass(frozen=True)
class RunnerSupport:
    supported: bool | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"supported": self.supported, "reason": self.reason}


@dataclasses.dataclass(frozen=True)
class Computed:
    """Everything the tree computed for one drafter config; ``None`` means not computable (see ``reasons``)."""

    aux_layer_ids: tuple[int, ...] | None
    expected_aux_layer_ids: tuple[int, ...] | None
    aux_by_runner: tuple[tuple[str, Any], ...]
    layers: tuple[tuple[int | None, bool], ...] | None
    expected_layers: tuple[dict[str, Any], ...] | None
    runner: str | None
    default_runner: str | None
    runner_support: tuple[tuple[str, RunnerSupport], ...]
    drops_prefix_block: bool | None
    prefix_block_predicate: str | None
    drops_prefix_block_when_disabled: bool | None
    mismatches: tuple[str, ...]
    reasons: tuple[tuple[str, str], ...]
    evidence: tuple[Place, ...]
    has_opt_out: bool = False  # the tree's SpeculativeConfig has the opt-out flag
    runners: tuple[str, ...] = RUNNERS  # the model runners this tree has
    hf_config: dict[str, Any] | None = dataclasses.field(default=None, compare=False)  # as vLLM builds it
    hf_source: HfSource | None = dataclasses.field(default=None, compare=False)  # the class that built it, from which transformers

    def to_json(self) -> dict[str, Any]:
        return {
            "aux_layer_ids": _list(self.aux_layer_ids),
            "expected_aux_layer_ids": _list(self.expected_aux_layer_ids),
            "aux_layer_ids_by_runner": {name: _list(value) if value != UNKNOWN else UNKNOWN for name, value in self.aux_by_runner},
            "layers": None if self.layers is None else [
                {"index": index, "sliding_window": window, "causal": causal} for index, (window, causal) in enumerate(self.layers)
            ],
            "expected_layers": None if self.expected_layers is None else list(self.expected_layers),
            "runners": list(self.runners),
            "runner": self.runner,
            "default_runner": self.default_runner,
            "runner_support": {name: support.to_json() for name, support in self.runner_support},
            "drops_prefix_block": self.drops_prefix_block,
            "prefix_block_predicate": self.prefix_block_predicate,
            f"drops_prefix_block_with_{OPT_OUT_FIELD}": self.drops_prefix_block_when_disabled,
            "mismatches": list(self.mismatches),
            "evidence": [site.to_json() for site in self.evidence],
            "reason": dict(self.reasons) or None,
            "hf_config": None if self.hf_source is None else self.hf_source.to_json(),
        }


def _list(value):
    return None if value is None else list(value)
