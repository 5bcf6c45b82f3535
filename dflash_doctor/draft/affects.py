"""Which drafters a fix's defect can reach: the tests a rule's ``[affects]`` table names.

Each test reads the user's drafter config (``check --draft-config``) and says
whether the defect can reach it: True, False, or None when the config does not
say. Only False exempts a fix from the gate, so a test answers False only when
the config proves the defect cannot reach the drafter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .config import DraftConfig


def _sliding_layers(draft: DraftConfig) -> bool | None:
    layers = draft.expected_layers()
    if layers is None:
        return None
    if any(layer["sliding_window"] is not None for layer in layers):
        return True
    # Sliding layers whose window the config does not state (the model class may default one): it cannot say.
    return None if any(layer["sliding"] for layer in layers) else False


def _unshifted_ids(draft: DraftConfig) -> bool | None:
    from .config import SPECULATORS, ZLAB

    return {ZLAB: True, SPECULATORS: False}.get(draft.format)


DRAFTER_TESTS: dict[str, Callable[[DraftConfig], bool | None]] = {
    "sliding-layers": _sliding_layers,  # any layer with a sliding window (layer_types or dflash_config.use_swa)
    "unshifted-ids": _unshifted_ids,  # layer ids that vLLM must shift (z-lab); speculators ids are capture ids already
}
