"""The headline report's comparisons: the authors' code against ours, the ablation against the paper's
Table 3, the old protocol (v1) and the tuning of the rates."""

from __future__ import annotations

import statistics

from .... import registry
from ....markdown import fill, pipe_table
from ....paths import TEMPLATES_DIR
from ... import tuning
from ..protocol import SETTINGS
from .grid import ABLATION_DATASET, FLOOR, V1_SETTINGS, Grid, newest_entries
from .tables import PAIRED_HEADER, auc_text, difference_text, label

PAPER_ABLATION = {"prism": .7134, "prism-L1": .6805, "prism-nogelu": .7047, "prism-noconv": .7076,
                  "prism-nogain": .7098}  # paper Table 3, AUC on Electronics


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
            if e["seed"] == tuning.TUNING_SEED and registry.trains(e["model"])}
    bases = [m for m in grid.models if registry.trains(m) and tuning.tuning_base(m) == m]
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
