"""results/README.md, the results front page of headline protocol v3 (templates/headline_v3_readme.md), and its
detail page results/headline_v3.md (v3_tables.markdown), both from one ``v3_tables.analyse`` of the v3 manifest and
the case-ranks files of both protocols.

The front page: findings computed from the tables; how it was made; per (width, dataset) the family of comparisons
(verdicts.py) with the cells still incomplete named; what moved from v2 (rates, places, v2's conclusions for the
same pairs); the width study (PRISM − Gated DeltaNet at each width). A v2 conclusion is the order v2's verdict
rule states ("excludes 0": the sign of the difference; otherwise none); a v3 conclusion is the order its verdict
states (verdicts.direction); the conclusion changed where the two differ.
"""

from __future__ import annotations

import collections
import datetime
import math
from pathlib import Path

from ...files import read_jsonl, write_atomically
from ...markdown import fill, pipe_table
from ...paths import RESULTS_DIR, TEMPLATES_DIR
from ...statistics import ALPHA, MAX_SEEDS, POWER
from ...tracking.bootstrap import PairedDifference, verdict
from .protocol import CASE_RANKS_NAME, PROTOCOL, V2, WIDTH
from .v3 import V3, WIDE_DATASETS
from .v3_tables import (
    COMMAND,
    FRONT_PAGE,
    NAME,
    PAIRS,
    DatasetResults,
    Results,
    analyse,
    comparison_table,
    markdown,
    seed_count_text,
)
from .verdicts import MC_MARGIN, N_MOST, N_START, Comparison, direction

VERDICTS = "[verdicts per dataset](#verdicts-per-dataset)"
MOVED = "[what moved from v2](#what-moved-from-v2)"
V2_PAGE = "[v2/README.md](v2/README.md)"
WIDTH_STUDY = "[width study](#width-study)"


def _order(sign: int, first: str, second: str) -> str:
    return f"{first} > {second}" if sign > 0 else f"{first} < {second}" if sign < 0 else "no order"


def v2_direction(difference: PairedDifference) -> int:
    """The order v2's verdict states: the sign of the difference where it is significant, else 0."""
    return (1 if difference.mean > 0 else -1) if difference.significant else 0


def _missing(table: DatasetResults, models) -> str:
    return "; ".join(f"{m}: {table.incomplete[m]}" for m in models if m in table.incomplete)


def _incomplete_text(table: DatasetResults) -> str:
    return "; ".join(f"{m} ({why})" for m, why in table.incomplete.items())


def dataset_section(table: DatasetResults) -> str:
    """One (width, dataset) of the verdicts: its comparison table, the pairs not computed and what is incomplete."""
    lines = [f"### {table.dataset} ({table.width})", ""]
    if table.comparisons:
        lines += [comparison_table(table.comparisons, table.best), ""]
    for first, second in PAIRS:
        if table.comparison(first, second) is None:
            lines.append(f"- {first} − {second}: not computed, incomplete ({_missing(table, (first, second))}).")
    if not table.best:
        lines.append("- best − second: not computed, incomplete (fewer than two backbones with table runs).")
    if table.incomplete:
        lines.append(f"- **Incomplete**: {_incomplete_text(table)}"
                     + ("; best − second ranks only the backbones with table runs." if table.best else "."))
    if table.not_run:
        lines.append(f"- **Not run under {V3.name} yet** (not ranked here; v2's tables, where v2 ran them: "
                     f"{V2_PAGE}): {', '.join(table.not_run)}.")
    return "\n".join(lines).rstrip() + "\n"


def conclusion_rows(results: Results) -> tuple[list[list[str]], list[str], int]:
    """Per base-width dataset and pair of PAIRS: v2's verdict, v3's and whether the conclusion changed; returns the
    rows, the pairs whose conclusion changed and the number of pairs compared in both."""
    rows, changed, compared = [], [], 0
    for table in results.at(WIDTH):
        for first, second in PAIRS:
            old, new = table.v2.get((first, second)), table.comparison(first, second)
            if old is None or new is None:
                status = "—"
            else:
                compared += 1
                before, after = v2_direction(old), direction(new)
                if before == after:
                    status = f"unchanged ({_order(after, first, second)})"
                else:
                    status = (f"**changed**: v2 {_order(before, first, second)}, v3 {_order(after, first, second)}")
                    changed.append(f"{table.dataset} {first} − {second}")
            rows.append([table.dataset, f"{first} − {second}", "no v2 runs" if old is None else verdict(old),
                         f"not computed, incomplete ({_missing(table, (first, second))})" if new is None
                         else new.verdict, status])
    return rows, changed, compared


