"""What a tree's own code computes for one drafter config, and where in the
tree that code lives. Nothing is inferred from a version number.

* aux layers: the resolver each runner calls (the capture-ids rule names them)
  on the drafter's hf_config.
* layers: the engine's per-layer attention resolver for each draft layer, with
  the config in force answering for each runner.
* runner: the runners the tree has, what chooses between them (the engine's
  switch), what each refuses, and the speculator each builds for the method.
* prefix block: what a constructor hands on about the last prefix-cache block
  (the block-drop rule names them), evaluated for the method.

``compute`` plans the calls (``plan``), builds the stubs they run on
(``stubs``), runs them once for every config and reads the outcomes
(``interpret``). Where each definition lives is the engine's route
(``engines/route.py``) and the asked rules'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..isolation.sandbox import Call, Chunk, Outcome
from ..model import UNKNOWN
from ..terminal import clean
from .definitions import Place

if TYPE_CHECKING:
    from ..draft.config import HfSource

# Where a program runs: sandbox.run here, or the same request on the host that holds the tree.
RunProgram = Callable[[Sequence[Chunk], Sequence[Call], dict[str, Any], dict[str, Any]], dict[str, Outcome]]


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
    opt_out: str | None = None  # the tree's speculative config has this opt-out flag
    runners: tuple[str, ...] = ()  # the model runners this tree has
    hf_config: dict[str, Any] | None = dataclasses.field(default=None, compare=False)  # as vLLM builds it
    hf_source: HfSource | None = dataclasses.field(
        default=None, compare=False
    )  # the class that built it, from which transformers

    def to_json(self) -> dict[str, Any]:
        return {
            "aux_layer_ids": as_list(self.aux_layer_ids),
            "expected_aux_layer_ids": as_list(self.expected_aux_layer_ids),
            "aux_layer_ids_by_runner": {
                name: as_list(value) if value != UNKNOWN else UNKNOWN for name, value in self.aux_by_runner
            },
            "layers": None
            if self.layers is None
            else [
                {"index": index, "sliding_window": window, "causal": causal}
                for index, (window, causal) in enumerate(self.layers)
            ],
            "expected_layers": None if self.expected_layers is None else list(self.expected_layers),
            "runners": list(self.runners),
            "runner": self.runner,
            "default_runner": self.default_runner,
            "runner_support": {name: support.to_json() for name, support in self.runner_support},
            "drops_prefix_block": self.drops_prefix_block,
            "prefix_block_predicate": self.prefix_block_predicate,
            "opt_out": self.opt_out,
            "drops_prefix_block_with_opt_out": self.drops_prefix_block_when_disabled,
            "mismatches": list(self.mismatches),
            "evidence": [site.to_json() for site in self.evidence],
            "reason": dict(self.reasons) or None,
            "hf_config": None if self.hf_source is None else self.hf_source.to_json(),
        }


def as_list(value: Iterable[Any] | None) -> list[Any] | None:
    return None if value is None else list(value)


@dataclasses.dataclass(frozen=True)
class ProbesSection:
    """What the tree's own code computed for the drafter config."""

    computed: Computed
    name: ClassVar[str] = "probes"

    def to_json(self) -> dict[str, Any]:
        return self.computed.to_json()

    def lines(self) -> list[str]:
        """Mismatches first (they are the news); clean lines."""
        computed = self.computed
        lines = ["probes (the tree's own code run on the drafter config):"]
        lines += [f"  !! {mismatch}" for mismatch in computed.mismatches]
        lines.append(
            f"  aux layer ids: {_value(computed.aux_layer_ids)} (expected {_value(computed.expected_aux_layer_ids)})"
        )
        accepts = ", ".join(
            f"{name.upper()} {_accepts(support.supported)}" for name, support in computed.runner_support
        )
        lines.append(
            f"  runner: {_value(computed.runner and computed.runner.upper())}" + (f" ({accepts})" if accepts else "")
        )
        if computed.layers is None:
            lines.append("  layers: not computable")
        else:
            for index, (window, causal) in enumerate(computed.layers):
                lines.append(
                    f"  layer {index}: window {window if window is not None else 'full'}, "
                    f"{'causal' if causal else 'non-causal'}"
                )
        lines.append(f"  drops the prefix-cache block for method='dflash': {_value(computed.drops_prefix_block)}")
        if computed.hf_source is not None:
            lines.append(f"  {computed.hf_source.line()}")
        lines += [f"  ({field}: {why})" for field, why in computed.reasons]
        return [clean(line) for line in lines]


def _value(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(list(value) if isinstance(value, tuple) else value)


def _accepts(supported: bool | None) -> str:
    return {True: "accepts", False: "refuses", None: "unknown"}[supported]
