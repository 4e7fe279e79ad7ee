"""The design of issue 39 under the authors' protocol: which runs, at which rate, in which order.

Arms: every model of ``models`` with the authors' per-backbone heads, and the models whose per-backbone
head is not ``equal_head`` wide (sasrec, prism, prism-authors) once more with every head that wide (the
equal-heads arm; the others' per-backbone runs already have it). Rates: the headline v3 rule
(``prism_rec.experiments.tuning.HEADLINE_V3_GRID``): seed 0 of each (dataset, model) trains at every rate
of the start grid, extended along the ladder while the best validation full-ranking AUC sits at an edge;
seeds 1.. then train at the chosen rate; the equal-heads arm takes its model's per-backbone choice, so it
differs in the head only. ``pop`` trains nothing: one run per dataset.

Order (``Design.pending``), most informative first: the first tier (``FIRST_TIER``: the pair the paper's
ordering rests on in both implementations, SASRec, the null backbone and the floor), seed 0's rate grids,
then its other seeds seed by seed, then its equal-heads arm; then the other models the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from ...experiments import tuning
from ...experiments.headline.v3 import V3
from .data import FEATURE_DIM
from .model import CHANNEL, POP, head_width
from .train import RunConfig

DESIGN_MODELS = ("prism-authors", "gdn-authors", "sasrec", "prism", "gated_deltanet", "null", "pop",
                 "mamba2-authors", "mamba2", "transformer++")
FIRST_TIER = frozenset(DESIGN_MODELS[:7])
DESIGN_SEEDS = len(V3.seeds)  # the headline's five
EQUAL_HEAD = "64"
PER_BACKBONE = "per-backbone"
RATE_FREE = ("model", "seed", "lr", "head_width")  # the settings a design's runs differ in


def equal_heads_retrain(model: str, equal_head: str | None = EQUAL_HEAD, channel: int = CHANNEL) -> bool:
    """The equal-heads rule, its one home: the arm where every head is ``equal_head`` wide retrains ``model``
    only when its per-backbone head has another width; otherwise its per-backbone runs are that arm too.
    ``pop`` has no head; without the arm (None) nothing is retrained."""
    if equal_head is None or model == POP:
        return False
    equal = head_width(model, equal_head, FEATURE_DIM, channel, option="--equal-head")
    return head_width(model, PER_BACKBONE, FEATURE_DIM, channel) != equal


def run_key(dataset: str, config: RunConfig) -> str:
    """The file name of a run's test cases (``cases/<key>.json``)."""
    return f"{dataset}__{config.model}__h{config.head_width}__lr{config.lr:g}__s{config.seed}"


def identity(dataset: str, config: dict) -> str:
    """What makes two runs the same run: the dataset and every setting."""
    return json.dumps([dataset, config], sort_keys=True)


def tuning_entries(rows: list[dict]) -> list[dict]:
    """Manifest rows as ``tuning``'s entries: per-backbone runs, scored by validation full-ranking AUC."""
    return [{"dataset": row["dataset"], "model": row["config"]["model"], "seed": row["config"]["seed"],
             "lr": row["config"]["lr"], "best_valid_auc": row["valid_full_auc"]}
            for row in rows if row["config"]["head_width"] == PER_BACKBONE]