def moved_section(results: Results) -> str:
    counts = results.tuning[WIDTH][1]
    places = [(t.dataset, *t.ranks_moved) for t in results.at(WIDTH) if t.ranks_moved[1]]
    rows, changed, compared = conclusion_rows(results)
    return "\n".join([
        f"- Cells (dataset, base backbone) whose chosen rate moved, at {WIDTH} (the width v2 trained): "
        f"{len(counts['moved'])} of the {counts['compared']} with a choice in both protocols"
        + (f" ({', '.join(counts['moved'])})." if counts["moved"] else "."),
        f"- Backbones whose place moved among the backbones ranked in both protocols (a backbone new in v3 moves "
        f"no one): {sum(m for _, m, _ in places)} of {sum(n for _, _, n in places)}"
        + (f" ({', '.join(f'{d} {m} of {n}' for d, m, n in places)})." if places else "."),
        f"- v2's conclusions for the same pairs: {len(changed)} of the {compared} pairs compared in both changed"
        + (f" ({', '.join(changed)})." if changed else "."), "",
        pipe_table(["dataset", "difference", "v2 verdict (v2's rule)", "v3 verdict", "conclusion"], rows,
                   align="lllll")])


def _detectable(comparison: Comparison) -> str:
    value = comparison.seeds.detectable
    return f"{value:.4f}" if math.isfinite(value) else "n/a"


def width_rows(results: Results) -> list[list[str]]:
    rows = []
    for dataset in WIDE_DATASETS:
        for width in V3.widths:
            table = results.get(width, dataset)
            if table is None:
                continue
            c = table.comparison(*PAIRS[0])
            missing = _missing(table, PAIRS[0]) or "—"
            if c is None:
                rows.append([dataset, width, "—", "—", "—", "incomplete", missing])
            else:
                rows.append([dataset, width, f"{c.seeds.mean:+.4f}", f"[{c.users.low:+.4f}, {c.users.high:+.4f}] "
                             f"({c.users.level:.1%})", _detectable(c), c.verdict, missing])
    return rows


def width_section(results: Results) -> str:
    return pipe_table(["dataset", "width", "prism − gated_deltanet", "paired bootstrap CI (test users)",
                       f"detectable ({POWER:.0%} power)", "verdict (Holm)", "incomplete"],
                      width_rows(results), align="llrrrll")


def _span(counts: list[tuple[float, str]]) -> str:
    """"N (dataset)" of the one count, or "N (dataset) to M (dataset)" of the fewest and the most."""
    def text(seeds: float, dataset: str) -> str:
        return f"{seed_count_text(seeds).replace('> ', 'more than ')} ({dataset})"

    ordered = sorted(counts)
    return text(*ordered[0]) if len(ordered) == 1 else f"{text(*ordered[0])} to {text(*ordered[-1])}"


def _pair_finding(tables: list[DatasetResults], first: str, second: str) -> str:
    known = [(t.dataset, c) for t in tables if (c := t.comparison(first, second)) is not None]
    waiting = [t.dataset for t in tables if t.comparison(first, second) is None]
    above = [d for d, c in known if direction(c) > 0]
    below = [d for d, c in known if direction(c) < 0]
    equal = [f"{d} ({c.verdict.removeprefix('equal within ')})" for d, c in known if c.verdict.startswith("equal")]
    open_ = [d for d, c in known if c.verdict.startswith("not resolved")]
    width = tables[0].width
    parts = [f"{first} < {second} on {', '.join(below)}" if below else "",
             f"equal within the gap of interest on {', '.join(equal)}" if equal else "",
             f"not resolved on {', '.join(open_)}" if open_ else "",
             f"not computed on {', '.join(waiting)} (incomplete)" if waiting else ""]
    detectable = [c.seeds.detectable for _, c in known if math.isfinite(c.seeds.detectable)]
    if detectable:
        parts.append(f"the seeds detect {min(detectable):.4f} to {max(detectable):.4f} with {POWER:.0%} power")
    open_gaps = [(d, c) for d, c in known if c.gap_open and not math.isnan(c.seeds_for_gap)]
    if open_gaps:
        spans = [_span([(getattr(c, name), d) for d, c in open_gaps]) for name in ("seeds_for_gap", "seeds_to_bound")]
        parts.append(f"where a gap of interest is not excluded, at least {spans[0]} seeds per backbone would detect "
                     f"a difference of its size with {POWER:.0%} power, and {spans[1]} would bound a zero difference "
                     f"within it (at the observed spread)")
    return (f"**{first} − {second} at {width}: {first} > {second} on {len(above)} of the {len(known)} datasets "
            f"compared**" + (f" ({', '.join(above)})" if above else "")
            + "".join(f"; {p}" for p in parts if p) + f" ({VERDICTS}).")


