"""The headline report's tables: a dataset's rows, its paired differences, the mean-rank summary and the
paper's Table 2, with the formatting of their cells."""

from __future__ import annotations

import math
import statistics

from .... import registry
from ....markdown import fill, pipe_table
from ....paths import TEMPLATES_DIR
from ....tracking.bootstrap import N_RESAMPLES, PairedDifference, verdict
from ....tracking.cells import Cell, seeds_text
from ....tracking.tables import column_title
from ....training.candidates import SAMPLED_LABEL, candidates_description
from ..protocol import CASE_RANKS_NAME, DATASETS, MANIFEST_NAME
from .grid import COMMAND, FLOOR, GROUPS, SHORT_SEQUENCE, Grid, model_group

PAPER_COLUMNS = {"books-dealrec": 0, "movies-long": 1, "electronics-gerec": 2, "yelp-iclrec": 3}
PAPER_DOMAINS = ("Books", "Movies", "Electronics", "Yelp")
PAPER_TABLE2 = {  # paper Table 2, AUC: Books, Movies, Electronics, Yelp
    "SASRec (sasrec)": (.8910, .7677, .7293, .9410), "HSTU (hstu)": (.8835, .7748, .7189, .9324),
    "Mamba-2 (mamba2)": (.8872, .7713, .7157, .9385), "Gated DeltaNet (gated_deltanet)": (.8844, .7504, .7159, .9367),
    "TTT (ttt-linear, ttt-mlp)": (.8871, .7591, .6946, .9375), "Titans (titans)": (.8869, .7652, .7007, .9395),
    "GLA (not in the suite)": (.8752, .7478, .7008, .8943), "PRISM (prism)": (.8888, .7727, .7134, .9393),
}
PAIRS = (("prism", "gated_deltanet"), ("prism", "sasrec"))  # the paired differences of every dataset


def label(model: str) -> str:
    return f"{model} (floor)" if model == FLOOR else model


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
    if not registry.trains(cell.model):
        return "— (no training)" if cell.runs else "—"
    return ", ".join(f"{rate:g}" for rate in rates) if rates else "missing"


def capped(run: dict) -> bool:
    """Whether a run stopped at its epoch cap (not by patience)."""
    return run["epochs_run"] >= run["epochs"]


FULL_RANKING = candidates_description("none", False)  # the evaluation of a manifest line without "evaluation"


def evaluations(runs: list[dict]) -> list[str]:
    """What the test cases of ``runs`` (manifest lines) rank their targets against, each description once."""
    return sorted({run.get("evaluation", FULL_RANKING) for run in runs})


def any_sampled(runs: list[dict]) -> bool:
    """Whether any of ``runs`` (manifest lines) was evaluated against sampled negatives."""
    return any(text.startswith(SAMPLED_LABEL) for text in evaluations(runs))


def metric_title(name: str, runs: list[dict]) -> str:
    """The column title of test metric ``name`` (e.g. "test NDCG@20"), "(sampled)" where any of ``runs`` was
    evaluated against sampled negatives."""
    return f"test {column_title(name)}" + (" (sampled)" if any_sampled(runs) else "")


def metric_text(runs: list[dict], name: str) -> str:
    """Test metric ``name`` of a cell's ``runs``: mean ± std over those that report it ("k of n runs" where
    not all do: runs evaluated before the metric existed or at other cutoffs), "missing" where none does."""
    values = [run[f"test_{name}"] for run in runs if f"test_{name}" in run]
    if not values:
        return "missing"
    text = f"{statistics.fmean(values):.4f}" + (f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else "")
    return text if len(values) == len(runs) else f"{text} ({len(values)} of {len(runs)} runs)"


def made_by(sources: str) -> str:
    return f"Made by `{COMMAND}` from {sources}."


SOURCES = f"`results/{MANIFEST_NAME}` and `results/{CASE_RANKS_NAME}`"


