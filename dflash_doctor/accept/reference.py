"""Published acceptance lengths and diagnosis thresholds: data in
``rules/reference/acceptance.toml``, each figure with its source."""

from __future__ import annotations

import dataclasses
import tomllib
from functools import cache
from typing import Any

from ..model import ToolError
from ..rules import rules_dir

REFERENCE_FILE = "reference/acceptance.toml"


@dataclasses.dataclass(frozen=True)
class Source:
    id: str
    title: str
    url: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "url": self.url}


@dataclasses.dataclass(frozen=True)
class FigureSet:
    """One published table row: acceptance length per dataset, one temperature."""

    source: Source
    temperature: float
    block_size: int
    acceptance_length: tuple[tuple[str, float], ...]  # (dataset, tau), as published


@dataclasses.dataclass(frozen=True)
class Drafter:
    name: str
    target: str
    note: str
    figures: tuple[FigureSet, ...]  # empty where none is published (``unpublished`` says where we looked)
    unpublished: Source | None = None


@dataclasses.dataclass(frozen=True)
class Judgement:
    """Thresholds of the diagnosis (see the file for what each is and why)."""

    collapse_below: float
    collapse_min_drafts: int
    layer_offset_loss: float
    long_prompt_tokens: int
    collapse_source: Source
    layer_offset_source: Source
    long_prompt_source: Source


@dataclasses.dataclass(frozen=True)
class Reference:
    tolerance: float
    tolerance_source: Source
    judgement: Judgement
    drafters: tuple[Drafter, ...]


@dataclasses.dataclass(frozen=True)
class Expected:
    """What the measurement is judged against: ``floor`` = tolerance x figure."""

    drafter: str
    target: str
    dataset: str | None  # None: traffic of unknown mix, judged against the lowest figure
    temperature: float
    figure: float
    figure_dataset: str
    tolerance: float
    block_size: int
    source: Source
    tolerance_source: Source
    figures: tuple[tuple[str, float], ...]
    note: str

    @property
    def floor(self) -> float:
        return self.tolerance * self.figure

    def to_json(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter,
            "target": self.target,
            "dataset": self.dataset,
            "temperature": self.temperature,
            "acceptance_length": self.figure,
            "figure_dataset": self.figure_dataset,
            "tolerance": self.tolerance,
            "floor": round(self.floor, 4),
            "block_size": self.block_size,
            "source": self.source.to_json(),
            "tolerance_source": self.tolerance_source.to_json(),
            "figures": dict(self.figures),
        }


def canonical_dataset(name: str) -> str:
    """``MT_Bench``, ``mtbench`` and ``mt-bench`` are one dataset."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def _short_name(name: str) -> str:
    return name.rsplit("/", 1)[-1].lower()


@cache
def load_reference() -> Reference:
    path = rules_dir() / REFERENCE_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        sources = {key: Source(key, raw["title"], raw["url"]) for key, raw in data["sources"].items()}
        raw_judgement = data["judgement"]
        judgement = Judgement(
            collapse_below=float(raw_judgement["collapse_below"]),
            collapse_min_drafts=int(raw_judgement["collapse_min_drafts"]),
            layer_offset_loss=float(raw_judgement["layer_offset_loss"]),
            long_prompt_tokens=int(raw_judgement["long_prompt_tokens"]),
            collapse_source=sources[raw_judgement["collapse_source"]],
            layer_offset_source=sources[raw_judgement["layer_offset_source"]],
            long_prompt_source=sources[raw_judgement["long_prompt_source"]],
        )
        drafters = tuple(
            Drafter(
                name=raw["name"],
                target=raw["target"],
                note=raw.get("note", ""),
                figures=tuple(
                    FigureSet(
                        source=sources[figures["source"]],
                        temperature=float(figures["temperature"]),
                        block_size=int(figures["block_size"]),
                        acceptance_length=tuple(
                            (key, float(value)) for key, value in figures["acceptance_length"].items()
                        ),
                    )
                    for figures in raw.get("figures", [])
                ),
                unpublished=sources[raw["unpublished"]] if "unpublished" in raw else None,
            )
            for raw in data["drafters"]
        )
        return Reference(float(data["tolerance"]), sources[data["tolerance_source"]], judgement, drafters)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ToolError(f"{REFERENCE_FILE}: cannot load: {exc}") from None
    except KeyError as exc:
        raise ToolError(f"{REFERENCE_FILE}: missing or unknown key {exc}") from None


def find_drafter(name: str) -> Drafter | None:
    """By full name or the part after the organisation, case-insensitive; None for a drafter the file does not name."""
    for drafter in load_reference().drafters:
        if name.lower() in (drafter.name.lower(), _short_name(drafter.name)):
            return drafter
    return None


def no_figures(name: str) -> str:
    """Why there is nothing to compare a measurement of drafter ``name`` with (``expected_for`` gave None)."""
    drafter = find_drafter(name)
    if drafter is None:
        with_figures = ", ".join(d.name for d in load_reference().drafters if d.figures)
        return (
            f"dflash-doctor knows no published acceptance length for drafter {name!r} (it knows figures for "
            f"{with_figures})"
        )
    where = f": {drafter.unpublished.title} ({drafter.unpublished.url})" if drafter.unpublished else ""
    return f"no acceptance length is published for {drafter.name}{where}"


def expected_for(drafter_name: str, dataset: str | None, temperature: float) -> Expected | None:
    """The figure to judge against; None when none is published for the drafter (a collapse is judged all the same)."""
    reference = load_reference()
    drafter = find_drafter(drafter_name)
    if drafter is None or not drafter.figures:
        return None
    matching = [figures for figures in drafter.figures if figures.temperature == temperature]
    if not matching:
        published = ", ".join(sorted({f"{figures.temperature:g}" for figures in drafter.figures}))
        raise ToolError(
            f"{drafter.name} has no published figures at temperature {temperature:g} (published: {published})"
        )
    figures = matching[0]
    by_dataset = dict(figures.acceptance_length)
    if dataset is None:
        figure_dataset = min(by_dataset, key=by_dataset.__getitem__)
    else:
        wanted = canonical_dataset(dataset)
        names = [name for name in by_dataset if canonical_dataset(name) == wanted]
        if not names:
            raise ToolError(
                f"{drafter.name} at temperature {temperature:g} has no figure for dataset {dataset!r} "
                f"(published: {', '.join(by_dataset)})"
            )
        figure_dataset = names[0]
    return Expected(
        drafter=drafter.name,
        target=drafter.target,
        dataset=None if dataset is None else figure_dataset,
        temperature=temperature,
        figure=by_dataset[figure_dataset],
        figure_dataset=figure_dataset,
        tolerance=reference.tolerance,
        block_size=figures.block_size,
        source=figures.source,
        tolerance_source=reference.tolerance_source,
        figures=figures.acceptance_length,
        note=drafter.note,
    )
