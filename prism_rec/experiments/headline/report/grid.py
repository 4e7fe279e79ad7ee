"""The headline grid: the manifest's newest runs of the protocol as cells of (dataset, model) with their
seed statistics and bootstrap intervals over test users, and the constants the report is built on."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

from .... import registry
from ....tracking.bootstrap import N_RESAMPLES, PairedDifference, paired_difference
from ....tracking.case_ranks import CaseRanks, decode
from ....tracking.cells import Cell
from ... import tuning
from ..protocol import DATASETS, PROTOCOL, SEEDS

COMMAND = "prism-rec headline tables"
FLOOR = "pop"  # item popularity: the row every trained backbone must clear
SHORT_SEQUENCE = ("movies-fedcsr",)  # short histories (mean 4.6): a short-sequence case, not the paper's Movies
V1_SETTINGS = {"lr": 1e-3, "epochs": 50, "patience": 5}
CASE_RANK_TOLERANCE = 1e-4  # the mean of a run's per-user AUC against its manifest test_auc
ABLATION_DATASET = "electronics-gerec"


def newest_entries(manifest: list[dict]) -> dict[tuple[str, str, int], dict]:
    """The newest (last) manifest entry per (dataset, model, seed)."""
    return {(entry["dataset"], entry["model"], entry["seed"]): entry for entry in manifest}


@dataclass
class Grid:
    """What the report reads: the v2 entries, the selected cells, the chosen rates and the checks on the
    per-user ranks."""

    entries: list[dict]
    other_protocols: int
    datasets: list[str]
    models: list[str]
    cells: dict[tuple[str, str], Cell]
    choices: dict[tuple[str, str], float]
    disagreeing: list[str] = field(default_factory=list)  # runs whose case ranks do not give their test AUC
    n_resamples: int = N_RESAMPLES
    _paired: dict = field(default_factory=dict)

    def cell(self, dataset: str, model: str) -> Cell:
        return self.cells[(dataset, model)]

    def trained(self, dataset: str) -> list[Cell]:
        """The cells of trained backbones with runs on ``dataset``."""
        return [self.cells[(dataset, m)] for m in self.models if m != FLOOR and self.cells[(dataset, m)].runs]

    def floor(self, dataset: str) -> dict | None:
        runs = self.cells[(dataset, FLOOR)].runs
        return runs[0] if runs else None

    def paired(self, dataset: str, first: str, second: str) -> PairedDifference | str:
        """``first`` − ``second`` on ``dataset``, or why it cannot be computed."""
        key = (dataset, first, second)
        if key not in self._paired:
            a, b = (self.cells.get((dataset, model)) or Cell(dataset, model, [], 0) for model in (first, second))
            missing = [c.model for c in (a, b) if not c.runs]  # a model of no run at all has no cell
            no_ranks = [c.model for c in (a, b) if c.runs and c.per_user is None]
            if missing or no_ranks:
                self._paired[key] = "; ".join([f"{', '.join(missing)} missing"] * bool(missing)
                                              + [f"no case ranks for {', '.join(no_ranks)}"] * bool(no_ranks))
            else:
                self._paired[key] = paired_difference(a.per_user, b.per_user, n_resamples=self.n_resamples)
        return self._paired[key]


BASELINES, PRISM_FAMILY, AUTHORS_PRESETS = "baselines", "PRISM and its ablations", "the authors' presets"
GROUPS = (BASELINES, PRISM_FAMILY, AUTHORS_PRESETS)  # the main table's order


def model_group(model: str) -> str:
    """The group of the headline's tables a model belongs to: the authors' code run as released (``*-authors``),
    PRISM and its ablation presets (``prism``, ``prism-*``), or a baseline (pop and every other backbone)."""
    if model.endswith("-authors"):
        return AUTHORS_PRESETS
    if model == "prism" or model.startswith("prism-"):
        return PRISM_FAMILY
    return BASELINES


def model_order(entries: list[dict]) -> list[str]:
    """pop first, then every registered backbone, then any other model with runs."""
    registered = [m for m in registry.list_backbones() if m != FLOOR]
    others = sorted({e["model"] for e in entries} - set(registered) - {FLOOR})
    return [FLOOR, *registered, *others]


def _aligned(ranks: CaseRanks) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(ranks.users, kind="stable")
    return ranks.users[order], ranks.auc()[order]


def run_user_auc(run: dict, row: dict, users: dict[str, np.ndarray]) -> tuple[np.ndarray, str | None]:
    """The per-user test AUC [U] of manifest entry ``run`` from its case-ranks line ``row``, in user order, and, where
    their mean misses the entry's test_auc by more than CASE_RANK_TOLERANCE, a line saying so. The run's test users
    must be those of the other runs of its dataset (``users``: dataset -> user ids, set by its first run)."""
    name = f"{run['dataset']}/{run['model']}/s{run['seed']}"
    where = f"case ranks of {name} (record {run['record_id']})"
    run_users, auc = _aligned(decode(row["case_ranks"], where))
    if not np.array_equal(run_users, users.setdefault(run["dataset"], run_users)):
        raise ValueError(f"{where}: its test users differ from the other runs of {run['dataset']}")
    if abs(auc.mean() - run["test_auc"]) > CASE_RANK_TOLERANCE:
        return auc, f"{name} (case ranks {auc.mean():.6f}, manifest {run['test_auc']:.6f})"
    return auc, None


def build_grid(manifest: list[dict], case_rank_rows: list[dict], n_resamples: int = N_RESAMPLES) -> Grid:
    """The report's view of a v2 manifest and its case-ranks lines (see the module docstring)."""
    entries = [e for e in manifest if e.get("protocol") == PROTOCOL]
    datasets = [*DATASETS, *sorted({e["dataset"] for e in entries} - set(DATASETS))]
    models = model_order(entries)
    choices = tuning.chosen_rates(entries)
    ranks = {row["record_id"]: row for row in case_rank_rows}
    selected = collections.defaultdict(list)
    for entry in sorted(tuning.selected_entries(entries), key=lambda e: e["seed"]):
        selected[(entry["dataset"], entry["model"])].append(entry)
    grid = Grid(entries, len(manifest) - len(entries), datasets, models, {}, choices, n_resamples=n_resamples)
    users: dict[str, np.ndarray] = {}
    for dataset in datasets:
        for model in models:
            runs = selected.get((dataset, model), [])
            cell = Cell(dataset, model, runs, 1 if not registry.trains(model) else len(SEEDS))
            if not runs and registry.trains(model):
                base = tuning.tuning_base(model)
                rates = {float(e["lr"]) for e in entries
                         if (e["dataset"], e["model"], e["seed"]) == (dataset, base, tuning.TUNING_SEED)}
                if rates and (dataset, base) not in choices:
                    cell.waiting = f"tuning {len(rates & set(tuning.LR_GRID))} of {len(tuning.LR_GRID)} rates"
            rows = []
            for run in runs:
                row = ranks.get(run["record_id"])
                if row is None:
                    break
                auc, disagreement = run_user_auc(run, row, users)
                if disagreement:
                    grid.disagreeing.append(disagreement)
                rows.append(auc)
            if runs and len(rows) == len(runs):
                cell.per_user = np.stack(rows)
                cell.ci = cell.interval(n_resamples)
            grid.cells[(dataset, model)] = cell
    return grid
