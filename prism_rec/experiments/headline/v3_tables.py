"""results/headline_v3.md: the v3 tables, from the v3 manifest (its own runs and the v2 runs it reused) and the
case-ranks files of both protocols.

Per width preset (v3.py): the final rate grid of every (dataset, base backbone) cell with its choice, cells still
at an edge flagged, and v2's choice beside it; per dataset the test AUC over seeds 0-4 with v2's rank beside
v3's; the family of comparisons of each dataset (PRISM − Gated DeltaNet, PRISM − SASRec, best − second) with the
paired interval over test users, Welch's interval over seeds, the minimum detectable difference and the
Holm-corrected verdict (verdicts.py); the width study (PRISM − Gated DeltaNet at each width); what moved from v2.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import numpy as np

from ... import registry
from ...files import read_jsonl, write_atomically
from ...markdown import pipe_table
from ...paths import RESULTS_DIR
from ...statistics import ALPHA, POWER
from ...tracking.bootstrap import bootstrap_mean_ci, paired_difference, verdict
from ...tracking.case_ranks import decode
from ...tracking.cells import Cell, seeds_text
from .. import tuning
from .protocol import CASE_RANKS_NAME, DATASETS, PROTOCOL, V2, WIDTH, width_of
from .report.grid import FLOOR, _aligned, model_order
from .report.tables import evaluations, metric_text, metric_title
from .v3 import V3, WIDE_DATASETS
from .verdicts import N_MOST, N_START, family

NAME = "headline_v3.md"
COMMAND = "prism-rec headline tables --protocol v3"
PAIRS = (("prism", "gated_deltanet"), ("prism", "sasrec"))


def cells_of(entries: list[dict], ranks: dict[str, dict], grid, seeds: int) -> dict[tuple[str, str], Cell]:
    """The table cells of ``entries`` (one width, one protocol's grid): every seed at the chosen rate, with the
    per-user AUC [S, U] where every run has case ranks."""
    selected = collections.defaultdict(list)
    for entry in sorted(tuning.selected_entries(entries, grid), key=lambda e: e["seed"]):
        if entry["seed"] < seeds:
            selected[(entry["dataset"], entry["model"])].append(entry)
    cells = {}
    for (dataset, model), runs in selected.items():
        cell = Cell(dataset, model, runs, seeds if registry.trains(model) else 1)
        rows = [ranks.get(run["record_id"]) for run in runs]
        if all(row is not None for row in rows):
            cell.per_user = np.stack([_aligned(decode(row["case_ranks"], f"case ranks of record {row['record_id']}"))[1]
                                      for row in rows])
        cells[(dataset, model)] = cell
    return cells


def _ranked(cells: dict, dataset: str) -> list[Cell]:
    return sorted((c for (d, m), c in cells.items() if d == dataset and m != FLOOR and c.runs), key=lambda c: -c.mean)


def tuning_table(entries: list[dict], v2_choices: dict, width: str) -> tuple[list[str], dict]:
    """Per (dataset, base backbone): the rates tried on seed 0 with their best validation AUC, the choice, an
    edge flag, and v2's choice; returns the lines and the number of cells whose rate moved from v2."""
    by_rate = tuning.valid_auc_by_rate(entries)
    grid = V3.grid
    rows, moved, edges = [], [], 0
    for (dataset, base), rates in sorted(by_rate.items()):
        chosen = grid.choice(rates)
        tried = ", ".join(f"**{r:g}** {v:.4f}" if r == chosen else f"{r:g} {v:.4f}" for r, v in sorted(rates.items()))
        edge = grid.at_edge(rates)
        edges += edge
        before = v2_choices.get((dataset, base)) if width == WIDTH else None
        if chosen is not None and before is not None and before != chosen:
            moved.append(f"{dataset}/{base}")
        status = ("incomplete (next " + f"{grid.next_rate(rates):g})" if chosen is None else
                  f"{chosen:g}" + (" ⚠ at the edge" + (" of the ladder" if chosen in (grid.ladder[0], grid.ladder[-1])
                                                       else "") if edge else ""))
        rows.append([dataset, base, tried, status, "—" if before is None else f"{before:g}"])
    lines = [pipe_table(["dataset", "backbone", "rates tried (seed 0: best validation AUC)", "chosen", "v2 chose"],
                        rows, align="lllrr"), "",
             f"{edges} of {len(rows)} cells are still at an edge of their grid (⚠)."]
    return lines, {"moved": moved, "cells": len(rows), "edges": edges}


def _comparisons(cells: dict, dataset: str, seed: int = 0) -> tuple[list, set]:
    """The dataset's family (PAIRS and best − second, once each whichever way round) and the best − second pair."""
    ranked = _ranked(cells, dataset)
    pairs = [p for p in PAIRS if all((dataset, m) in cells for m in p)]
    best = {ranked[0].model, ranked[1].model} if len(ranked) >= 2 else set()
    if best and best not in [set(p) for p in pairs]:
        pairs.append((ranked[0].model, ranked[1].model))
    ready = [p for p in pairs if all(cells[(dataset, m)].per_user is not None for m in p)]
    if not ready:
        return [], best
    data = {m: (cells[(dataset, m)].aucs, cells[(dataset, m)].per_user) for p in ready for m in p}
    return family(ready, data, dataset, seed=seed), best


def comparison_table(comparisons: list, best: set) -> str:
    rows = []
    for c in comparisons:
        s, u = c.seeds, c.users
        what = f"{c.first} − {c.second}" + (" (best − second)" if {c.first, c.second} == best else "")
        welch = "n/a (seed spread unknown)" if not np.isfinite(s.p) else f"[{s.low:+.4f}, {s.high:+.4f}]"
        users = f"[{u.low:+.4f}, {u.high:+.4f}] ({u.level:.1%}, {u.n_resamples:,} resamples)"
        rows.append([what, f"{s.mean:+.4f}", users, welch, f"{s.n_a}/{s.n_b}",
                     "n/a" if not np.isfinite(s.detectable) else f"{s.detectable:.4f}",
                     f"{c.gap:.4f} ({c.gap_source})", "n/a" if not np.isfinite(c.adjusted_p) else f"{c.adjusted_p:.2g}",
                     f"**{c.verdict}**"])
    return pipe_table(["difference", "value", "paired bootstrap CI (test users)", "95% Welch CI (seeds)", "seeds",
                       f"detectable ({POWER:.0%} power, α {ALPHA})", "gap of interest", "Holm p", "verdict"],
                      rows, align="lrrrrrrrl")


def auc_table(cells: dict, v2_cells: dict, models: list[str], dataset: str,
              metrics: tuple[str, ...] = ()) -> tuple[str, int]:
    """Test AUC per backbone with v3's and v2's rank, then the test ``metrics`` (mean ± std over seeds);
    returns the table and how many ranks moved."""
    ranks = {c.model: i for i, c in enumerate(_ranked(cells, dataset), 1)}
    before = {c.model: i for i, c in enumerate(_ranked(v2_cells, dataset), 1)}
    rows, moved = [], 0
    for model in models:
        cell = cells.get((dataset, model))
        if cell is None:
            continue
        ci = bootstrap_mean_ci(cell.per_user) if cell.per_user is not None else None
        rate = "—" if not registry.trains(model) else ", ".join(sorted({f"{r['lr']:g}" for r in cell.runs}))
        old = before.get(model)
        moved += old is not None and model in ranks and old != ranks[model]
        rows.append([model, seeds_text(cell.aucs, cell.expected), "missing" if ci is None else
                     f"[{ci[0]:.4f}, {ci[1]:.4f}]", rate, str(ranks.get(model, "—")), str(old or "—"),
                     *(metric_text(cell.runs, name) for name in metrics)])
    runs = [run for (d, _), cell in cells.items() if d == dataset for run in cell.runs]
    return pipe_table(["backbone", "test AUC mean ± std (seeds)", "95% CI (test users)", "lr", "rank", "v2 rank",
                       *(metric_title(name, runs) for name in metrics)],
                      rows, align="lrrrrr" + "r" * len(metrics)), moved


def v2_verdicts(v2_cells: dict, dataset: str) -> dict[tuple[str, str], str]:
    """v2's verdict words (bootstrap.verdict) for PAIRS on ``dataset``."""
    words = {}
    for a, b in PAIRS:
        first, second = v2_cells.get((dataset, a)), v2_cells.get((dataset, b))
        if first is not None and second is not None and first.per_user is not None and second.per_user is not None:
            words[(a, b)] = verdict(paired_difference(first.per_user, second.per_user))
    return words


def markdown(manifest: list[dict], case_rank_rows: list[dict], source: str = f"results/{V3.manifest_name}",
             metrics: tuple[str, ...] = ()) -> str:
    ranks = {row["record_id"]: row for row in case_rank_rows}
    entries = [e for e in manifest if e.get("protocol") in (PROTOCOL, V3.name)]
    v2_entries = [e for e in entries if e["protocol"] == PROTOCOL and width_of(e) == WIDTH]
    v2_cells = cells_of(v2_entries, ranks, V2.grid, len(V2.seeds))
    v2_choices = tuning.chosen_rates(v2_entries, V2.grid)
    models = model_order(entries)
    datasets = [d for d in [*DATASETS, *sorted({e["dataset"] for e in entries} - set(DATASETS))]
                if any(e["dataset"] == d for e in entries)]
    lines = [f"# Headline v3 (protocol {V3.name})", "",
             f"Written {time.strftime('%Y-%m-%d')} by `{COMMAND}` from `{source}` (its own runs "
             f"and the v2 runs it reused, {len(v2_entries)} lines) and the case-ranks files of both protocols. "
             f"Rates: start {', '.join(f'{r:g}' for r in V3.grid.start)}, extended per cell along "
             f"{', '.join(f'{r:g}' for r in V3.grid.ladder)} while seed 0's choice sits at an edge (tuning.py); "
             f"seeds {V3.seeds[0]}-{V3.seeds[-1]} at the chosen rate. Test metrics: "
             f"{'; '.join(evaluations(entries))}.", "",
             "**Verdicts** (verdicts.py): per dataset the family is PRISM − Gated DeltaNet, PRISM − SASRec and best − "
             f"second; Holm's correction over the family's Welch p-values (seeds); \"a > b\" needs the Holm-adjusted "
             f"p < {ALPHA} and the paired bootstrap interval over test users (level 1 − α/m, Bonferroni over the "
             f"family) on the same side of 0; \"equal within ±x\" only where the Welch interval lies inside ±x and x "
             f"is no larger than the gap of interest (the paper's Table 2 gap of the pair on that domain, else the "
             f"smallest such gap of PRISM); otherwise \"not resolved\". The bootstrap starts at {N_START:,} resamples "
             f"and doubles up to {N_MOST:,} until its bound nearest 0 lies 3 Monte-Carlo errors from 0 (else \"at the "
             f"boundary\", not excluding 0), so the verdict does not move with the resampling seed. \"detectable\" is "
             f"the smallest true difference the seeds detect with {POWER:.0%} power at α {ALPHA} (statsmodels, pooled "
             f"seed spread).", ""]
    summary = {"rates moved": [], "ranks moved": 0, "verdicts changed": []}
    width_rows = []
    for width in V3.widths:
        mine = [e for e in entries if width_of(e) == width]
        if not mine:
            continue
        cells = cells_of(mine, ranks, V3.grid, len(V3.seeds))
        tuned, counts = tuning_table(mine, v2_choices, width)
        summary["rates moved"] += [f"{m} ({width})" for m in counts["moved"]]
        lines += [f"## Width {width}: tuning", "", *tuned, ""]
        for dataset in datasets:
            if not any(d == dataset for d, _ in cells):
                continue
            table, moved = auc_table(cells, v2_cells if width == WIDTH else {}, models, dataset, metrics)
            summary["ranks moved"] += moved
            comparisons, best = _comparisons(cells, dataset)
            lines += [f"## {dataset} ({width})", "", table, "", comparison_table(comparisons, best), ""]
            before = v2_verdicts(v2_cells, dataset) if width == WIDTH else {}
            for c in comparisons:
                old = before.get((c.first, c.second))
                if old is not None:
                    lines.append(f"- {c.first} − {c.second}: v2 said \"{old}\", v3 says \"{c.verdict}\".")
                    if (old == "excludes 0") != (">" in c.verdict or "<" in c.verdict):
                        summary["verdicts changed"].append(f"{dataset} {c.first} − {c.second}")
                if (c.first, c.second) == PAIRS[0] and dataset in WIDE_DATASETS:
                    width_rows.append([dataset, width, f"{c.seeds.mean:+.4f}",
                                       f"[{c.seeds.low:+.4f}, {c.seeds.high:+.4f}]", f"{c.seeds.detectable:.4f}",
                                       c.verdict])
            lines.append("")
    lines += ["## Width study: PRISM − Gated DeltaNet against the state's size", "",
              pipe_table(["dataset", "width", "difference", "95% Welch CI (seeds)", "detectable", "verdict"],
                         sorted(width_rows), align="llrrrl") if width_rows else "No width-study cell has runs yet.", "",
              "## What moved from v2", "",
              f"- Cells whose chosen rate moved: {len(summary['rates moved'])}"
              + (f" ({', '.join(summary['rates moved'])})." if summary["rates moved"] else "."),
              f"- Backbones whose rank within a dataset moved: {summary['ranks moved']}.",
              f"- PRISM verdicts that changed between \"significant\" and not: {len(summary['verdicts changed'])}"
              + (f" ({', '.join(summary['verdicts changed'])})." if summary["verdicts changed"] else "."), ""]
    return "\n".join(lines)


def write_v3(results_dir: Path = RESULTS_DIR, metrics: tuple[str, ...] = ()) -> Path:
    """Write results_dir/headline_v3.md from the v3 manifest and both case-ranks files, the test ``metrics``
    after AUC in each dataset's table; returns its path."""
    manifest = read_jsonl(results_dir / V3.manifest_name)
    if not manifest:
        raise FileNotFoundError(f"option --manifest: no finished runs in {results_dir / V3.manifest_name}")
    wanted = {e["record_id"] for e in manifest}
    rows = [row for name in (V3.case_ranks_name, CASE_RANKS_NAME) for row in read_jsonl(results_dir / name)
            if row["record_id"] in wanted]
    path = results_dir / NAME
    source = results_dir / V3.manifest_name
    write_atomically(path, markdown(manifest, rows, f"results/{V3.manifest_name}" if results_dir == RESULTS_DIR
                                    else str(source), metrics))
    return path


def readme_section(results_dir: Path) -> str:
    """The part of results/README.md that points to results/headline_v3.md (nothing until it exists)."""
    if not (results_dir / NAME).exists():
        return ""
    return (f"\n## Headline v3\n\nThe v3 tables (rates tuned to an interior optimum, seeds 0-4, the detectable "
            f"difference, Holm-corrected verdicts, the width study, what moved from v2): [{NAME}]({NAME}), made by "
            f"`{COMMAND}` from `results/{V3.manifest_name}`.\n")
