"""AUC tables and chart: one row (bar) per model (a cell, cells.py), the mean over seeds with its std (where
there are several) and a 95% bootstrap interval over test users, from the runs in the MLflow store.
``prism-rec bench`` and ``prism-rec tables`` write into results/local/ (git-ignored): results/<dataset>/
holds the published tables of the headline report (headline/report/), which a user's runs never replace."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import OptionError
from ..files import write_atomically
from ..markdown import pipe_table
from ..names import NAME_PATTERN, inside, path_name
from ..paths import RESULTS_DIR
from ..registry import trains
from ..training.candidates import SAMPLED_LABEL, candidates_description
from ..training.metrics import METRIC_NAMES
from .case_ranks import decode
from .cells import Cell, runs_label
from .plots import auc_chart
from .records import CASE_RANKS_ARTIFACT
from .store import PROTOCOL_TAG, experiment_id, load_artifact

LOCAL_RESULTS_DIR = RESULTS_DIR / "local"  # a user's benches (git-ignored)
TITLES = {"auc": "AUC", "mrr": "MRR", "hit": "Hit", "ndcg": "NDCG", "coverage": "Coverage", "avg_pop": "AvgPop"}


def parse_table_metrics(text: str) -> tuple[str, ...]:
    """``prism-rec tables --metrics`` (a comma list such as "mrr,ndcg_20,coverage_10"); an unknown name raises
    OptionError naming the option."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        kind, _, k = name.rpartition("_")
        at_cutoff = kind in ("hit", "ndcg", "coverage", "avg_pop") and k.isdigit() and int(k) >= 1
        if name not in ("auc", "mrr") and not at_cutoff:
            raise OptionError(f"option --metrics: unknown metric {name!r} (auc, mrr, or hit_K, ndcg_K, coverage_K, "
                              "avg_pop_K with K >= 1)")
    return names


def column_title(name: str) -> str:
    """A metric's column title: "auc" -> "AUC", "ndcg_10" -> "NDCG@10", "avg_pop_10" -> "AvgPop@10"."""
    kind, _, k = name.rpartition("_")
    return TITLES[name] if name in TITLES else f"{TITLES[kind]}@{k}"


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


def evaluation_of(run: pd.Series) -> str:
    """candidates_description of an MLflow run's evaluation options (a run from before them: full ranking)."""
    sampled, excluded = (LATER_PARAMS[name] if pd.isna(run.get(name)) else run.get(name)
                         for name in ("params.sampled", "params.exclude_history"))
    return candidates_description(str(sampled), str(excluded) == "True")


def store_cells(runs: pd.DataFrame, dataset: str = "", metrics: tuple[str, ...] = METRIC_NAMES) -> list[Cell]:
    """One cell per model of ``runs`` (MLflow child runs; models sorted, runs in the frame's order), each run
    {"run_id", "n_parameters", "evaluation" (:func:`evaluation_of`), "test_<metric>" of ``metrics``} (NaN where
    a run did not log the metric)."""
    cells = []
    for model, group in runs.groupby("tags.model", sort=True):
        rows = [{"run_id": row.get("run_id"), "n_parameters": row["metrics.n_parameters"],
                 "evaluation": evaluation_of(row),
                 **{f"test_{name}": row.get(f"metrics.test_{name}", np.nan) for name in metrics}}
                for _, row in group.iterrows()]
        cells.append(Cell(dataset, model, rows, len(rows)))
    return cells


def with_test_user_ranks(cells: list[Cell]) -> list[Cell]:
    """``cells`` with the per-user AUC of their runs (each run's case-ranks artifact, users sorted) and its
    95% bootstrap interval over test users; a cell whose runs lack it, or ranked different users, keeps None."""
    for cell in cells:
        per_user = []
        for run in cell.runs:
            entry = load_artifact(run["run_id"], CASE_RANKS_ARTIFACT)
            try:
                cases = decode(entry, run["run_id"]) if entry is not None else None
            except ValueError:
                cases = None
            if cases is None:
                break
            order = np.argsort(cases.users, kind="stable")
            per_user.append((cases.users[order], cases.auc()[order]))
        if len(per_user) == len(cell.runs) and all(np.array_equal(users, per_user[0][0]) for users, _ in per_user):
            cell.per_user = np.stack([auc for _, auc in per_user])
            cell.ci = cell.interval()
    return cells


