"""The headline report's checks: runs near the floor, on the plateau, at the epoch cap, diverged, case ranks
against the manifest, and a same-seed match."""

from __future__ import annotations

from .... import registry
from ... import tuning
from ..protocol import SETTINGS
from .grid import CASE_RANK_TOLERANCE, FLOOR, Grid, newest_entries
from .tables import capped

NEAR_FLOOR = 0.02  # a run whose test AUC is less than this above pop's is listed
PLATEAU_VALID_GAP = 0.01  # a run whose best validation AUC is less than this above pop's stopped on the plateau
PLATEAU_BEST_EPOCH = 2  # ... as did one whose best epoch is at most this and whose patience ran out


def run_name(entry: dict, grid: Grid) -> str:
    """dataset/model/seed, with the rate when the run is a tuning run at a rate that was not chosen."""
    chosen = tuning.rate_for(entry["dataset"], entry["model"], grid.choices)
    untuned = not registry.trains(entry["model"]) or float(entry["lr"]) == chosen
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
