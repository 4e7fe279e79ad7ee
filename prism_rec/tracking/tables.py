"""AUC tables and chart: one row (bar) per model (a cell, cells.py), the mean over seeds with its std (where
there are several) and a 95% bootstrap interval over test users, from the runs in the MLflow store.
``prism-rec bench`` and ``prism-rec tables`` write into results/local/ (git-ignored): results/<dataset>/
holds the published tables of the headline report (headline/report/), which a user's runs never replace."""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..files import write_atomically
from ..markdown import pipe_table
from ..names import NAME_PATTERN, inside, path_name
from ..paths import RESULTS_DIR
from ..registry import trains
from ..training.metrics import METRIC_NAMES
from .case_ranks import decode
from .cells import Cell, runs_label
from .plots import auc_chart
from .records import CASE_RANKS_ARTIFACT
from .store import experiment_id

LOCAL_RESULTS_DIR = RESULTS_DIR / "local"  # a user's benches (git-ignored)
COLUMN_TITLES = {"auc": "AUC", **{f"{kind}_{k}": f"{kind.upper() if kind == 'ndcg' else 'Hit'}@{k}"
                                  for kind in ("hit", "ndcg") for k in (10, 200, 500)}}


PROTOCOL_PARAMS = ("d_model", "dropout", "max_len", "batch_size", "lr", "weight_decay", "epochs", "patience", "loss",
                   "n_negatives", "precision", "exclude_history", "sampled")
# params added later: the value runs logged before them had
LATER_PARAMS = {"params.precision": "bf16", "params.exclude_history": "False", "params.sampled": "none"}
HEADLINE_MARKER = "(protocol headline-"  # in the first line of the headline report's results/<dataset>/auc.md


def protocol_key(run: pd.Series) -> tuple:
    """The training protocol of a run: data options and the shared training settings (not the model,
    its architecture options, the seed or the device)."""
    names = sorted(c for c in run.index if c.startswith("params.data.")) + [f"params.{p}" for p in PROTOCOL_PARAMS]
    return tuple((name, LATER_PARAMS.get(name) if pd.isna(run.get(name)) else run.get(name)) for name in names)


def finished_child_runs(experiment: str) -> tuple[pd.DataFrame, int]:
    """The newest finished run of every (model, seed) in ``experiment`` among the runs trained with the
    newest run's protocol (``protocol_key``), and how many finished runs of other protocols were left out."""
    import mlflow

    runs = mlflow.search_runs(
        experiment_ids=[experiment_id(experiment)],
        filter_string="tags.prism_rec_role = 'child' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
    )
    if runs.empty:
        return runs, 0
    keys = runs.apply(protocol_key, axis=1)
    same_protocol = runs[keys == keys.iloc[0]]
    return same_protocol.drop_duplicates(["tags.model", "tags.seed"], keep="first"), len(runs) - len(same_protocol)


def store_cells(runs: pd.DataFrame, dataset: str = "") -> list[Cell]:
    """One cell per model of ``runs`` (MLflow child runs; models sorted, runs in the frame's order), each run
    {"run_id", "n_parameters", "test_<metric>"}."""
    cells = []
    for model, group in runs.groupby("tags.model", sort=True):
        rows = [{"run_id": row.get("run_id"), "n_parameters": row["metrics.n_parameters"],
                 **{f"test_{name}": row[f"metrics.test_{name}"] for name in METRIC_NAMES}}
                for _, row in group.iterrows()]
        cells.append(Cell(dataset, model, rows, len(rows)))
    return cells


def with_test_user_ranks(cells: list[Cell]) -> list[Cell]:
    """``cells`` with the per-user AUC of their runs (each run's case-ranks artifact, users sorted) and its
    95% bootstrap interval over test users; a cell whose runs lack it, or ranked different users, keeps None."""
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per run read is noise
    for cell in cells:
        per_user = []
        for run in cell.runs:
            try:
                cases = decode(mlflow.artifacts.load_dict(f"runs:/{run['run_id']}/{CASE_RANKS_ARTIFACT}"),
                               run["run_id"])
            except (OSError, ValueError, mlflow.exceptions.MlflowException):
                break
            order = np.argsort(cases.users, kind="stable")
            per_user.append((cases.users[order], cases.auc()[order]))
        if len(per_user) == len(cell.runs) and all(np.array_equal(users, per_user[0][0]) for users, _ in per_user):
            cell.per_user = np.stack([auc for _, auc in per_user])
            cell.ci = cell.interval()
    return cells


