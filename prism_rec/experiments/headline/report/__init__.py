"""results/v2/README.md and results/<dataset>/auc.md, .csv, .png, pareto.png of the headline benchmark
(protocol "headline-v2", superseded by v3, whose front page is results/README.md: front_page.py), built from
its manifest and per-test-user ranks only.

The tables read results/headline_v2_manifest.jsonl (one line per finished run; lines of any other
protocol are left out and counted, so old-protocol runs cannot leak in) and
results/headline_v2_case_ranks.jsonl (each run's per-test-user ranks, case_ranks.py), not the MLflow
store. Rows are the entries tuning.selected_entries keeps: every seed at its cell's chosen rate, and pop.
A cell without runs reads "missing"; nothing is estimated. Intervals are bootstraps over test users
(bootstrap.py); solo training speed comes from results/solo_throughput.csv, and a missing file or row is said.
The package follows the report's sections: grid.py (cells), tables.py, checks.py, comparisons.py, cost.py;
this module writes the files.
"""

from __future__ import annotations

import datetime
import math
import statistics
from pathlib import Path

import pandas as pd

from .... import registry
from ....files import read_jsonl, write_atomically
from ....markdown import fill
from ....names import path_name
from ....paths import RESULTS_DIR, TEMPLATES_DIR
from ....tracking.bootstrap import N_RESAMPLES, SEED_ALPHA
from ....tracking.plots import auc_chart, forest_plot
from ....training.metrics import METRIC_NAMES
from ... import tuning
from ...throughput.solo import SOLO_NAME, read_solo
from ..protocol import CASE_RANKS_NAME, DATASETS, MANIFEST_NAME, PROTOCOL, SEEDS, SETTINGS
from .checks import cap_check, case_rank_check, divergence_check, near_floor, plateaus, same_seed_check
from .comparisons import ablation, authors_table, tuning_table, v1_comparison
from .cost import cost_tables, gpu_sharing_note, write_pareto
from .findings import findings
from .grid import ABLATION_DATASET, BASELINES, COMMAND, FLOOR, SHORT_SEQUENCE, Grid, build_grid, model_group
from .tables import (
    SOURCES,
    any_sampled,
    capped,
    dataset_table,
    evaluations,
    label,
    made_by,
    paired_note,
    paired_table,
    paper_table,
    summary_table,
)

V1_MANIFESTS = ("v1/headline_manifest.jsonl", "v1/ml-100k/headline_manifest.jsonl")  # under results/
README = Path("v2") / "README.md"  # under results/; its links to results/<dataset>/ start with "../"


def dataset_markdown(grid: Grid, dataset: str, metrics: tuple[str, ...] = ()) -> str:
    """results/<dataset>/auc.md: the dataset table with Hit@10, NDCG@10 and ``metrics`` (``headline tables
    --metrics``) after AUC, the paired differences and the provenance."""
    cell_runs = [run for model in grid.models for run in grid.cell(dataset, model).runs]
    commands = sorted({run["command"] for run in cell_runs})
    machines = sorted({run["machine"] for run in cell_runs})
    commits = sorted({run["git_commit"] for run in cell_runs})
    extra = tuple(dict.fromkeys((*(name for name in METRIC_NAMES if name in ("hit_10", "ndcg_10")), *metrics)))
    return fill(TEMPLATES_DIR / "headline_dataset.md", dataset=dataset, protocol=PROTOCOL,
                kind="sampled" if any_sampled(cell_runs) else "full-ranking",
                evaluation="; ".join(evaluations(cell_runs)), dataset_table=dataset_table(grid, dataset, extra),
                made_by=made_by(SOURCES),
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
               "at_cap": sum(capped(r) for r in cell.runs) if registry.trains(model) else 0,
               "n_parameters": cell.runs[0]["n_parameters"]}
        for name in METRIC_NAMES:
            values = [r[f"test_{name}"] for r in cell.runs]
            row[f"{name}_mean"] = statistics.fmean(values)
            row[f"{name}_std"] = statistics.stdev(values) if len(values) > 1 else math.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    counts = ["n_seeds", "expected_seeds", "at_cap", "n_parameters"]
    frame[counts] = frame[counts].astype("Int64")  # counts stay integers beside a row without runs
    return frame.to_csv(index=False, float_format="%.6f")


