"""The findings that open results/v2/README.md: at most six statements computed from the grid, each with its verdict
in plain words and the table or figure it comes from."""

from __future__ import annotations

from ....tracking.bootstrap import PairedDifference
from .checks import NEAR_FLOOR
from .grid import Grid
from .tables import PAIRS, capped, ranked_models

MAIN_TABLE = "[main table](#main-table-test-auc)"
PER_DATASET = "[per-dataset tables](#per-dataset) and results/<dataset>/paired.png"
CHECKS = "[appendix: checks](#appendix-checks)"
FLOOR_MARGIN = 0.05  # a dataset whose every trained run is less than this above pop's test AUC sits near the floor


def plain_verdict(difference: PairedDifference) -> str:
    """A paired difference's verdict (bootstrap.verdict's rule) for a reader: significant, seeds do not separate
    them, or within noise."""
    if difference.significant:
        return "significant"
    if difference.excludes_zero:
        return "not significant (only the interval over test users excludes 0; the seeds do not separate them)"
    return "within noise (the interval over test users includes 0)"


def _pair_finding(grid: Grid, first: str, second: str) -> str | None:
    """Where ``first`` − ``second`` is significant, and which way, over the datasets that have both (None: none)."""
    differences = {d: grid.paired(d, first, second) for d in grid.datasets}
    known = {d: x for d, x in differences.items() if not isinstance(x, str)}
    if not known:
        return None
    wins = [f"{d} ({first} {'higher' if x.mean > 0 else 'lower'} by {abs(x.mean):.4f})"
            for d, x in known.items() if x.significant]
    if not wins:
        return (f"**{first} against {second}: not significantly different on any of the {len(known)} datasets** "
                f"(verdict per dataset: {'; '.join(f'{d} {plain_verdict(x)}' for d, x in known.items())}; "
                f"{PER_DATASET}).")
    rest = "" if len(wins) == len(known) else "; not significant on the others"
    return (f"**{first} against {second}: significantly different on {len(wins)} of {len(known)} datasets**: "
            f"{', '.join(wins)}{rest} ({PER_DATASET}).")


def _leader(grid: Grid) -> str:
    """The best mean rank, where that model has the best mean, and whether its lead over the second is significant."""
    order = ranked_models(grid)
    if not order:
        return "No trained backbone has runs yet."
    model, (rank, over) = order[0]
    best_on = [d for d in grid.datasets
               if grid.trained(d) and max(grid.trained(d), key=lambda c: c.mean).model == model]
    ranked_on = sum(bool(grid.trained(d)) for d in grid.datasets)
    leads = []
    for dataset in best_on:
        second = sorted(grid.trained(dataset), key=lambda c: -c.mean)[1:2]
        difference = grid.paired(dataset, model, second[0].model) if second else "no second"
        if not isinstance(difference, str):
            leads.append(difference.significant)
    return (f"**{model} has the best mean rank, {rank:.1f} over {over} datasets, and the best mean test AUC on "
            f"{len(best_on)} of {ranked_on}** ({MAIN_TABLE}); its lead over the second is significant on "
            f"{sum(leads)} of those {len(leads)} (the best − second rows of the {PER_DATASET}).")


def _floor_finding(grid: Grid) -> str | None:
    """The datasets where every trained table run lies less than FLOOR_MARGIN above pop: their orderings say little."""
    near = []
    for dataset in grid.datasets:
        floor, runs = grid.floor(dataset), [run for cell in grid.trained(dataset) for run in cell.runs]
        if floor is not None and runs and all(run["test_auc"] < floor["test_auc"] + FLOOR_MARGIN for run in runs):
            near.append(f"{dataset} (pop {floor['test_auc']:.4f}, best {max(r['test_auc'] for r in runs):.4f})")
    if not near:
        return None
    return (f"**On {', '.join(near)} every trained run is less than {FLOOR_MARGIN} above popularity**: "
            f"differences there are differences near the floor, not a ranking of sequence models (runs within "
            f"{NEAR_FLOOR} of pop are listed in the {CHECKS}).")


def _cap_finding(grid: Grid) -> str:
    runs = [run for d in grid.datasets for cell in grid.trained(d) for run in cell.runs]
    at_cap = sum(capped(run) for run in runs)
    if not at_cap:
        return f"**No table run stopped at its epoch cap**: every one stopped by patience ({CHECKS})."
    return (f"**{at_cap} of {len(runs)} table runs stopped at the epoch cap, still improving**: more epochs may move "
            f"them ({CHECKS}).")


def findings(grid: Grid) -> str:
    """The README's findings, a numbered line each."""
    lines = [_leader(grid), *(_pair_finding(grid, a, b) for a, b in PAIRS),
             _pair_finding(grid, "prism-authors", "prism"), _floor_finding(grid), _cap_finding(grid)]
    return "\n".join(f"{number}. {line}" for number, line in enumerate((x for x in lines if x), start=1))