def dataset_table(grid: Grid, dataset: str, extra_metrics: tuple[str, ...] = ()) -> str:
    """One row per backbone (pop first): test AUC mean ± std (seeds), the 95% bootstrap interval over test
    users, the chosen rate, best/run epochs per seed, runs at the epoch cap, ``extra_metrics`` mean ± std."""
    runs = [run for model in grid.models for run in grid.cell(dataset, model).runs]
    titles = ["backbone", "test AUC mean ± std (seeds)", "95% CI (test users)", "lr", "epochs best/run (per seed)",
              "at cap", *(metric_title(name, runs) for name in extra_metrics)]
    rows = []
    best = max((c.mean for c in grid.trained(dataset)), default=None)
    for model in grid.models:
        cell = grid.cell(dataset, model)
        text = auc_text(cell)
        if cell.runs and model != FLOOR and cell.mean == best:
            text = f"**{text}**"
        if not registry.trains(model):
            epochs, at_cap = ("— (no training)", "—") if cell.runs else ("missing", "missing")
        elif cell.runs:
            epochs = ", ".join(f"{r['best_epoch']}/{r['epochs_run']}" for r in cell.runs)
            at_cap = f"{sum(capped(r) for r in cell.runs)} of {len(cell.runs)}"
        else:
            epochs = at_cap = "missing"
        extras = [metric_text(cell.runs, name) for name in extra_metrics]
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


def ranked_models(grid: Grid) -> list[tuple[str, tuple[float, int]]]:
    """(model, (mean rank, datasets ranked on)) of every trained model with runs, best mean rank first (ties: the
    report's model order); the ranks are :func:`mean_ranks` among all trained models."""
    trained = [m for m in grid.models if m != FLOOR]
    ranks = mean_ranks({key: cell.aucs for key, cell in grid.cells.items() if cell.runs}, trained)
    return sorted(((m, ranks[m]) for m in trained if m in ranks), key=lambda item: item[1][0])


def summary_table(grid: Grid) -> str:
    """Test AUC per model and dataset (mean ± std (seeds) and the 95% interval over test users), best trained mean
    in bold, in the groups of grid.model_group (baselines with pop first; PRISM and its ablations; the authors'
    presets), each sorted by mean rank among all trained models (pop is the floor, not ranked; models without
    runs last)."""
    ranked = dict(ranked_models(grid))
    columns = [f"{d} (short sequences)" if d in SHORT_SEQUENCE else d for d in grid.datasets]
    rows = []
    best = {d: max((c.mean for c in grid.trained(d)), default=None) for d in grid.datasets}
    for group in GROUPS:
        members = [m for m in grid.models if model_group(m) == group]
        members.sort(key=lambda m: (m != FLOOR, m not in ranked, ranked.get(m, (0.0, 0))[0]))
        rows.append([f"**{group}**", *([""] * (len(columns) + 1))])
        for model in members:
            row = []
            for dataset in grid.datasets:
                cell = grid.cell(dataset, model)
                text = auc_text(cell)
                if cell.runs and model != FLOOR and cell.mean == best[dataset]:
                    text = f"**{text}**"
                row.append(text + (f" [{cell.ci[0]:.4f}, {cell.ci[1]:.4f}]" if cell.runs and cell.ci else ""))
            rank = ranked.get(model)
            rank_text = ("— (floor)" if model == FLOOR else "missing" if rank is None
                         else f"{rank[0]:.1f} (over {rank[1]})")
            rows.append([label(model), *row, rank_text])
    return pipe_table(["backbone", *columns, "mean rank"], rows, align="l" + "r" * (len(columns) + 1))


def paper_table() -> str:
    ours = {column: dataset for dataset, column in PAPER_COLUMNS.items()}
    return pipe_table(["paper model (ours)", *(f"{PAPER_DOMAINS[i]} (ours: {ours[i]})" for i in range(4))],
                      [[name, *(f"{v:.4f}" for v in values)] for name, values in PAPER_TABLE2.items()], align="lrrrr")
