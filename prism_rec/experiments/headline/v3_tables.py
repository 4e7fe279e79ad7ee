"""The v3 results, from the v3 manifest (its own runs and the v2 runs it reused) and the case-ranks files of both
protocols, computed once by ``analyse``: per width preset (v3.py) and dataset the table cells, the family of
comparisons (PRISM − Gated DeltaNet, PRISM − SASRec, best − second; verdicts.py), the cells still incomplete and
why, the backbones not run yet, v2's paired differences for the same pairs, and what moved from v2 (rates, ranks).

``markdown`` writes results/headline_v3.md, the detail page: per width the final rate grid of every (dataset, base
backbone) cell with its choice, cells still at an edge flagged, and v2's choice beside it; per dataset the test AUC
over seeds 0-4 with v2's rank beside v3's. The verdicts, the width study and what moved from v2 are on the front
page, results/README.md (front_page.py).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import numpy as np

from ... import registry
from ...markdown import pipe_table
from ...statistics import ALPHA, MAX_SEEDS, POWER
from ...tracking.bootstrap import PairedDifference, bootstrap_mean_ci, paired_difference
from ...tracking.cells import Cell, seeds_text
from ...tracking.store import is_cpu_machine
from .. import tuning
from .protocol import DATASETS, PROTOCOL, V2, WIDTH, width_of
from .report.grid import FLOOR, model_order, run_user_auc
from .report.tables import evaluations, metric_text, metric_title
from .v3 import V3
from .verdicts import Comparison, family

NAME = "headline_v3.md"
COMMAND = "prism-rec headline tables --protocol v3"
PAIRS = (("prism", "gated_deltanet"), ("prism", "sasrec"))
FRONT_PAGE = "README.md"  # results/README.md, front_page.py


def cells_of(entries: list[dict], ranks: dict[str, dict], grid, seeds: int) -> dict[tuple[str, str], Cell]:
    """The table cells of ``entries`` (one width, one protocol's grid): every seed at the chosen rate, with the
    per-user AUC [S, U] where every run has case ranks. A dataset's runs must share their test users and each
    run's case ranks must give its test AUC (report.grid.run_user_auc), or ValueError names the record."""
    selected = collections.defaultdict(list)
    for entry in sorted(tuning.selected_entries(entries, grid), key=lambda e: e["seed"]):
        if entry["seed"] < seeds:
            selected[(entry["dataset"], entry["model"])].append(entry)
    cells, users = {}, {}
    for (dataset, model), runs in selected.items():
        cell = Cell(dataset, model, runs, seeds if registry.trains(model) else 1)
        rows = [ranks.get(run["record_id"]) for run in runs]
        if all(row is not None for row in rows):
            per_user = []
            for run, row in zip(runs, rows):
                auc, disagreement = run_user_auc(run, row, users)
                if disagreement:
                    raise ValueError(f"the case ranks of {disagreement} do not give its test AUC")
                per_user.append(auc)
            cell.per_user = np.stack(per_user)
        cells[(dataset, model)] = cell
    return cells


def machines_text(cells: dict[tuple[str, str], Cell]) -> str:
    """Where the runs of ``cells`` trained: runs per machine, and the cells whose seeds ran on a CPU (always fp32)
    beside seeds on a GPU (bf16 autocast, the training default there)."""
    counts = collections.Counter(run.get("machine") or "machine not recorded" for c in cells.values() for run in c.runs)
    text = ", ".join(f"{n} on {machine}" for machine, n in counts.most_common())
    mixed = [f"{c.dataset}/{c.model}" for c in cells.values()
             if len({is_cpu_machine(run.get("machine") or "") for run in c.runs}) == 2]
    if mixed:
        text += (f"; seeds on a CPU (fp32) beside seeds on a GPU (bf16 autocast) in {len(mixed)} cell"
                 f"{'s' if len(mixed) > 1 else ''}: {', '.join(sorted(mixed))}")
    return text


def tuning_table(entries: list[dict], v2_choices: dict, width: str) -> tuple[list[str], dict]:
    """Per (dataset, base backbone): the rates tried on seed 0 with their best validation AUC, the choice, an
    edge flag, and v2's choice; returns the lines and counts: the cells whose rate moved from v2 ("moved"), those
    with a choice in both protocols ("compared"), all cells and those at an edge."""
    by_rate = tuning.valid_auc_by_rate(entries)
    on_cpu = tuning.seed0_by_rate(entries, lambda entry: is_cpu_machine(entry.get("machine") or ""))
    grid = V3.grid
    rows, moved, compared, edges, mixed = [], [], 0, 0, 0
    for (dataset, base), rates in sorted(by_rate.items()):
        chosen = grid.choice(rates)
        cpu = on_cpu[(dataset, base)]
        marked = len(set(cpu.values())) == 2  # seed 0 trained on a CPU at some rates, on a GPU at others
        mixed += marked
        tried = ", ".join((f"**{r:g}**" if r == chosen else f"{r:g}") + f" {v:.4f}"
                          + (" (CPU)" if marked and cpu[r] else "") for r, v in sorted(rates.items()))
        edge = grid.at_edge(rates)
        edges += edge
        before = v2_choices.get((dataset, base)) if width == WIDTH else None
        if chosen is not None and before is not None:
            compared += 1
            if before != chosen:
                moved.append(f"{dataset}/{base}")
        status = ("incomplete (next " + f"{grid.next_rate(rates):g})" if chosen is None else
                  f"{chosen:g}" + (" ⚠ at the edge" + (" of the ladder" if chosen in (grid.ladder[0], grid.ladder[-1])
                                                       else "") if edge else ""))
        rows.append([dataset, base, tried, status, "—" if before is None else f"{before:g}"])
    lines = [pipe_table(["dataset", "backbone", "rates tried (seed 0: best validation AUC)", "chosen", "v2 chose"],
                        rows, align="lllrr"), "",
             f"{edges} of {len(rows)} cells are still at an edge of their grid (⚠)."]
    if mixed:
        lines.append(f"In {mixed} cell{'s' if mixed > 1 else ''} seed 0 trained on a CPU (fp32) at the rates marked "
                     "(CPU) and on a GPU (bf16 autocast) at the others, so the choice compares runs of two numeric "
                     "settings.")
    return lines, {"moved": moved, "compared": compared, "cells": len(rows), "edges": edges}


def _ranked(cells: dict, dataset: str) -> list[Cell]:
    return sorted((c for (d, m), c in cells.items() if d == dataset and m != FLOOR and c.runs), key=lambda c: -c.mean)


def _comparisons(cells: dict, dataset: str, seed: int = 0) -> tuple[list[Comparison], set]:
    """The dataset's family (PAIRS and best − second, once each whichever way round) over the pairs whose cells
    both have case ranks, and the best − second pair."""
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


def incomplete_cells(cells: dict, entries: list[dict], dataset: str, width: str) -> dict[str, str]:
    """Why each backbone at stake on (``dataset``, ``width``) lacks complete table runs (backbone -> reason):
    at stake are the backbones with any run there, the width preset's backbones and those of PAIRS (pop aside)."""
    preset = V3.widths[width]
    stake = ({e["model"] for e in entries if e["dataset"] == dataset} | set(preset.models or ())
             | {m for pair in PAIRS for m in pair}) - {FLOOR}
    by_rate = tuning.valid_auc_by_rate(entries)
    reasons = {}
    for model in sorted(stake):
        cell = cells.get((dataset, model))
        if cell is None:
            base = tuning.tuning_base(model)
            rates = by_rate.get((dataset, base))
            if not rates or not any(e["dataset"] == dataset and e["model"] == model for e in entries):
                reasons[model] = "no runs"
            elif V3.grid.choice(rates) is None:
                reasons[model] = (f"rate grid{'' if base == model else f' of {base}'} incomplete, next "
                                  f"{V3.grid.next_rate(rates):g}")
            else:
                reasons[model] = "no run at the chosen rate"
        elif len(cell.runs) < cell.expected:
            reasons[model] = f"{len(cell.runs)} of {cell.expected} seeds"
        elif cell.per_user is None:
            reasons[model] = "case ranks missing"
    return reasons


def not_run(entries: list[dict], incomplete: dict[str, str], dataset: str, width: str) -> list[str]:
    """The registered backbones the grid trains at ``width`` (its preset's list, else every one) with no run on
    ``dataset`` there and not already named by incomplete_cells (a backbone whose v3 grid has not started);
    pop aside, as there."""
    preset = V3.widths[width]
    ran = {e["model"] for e in entries if e["dataset"] == dataset} | {FLOOR}
    return [m for m in (preset.models or registry.list_backbones()) if m not in ran and m not in incomplete]


def ranks_moved(cells: dict, v2_cells: dict, dataset: str) -> tuple[int, int]:
    """How many of the backbones ranked in both protocols on ``dataset`` hold another place among them in v3
    than in v2, and how many are ranked in both (a backbone new in v3 moves no one)."""
    before = [c.model for c in _ranked(v2_cells, dataset)]
    after = [c.model for c in _ranked(cells, dataset) if c.model in before]
    before = [m for m in before if m in after]
    return sum(a != b for a, b in zip(after, before)), len(after)


def seed_count_text(seeds: float) -> str:
    """A seed count of statistics.seeds_needed or seeds_to_bound: the count, "> MAX_SEEDS" or "n/a"."""
    return "n/a" if np.isnan(seeds) else f"> {MAX_SEEDS}" if np.isinf(seeds) else f"{seeds:.0f}"


def gap_seed_counts_text(comparison: Comparison) -> str:
    """For a verdict that leaves the gap of interest open, the seeds per backbone that would detect it and that
    would bound a zero difference within it, "detect / bound"; "—" for the other verdicts."""
    if not comparison.gap_open:
        return "—"
    return f"{seed_count_text(comparison.seeds_for_gap)} / {seed_count_text(comparison.seeds_to_bound)}"


def comparison_table(comparisons: list[Comparison], best: set) -> str:
    """One row per comparison: the difference, both intervals, the seeds, the detectable difference, the gap of
    interest (where left open, the seeds per backbone that would settle it), the Holm-adjusted p and the verdict."""
    rows = []
    for c in comparisons:
        s, u = c.seeds, c.users
        what = f"{c.first} − {c.second}" + (" (best − second)" if {c.first, c.second} == best else "")
        welch = "n/a (seed spread unknown)" if not np.isfinite(s.p) else f"[{s.low:+.4f}, {s.high:+.4f}]"
        users = (f"[{u.low:+.4f}, {u.high:+.4f}] ({u.level:.1%}, {u.n_resamples:,} resamples"
                 + (", at the boundary: 0 not excluded)" if u.at_boundary else ")"))
        rows.append([what, f"{s.mean:+.4f}", users, welch, f"{s.n_a}/{s.n_b}",
                     "n/a" if not np.isfinite(s.detectable) else f"{s.detectable:.4f}",
                     f"{c.gap:.4f} ({c.gap_source})", gap_seed_counts_text(c),
                     "n/a" if not np.isfinite(c.adjusted_p) else f"{c.adjusted_p:.2g}", f"**{c.verdict}**"])
    return pipe_table(["difference", "value", "paired bootstrap CI (test users)", "95% Welch CI (seeds)", "seeds",
                       f"detectable ({POWER:.0%} power, α {ALPHA})", "gap of interest",
                       "seeds to settle the gap (detect / bound)", "Holm p", "verdict"], rows, align="lrrrrrrrrl")


def auc_table(cells: dict, v2_cells: dict, models: list[str], dataset: str, metrics: tuple[str, ...] = ()) -> str:
    """Test AUC per backbone with v3's and v2's rank, then the test ``metrics`` (mean ± std over seeds)."""
    ranks = {c.model: i for i, c in enumerate(_ranked(cells, dataset), 1)}
    before = {c.model: i for i, c in enumerate(_ranked(v2_cells, dataset), 1)}
    rows = []
    for model in models:
        cell = cells.get((dataset, model))
        if cell is None:
            continue
        ci = bootstrap_mean_ci(cell.per_user) if cell.per_user is not None else None
        rate = "—" if not registry.trains(model) else ", ".join(sorted({f"{r['lr']:g}" for r in cell.runs}))
        rows.append([model, seeds_text(cell.aucs, cell.expected), "missing" if ci is None else
                     f"[{ci[0]:.4f}, {ci[1]:.4f}]", rate, str(ranks.get(model, "—")), str(before.get(model, "—")),
                     *(metric_text(cell.runs, name) for name in metrics)])
    runs = [run for (d, _), cell in cells.items() if d == dataset for run in cell.runs]
    return pipe_table(["backbone", "test AUC mean ± std (seeds)", "95% CI (test users)", "lr", "rank", "v2 rank",
                       *(metric_title(name, runs) for name in metrics)],
                      rows, align="lrrrrr" + "r" * len(metrics))


def v2_differences(v2_cells: dict, dataset: str) -> dict[tuple[str, str], PairedDifference]:
    """v2's paired differences (bootstrap.paired_difference, v2's verdict rule) for PAIRS on ``dataset``."""
    differences = {}
    for a, b in PAIRS:
        first, second = v2_cells.get((dataset, a)), v2_cells.get((dataset, b))
        if first is not None and second is not None and first.per_user is not None and second.per_user is not None:
            differences[(a, b)] = paired_difference(first.per_user, second.per_user)
    return differences


@dataclass(frozen=True)
class DatasetResults:
    """One (width, dataset) of the v3 results."""

    width: str
    dataset: str
    auc_table: str  # "" where the dataset has no runs at this width
    comparisons: list[Comparison]
    best: set[str]  # the best − second pair ({} under two ranked backbones)
    incomplete: dict[str, str]  # backbone -> why its table runs are not complete (incomplete_cells)
    not_run: list[str]  # the grid's backbones with no run here yet (not_run)
    v2: dict[tuple[str, str], PairedDifference]  # v2's differences for PAIRS (base width only)
    ranks_moved: tuple[int, int]  # (moved, ranked in both protocols) (ranks_moved); (0, 0) off the base width

    def comparison(self, first: str, second: str) -> Comparison | None:
        return next((c for c in self.comparisons if (c.first, c.second) == (first, second)), None)


@dataclass(frozen=True)
class Results:
    """The v3 results: the manifest lines read, the tuning table and counts per width, every (width, dataset)."""

    entries: list[dict]  # the lines of either protocol
    v2_entries: list[dict]  # the reused v2 lines at the base width
    table_runs: dict[str, int]  # width -> runs in its tables (every seed at the chosen rate; pop once)
    machines: dict[str, str]  # width -> where its table runs trained (machines_text)
    tuning: dict[str, tuple[list[str], dict]]  # width -> tuning_table's lines and counts
    datasets: list[DatasetResults]

    def at(self, width: str) -> list[DatasetResults]:
        return [d for d in self.datasets if d.width == width]

    def get(self, width: str, dataset: str) -> DatasetResults | None:
        return next((d for d in self.datasets if (d.width, d.dataset) == (width, dataset)), None)


def analyse(manifest: list[dict], case_rank_rows: list[dict], metrics: tuple[str, ...] = ()) -> Results:
    """The v3 results of ``manifest`` and its case-ranks lines (see the module docstring); the dataset tables
    show the test ``metrics`` after AUC."""
    ranks = {row["record_id"]: row for row in case_rank_rows}
    entries = [e for e in manifest if e.get("protocol") in (PROTOCOL, V3.name)]
    v2_entries = [e for e in entries if e["protocol"] == PROTOCOL and width_of(e) == WIDTH]
    v2_cells = cells_of(v2_entries, ranks, V2.grid, len(V2.seeds))
    v2_choices = tuning.chosen_rates(v2_entries, V2.grid)
    models = model_order(entries)
    extra = sorted({e["dataset"] for e in entries} - set(DATASETS))
    table_runs, machines, tuned, results = {}, {}, {}, []
    for width, preset in V3.widths.items():
        mine = [e for e in entries if width_of(e) == width]
        cells = cells_of(mine, ranks, V3.grid, len(V3.seeds))
        table_runs[width] = sum(len(c.runs) for c in cells.values())
        machines[width] = machines_text(cells)
        tuned[width] = tuning_table(mine, v2_choices, width)
        base = width == WIDTH
        for dataset in [*(preset.datasets or DATASETS), *(d for d in extra if any(e["dataset"] == d for e in mine))]:
            has_runs = any(d == dataset for d, _ in cells)
            table = auc_table(cells, v2_cells if base else {}, models, dataset, metrics) if has_runs else ""
            comparisons, best = _comparisons(cells, dataset)
            incomplete = incomplete_cells(cells, mine, dataset, width)
            results.append(DatasetResults(
                width, dataset, table,
                comparisons, best, incomplete, not_run(mine, incomplete, dataset, width),
                v2_differences(v2_cells, dataset) if base else {},
                ranks_moved(cells, v2_cells, dataset) if base else (0, 0)))
    return Results(entries, v2_entries, table_runs, machines, tuned, results)


def markdown(results: Results, source: str = f"results/{V3.manifest_name}") -> str:
    """results/headline_v3.md: the tuning table of each width, then each dataset's test AUC table."""
    lines = [f"# Headline v3 (protocol {V3.name}): rate grids and test AUC", "",
             f"Written {time.strftime('%Y-%m-%d')} by `{COMMAND}` from `{source}` (its own runs "
             f"and the v2 runs it reused, {len(results.v2_entries)} lines) and the case-ranks files of both protocols. "
             f"Rates: start {', '.join(f'{r:g}' for r in V3.grid.start)}, extended per cell along "
             f"{', '.join(f'{r:g}' for r in V3.grid.ladder)} while seed 0's choice sits at an edge (tuning.py); "
             f"seeds {V3.seeds[0]}-{V3.seeds[-1]} at the chosen rate. Test metrics: "
             f"{'; '.join(evaluations(results.entries))}. \"rank\" orders every backbone of the table by mean test "
             f"AUC, \"v2 rank\" the v2 runs the manifest reused.", "",
             f"The comparisons of each dataset with their verdicts, the width study and what moved from v2 are on the "
             f"results front page, [{FRONT_PAGE}]({FRONT_PAGE}).", ""]
    for width in V3.widths:
        tuned, counts = results.tuning[width]
        if not counts["cells"]:
            continue
        lines += [f"## Width {width}: tuning", "", *tuned, ""]
        for dataset in results.at(width):
            if dataset.auc_table:
                lines += [f"## {dataset.dataset} ({width})", "", dataset.auc_table, ""]
    return "\n".join(lines)
