"""results/README.md and results/<dataset>/auc.md, .csv, .png, pareto.png of the headline benchmark
(protocol "headline-v2"), built from its manifest and per-test-user ranks only.

The tables read results/headline_v2_manifest.jsonl (one line per finished run; lines of any other
protocol are left out and counted, so old-protocol runs cannot leak in) and
results/headline_v2_case_ranks.jsonl (each run's per-test-user ranks, case_ranks.py), not the MLflow
store. Rows are the entries tuning.selected_entries keeps: every seed at its cell's chosen rate, and pop.
A cell without runs reads "missing"; nothing is estimated. Intervals are bootstraps over test users
(bootstrap.py); solo training speed comes from results/solo_throughput.csv, and a missing file or row is said.
"""

from __future__ import annotations

import collections
import datetime
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ... import registry
from .. import tuning
from ...tracking.case_ranks import CaseRanks, decode
from ...markdown import fill, pipe_table
from ...files import read_jsonl, write_atomically
from ...names import path_name
from .protocol import (CASE_RANKS_NAME, DATASETS, LAYERS, MANIFEST_NAME, PROTOCOL, SEEDS, SETTINGS,
                                backbone_parameters, training_config)
from ...training.metrics import METRIC_NAMES
from ...paths import RESULTS_DIR, TEMPLATES_DIR
from ...tracking.plots import auc_bar_chart, pareto_chart
from ...tracking.bootstrap import N_RESAMPLES, PairedDifference, bootstrap_mean_ci, paired_difference, verdict

COMMAND = "prism-rec headline tables"
FLOOR = "pop"  # item popularity: the row every trained backbone must clear
SHORT_SEQUENCE = ("movies-fedcsr",)  # short histories (mean 4.6): a short-sequence case, not the paper's Movies
SOLO_NAME = "solo_throughput.csv"
SOLO_COLUMNS = ("dataset", "model", "tokens_per_s", "step_ms", "batch_size", "max_len", "n_items", "dtype",
                "machine", "command")
V1_MANIFESTS = ("v1/headline_manifest.jsonl", "v1/ml-100k/headline_manifest.jsonl")  # under results/
V1_SETTINGS = {"lr": 1e-3, "epochs": 50, "patience": 5}
NEAR_FLOOR = 0.02  # a run whose test AUC is less than this above pop's is listed
PLATEAU_VALID_GAP = 0.01  # a run whose best validation AUC is less than this above pop's stopped on the plateau
PLATEAU_BEST_EPOCH = 2  # ... as did one whose best epoch is at most this and whose patience ran out
CASE_RANK_TOLERANCE = 1e-4  # the mean of a run's per-user AUC against its manifest test_auc

PAPER_COLUMNS = {"books-dealrec": 0, "movies-long": 1, "electronics-gerec": 2, "yelp-iclrec": 3}
PAPER_DOMAINS = ("Books", "Movies", "Electronics", "Yelp")
PAPER_TABLE2 = {  # paper Table 2, AUC: Books, Movies, Electronics, Yelp
    "SASRec (sasrec)": (.8910, .7677, .7293, .9410), "HSTU (hstu)": (.8835, .7748, .7189, .9324),
    "Mamba-2 (mamba2)": (.8872, .7713, .7157, .9385), "Gated DeltaNet (gated_deltanet)": (.8844, .7504, .7159, .9367),
    "TTT (ttt-linear, ttt-mlp)": (.8871, .7591, .6946, .9375), "Titans (titans)": (.8869, .7652, .7007, .9395),
    "GLA (not in the suite)": (.8752, .7478, .7008, .8943), "PRISM (prism)": (.8888, .7727, .7134, .9393),
}
PAPER_ABLATION = {"prism": .7134, "prism-L1": .6805, "prism-nogelu": .7047, "prism-noconv": .7076,
                  "prism-nogain": .7098}  # paper Table 3, AUC on Electronics
ABLATION_DATASET = "electronics-gerec"
PAIRS = (("prism", "gated_deltanet"), ("prism", "sasrec"))  # the paired differences of every dataset


def newest_entries(manifest: list[dict]) -> dict[tuple[str, str, int], dict]:
    """The newest (last) manifest entry per (dataset, model, seed)."""
    return {(entry["dataset"], entry["model"], entry["seed"]): entry for entry in manifest}


@dataclass
class Cell:
    """One (dataset, model) of the tables: its selected runs in seed order and their per-user AUC."""

    dataset: str
    model: str
    runs: list[dict]
    expected: int  # the seeds the grid asks for
    waiting: str = ""  # why a cell without runs has none yet
    per_user: np.ndarray | None = None  # [runs, users] in the dataset's user order; None unless every run has ranks
    ci: tuple[float, float] | None = None

    @property
    def aucs(self) -> list[float]:
        return [run["test_auc"] for run in self.runs]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.aucs)

    @property
    def std(self) -> float:
        return statistics.stdev(self.aucs) if len(self.runs) > 1 else math.nan


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
            a, b = self.cells[(dataset, first)], self.cells[(dataset, second)]
            missing = [c.model for c in (a, b) if not c.runs]
            no_ranks = [c.model for c in (a, b) if c.runs and c.per_user is None]
            if missing or no_ranks:
                self._paired[key] = "; ".join([f"{', '.join(missing)} missing"] * bool(missing)
                                              + [f"no case ranks for {', '.join(no_ranks)}"] * bool(no_ranks))
            else:
                self._paired[key] = paired_difference(a.per_user, b.per_user, n_resamples=self.n_resamples)
        return self._paired[key]


def model_order(entries: list[dict]) -> list[str]:
    """pop first, then every registered backbone, then any other model with runs."""
    registered = [m for m in registry.list_backbones() if m != FLOOR]
    others = sorted({e["model"] for e in entries} - set(registered) - {FLOOR})
    return [FLOOR, *registered, *others]


