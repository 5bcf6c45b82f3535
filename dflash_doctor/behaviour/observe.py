"""The question kinds: what the tree's code computed for each drafter config,
as observations (one per runner, setting, link and layer)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..draft.config import DraftConfig
from ..model import UNKNOWN, Observation
from .computed import Computed, as_list
from .capture import CaptureAnswer
from .construct import Built, Indices
from .flag import FlagAnswer

Layers = dict[str | None, Built] | None  # per runner (None: an engine with one worker), when the rule builds layers

DEFAULT = "default"


def _accepts(name: str, computed: Computed, runner: str) -> Observation:
    support = dict(computed.runner_support).get(runner)
    if support is None:
        why = dict(computed.reasons).get("runner") or "not computed"
        return Observation(name, runner, DEFAULT, "runner-accepts", None, True, None, None, why)
    return Observation(
        name, runner, DEFAULT, "runner-accepts", None, True, support.supported, support.supported, support.reason
    )


def capture_ids(name: str, draft: DraftConfig, computed: Computed, built: Layers) -> Iterator[Observation]:
    """Per runner: the aux-layer ids the resolver returns, against the ids the drafter was trained on."""
    expected = computed.expected_aux_layer_ids
    by_runner = dict(computed.aux_by_runner)
    reasons = dict(computed.reasons)
    for runner in computed.runners:
        yield _accepts(name, computed, runner)
        value = by_runner.get(runner, UNKNOWN)
        if value is UNKNOWN or expected is None:
            why = (
                reasons.get(f"aux_layer_ids_by_runner.{runner}")
                or reasons.get("aux_layer_ids")
                or "the drafter states no usable layer ids"
            )
            yield Observation(name, runner, DEFAULT, "resolver", None, as_list(expected), None, None, why)
            continue
        note = "" if value is not None else "the resolver returns None: the tree ignores the drafter's ids"
        yield Observation(
            name, runner, DEFAULT, "resolver", None, list(expected), as_list(value), value == tuple(expected), note
        )


UNSTATED_WINDOW = "the drafter's config marks this layer sliding but states no window"


def layer_attention(name: str, draft: DraftConfig, computed: Computed, built: Layers) -> Iterator[Observation]:
    """Per runner and draft layer: the sliding window and causality that reached the
    attention layer when the tree's own classes built the drafter's layers."""
    expected = computed.expected_layers
    for runner in computed.runners or (None,):
        answer = built.get(runner) if built else None
        if answer is not None and answer.refused:
            yield Observation(name, runner, DEFAULT, "runner-accepts", None, True, False, False, answer.reason)
            continue
        if runner is not None:
            yield _accepts(name, computed, runner)
        if answer is not None and answer.indices is not None:
            yield from _layer_indices(name, runner, answer.indices)
        if answer is None or answer.layers is None or expected is None:
            why = answer.reason if answer is not None else "the rule builds no layers"
            for part in ("sliding-window", "causality"):
                yield Observation(
                    name, runner, DEFAULT, part, None, None, None, None, why or "the drafter states no layers"
                )
            continue
        for (window, causal), wanted in zip(answer.layers, expected):
            index = wanted["index"]
            if wanted["sliding"] and wanted["sliding_window"] is None:
                yield Observation(name, runner, DEFAULT, "sliding-window", index, None, window, None, UNSTATED_WINDOW)
            else:
                yield Observation(
                    name,
                    runner,
                    DEFAULT,
                    "sliding-window",
                    index,
                    wanted["sliding_window"],
                    window,
                    window == wanted["sliding_window"],
                )
            want_causal = wanted["causal"]
            known = want_causal is not None and isinstance(causal, bool)
            yield Observation(
                name, runner, DEFAULT, "causality", index, want_causal, causal, causal == want_causal if known else None
            )


def _layer_indices(name: str, runner: str | None, indices: Indices) -> Iterator[Observation]:
    """The index each layer received from the model class: layer i must get i."""
    if indices.received is None:
        yield Observation(name, runner, DEFAULT, "layer-index", None, None, None, None, indices.reason)
        return
    for position, received in enumerate(indices.received):
        if received is None:  # the layer class takes no index: nothing to hand it wrongly
            yield Observation(
                name, runner, DEFAULT, "layer-index", position, position, None, True, "the layer takes no index"
            )
        else:
            yield Observation(name, runner, DEFAULT, "layer-index", position, position, received, received == position)


def block_drop(name: str, draft: DraftConfig, computed: Computed, built: Layers) -> Iterator[Observation]:
    """Whether the KV cache manager is told to drop the last prefix-cache block for
    the method: by default, and with the opt-out flag where the tree has one."""
    why = dict(computed.reasons).get("drops_prefix_block", "")
    settings = [(DEFAULT, computed.drops_prefix_block)]
    if computed.opt_out:
        settings.append((computed.opt_out, computed.drops_prefix_block_when_disabled))
    for setting, drops in settings:
        shown = computed.prefix_block_predicate or ""
        note = (
            f"{shown}{'()' if shown.isidentifier() else ''} decides" if drops is not None else why or "not computable"
        )
        yield Observation(
            name, None, setting, "kv-cache-manager", None, False, drops, None if drops is None else not drops, note
        )


def layer_rope(name: str, draft: DraftConfig, computed: Computed, built: Layers) -> Iterator[Observation]:
    """Per runner and draft layer: the RoPE base the tree's own classes built the layer's
    rotary embedding with, against the base the drafter states."""
    expected = draft.rope_base()
    for runner in computed.runners or (None,):
        answer = built.get(runner) if built else None
        if answer is not None and answer.refused:
            yield Observation(name, runner, DEFAULT, "runner-accepts", None, True, False, False, answer.reason)
            continue
        if runner is not None:
            yield _accepts(name, computed, runner)
        if answer is None or answer.layers is None or expected is None:
            why = answer.reason if answer is not None and answer.layers is None else "the rule builds no layers"
            if expected is None:
                why = "the drafter's config states no RoPE base (rope_parameters.rope_theta or rope_theta)"
            yield Observation(name, runner, DEFAULT, "rotary-base", None, expected, None, None, why)
            continue
        for index, (base, _) in enumerate(answer.layers):
            known = isinstance(base, (int, float)) and not isinstance(base, bool)
            note = "" if known else f"the base handed over is {base!r}, not a number"
            same = float(base) == expected if known else None
            yield Observation(name, runner, DEFAULT, "rotary-base", index, expected, base, same, note)


def algorithm_flag(name: str, draft: DraftConfig, computed: Computed, answer: FlagAnswer) -> Iterator[Observation]:
    """What the method's member answers to the predicate (the same for every drafter config)."""
    flag = answer.flag
    where = f"{answer.place.file}:{answer.place.line}" if answer.place else flag.file
    note = answer.reason or (
        f"{flag.enum}.{flag.predicate}() ({where}) is {answer.value} for {flag.enum}.{flag.member}: {flag.meaning}"
    )
    ok = None if answer.value is None else answer.value == flag.expected
    yield Observation(name, None, DEFAULT, "predicate", None, flag.expected, answer.value, ok, note)