def _best_finding(tables: list[DatasetResults]) -> str:
    leaders = collections.defaultdict(list)
    resolved = []
    for t in tables:
        c = next((c for c in t.comparisons if {c.first, c.second} == t.best), None)
        if c is None:
            continue
        leader = c.first if c.seeds.mean > 0 else c.second
        leaders[leader].append(t.dataset)
        if direction(c) != 0:
            resolved.append(t.dataset)
    if not leaders:
        return f"**No dataset has a best − second comparison yet** ({VERDICTS})."
    order = sorted(leaders.items(), key=lambda item: -len(item[1]))
    total = sum(len(d) for d in leaders.values())
    shown = "; ".join(f"{m} on {len(d)} of {total} datasets ({', '.join(d)})" for m, d in order)
    return (f"**Best mean test AUC at {tables[0].width}: {shown}**; the lead over the second "
            f"is resolved on {len(resolved)} of them" + (f" ({', '.join(resolved)})" if resolved else "")
            + f", not resolved on the others ({VERDICTS}).")


def _width_finding(results: Results) -> str:
    parts = []
    for dataset in WIDE_DATASETS:
        cells = []
        for width in V3.widths:
            table = results.get(width, dataset)
            c = None if table is None else table.comparison(*PAIRS[0])
            cells.append(f"{width} {c.seeds.mean:+.4f}, {c.verdict}" if c is not None else
                         f"{width} incomplete ({_missing(table, PAIRS[0]) if table else 'no runs'})")
        parts.append(f"{dataset}: {'; '.join(cells)}")
    return f"**Width study, prism − gated_deltanet**: {' | '.join(parts)} ({WIDTH_STUDY})."


def _moved_finding(results: Results) -> str:
    counts = results.tuning[WIDTH][1]
    moved = sum(t.ranks_moved[0] for t in results.at(WIDTH))
    ranked = sum(t.ranks_moved[1] for t in results.at(WIDTH))
    _, changed, compared = conclusion_rows(results)
    return (f"**From v2: {len(counts['moved'])} of {counts['compared']} cells moved rate, {moved} of {ranked} "
            f"backbones moved place, and v2's conclusion changed for {len(changed)} of {compared} pairs**"
            + (f" ({', '.join(changed)})" if changed else "") + f" ({MOVED}).")


def _incomplete_finding(results: Results) -> str:
    open_ = [t for t in results.datasets if t.incomplete]
    if not open_:
        return f"**Every table is complete**: every backbone at stake has all its seeds with case ranks ({VERDICTS})."
    return (f"**{len(open_)} of {len(results.datasets)} (dataset, width) tables are incomplete**: "
            + "; ".join(f"{t.dataset} {t.width}: {_incomplete_text(t)}" for t in open_) + f" ({VERDICTS}).")