def _aligned(ranks: CaseRanks) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(ranks.users, kind="stable")
    return ranks.users[order], ranks.auc()[order]


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
            cell = Cell(dataset, model, runs, 1 if model in tuning.UNTRAINED else len(SEEDS))
            if not runs and model not in tuning.UNTRAINED:
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
                where = f"case ranks of {dataset}/{model}/s{run['seed']} (record {run['record_id']})"
                run_users, auc = _aligned(decode(row["case_ranks"], where))
                reference = users.setdefault(dataset, run_users)
                if not np.array_equal(run_users, reference):
                    raise ValueError(f"{where}: its test users differ from the other runs of {dataset}")
                if abs(auc.mean() - run["test_auc"]) > CASE_RANK_TOLERANCE:
                    grid.disagreeing.append(f"{dataset}/{model}/s{run['seed']} (case ranks {auc.mean():.6f}, "
                                            f"manifest {run['test_auc']:.6f})")
                rows.append(auc)
            if runs and len(rows) == len(runs):
                cell.per_user = np.stack(rows)
                cell.ci = bootstrap_mean_ci(cell.per_user, n_resamples=n_resamples)
            grid.cells[(dataset, model)] = cell
    return grid


# ---- formatting ---------------------------------------------------------------------------------------

def label(model: str) -> str:
    return f"{model} (floor)" if model == FLOOR else model


def seeds_text(aucs: list[float], expected: int) -> str:
    """mean ± sample std (n) of the test AUC of a cell's seeds, saying "n of expected" when some are missing."""
    count = f"{len(aucs)}" if len(aucs) == expected else f"{len(aucs)} of {expected}"
    if len(aucs) == 1:
        return f"{aucs[0]:.4f} ({count} seed{'s' if expected > 1 else ''})"
    return f"{statistics.fmean(aucs):.4f} ± {statistics.stdev(aucs):.4f} ({count})"


def auc_text(cell: Cell) -> str:
    """mean ± std (n) of a cell's test AUC, or "missing" (and why, where known)."""
    if not cell.runs:
        return f"missing ({cell.waiting})" if cell.waiting else "missing"
    return seeds_text(cell.aucs, cell.expected)


def ci_text(cell: Cell) -> str:
    if not cell.runs:
        return "missing"
    return f"[{cell.ci[0]:.4f}, {cell.ci[1]:.4f}]" if cell.ci else "missing (case ranks)"


def rate_text(cell: Cell) -> str:
    rates = sorted({float(run["lr"]) for run in cell.runs})
    if cell.model in tuning.UNTRAINED:
        return "— (no training)" if cell.runs else "—"
    return ", ".join(f"{rate:g}" for rate in rates) if rates else "missing"


def capped(run: dict) -> bool:
    """Whether a run stopped at its epoch cap (not by patience)."""
    return run["epochs_run"] >= run["epochs"]


def made_by(sources: str) -> str:
    return f"Made by `{COMMAND}` from {sources}."


SOURCES = f"`results/{MANIFEST_NAME}` and `results/{CASE_RANKS_NAME}`"


def dataset_table(grid: Grid, dataset: str, extra_metrics: tuple[str, ...] = ()) -> str:
    """One row per backbone (pop first): test AUC mean ± std (seeds), the 95% bootstrap interval over test
    users, the chosen rate, best/run epochs per seed, runs at the epoch cap, ``extra_metrics`` mean ± std."""
    titles = ["backbone", "test AUC mean ± std (seeds)", "95% CI (test users)", "lr", "epochs best/run (per seed)",
              "at cap", *(f"test {name}" for name in extra_metrics)]
    rows = []
    best = max((c.mean for c in grid.trained(dataset)), default=None)
    for model in grid.models:
        cell = grid.cell(dataset, model)
        text = auc_text(cell)
        if cell.runs and model != FLOOR and cell.mean == best:
            text = f"**{text}**"
        if model in tuning.UNTRAINED:
            epochs, at_cap = ("— (no training)", "—") if cell.runs else ("missing", "missing")
        elif cell.runs:
            epochs = ", ".join(f"{r['best_epoch']}/{r['epochs_run']}" for r in cell.runs)
            at_cap = f"{sum(capped(r) for r in cell.runs)} of {len(cell.runs)}"
        else:
            epochs = at_cap = "missing"
        extras = []
        for name in extra_metrics:
            values = [run[f"test_{name}"] for run in cell.runs]
            extras.append("missing" if not values else f"{statistics.fmean(values):.4f}"
                          + (f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""))
        rows.append([label(model), text, ci_text(cell), rate_text(cell), epochs, at_cap, *extras])
    return pipe_table(titles, rows, align="l" + "r" * (len(titles) - 1))


def pair_rows(grid: Grid, dataset: str) -> list[tuple[str, PairedDifference | str]]:
    """(what, difference) for PRISM − Gated DeltaNet, PRISM − SASRec and best − second by mean."""
    rows = [(f"{a} − {b}", grid.paired(dataset, a, b)) for a, b in PAIRS]
    trained = sorted(grid.trained(dataset), key=lambda c: -c.mean)
    if len(trained) >= 2:
        first, second = trained[0].model, trained[1].model
        rows.append((f"best − second: {first} − {second}", grid.paired(dataset, first, second)))
    else:
        rows.append(("best − second", f"{len(trained)} trained backbone(s) with runs"))
    return rows


def difference_text(difference: PairedDifference | str) -> list[str]:
    """The cells of a paired-difference row: difference, interval, Wilcoxon p, Welch p over seeds, verdict."""
    if isinstance(difference, str):
        return ["missing", "missing", "missing", "missing", f"undetermined ({difference})"]
    p_value = "n/a (all differences 0)" if math.isnan(difference.wilcoxon_p) else f"{difference.wilcoxon_p:.2g}"
    seed_p = "n/a" if math.isnan(difference.seed_p) else f"{difference.seed_p:.2g}"
    words = verdict(difference)
    return [f"{difference.mean:+.4f}", f"[{difference.low:+.4f}, {difference.high:+.4f}]", p_value, seed_p,
            f"**{words}** ✱" if difference.significant else words]


PAIRED_HEADER = ["value", "95% paired bootstrap CI (test users)", "Wilcoxon p", "Welch p (seeds)", "verdict"]