def summarise(cells: list[Cell], intervals: bool = False, metrics: tuple[str, ...] = METRIC_NAMES) -> pd.DataFrame:
    """A row per cell: model, n_seeds, n_parameters, evaluation (its runs' :func:`evaluation_of`),
    <metric>_mean and <metric>_std over seeds of ``metrics``; with ``intervals`` also n_users, auc_ci_low
    and auc_ci_high (NaN for a cell without per-user AUC)."""
    rows = []
    for cell in cells:
        row = {"model": cell.model, "n_seeds": len(cell.runs), "n_parameters": int(cell.runs[0]["n_parameters"]),
               "evaluation": cell.runs[0].get("evaluation", candidates_description("none", False))}
        for name in metrics:
            logged = not np.isnan(cell.values(name)).any()  # a metric some run did not log: NaN
            row[f"{name}_mean"] = cell.metric_mean(name) if logged else np.nan
            row[f"{name}_std"] = cell.metric_std(name) if logged else np.nan
        if intervals:
            low, high = cell.ci if cell.ci else (np.nan, np.nan)
            row.update(n_users=np.nan if cell.per_user is None else cell.per_user.shape[1], auc_ci_low=low,
                       auc_ci_high=high)
        rows.append(row)
    return pd.DataFrame(rows)


def summary_metrics(summary: pd.DataFrame) -> tuple[str, ...]:
    """The metrics of a :func:`summarise` frame, in its order."""
    return tuple(column.removesuffix("_mean") for column in summary if column.endswith("_mean"))


def markdown_table(summary: pd.DataFrame) -> str:
    """Markdown rows of the metrics of ``summary`` with the best mean of each in bold (a sampled evaluation's
    titled "(sampled)", spread_note says what that means); where ``summary`` has auc_ci_low and auc_ci_high,
    a column with that interval (and the number of test users) after AUC."""
    intervals, metrics = "auc_ci_low" in summary, summary_metrics(summary)
    sampled = " (sampled)" if _sampled(summary) else ""
    header = ["Model", *(column_title(name) + sampled for name in metrics), "Params", "Seeds"]
    if intervals:
        header[2:2] = ["AUC 95% CI (test users)"]
    rows = []
    best = {name: summary[f"{name}_mean"].max() for name in metrics}
    for _, row in summary.iterrows():
        cells = [row["model"]]
        for name in metrics:
            mean, std = row[f"{name}_mean"], row[f"{name}_std"]
            text = "—" if np.isnan(mean) else f"{mean:.4f}" + ("" if np.isnan(std) else f" ± {std:.4f}")
            cells.append(f"**{text}**" if mean == best[name] else text)
        if intervals:
            cells[2:2] = ["—" if np.isnan(row["auc_ci_low"]) else
                          f"[{row['auc_ci_low']:.4f}, {row['auc_ci_high']:.4f}] ({int(row['n_users']):,} users)"]
        seeds = str(row["n_seeds"]) if trains(row["model"]) else runs_label(row["model"], row["n_seeds"])
        cells += [f"{row['n_parameters']:,}", seeds]
        rows.append(cells)
    return pipe_table(header, rows, align="l" * len(header))


def _sampled(summary: pd.DataFrame) -> bool:
    return "evaluation" in summary and summary["evaluation"].str.startswith(SAMPLED_LABEL).any()