def capture_position(name: str, draft: DraftConfig, computed: Computed, answer: CaptureAnswer) -> Iterator[Observation]:
    """Per target architecture (the setting): the hidden states its hook ends up tapping for
    the drafter's ids, against the ones the drafter was trained on (HF ``hidden_states`` indices)."""
    expected = draft.expected_aux_layer_ids()
    if not answer.architectures:
        yield Observation(name, None, DEFAULT, "capture-position", None, as_list(expected), None, None, answer.reason)
        return
    for tapped in answer.architectures:
        where = f"{tapped.place.symbol} ({tapped.place.file}:{tapped.place.line})"
        if tapped.unjudged:  # recorded, not judged: nothing reaches a drafter silently wrong
            note = f"{where}: {tapped.reason}"
            yield Observation(name, None, tapped.architecture, tapped.unjudged, None, None, None, None, note)
            continue
        indices = tapped.indices if expected is not None else None
        ok = None if indices is None or expected is None else indices == tuple(expected)
        why = f"{tapped.holder} taps each listed layer's {tapped.position}" if indices is not None else tapped.reason
        note = f"{where}: {why or 'the drafter states no usable layer ids'}"
        if answer.note:
            note = f"{note} ({answer.note})"
        yield Observation(
            name, None, tapped.architecture, "capture-position", None, as_list(expected), as_list(indices), ok, note
        )


# each kind reads what its rule's own run found (built layers, a predicate's answer), per drafter config
QUESTION_KINDS: dict[str, Callable[[str, DraftConfig, Computed, Any], Iterator[Observation]]] = {
    "capture-ids": capture_ids,
    "layer-attention": layer_attention,
    "block-drop": block_drop,
    "layer-rope": layer_rope,
    "algorithm-flag": algorithm_flag,
    "capture-position": capture_position,
}