def paired_table(grid: Grid, dataset: str) -> str:
    rows = [[what, *difference_text(difference)] for what, difference in pair_rows(grid, dataset)]
    return pipe_table(["difference of mean test AUC", *PAIRED_HEADER], rows, align="lrrrrl")


def paired_note() -> str:
    return fill(TEMPLATES_DIR / "headline_paired_note.md", n_resamples=f"{N_RESAMPLES:,}")


def mean_ranks(cells: dict, models: list[str]) -> dict[str, tuple[float, int]]:
    """Per model: the mean over datasets of its rank (1 = best mean AUC; equal means share the average
    of their ranks) among the models with runs there, and the number of datasets it was ranked on.
    ``cells``: {(dataset, model): test AUCs}."""
    ranks: dict[str, list[float]] = {}
    for dataset in sorted({d for d, _ in cells},
                          key=lambda d: (d not in DATASETS, DATASETS.index(d) if d in DATASETS else d)):
        means = {m: statistics.fmean(cells[(dataset, m)]) for m in models if cells.get((dataset, m))}
        for model, mean in means.items():
            above = sum(other > mean for other in means.values())
            tied = sum(other == mean for other in means.values())
            ranks.setdefault(model, []).append(above + (tied + 1) / 2)
    return {model: (statistics.fmean(r), len(r)) for model, r in ranks.items()}


def summary_table(grid: Grid) -> str:
    """Test AUC per backbone and dataset (mean ± std (seeds)), best trained mean in bold, mean rank among
    the trained backbones (pop is the floor, not ranked)."""
    trained = [m for m in grid.models if m != FLOOR]
    ranks = mean_ranks({key: cell.aucs for key, cell in grid.cells.items() if cell.runs}, trained)
    columns = [f"{d} (short sequences)" if d in SHORT_SEQUENCE else d for d in grid.datasets]
    rows = []
    best = {d: max((c.mean for c in grid.trained(d)), default=None) for d in grid.datasets}
    for model in grid.models:
        row = []
        for dataset in grid.datasets:
            cell = grid.cell(dataset, model)
            text = auc_text(cell)
            row.append(f"**{text}**" if cell.runs and model != FLOOR and cell.mean == best[dataset] else text)
        rank = ranks.get(model)
        rank_text = "— (floor)" if model == FLOOR else "missing" if rank is None else f"{rank[0]:.1f} (over {rank[1]})"
        rows.append([label(model), *row, rank_text])
    return pipe_table(["backbone", *columns, "mean rank"], rows, align="l" + "r" * (len(columns) + 1))


def paper_table() -> str:
    ours = {column: dataset for dataset, column in PAPER_COLUMNS.items()}
    return pipe_table(["paper model (ours)", *(f"{PAPER_DOMAINS[i]} (ours: {ours[i]})" for i in range(4))],
                      [[name, *(f"{v:.4f}" for v in values)] for name, values in PAPER_TABLE2.items()], align="lrrrr")


# ---- checks ---------------------------------------------------------------------------------------------

def run_name(entry: dict, grid: Grid) -> str:
    """dataset/model/seed, with the rate when the run is a tuning run at a rate that was not chosen."""
    chosen = tuning.rate_for(entry["dataset"], entry["model"], grid.choices)
    untuned = entry["model"] in tuning.UNTRAINED or float(entry["lr"]) == chosen
    extra = "" if untuned else f" (tuning run, lr {entry['lr']:g})"
    return f"{entry['dataset']}/{entry['model']}/s{entry['seed']}{extra}"


def trained_runs(grid: Grid) -> list[dict]:
    """The newest line of every trained (dataset, model, seed, rate) run that did not diverge, in report order."""
    newest = {(e["dataset"], e["model"], e["seed"], float(e["lr"])): e for e in grid.entries
              if e["model"] != FLOOR and not e.get("diverged")}
    order = {m: i for i, m in enumerate(grid.models)}
    return sorted(newest.values(),
                  key=lambda e: (grid.datasets.index(e["dataset"]), order[e["model"]], e["seed"], e["lr"]))


def table_run_summary(grid: Grid, flagged: list[dict]) -> str:
    """How many of ``flagged`` are table runs (seeds at the chosen rate), in all and per dataset."""
    table_ids = {run["record_id"] for cell in grid.cells.values() for run in cell.runs}
    ours = [e for e in flagged if e["record_id"] in table_ids]
    trained = {d: sum(len(c.runs) for c in grid.trained(d)) for d in grid.datasets}
    per_dataset = [f"{d} {n} of {trained[d]}" for d in grid.datasets
                   if (n := sum(e["dataset"] == d for e in ours))]
    return (f"Among the {sum(trained.values())} trained table runs (seeds at the chosen rate): {len(ours)}"
            + (f" ({', '.join(per_dataset)})." if per_dataset else "."))


def near_floor(grid: Grid) -> list[str]:
    """Every trained run (tuning runs too) whose test AUC is less than NEAR_FLOOR above its dataset's pop
    row (or below it)."""
    lines, checked, without, flagged = [], 0, set(), []
    for entry in trained_runs(grid):
        floor = grid.floor(entry["dataset"])
        if floor is None:
            without.add(entry["dataset"])
            continue
        checked += 1
        if entry["test_auc"] < floor["test_auc"] + NEAR_FLOOR:
            flagged.append(entry)
            lines.append(f"- {run_name(entry, grid)}: test AUC {entry['test_auc']:.4f}, pop {floor['test_auc']:.4f} "
                         f"({entry['test_auc'] - floor['test_auc']:+.4f})")
    head = (f"**Runs near the floor** (test AUC less than {NEAR_FLOOR} above the pop row of their dataset, or "
            f"below it; every trained run, tuning runs included): {len(lines)} of {checked}"
            + (f". {table_run_summary(grid, flagged)} The runs:" if lines else ": none."))
    if without:
        head += f" Not checked, no pop row: {', '.join(d for d in grid.datasets if d in without)}."
    return [head, *lines]