def spread_note(summary: pd.DataFrame) -> str:
    """What the ± and the interval of a table mean, with one seed per model said as such, and what each
    test case ranks its target against (:func:`evaluation_of`; the per-user AUC of the interval always
    against all items)."""
    trained = summary[[trains(model) for model in summary["model"]]]
    seeds = ("One seed per model: no std over seeds (pass --seeds N for one)." if (trained["n_seeds"] == 1).all()
             else "Mean ± sample std over seeds (a model with one seed has no ±).")
    if len(trained) < len(summary):
        seeds += " A model that does not train (pop) is deterministic: one run."
    evaluations = sorted(set(summary["evaluation"])) if "evaluation" in summary else [candidates_description(
        "none", False)]
    interval = ("the seed-averaged per-user AUC" if evaluations == [candidates_description("none", False)]
                else "the seed-averaged per-user full-ranking AUC (all items, history kept)")
    return (f"{seeds} The 95% CI is a bootstrap over test users of {interval}; {'; '.join(evaluations)} (ties "
            "count 1/2 in AUC, against the target in Hit/NDCG). Best mean per column in bold.")


def table_folder(results_dir: Path, dataset: str) -> Path:
    """results/<dataset>, or results/<dataset>/store when results/<dataset>/auc.md is the headline report's
    (headline/report/, from the headline manifest only): a table from the store, which holds runs of any
    protocol, must not replace it."""
    folder = inside(Path(results_dir) / path_name(dataset, "experiment"), results_dir, "table folder")
    markdown = folder / "auc.md"
    if markdown.is_file() and HEADLINE_MARKER in markdown.read_text().partition("\n")[0]:
        return folder / "store"
    return folder


def write_tables(dataset: str, results_dir: Path = LOCAL_RESULTS_DIR,
                 extra_metrics: tuple[str, ...] = ()) -> tuple[Path, Path, Path]:
    """Write auc.md, auc.csv and the bar chart auc.png from the store into results_dir/<dataset> (or its
    store/ folder, see table_folder), with the columns of ``extra_metrics`` (e.g. mrr, coverage_10) after
    the default ones; returns their paths."""
    runs, other_protocols = finished_child_runs(dataset)
    if runs.empty:
        raise ValueError(f"no finished runs for dataset {dataset!r} in the tracking store")
    metrics = METRIC_NAMES + tuple(name for name in extra_metrics if name not in METRIC_NAMES)
    summary = summarise(with_test_user_ranks(store_cells(runs, dataset, metrics)), intervals=True, metrics=metrics)
    folder = table_folder(results_dir, dataset)
    folder.mkdir(parents=True, exist_ok=True)
    commands = sorted(set(runs["tags.command"].dropna()))
    machines = sorted(set(runs["tags.machine"].dropna()))
    commits = sorted(set(runs["tags.git_commit"].dropna()))
    versions = [f"{name} {', '.join(sorted(set(runs[column].dropna())))}"
                for name, column in (("torch", "tags.torch_version"),
                                     ("Triton", "tags.triton_version")) if column in runs]
    lines = [
        f"# {dataset}: {'sampled' if _sampled(summary) else 'full-ranking'} test metrics",
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
    chart_path = auc_chart(summary, f"{dataset}: {'sampled' if _sampled(summary) else 'full-ranking'} test AUC",
                           folder / "auc.png")
    return markdown_path, csv_path, chart_path


def write_all_tables(results_dir: Path = LOCAL_RESULTS_DIR, extra_metrics: tuple[str, ...] = ()) -> list[Path]:
    """Rebuild the table of every experiment that holds next-item benchmark runs (write_tables' ``extra_metrics``);
    experiments tagged with another protocol (store.PROTOCOL_TAG) are that protocol's to write."""
    import mlflow

    from .store import tracking_uri

    mlflow.set_tracking_uri(tracking_uri())
    written = []
    for experiment in mlflow.search_experiments():
        if not NAME_PATTERN.match(experiment.name):  # made by an older import: never a folder
            print(f"experiment {experiment.name!r} skipped: not a plain name, so no table folder", file=sys.stderr)
        elif PROTOCOL_TAG in experiment.tags:  # another protocol's experiment: its own writer builds its table
            continue
        elif experiment.name != "Default" and not finished_child_runs(experiment.name)[0].empty:
            written.append(write_tables(experiment.name, results_dir, extra_metrics)[0])
    return written
