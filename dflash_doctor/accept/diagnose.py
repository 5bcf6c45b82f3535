"""From numbers to a verdict: which defect the acceptance figures point to."""

from __future__ import annotations

import dataclasses

from ..model import EXIT_MISSING, EXIT_OK, EXIT_UNKNOWN, exit_code_for
from .measurement import Measurement
from .reference import Expected, Judgement

TOO_LITTLE_DATA = "too-little-data"
COLLAPSE = "collapse"
WITHIN_BAND = "within-band"
NO_REFERENCE = "no-reference"
UNIFORM_LOSS = "uniform-loss"
CONTEXT_DECAY = "context-decay"
LARGE_LOSS = "large-loss"

EXIT_CODES = {  # each diagnosis's part in the one exit-code rule
    WITHIN_BAND: EXIT_OK,
    NO_REFERENCE: EXIT_OK,
    COLLAPSE: EXIT_MISSING,
    UNIFORM_LOSS: EXIT_MISSING,
    CONTEXT_DECAY: EXIT_MISSING,
    LARGE_LOSS: EXIT_MISSING,
    TOO_LITTLE_DATA: EXIT_UNKNOWN,
}


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    code: str
    text: str

    @property
    def exit_code(self) -> int:
        return exit_code_for((EXIT_CODES[self.code],))

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "text": self.text}


def _figure_phrase(expected: Expected) -> str:
    if expected.dataset:
        return (
            f"{expected.figure:.2f} published for {expected.drafter} on {expected.figure_dataset} "
            f"at temperature {expected.temperature:g}"
        )
    return (
        f"{expected.figure:.2f}, the lowest figure published for {expected.drafter} at temperature "
        f"{expected.temperature:g} ({expected.figure_dataset}; give --dataset for a closer comparison)"
    )


def diagnose(
    measurement: Measurement, expected: Expected | None, judgement: Judgement, min_drafts: int, no_figures: str = ""
) -> Diagnosis:
    """``no_figures``: why a --drafter given has no published figure to compare with (see reference.no_figures)."""
    length, drafts = measurement.acceptance_length, measurement.drafts
    where = " in the window" if measurement.window_s is not None else ""
    if length is None or drafts == 0:
        return Diagnosis(
            TOO_LITTLE_DATA,
            f"No drafts recorded{where}: there was no speculative-decoding traffic to judge. "
            "Send a workload (--prompts) or measure over a longer --window.",
        )
    if length < judgement.collapse_below and (drafts is None or drafts >= judgement.collapse_min_drafts):
        return Diagnosis(COLLAPSE, _collapse_text(length, measurement.per_position, judgement))
    if drafts is not None and drafts < min_drafts:
        return Diagnosis(
            TOO_LITTLE_DATA,
            f"Only {drafts} drafts recorded{where} (fewer than --min-drafts {min_drafts}): too little traffic to judge "
            f"an acceptance length of {length:.2f}. Send a workload (--prompts) or measure over a longer --window.",
        )
    if expected is None and no_figures:
        return Diagnosis(
            NO_REFERENCE,
            f"Mean acceptance length {length:.2f} shows no collapse; {no_figures}, so there is no figure to compare "
            "it with.",
        )
    if expected is None:
        return Diagnosis(
            NO_REFERENCE,
            f"Mean acceptance length {length:.2f} shows no collapse. Give --drafter (and --dataset) "
            "to compare it with published figures.",
        )
    if length >= expected.floor:
        return Diagnosis(
            WITHIN_BAND,
            f"Mean acceptance length {length:.2f} is within the expected band: at least {expected.floor:.2f}, "
            f"{expected.tolerance:g} x the {_figure_phrase(expected)}.",
        )
    return _loss(length, measurement.mean_prompt_tokens, expected, judgement)


def _collapse_text(length: float, per_position: tuple[float, ...], judgement: Judgement) -> str:
    shape = ""
    if per_position:
        # Under 1.5 the per-position rates sum to under 0.5: position 0 itself fails.
        later = max(per_position[1:], default=0.0)
        shape = (
            f"; position 0 accepts {per_position[0]:.0%} of drafts and no later position more than {later:.0%}: "
            "the collapse starts from the first drafted token"
        )
    return (
        f"Acceptance collapsed: mean acceptance length {length:.2f} (under {judgement.collapse_below:g}){shape}. "
        "Drafted tokens are almost never accepted, so the drafter's inputs or attention are broken: a wrong mask "
        "token, dtype (keep the drafter bf16) or KV layout, or causal sliding-window layers run as non-causal full "
        "attention (the swa-config fix, for drafters such as Qwen3.6-27B-DFlash). "
        f"A missing layer offset alone costs only about 3-{judgement.layer_offset_loss:.0%}. "
        "Run `dflash-doctor check` on the serving install."
    )


def _loss(length: float, mean_prompt_tokens: float | None, expected: Expected, judgement: Judgement) -> Diagnosis:
    loss = 1 - length / expected.figure
    below = (
        f"Mean acceptance length {length:.2f} is {loss:.0%} below the {_figure_phrase(expected)} "
        f"(floor {expected.floor:.2f})"
    )
    long = judgement.long_prompt_tokens
    if loss <= judgement.layer_offset_loss:
        return Diagnosis(
            UNIFORM_LOSS,
            f"{below}: a moderate loss without a collapse, consistent with a missing layer offset (layer-offset costs "
            f"about 3-{judgement.layer_offset_loss:.0%}). Check the serving install with "
            "`dflash-doctor check --only layer-offset`. A prompt format or thinking mode other than the published "
            "setup also costs acceptance: measure with the benchmark's own prompts (--prompts, --dataset).",
        )
    if mean_prompt_tokens is not None and mean_prompt_tokens > long:
        return Diagnosis(
            CONTEXT_DECAY,
            f"{below}, with prompts of {mean_prompt_tokens:.0f} tokens on average, past the {long} tokens where "
            "drafter sliding windows begin: consistent with a lost sliding-window config (swa-config), which leaves "
            f"short prompts unaffected. To confirm, measure again with prompts under {long} tokens (--prompts with "
            "the benchmark's own): good acceptance there and poor acceptance on long prompts point to swa-config; "
            "check the install with `dflash-doctor check --only swa-config`.",
        )
    prompts = f", with prompts of {mean_prompt_tokens:.0f} tokens on average" if mean_prompt_tokens is not None else ""
    return Diagnosis(
        LARGE_LOSS,
        f"{below}{prompts}: more than a missing layer offset costs (about 3-{judgement.layer_offset_loss:.0%}), "
        "without a collapse. If the drafter has sliding-window layers, a lost sliding-window config (swa-config) "
        f"shows this way on long prompts: measure once with prompts under {long} tokens and once with prompts well "
        "past the drafter's window (8-16K tokens); acceptance that decays with length points to swa-config "
        "(`dflash-doctor check --only swa-config`). If short prompts are low too, compare the prompt format, "
        "thinking mode and sampling with the published setup.",
    )