def plateau_reason(entry: dict, floor: dict | None) -> str | None:
    """Why ``entry`` counts as stopped on the popularity plateau, or None: its best validation AUC is less
    than PLATEAU_VALID_GAP above pop's, or its best epoch is at most PLATEAU_BEST_EPOCH and it stopped by
    patience (before the cap)."""
    if floor is not None and entry["best_valid_auc"] < floor["best_valid_auc"] + PLATEAU_VALID_GAP:
        return (f"best valid AUC {entry['best_valid_auc']:.4f} against pop's {floor['best_valid_auc']:.4f}; "
                f"best epoch {entry['best_epoch']} of {entry['epochs_run']}")
    if entry["best_epoch"] <= PLATEAU_BEST_EPOCH and not capped(entry) \
            and entry["epochs_run"] - entry["best_epoch"] >= entry["patience"]:
        return f"best epoch {entry['best_epoch']}, stopped by patience {entry['patience']} after {entry['epochs_run']}"
    return None


def plateaus(grid: Grid) -> list[str]:
    lines, runs, flagged = [], trained_runs(grid), []
    for entry in runs:
        reason = plateau_reason(entry, grid.floor(entry["dataset"]))
        if reason:
            flagged.append(entry)
            lines.append(f"- {run_name(entry, grid)}: {reason}")
    no_floor = [d for d in grid.datasets if grid.floor(d) is None and any(e["dataset"] == d for e in runs)]
    head = (f"**Runs stopped on the plateau.** Rule: a trained run stopped on the popularity plateau when its best "
            f"validation AUC is less than {PLATEAU_VALID_GAP} above the pop row's validation AUC on its dataset "
            f"(it never got clearly past ranking by popularity, which is what the first epochs learn), or when its "
            f"best epoch is {PLATEAU_BEST_EPOCH} or earlier and it then ran out of patience before the epoch cap "
            f"(nothing it learned after the first epochs helped). Every trained run, tuning runs included: "
            f"{len(lines)} of {len(runs)}"
            + (f". {table_run_summary(grid, flagged)} The runs:" if lines else ": none."))
    if no_floor:
        head += f" Without a pop row only the second clause was checked on {', '.join(no_floor)}."
    return [head, *lines]


def cap_check(grid: Grid) -> list[str]:
    runs = trained_runs(grid)
    at_cap = [e for e in runs if capped(e)]
    improving = [e for e in at_cap if e["best_epoch"] > e["epochs_run"] - e["patience"]]
    caps = sorted({e["epochs"] for e in runs})
    head = (f"**Runs at the epoch cap** ({', '.join(map(str, caps)) or SETTINGS['epochs']} epochs): {len(at_cap)} of "
            f"{len(runs)} trained runs, tuning runs included; {len(improving)} of them had their best epoch within "
            f"the last `patience` epochs (still improving when stopped)" + (":" if at_cap else "."))
    return [head, *(f"- {run_name(e, grid)}: best epoch {e['best_epoch']} of {e['epochs_run']}" for e in at_cap)]


def divergence_check(grid: Grid) -> list[str]:
    """Runs whose scores stopped being finite: before their first validation (no metrics; the rate loses the
    tuning) or later (training ended there, the best epoch before it kept)."""
    early = [e for e in grid.entries if e.get("diverged")]
    later = [e for e in trained_runs(grid) if e.get("diverged_epoch")]
    head = (f"**Diverged runs** (scores not finite; tuning runs included): {len(early)} before their first "
            f"validation, {len(later)} later" + (":" if early or later else "."))
    return [head, *(f"- {run_name(e, grid)}: before its first validation" for e in early),
            *(f"- {run_name(e, grid)}: at epoch {e['diverged_epoch']}, best epoch {e['best_epoch']} kept"
              for e in later)]


def case_rank_check(grid: Grid) -> str:
    with_ranks = sum(len(c.runs) for c in grid.cells.values() if c.per_user is not None)
    total = sum(len(c.runs) for c in grid.cells.values())
    text = (f"**Per-user ranks.** {with_ranks} of {total} table runs have case ranks (the others' interval cells "
            f"read \"missing (case ranks)\"); ")
    if grid.disagreeing:
        return text + (f"{len(grid.disagreeing)} disagree with their manifest test AUC by more than "
                       f"{CASE_RANK_TOLERANCE:g}: {', '.join(grid.disagreeing)}.")
    return text + f"the mean of each one's per-user AUC is its manifest test AUC within {CASE_RANK_TOLERANCE:g}."


def same_seed_check(manifest: list[dict], model: str, reference: str, why: str) -> str:
    """How closely ``model`` reproduces ``reference`` seed by seed (``why`` says why it should), over the
    runs of both with the same dataset, seed and rate; runs that differ are named with their commits."""
    entries = newest_entries(manifest)
    pairs = [(key, entries[(key[0], model, key[2])], entry) for key, entry in sorted(entries.items())
             if key[1] == reference and (key[0], model, key[2]) in entries]
    other_rates = [p for p in pairs if p[1].get("lr") != p[2].get("lr")]
    pairs = [p for p in pairs if p not in other_rates]
    skipped = f" ({len(other_rates)} pair(s) trained at different rates left out)" if other_rates else ""
    if not pairs:
        return (f"**{model} against {reference}, seed by seed:** no run of both with the same dataset, seed and "
                f"rate{skipped}.")
    differing = [f"{dataset} s{seed} ({abs(ours['test_auc'] - theirs['test_auc']):.1e}; commits "
                 f"{ours['git_commit']} and {theirs['git_commit']}, compile {ours.get('compile', 'off')} and "
                 f"{theirs.get('compile', 'off')})"
                 for (dataset, _, seed), ours, theirs in pairs if ours["test_auc"] != theirs["test_auc"]]
    return (f"**{model} against {reference}, seed by seed** ({why}): the same test AUC to every digit in "
            f"{len(pairs) - len(differing)} of {len(pairs)} runs"
            + (f"; different in {', '.join(differing)}" if differing else "") + f"{skipped}.")


# ---- ablation, v1, tuning -------------------------------------------------------------------------------

AUTHORS_PAIRS = (("prism-authors", "prism"), ("gdn-authors", "gated_deltanet"), ("mamba2-authors", "mamba2"),
                 ("prism-authors", "gdn-authors"), ("prism-authors", "sasrec"), ("prism", "gated_deltanet"),
                 ("prism", "sasrec"))  # paper as run against paper as written, and the paper's ordering claims