def summarise(cells: list[Cell], intervals: bool = False) -> pd.DataFrame:
    """A row per cell: model, n_seeds, n_parameters, <metric>_mean and <metric>_std over seeds; with
    ``intervals`` also n_users, auc_ci_low and auc_ci_high (NaN for a cell without per-user AUC)."""
    rows = []
    for cell in cells:
        row = {"model": cell.model, "n_seeds": len(cell.runs), "n_parameters": int(cell.runs[0]["n_parameters"])}
        for name in METRIC_NAMES:
            row[f"{name}_mean"] = cell.metric_mean(name)
            row[f"{name}_std"] = cell.metric_std(name)
        if intervals:
            low, high = cell.ci if cell.ci else (np.nan, np.nan)
            row.update(n_users=np.nan if cell.per_user is None else cell.per_user.shape[1], auc_ci_low=low,
                       auc_ci_high=high)
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(summary: pd.DataFrame) -> str:
    """Markdown rows with the best mean of each metric in bold; where ``summary`` has auc_ci_low and
    auc_ci_high, a column with that interval (and the number of test users) after AUC."""
    intervals = "auc_ci_low" in summary
    header = ["Model", *(COLUMN_TITLES[name] for name in METRIC_NAMES), "Params", "Seeds"]
    if intervals:
        header[2:2] = ["AUC 95% CI (test users)"]
    rows = []
    best = {name: summary[f"{name}_mean"].max() for name in METRIC_NAMES}
    for _, row in summary.iterrows():
        cells = [row["model"]]
        for name in METRIC_NAMES:
            mean, std = row[f"{name}_mean"], row[f"{name}_std"]
            text = f"{mean:.4f}" + ("" if np.isnan(std) else f" ± {std:.4f}")
            cells.append(f"**{text}**" if mean == best[name] else text)
        if intervals:
            cells[2:2] = ["—" if np.isnan(row["auc_ci_low"]) else
                          f"[{row['auc_ci_low']:.4f}, {row['auc_ci_high']:.4f}] ({int(row['n_users']):,} users)"]
        seeds = str(row["n_seeds"]) if trains(row["model"]) else runs_label(row["model"], row["n_seeds"])
        cells += [f"{row['n_parameters']:,}", seeds]
        rows.append(cells)
    return pipe_table(header, rows, align="l" * len(header))


def spread_note(summary: pd.DataFrame) -> str:
    """What the ± and the interval of a table mean, with one seed per model said as such."""
    trained = summary[[trains(model) for model in summary["model"]]]
    seeds = ("One seed per model: no std over seeds (pass --seeds N for one)." if (trained["n_seeds"] == 1).all()
             else "Mean ± sample std over seeds (a model with one seed has no ±).")
    if len(trained) < len(summary):
        seeds += " A model that does not train (pop) is deterministic: one run."
    return (f"{seeds} The 95% CI is a bootstrap over test users of the seed-averaged per-user AUC; each test "
            "case ranks its target against all items (ties count 1/2 in AUC, against the target in Hit/NDCG). "
            "Best mean per column in bold.")


def table_folder(results_dir: Path, dataset: str) -> Path:
    """results/<dataset>, or results/<dataset>/store when results/<dataset>/auc.md is the headline report's
    (headline/report/, from the headline manifest only): a table from the store, which holds runs of any
    protocol, must not replace it."""
    folder = inside(Path(results_dir) / path_name(dataset, "experiment"), results_dir, "table folder")
    markdown = folder / "auc.md"
    if markdown.is_file() and HEADLINE_MARKER in markdown.read_text().partition("\n")[0]:
        return folder / "store"
    return folder


def write_tables(dataset: str, results_dir: Path = LOCAL_RESULTS_DIR) -> tuple[Path, Path, Path]:
    """Write auc.md, auc.csv and the bar chart auc.png from the store into results_dir/<dataset> (or its
    store/ folder, see table_folder); returns their paths."""
    runs, other_protocols = finished_child_runs(dataset)
    if runs.empty:
        raise ValueError(f"no finished runs for dataset {dataset!r} in the tracking store")
    summary = summarise(with_test_user_ranks(store_cells(runs, dataset)), intervals=True)
    folder = table_folder(results_dir, dataset)
    folder.mkdir(parents=True, exist_ok=True)
    commands = sorted(set(runs["tags.command"].dropna()))
    machines = sorted(set(runs["tags.machine"].dropna()))
    commits = sorted(set(runs["tags.git_commit"].dropna()))
    versions = [f"{name} {', '.join(sorted(set(runs[column].dropna())))}"
                for name, column in (("torch", "tags.torch_version"),
                                     ("Triton", "tags.triton_version")) if column in runs]
    lines = [
        f"# {dataset}: full-ranking test metrics",
        "",
        spread_note(summary),
        "",
        markdown_table(summary),
        "",
        f"Produced by: {'; '.join(f'`{c}`' for c in commands)}",
        f"Machine: {'; '.join(machines)}{''.join(f'; {v}' for v in versions)}. Commit: {', '.join(commits)}. "
        f"Table written {datetime.date.today().isoformat()} (`prism-rec tables` rebuilds it from the MLflow store).",
    ]
    if other_protocols:
        lines.append(f"Left out: {other_protocols} finished run(s) trained with another protocol (data options or "
                     f"shared training settings) than the newest run.")
    if "tags.dataset_stats" in runs and runs["tags.dataset_stats"].notna().any():
        lines.append(f"Dataset after filtering: {runs['tags.dataset_stats'].dropna().iloc[0]}.")
    markdown_path, csv_path = folder / "auc.md", folder / "auc.csv"
    write_atomically(markdown_path, "\n".join(lines) + "\n")
    write_atomically(csv_path, summary.to_csv(index=False, float_format="%.6f"))
    chart_path = auc_chart(summary, f"{dataset}: full-ranking test AUC", folder / "auc.png")
    return markdown_path, csv_path, chart_path


def write_all_tables(results_dir: Path = LOCAL_RESULTS_DIR) -> list[Path]:
    """Rebuild the table of every experiment that holds benchmark runs."""
    import mlflow

    from .store import tracking_uri

    mlflow.set_tracking_uri(tracking_uri())
    written = []
    for experiment in mlflow.search_experiments():
        if not NAME_PATTERN.match(experiment.name):  # made by an older import: never a folder
            print(f"experiment {experiment.name!r} skipped: not a plain name, so no table folder", file=sys.stderr)
        elif experiment.name != "Default" and not finished_child_runs(experiment.name)[0].empty:
            written.append(write_tables(experiment.name, results_dir)[0])
    return written