def readme(grid: Grid, v1_entries: list[dict], solo: dict | None, pareto_missing: dict[str, list[str]]) -> str:
    """results/v2/README.md: templates/headline_readme.md filled with the grid's findings, tables, figures and (in
    an appendix) checks."""
    rates = sorted({float(e["lr"]) for e in grid.entries if registry.trains(e["model"])})
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
        "findings": findings(grid), "summary_table": summary_table(grid), "paper_table": paper_table(),
        "paired_note": paired_note(),
        "per_dataset": "".join(dataset_section(grid, dataset, pareto_missing) + "\n\n" for dataset in grid.datasets),
        "checks": "\n".join([*near_floor(grid), "", *plateaus(grid), "", *cap_check(grid), "",
                             *divergence_check(grid), "", case_rank_check(grid), "", same_seed]),
        "authors_table": authors_table(grid), "ablation_dataset": ABLATION_DATASET,
        "ablation": "\n".join(ablation(grid)), "v1_comparison": "\n".join(v1_comparison(grid, v1_entries)),
        "tuning_table": "\n".join(tuning_table(grid)), "cost_tables": "\n".join(cost_tables(grid, solo)),
        "gpu_sharing": gpu_sharing_note(grid.entries),
        "pareto_links": ", ".join(f"[{d}](../{d}/pareto.png)" for d in pareto_missing) or "none yet",
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
                      f"{made_by(SOURCES)} Also: [results/{dataset}/auc.md](../{dataset}/auc.md) (with Hit@10, "
                      f"NDCG@10), [paired.png](../{dataset}/paired.png) (PRISM − each baseline), "
                      f"[pareto.png](../{dataset}/pareto.png)."])


def write_forest(grid: Grid, dataset: str, path: Path) -> Path:
    """The forest plot of ``dataset``: PRISM minus each trained baseline (grid.model_group) with its paired
    bootstrap interval over test users, filled where the README's verdict calls it significant."""
    rows = []
    for model in grid.models:
        if model_group(model) != BASELINES or not registry.trains(model):
            continue
        difference = grid.paired(dataset, "prism", model)
        if not isinstance(difference, str):  # a missing cell or one without case ranks draws no row
            rows.append((f"prism − {model}", difference.mean, difference.low, difference.high, difference.significant))
    return forest_plot(rows, f"{dataset}: PRISM − each baseline ({PROTOCOL})",
                       "whiskers: 95% paired bootstrap CI over test users",
                       f"Filled: significant (the interval excludes 0 and Welch p over seeds < {SEED_ALPHA}). "
                       f"Made by `{COMMAND}`.", path)


def write_results(manifest: list[dict], results_dir: Path | None = None, case_ranks: list[dict] | None = None,
                  n_resamples: int = N_RESAMPLES, metrics: tuple[str, ...] = ()) -> list[Path]:
    """results/v2/README.md and, for every dataset with table runs, results/<dataset>/auc.md, .csv, .png, paired.png
    (the forest plot) and pareto.png (each figure with its SVG beside), from the v2 lines of ``manifest`` and the
    case-ranks lines (``case_ranks``; by default read from results_dir/headline_v2_case_ranks.jsonl; results_dir
    defaults to results/), the dataset tables with the test ``metrics`` too (dataset_markdown). The v1 means
    come from results_dir/v1/, the solo speeds from results_dir/solo_throughput.csv. Returns the paths
    written."""
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
        write_atomically(folder / "auc.md", dataset_markdown(grid, dataset, metrics))
        write_atomically(folder / "auc.csv", dataset_csv(grid, dataset))
        summary = pd.DataFrame({"model": [label(c.model) for c in cells], "auc_mean": [c.mean for c in cells],
                                "auc_std": [c.std for c in cells], "n_seeds": [len(c.runs) for c in cells],
                                "auc_ci_low": [c.ci[0] if c.ci else math.nan for c in cells],
                                "auc_ci_high": [c.ci[1] if c.ci else math.nan for c in cells]})
        auc_chart(summary, f"{dataset}: full-ranking test AUC ({PROTOCOL})", folder / "auc.png",
                  caption=f"Made by `{COMMAND}`.", floor=label(FLOOR))
        forest = write_forest(grid, dataset, folder / "paired.png")
        pareto, pareto_missing[dataset] = write_pareto(grid, dataset, solo, folder / "pareto.png")
        written += [folder / "auc.md", folder / "auc.csv", folder / "auc.png", forest, pareto]
    path = results_dir / README
    write_atomically(path, readme(grid, v1_entries, solo, pareto_missing))
    return [*written, path]