def authors_table(grid: Grid) -> str:
    """Per dataset, the paired differences between the authors' presets (results/paper_vs_code.md) and the
    faithful backbones, and the paper's ordering claims (PRISM above GDN, near SASRec) under both."""
    rows = [[dataset, f"{first} − {second}", *difference_text(grid.paired(dataset, first, second))]
            for dataset in grid.datasets for first, second in AUTHORS_PAIRS]
    return pipe_table(["dataset", "difference of mean test AUC", *PAIRED_HEADER], rows, align="llrrrrl")


def ablation(grid: Grid) -> list[str]:
    """The presets of the paper's Table 3 on ABLATION_DATASET: the paper's order beside ours, and prism −
    each preset with its paired interval."""
    paper = sorted(PAPER_ABLATION, key=lambda m: -PAPER_ABLATION[m])
    cells = {m: grid.cell(ABLATION_DATASET, m) for m in PAPER_ABLATION}
    ours = sorted((m for m in PAPER_ABLATION if cells[m].runs), key=lambda m: -cells[m].mean)
    order = [[str(rank + 1), f"{model} {PAPER_ABLATION[model]:.4f}",
              f"{ours[rank]} {auc_text(cells[ours[rank]])}" if rank < len(ours) else "missing"]
             for rank, model in enumerate(paper)]
    missing = [m for m in paper if not cells[m].runs]
    pairs = {model: grid.paired(ABLATION_DATASET, "prism", model) for model in paper[1:]}
    unresolved = [f"prism − {m}" for m, d in pairs.items() if isinstance(d, str) or not d.significant]
    if missing:
        order_text = f"Order undetermined: {', '.join(missing)} missing."
    else:
        order_text = ("The paper's order holds" if ours == paper else "Not the paper's order") + " by mean" + (
            f"; the grid does not separate prism from a preset where the difference below is not significant "
            f"({len(unresolved)} of {len(pairs)}: {', '.join(unresolved)})." if unresolved else ".")
    differences = [[f"prism − {model}", *difference_text(difference)] for model, difference in pairs.items()]
    return [pipe_table(["rank", "paper Table 3 (Electronics AUC)", f"ours ({ABLATION_DATASET}, test AUC mean ± std)"],
                       order, align="rll"), "", order_text, "",
            pipe_table(["prism − preset", *PAIRED_HEADER], differences, align="lrrrrl")]


def v1_means(v1_entries: list[dict]) -> dict[tuple[str, str], float]:
    cells: dict[tuple[str, str], list[float]] = {}
    for (dataset, model, _), entry in newest_entries(v1_entries).items():
        cells.setdefault((dataset, model), []).append(entry["test_auc"])
    return {key: statistics.fmean(values) for key, values in cells.items()}


def v1_comparison(grid: Grid, v1_entries: list[dict]) -> list[str]:
    """Per dataset and backbone the v1 mean test AUC beside v2's, and the reasons they differ."""
    before = v1_means(v1_entries)
    rows = []
    for model in grid.models:
        row = []
        for dataset in grid.datasets:
            old, cell = before.get((dataset, model)), grid.cell(dataset, model)
            new = f"{cell.mean:.4f}" if cell.runs else "missing"
            if old is None:
                row.append(f"no v1 run → {new}")
            else:
                row.append(f"{old:.4f} → {new}" + (f" ({cell.mean - old:+.4f})" if cell.runs else ""))
        rows.append([label(model), *row])
    lines = [pipe_table(["backbone", *(f"{d} v1 → v2" for d in grid.datasets)], rows,
                        align="l" + "r" * len(grid.datasets))]
    other_rate = sorted(f"{d}/{m} {rate:g}" for (d, m), rate in grid.choices.items() if rate != V1_SETTINGS["lr"])
    table_runs = [run for cell in grid.cells.values() if cell.model != FLOOR for run in cell.runs]
    late = [run for run in table_runs if run["best_epoch"] > V1_SETTINGS["epochs"]]
    patient = [run for run in table_runs if run["best_epoch"] > 3 * V1_SETTINGS["patience"]]
    changes = fill(TEMPLATES_DIR / "headline_v1_changes.md", v1_lr=f"{V1_SETTINGS['lr']:g}",
                   lr_grid=", ".join(f"{r:g}" for r in tuning.LR_GRID), other_rates=len(other_rate),
                   cells=len(grid.choices), other_rate_list=f" ({', '.join(other_rate)})." if other_rate else ".",
                   v1_patience=V1_SETTINGS["patience"], v1_epochs=V1_SETTINGS["epochs"],
                   patience=SETTINGS["patience"], epochs=SETTINGS["epochs"], late=len(late),
                   table_runs=len(table_runs), plateau_epoch=3 * V1_SETTINGS["patience"], patient=len(patient))
    return [*lines, "", changes]


def tuning_table(grid: Grid) -> list[str]:
    """Per (dataset, base backbone): seed 0's best validation AUC at each rate of the grid and the choice."""
    seen = {(e["dataset"], e["model"], float(e["lr"])): e["best_valid_auc"] for e in grid.entries
            if e["seed"] == tuning.TUNING_SEED and e["model"] not in tuning.UNTRAINED}
    bases = [m for m in grid.models if m not in tuning.UNTRAINED and tuning.tuning_base(m) == m]
    rows = []
    untuned = [d for d in grid.datasets if not any(key[0] == d for key in seen)]
    for dataset in (d for d in grid.datasets if d not in untuned):
        for base in bases:
            values = [seen.get((dataset, base, rate)) for rate in tuning.LR_GRID]
            chosen = grid.choices.get((dataset, base))
            cells = [("missing" if v is None else "diverged" if v == float("-inf") else f"**{v:.4f}**"
                      if rate == chosen else f"{v:.4f}")
                     for rate, v in zip(tuning.LR_GRID, values)]
            done = sum(v is not None for v in values)
            rows.append([dataset, base, *cells,
                         f"{chosen:g}" if chosen else f"missing ({done} of {len(values)} rates)"])
    lines = [pipe_table(["dataset", "backbone", *(f"lr {r:g}" for r in tuning.LR_GRID), "chosen"], rows,
                        align="ll" + "r" * (len(tuning.LR_GRID) + 1))]
    if untuned:
        lines += ["", f"No tuning run yet on {', '.join(untuned)} (every rate missing)."]
    return lines


