"""The next-item side of issue 39's design: the headline runs of the same backbones, from its manifests.

The next-item arms are headline v3 cells (``prism-rec headline run --protocol v3``: width d64, the rate grid
``tuning.HEADLINE_V3_GRID`` chosen on seed 0 by validation AUC, seeds 0-4), which count v2's runs wherever
their settings match; so the v3 manifest and the v2 one are read together (a line in both counts once, by
its record id) and selected by the v3 rule, as results/headline_v3.md does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import OptionError
from ...experiments import tuning
from ...experiments.campaign import merge_manifests
from ...experiments.headline.protocol import WIDTH, width_of
from ...experiments.headline.v3 import V3
from ...paths import RESULTS_DIR
from ...registry import trains

NEXT_ITEM_MANIFESTS = (RESULTS_DIR / V3.manifest_name, RESULTS_DIR / "headline_v2_manifest.jsonl")


@dataclass(frozen=True)
class NextItemCell:
    """One (dataset, model) of the next-item protocol: its chosen rate (None while seed 0's grid is
    unfinished), the rate its grid needs next, and its test AUC per seed at the chosen rate."""

    rate: float | None
    next_rate: float | None
    test_auc: dict[int, float]


def read_entries(paths: list[Path], datasets: set[str]) -> list[dict]:
    """The width-d64 lines of ``paths`` on ``datasets``, each record once (the first file's copy)."""
    try:
        entries = merge_manifests(paths)
    except FileNotFoundError as error:  # "manifest PATH does not exist"
        raise OptionError(f"option --next-item: {error}") from None
    return [entry for entry in entries if entry["dataset"] in datasets and width_of(entry) == WIDTH]


def next_item_cells(paths: list[Path], datasets: set[str], models: list[str]) -> dict[tuple[str, str], NextItemCell]:
    """{(dataset, model): its cell} for ``models`` on ``datasets`` (a model without runs: no rate, no seeds)."""
    entries = read_entries(paths, datasets)
    grid = V3.grid
    chosen, wanted = tuning.chosen_rates(entries, grid), tuning.next_rates(entries, grid)
    selected = [e for e in tuning.selected_entries(entries, grid) if e["seed"] in V3.seeds]
    cells = {}
    for dataset in sorted(datasets):
        for model in models:
            base = (dataset, tuning.tuning_base(model))
            scores = {e["seed"]: e["test_auc"] for e in selected if (e["dataset"], e["model"]) == (dataset, model)}
            rate = chosen.get(base) if trains(model) else None
            cells[(dataset, model)] = NextItemCell(rate, wanted.get(base), scores)
    return cells