@dataclass(frozen=True)
class Design:
    """The runs of the design over ``datasets`` x ``models`` (priority order) x ``seeds`` on ``base``'s settings."""

    datasets: tuple[str, ...]
    models: tuple[str, ...] = DESIGN_MODELS
    seeds: tuple[int, ...] = tuple(range(DESIGN_SEEDS))
    base: RunConfig = RunConfig(model="null")
    grid: tuning.TuningGrid = V3.grid
    equal_head: str | None = EQUAL_HEAD

    def record(self) -> dict:
        """What the runs' manifest rows keep of this design beside their settings (``from_record``)."""
        return {"models": list(self.models), "seeds": list(self.seeds), "lr_grid": {
            "start": list(self.grid.start), "ladder": list(self.grid.ladder)}, "equal_head": self.equal_head}

    @classmethod
    def from_record(cls, datasets: tuple[str, ...], base: RunConfig, record: dict) -> Design:
        """The design of ``record`` (``Design.record``) over ``datasets`` on ``base``'s settings."""
        grid = tuning.TuningGrid(tuple(record["lr_grid"]["start"]), tuple(record["lr_grid"]["ladder"]))
        return cls(datasets, tuple(record["models"]), tuple(record["seeds"]), base, grid, record["equal_head"])

    def own(self, rows: list[dict]) -> list[dict]:
        """The rows made on this design's settings (other rows of the manifest are left alone)."""
        fixed = {k: v for k, v in self.base.to_dict().items() if k not in RATE_FREE}
        return [row for row in rows if row["dataset"] in self.datasets
                and all(row["config"].get(k) == v for k, v in fixed.items())]

    def retrains(self, model: str) -> bool:
        """Whether this design's equal-heads arm retrains ``model`` (``equal_heads_retrain``)."""
        return equal_heads_retrain(model, self.equal_head, self.base.channel)

    def _job(self, dataset: str, model: str, seed: int, lr: float, head: str = PER_BACKBONE) -> tuple[str, RunConfig]:
        return dataset, replace(self.base, model=model, seed=seed, lr=lr, head_width=head).check()

    def _tier(self, models: list[str], by_rate: dict, choices: dict) -> list[tuple[str, RunConfig]]:
        jobs = []
        for model in models:  # seed 0's rate grids (every missing start rate at once, then the extensions)
            for dataset in self.datasets:
                if model == POP:
                    jobs.append(self._job(dataset, POP, self.seeds[0], self.base.lr))
                    continue
                if tuning.tuning_base(model) != model:
                    continue  # a preset trains at its base's chosen rate (tuning.py), every seed below
                tried = by_rate.get((dataset, model), {})
                missing = [r for r in self.grid.rates(tried) if r not in tried]
                extension = self.grid.next_rate(tried)
                rates = missing or ([extension] if extension is not None else [])
                jobs += [self._job(dataset, model, tuning.TUNING_SEED, rate) for rate in rates]
        heads = [(m, PER_BACKBONE) for m in models] + [(m, self.equal_head) for m in models if self.retrains(m)]
        for group in (heads[:len(models)], heads[len(models):]):  # the other seeds, then the equal-heads arm
            for seed in self.seeds:
                for model, head in group:
                    for dataset in self.datasets:
                        rate = tuning.rate_for(dataset, model, choices)
                        tuned = (seed == tuning.TUNING_SEED and head == PER_BACKBONE
                                 and tuning.tuning_base(model) == model)  # its run is in the grid
                        if rate is not None and model != POP and not tuned:
                            jobs.append(self._job(dataset, model, seed, rate, head))
        return jobs

    def chosen(self, rows: list[dict]) -> dict[tuple[str, str], float]:
        """{(dataset, model): chosen rate} of every cell whose seed-0 grid is complete."""
        return tuning.chosen_rates(tuning_entries(self.own(rows)), self.grid)

    def pending(self, rows: list[dict]) -> list[tuple[str, RunConfig]]:
        """The runs that can start now (their rate known), in priority order, without those in ``rows``."""
        rows = self.own(rows)
        by_rate = tuning.valid_auc_by_rate(tuning_entries(rows))
        choices = tuning.chosen_rates(tuning_entries(rows), self.grid)
        done = {identity(row["dataset"], row["config"]) for row in rows}
        first = [m for m in self.models if m in FIRST_TIER]
        jobs = [*self._tier(first, by_rate, choices), *self._tier([m for m in self.models if m not in first],
                                                                  by_rate, choices)]
        unique = {}
        for dataset, config in jobs:
            unique.setdefault(identity(dataset, config.to_dict()), (dataset, config))
        return [job for key, job in unique.items() if key not in done]

    def rates(self, rows: list[dict]) -> dict[tuple[str, str], tuple[float, bool]]:
        """{(dataset, model): (rate, chosen)}: the chosen rate of a complete seed-0 grid, else the rate
        leading among those tried so far (chosen False)."""
        entries = tuning_entries(self.own(rows))
        leading = {key: (rate, False) for key, rate in tuning.leading_rates(entries, self.grid).items()}
        return {**leading, **{key: (rate, True) for key, rate in tuning.chosen_rates(entries, self.grid).items()}}

    def selected(self, rows: list[dict]) -> dict[tuple[str, str, str], tuple[float | None, bool, list[dict]]]:
        """{(dataset, model, head): (rate, chosen, its runs at that rate, seeds in order)} for every cell with
        runs at its chosen or leading rate (``pop``: rate None, chosen); head as the runs' config has it."""
        rows, rates = self.own(rows), self.rates(rows)
        cells: dict[tuple[str, str, str], tuple[float | None, bool, list[dict]]] = {}
        for row in sorted(rows, key=lambda r: r["config"]["seed"]):
            config = row["config"]
            rate, chosen = (None, True) if config["model"] == POP else rates.get((row["dataset"], config["model"]),
                                                                                 (None, False))
            if config["model"] == POP or (config["lr"] == rate and config["seed"] in self.seeds):
                key = (row["dataset"], config["model"], config["head_width"])
                cells.setdefault(key, (rate, chosen, []))[2].append(row)
        return cells