# ---- cost and Pareto ------------------------------------------------------------------------------------

def read_solo(path: Path) -> dict[tuple[str, str], dict] | None:
    """{(dataset, model): row} of the solo throughput file (the last row per pair), None if it is absent."""
    if not Path(path).is_file():
        return None
    frame = pd.read_csv(path)
    missing = [c for c in SOLO_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: no column(s) {', '.join(missing)}")
    return {(row["dataset"], row["model"]): row for row in frame.to_dict("records")}


# a solo step this many times the same backbone's median step over the datasets is not believed (the
# datasets' step costs differ by up to about 3x between T 50 and T 200; four cells measured 6.7x-18x with a
# mean of a few steps, one of them still 14x with the median step)
SUSPECT_STEP_FACTOR = 4.0
# what was found out about a suspect figure, said while it is one (results/solo_checks.md has the runs)
KNOWN_SUSPECTS = {
    ("yelp-iclrec", "gated_deltanet"): (
        "gated_deltanet on yelp-iclrec is the benchmark process's, not the backbone's: measured again with "
        "the median step (2026-12-02), it stayed 14x, its step being host time (332 ms of wall time around "
        "4.1 ms of kernels), and whichever backbone a process timed first after loading yelp-iclrec was as "
        "slow (mamba2, 430 ms when it went first); in the grid it trains there at the pace of prism-L0, the "
        "same layer (shared-GPU table below). The host-side cause is not established (results/solo_checks.md)."),
}


def suspect_solo(solo: dict | None) -> dict[tuple[str, str], float]:
    """{(dataset, model): step / that model's median step over the datasets} of the solo rows past
    SUSPECT_STEP_FACTOR: timings not to plot or compare."""
    steps: dict[str, list[float]] = {}
    for (_, model), row in (solo or {}).items():
        steps.setdefault(model, []).append(float(row["step_ms"]))
    return {(dataset, model): ratio for (dataset, model), row in (solo or {}).items()
            if (ratio := float(row["step_ms"]) / statistics.median(steps[model])) > SUSPECT_STEP_FACTOR}


def suspect_note(suspect: dict[tuple[str, str], float]) -> str:
    """The paragraph under the solo table: how many figures are suspect, and what is known of each."""
    if not suspect:
        return (f"No figure is suspect (none took more than {SUSPECT_STEP_FACTOR:g}x the same backbone's median "
                "step over the datasets).")
    return (f"Suspect: {len(suspect)} figure(s) whose step took more than {SUSPECT_STEP_FACTOR:g}x the same "
            "backbone's median step over the datasets (the step above, as that multiple; the datasets' own costs "
            "differ by at most about 3x), left out of the Pareto plots."
            + "".join(f" {KNOWN_SUSPECTS[cell]}" for cell in sorted(suspect) if cell in KNOWN_SUSPECTS))


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """The models of ``points`` ({model: (tokens/s, AUC)}) that no other beats on one axis without losing
    on the other, fastest first."""
    front = [m for m, (speed, auc) in points.items()
             if not any(s >= speed and a >= auc and (s, a) != (speed, auc) for s, a in points.values())]
    return sorted(front, key=lambda m: -points[m][0])


def pareto_points(grid: Grid, dataset: str, solo: dict | None) -> tuple[dict, list[str]]:
    """{model: (tokens/s, mean AUC, std)} of the trained cells with a believable solo figure, and the cells
    without one (none, or suspect_solo's)."""
    points, missing, suspect = {}, [], suspect_solo(solo)
    for cell in grid.trained(dataset):
        row = (solo or {}).get((dataset, cell.model))
        if row is None or not math.isfinite(float(row["tokens_per_s"])) or (dataset, cell.model) in suspect:
            missing.append(cell.model)
        else:
            points[cell.model] = (float(row["tokens_per_s"]), cell.mean, 0.0 if math.isnan(cell.std) else cell.std)
    return points, missing


def write_pareto(grid: Grid, dataset: str, solo: dict | None, path: Path) -> tuple[Path, list[str]]:
    points, missing = pareto_points(grid, dataset, solo)
    front = pareto_front({m: p[:2] for m, p in points.items()})
    machines = sorted({str(solo[(dataset, m)]["machine"]) for m in points}) if points else []
    floor = grid.floor(dataset)
    if solo is None:
        note = f"results/{SOLO_NAME} is absent: no solo tokens/s, nothing to plot"
    elif missing:
        note = f"no believable solo tokens/s in results/{SOLO_NAME} for: {', '.join(missing)}"
    else:
        note = "every trained backbone has a solo figure"
    caption = (f"{note}. Error bars: std of test AUC over seeds. Front: no other backbone is both faster and "
               f"better. Made by `{COMMAND}`.")
    pareto_chart(points, front, floor["test_auc"] if floor else None,
                 f"{dataset}: test AUC against solo training tokens/s ({', '.join(machines) or 'no machine'})",
                 caption, path)
    return path, missing


def cost_tables(grid: Grid, solo: dict | None) -> list[str]:
    """Parameters, solo training tokens/s (solo_throughput.csv) and the shared-GPU figure of the manifest."""
    datasets = grid.datasets
    numeric = "l" + "r" * len(datasets)

    def mean_of(cell: Cell, key: str, form: str) -> str:
        return form.format(statistics.fmean(r[key] for r in cell.runs)) if cell.runs else "missing"

    sizes = []
    for model in grid.models:
        if model in tuning.UNTRAINED:
            layers, params = "—", "none"
        else:
            layers = LAYERS.get(model, SETTINGS["n_layers"])
            config = training_config(DATASETS[0], model, 0, "cpu", {}, V1_SETTINGS["lr"])
            params = f"{backbone_parameters(model, config):,}"
        sizes.append([label(model), str(layers), params,
                      *(mean_of(grid.cell(d, model), "n_parameters", "{:,.0f}") for d in datasets)])
    trained = [model for model in grid.models if model not in tuning.UNTRAINED]
    solo_rows = [row for row in (solo or {}).values()]
    solo_machines = sorted({str(row["machine"]) for row in solo_rows})
    suspect = suspect_solo(solo)

    def solo_cell(dataset: str, model: str) -> str:
        if not solo or (dataset, model) not in solo:
            return "missing"
        figure = f"{float(solo[(dataset, model)]['tokens_per_s']):,.0f}"
        return f"{figure} (suspect: step {suspect[(dataset, model)]:.1f}x)" if (dataset, model) in suspect else figure

    solo_table = [[model, *(solo_cell(d, model) for d in datasets)] for model in trained]
    shared_table = [[model, *(mean_of(grid.cell(d, model), "train_tokens_per_s", "{:,.0f}") for d in datasets)]
                    for model in trained]
    return [pipe_table(["backbone", "layers", "backbone params", *(f"{d} total params" for d in datasets)], sizes,
                       align="lrr" + "r" * len(datasets)),
            "", f"Solo training tokens/s (next-item targets per second of training, one run alone on the GPU; "
              f"results/{SOLO_NAME}"
              + (f", {', '.join(solo_machines)}; the commands in its `command` column" if solo_rows else ": absent")
            + "). These are the x axes of the Pareto plots.", "",
            pipe_table(["backbone", *datasets], solo_table, align=numeric),
            "", suspect_note(suspect),
            "", "Shared-GPU training tokens/s of the table runs (the manifest's `train_tokens_per_s`, mean over "
            "seeds: each run's share of a GPU it shared with other runs; not a solo figure, not used in the "
            "Pareto plots):", "", pipe_table(["backbone", *datasets], shared_table, align=numeric)]


def gpu_sharing_note(manifest: list[dict]) -> str:
    """One paragraph on how the GPU runs shared their GPU (the manifest's ``jobs_per_device`` and
    ``gpu_sharing``; lines written before ``gpu_sharing`` existed ran in time slices)."""
    gpu_runs = [entry for entry in manifest  # tracking.machine_description names CUDA devices "<name> (CUDA x)"
                if "jobs_per_device" in entry and "(CUDA " in entry.get("machine", "")]
    if not gpu_runs:
        return "No run in the manifest trained on a GPU."
    counts = sorted({entry["jobs_per_device"] for entry in gpu_runs})
    modes = collections.Counter(entry.get("gpu_sharing", "time-slicing") for entry in gpu_runs)
    words = {"mps": "through a CUDA MPS server", "time-slicing": "in time slices"}
    shared = ", ".join(f"{count} {words.get(mode, mode)}" for mode, count in sorted(modes.items()))
    return (f"The GPU runs shared each GPU with {' or '.join(f'{c:g}' for c in counts)} worker processes "
            f"on average (the manifest's `jobs_per_device`, workers per GPU while the call began; runs: {shared}), "
            "so tokens/s is each run's share, not a solo figure, and depends on whichever other runs were in flight: "
            "these figures compare backbones only roughly; `make throughput` measures solo steps.")


# ---- files ----------------------------------------------------------------------------------------------

def dataset_markdown(grid: Grid, dataset: str) -> str:
    cell_runs = [run for model in grid.models for run in grid.cell(dataset, model).runs]
    commands = sorted({run["command"] for run in cell_runs})
    machines = sorted({run["machine"] for run in cell_runs})
    commits = sorted({run["git_commit"] for run in cell_runs})
    extra = tuple(name for name in METRIC_NAMES if name in ("hit_10", "ndcg_10"))
    return fill(TEMPLATES_DIR / "headline_dataset.md", dataset=dataset, protocol=PROTOCOL,
                dataset_table=dataset_table(grid, dataset, extra), made_by=made_by(SOURCES),
                paired_table=paired_table(grid, dataset), paired_note=paired_note(),
                commands="; ".join(f"`{c}`" for c in commands) or "none", machines="; ".join(machines) or "none",
                commits=", ".join(commits) or "none") + "\n"


def dataset_csv(grid: Grid, dataset: str) -> str:
    rows = []
    for model in grid.models:
        cell = grid.cell(dataset, model)
        if not cell.runs:
            rows.append({"model": model, "n_seeds": 0, "expected_seeds": cell.expected})
            continue
        row = {"model": model, "n_seeds": len(cell.runs), "expected_seeds": cell.expected, "lr": cell.runs[0]["lr"],
               "auc_ci_low": cell.ci[0] if cell.ci else math.nan, "auc_ci_high": cell.ci[1] if cell.ci else math.nan,
               "best_epochs": " ".join(str(r["best_epoch"]) for r in cell.runs),
               "epochs_run": " ".join(str(r["epochs_run"]) for r in cell.runs),
               "at_cap": sum(capped(r) for r in cell.runs) if model not in tuning.UNTRAINED else 0,
               "n_parameters": cell.runs[0]["n_parameters"]}
        for name in METRIC_NAMES:
            values = [r[f"test_{name}"] for r in cell.runs]
            row[f"{name}_mean"] = statistics.fmean(values)
            row[f"{name}_std"] = statistics.stdev(values) if len(values) > 1 else math.nan
        rows.append(row)
    return pd.DataFrame(rows).to_csv(index=False, float_format="%.6f")


def readme(grid: Grid, v1_entries: list[dict], solo: dict | None, pareto_missing: dict[str, list[str]]) -> str:
    """results/README.md: templates/headline_readme.md filled with the grid's tables, checks and figures."""
    rates = sorted({float(e["lr"]) for e in grid.entries if e["model"] not in tuning.UNTRAINED})
    caps = sorted({(e["epochs"], e["patience"]) for e in grid.entries})
    commands = sorted({e["command"] for e in grid.entries})
    same_seed = same_seed_check([e for c in grid.cells.values() for e in c.runs], "prism-L0", "gated_deltanet",
                                "PRISM at L = 0 is Gated DeltaNet; they match only where both trained at the same rate")
    values = {
        "date": datetime.date.today().isoformat(), "command": COMMAND, "sources": SOURCES,
        "table_runs": sum(len(c.runs) for c in grid.cells.values()),
        "expected": sum(c.expected for c in grid.cells.values()), "manifest_lines": len(grid.entries),
        "other_protocols": (f"; {grid.other_protocols} line(s) of other protocols left out"
                            if grid.other_protocols else ""),
        "datasets": ", ".join(DATASETS),
        "settings": ", ".join(f"{k} {v}" for k, v in SETTINGS.items() if k not in ("epochs", "patience")),
        "caps": "; ".join(f"{e}, {p}" for e, p in caps) or "no runs", "tuning_seed": tuning.TUNING_SEED,
        "lr_grid": ", ".join(f"{r:g}" for r in tuning.LR_GRID), "seeds": ", ".join(map(str, SEEDS)),
        "rates": ", ".join(f"{r:g}" for r in rates) or "none",
        "summary_table": summary_table(grid), "paper_table": paper_table(), "paired_note": paired_note(),
        "per_dataset": "".join(dataset_section(grid, dataset, pareto_missing) + "\n\n" for dataset in grid.datasets),
        "checks": "\n".join([*near_floor(grid), "", *plateaus(grid), "", *cap_check(grid), "",
                             *divergence_check(grid), "", case_rank_check(grid), "", same_seed]),
        "authors_table": authors_table(grid), "ablation_dataset": ABLATION_DATASET,
        "ablation": "\n".join(ablation(grid)), "v1_comparison": "\n".join(v1_comparison(grid, v1_entries)),
        "tuning_table": "\n".join(tuning_table(grid)), "cost_tables": "\n".join(cost_tables(grid, solo)),
        "gpu_sharing": gpu_sharing_note(grid.entries),
        "pareto_links": ", ".join(f"[{d}]({d}/pareto.png)" for d in pareto_missing) or "none yet",
        "solo_note": (f"results/{SOLO_NAME} is absent: the plots hold no points and say so." if solo is None else
                      "Backbones without a believable solo figure (none, or a suspect one above; left out of "
                      "their plot, which names them): "
                      + ("; ".join(f"{d}: {', '.join(m)}" for d, m in pareto_missing.items() if m) or "none") + "."),
        "made_by_sources": made_by(SOURCES), "made_by_manifest": made_by(f"`results/{MANIFEST_NAME}`"),
        "made_by_v1": made_by(f"`results/{MANIFEST_NAME}` and {', '.join(f'`results/{p}`' for p in V1_MANIFESTS)}"),
        "made_by_solo": made_by(f"`results/{MANIFEST_NAME}` and `results/{SOLO_NAME}`"),
        "commands": "; ".join(f"`{c}`" for c in commands) or "none",
        "manifest_name": MANIFEST_NAME, "case_ranks_name": CASE_RANKS_NAME,
    }
    return fill(TEMPLATES_DIR / "headline_readme.md", **values) + "\n"


def dataset_section(grid: Grid, dataset: str, pareto_missing: dict[str, list[str]]) -> str:
    """The README's section of one dataset: its table and paired differences, or that it has no runs yet."""
    heading = f"### {dataset}" + (" (short sequences)" if dataset in SHORT_SEQUENCE else "")
    if dataset not in pareto_missing:  # no table run at all
        return f"{heading}\n\nNo table runs yet: all {len(grid.models)} rows missing."
    return "\n".join([heading, "", dataset_table(grid, dataset), "", paired_table(grid, dataset), "",
                      f"{made_by(SOURCES)} Also: [results/{dataset}/auc.md]({dataset}/auc.md) (with Hit@10, NDCG@10), "
                      f"[pareto.png]({dataset}/pareto.png)."])


def write_results(manifest: list[dict], results_dir: Path | None = None, case_ranks: list[dict] | None = None,
                  n_resamples: int = N_RESAMPLES) -> list[Path]:
    """results/README.md and, for every dataset with table runs, results/<dataset>/auc.md, .csv, .png and
    pareto.png, from the v2 lines of ``manifest`` and the case-ranks lines (``case_ranks``; by default
    read from results_dir/headline_v2_case_ranks.jsonl; results_dir defaults to results/). The v1 means come
    from results_dir/v1/, the solo speeds from results_dir/solo_throughput.csv. Returns the paths written."""
    results_dir = Path(RESULTS_DIR if results_dir is None else results_dir)
    if case_ranks is None:
        case_ranks = read_jsonl(results_dir / CASE_RANKS_NAME)
    grid = build_grid(manifest, case_ranks, n_resamples)
    if not grid.entries:
        raise ValueError(f"no {PROTOCOL} runs in the manifest ({len(manifest)} line(s) of other protocols)")
    v1_entries = [e for name in V1_MANIFESTS for e in read_jsonl(results_dir / name)]
    solo = read_solo(results_dir / SOLO_NAME)
    written, pareto_missing = [], {}
    for dataset in grid.datasets:
        cells = [grid.cell(dataset, m) for m in grid.models if grid.cell(dataset, m).runs]
        if not cells:
            continue
        folder = results_dir / path_name(dataset, "manifest dataset")
        write_atomically(folder / "auc.md", dataset_markdown(grid, dataset))
        write_atomically(folder / "auc.csv", dataset_csv(grid, dataset))
        summary = pd.DataFrame({"model": [label(c.model) for c in cells], "auc_mean": [c.mean for c in cells],
                                "auc_std": [c.std for c in cells], "n_seeds": [len(c.runs) for c in cells]})
        auc_bar_chart(summary, f"{dataset}: full-ranking test AUC ({PROTOCOL})", folder / "auc.png",
                      caption=f"Error bars: std over seeds. Made by `{COMMAND}`.")
        pareto, pareto_missing[dataset] = write_pareto(grid, dataset, solo, folder / "pareto.png")
        written += [folder / "auc.md", folder / "auc.csv", folder / "auc.png", pareto]
    path = results_dir / "README.md"
    write_atomically(path, readme(grid, v1_entries, solo, pareto_missing))
    return [*written, path]