def _not_run_finding(results: Results) -> str | None:
    """Which backbones of the grid some table has not started, grouped by the tables they lack; None when every
    table has started every backbone (the incomplete ones are finding _incomplete_finding's)."""
    lacking: dict[str, list[str]] = collections.defaultdict(list)
    for table in results.datasets:
        for model in table.not_run:
            lacking[model].append(f"{table.dataset} {table.width}")
    if not lacking:
        return None
    groups: dict[tuple[str, ...], list[str]] = collections.defaultdict(list)
    for model, tables in lacking.items():
        groups[tuple(tables)].append(model)
    every = {width: [f"{t.dataset} {width}" for t in results.at(width)] for width in V3.widths}

    def where(tables: tuple[str, ...]) -> str:
        width = next((w for w, named in every.items() if list(tables) == named), None)
        if width is None:
            return ", ".join(tables)
        return f"the {width} table" if len(tables) == 1 else f"all {len(tables)} {width} tables"

    return (f"**Backbones not run under {V3.name} yet** (not ranked by its tables, so best − second is among those "
            f"ranked; v2's tables, where v2 ran them: {V2_PAGE}): "
            + "; ".join(f"{', '.join(models)} on {where(tables)}" for tables, models in groups.items())
            + f" ({VERDICTS}).")


def findings(results: Results) -> str:
    """The front page's findings, a numbered line each."""
    base = results.at(WIDTH)
    lines = [*(_pair_finding(base, a, b) for a, b in PAIRS), _best_finding(base), _width_finding(results),
             _moved_finding(results), _incomplete_finding(results), _not_run_finding(results)]
    return "\n".join(f"{number}. {line}" for number, line in enumerate(filter(None, lines), start=1))


def readme(results: Results, folder: str, rank_rows: int) -> str:
    """results/README.md: templates/headline_v3_readme.md filled from ``results``, the files named under
    ``folder``."""
    by_protocol = collections.Counter(e["protocol"] for e in results.entries)
    values = {
        "protocol": V3.name, "v2_protocol": PROTOCOL, "findings": findings(results),
        "date": datetime.date.today().isoformat(), "command": COMMAND, "manifest": f"{folder}/{V3.manifest_name}",
        "manifest_lines": len(results.entries), "v3_runs": by_protocol[V3.name], "v2_runs": by_protocol[PROTOCOL],
        "case_ranks": f"{folder}/{V3.case_ranks_name}", "v2_case_ranks": f"{folder}/{CASE_RANKS_NAME}",
        "rank_rows": rank_rows,
        "table_runs": ", ".join(f"{n} at {w}" for w, n in results.table_runs.items()),
        "machines": "; ".join(f"{w}: {text}" for w, text in results.machines.items()),
        "start": ", ".join(f"{r:g}" for r in V3.grid.start), "ladder": ", ".join(f"{r:g}" for r in V3.grid.ladder),
        "seeds": f"{V3.seeds[0]}-{V3.seeds[-1]}", "v2_grid": ", ".join(f"{r:g}" for r in V2.grid),
        "v2_seeds": f"{V2.seeds[0]}-{V2.seeds[-1]}", "alpha": ALPHA, "power": f"{POWER:.0%}",
        "n_start": f"{N_START:,}", "n_most": f"{N_MOST:,}", "mc_margin": f"{MC_MARGIN:g}", "max_seeds": MAX_SEEDS,
        "verdicts": "\n".join(dataset_section(t) for t in results.datasets), "moved": moved_section(results),
        "d64": V3.widths[WIDTH].d_model, "d256": V3.widths["d256"].d_model,
        "wide_datasets": " and ".join(WIDE_DATASETS),
        "width_study": width_section(results),
    }
    return fill(TEMPLATES_DIR / "headline_v3_readme.md", **values) + "\n"


def write_pages(results_dir: Path = RESULTS_DIR, metrics: tuple[str, ...] = ()) -> list[Path]:
    """Write results_dir/README.md (the front page) and results_dir/headline_v3.md (the detail page, with the test
    ``metrics`` after AUC) from the v3 manifest and both case-ranks files there; returns their paths."""
    source = results_dir / V3.manifest_name
    manifest = read_jsonl(source)
    if not manifest:
        raise FileNotFoundError(f"option --results-dir: no finished runs in {source}")
    wanted = {e["record_id"] for e in manifest}
    rows = [row for name in (V3.case_ranks_name, CASE_RANKS_NAME) for row in read_jsonl(results_dir / name)
            if row["record_id"] in wanted]
    results = analyse(manifest, rows, metrics)
    folder = "results" if results_dir == RESULTS_DIR else str(results_dir)
    detail, front = results_dir / NAME, results_dir / FRONT_PAGE
    write_atomically(detail, markdown(results, f"{folder}/{V3.manifest_name}"))
    write_atomically(front, readme(results, folder, len(rows)))
    return [front, detail]
