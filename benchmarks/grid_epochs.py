"""What an epoch of the headline grid costs in each compile mode, read from its manifests (no GPU needed):

    python benchmarks/grid_epochs.py                      # results/headline_v3_manifest.jsonl -> results/step_grid.md

Each manifest line is one grid run, on a GPU one of ``jobs_per_device`` sharing it through CUDA MPS. Per (machine,
dataset, width, backbone, compile mode) it reports the runs, their median concurrency, the median wall seconds per epoch
(the run's wall time over its epochs: validation after every epoch, compilation and the test included) and the
median GPU share per epoch (those seconds over the concurrency: the GPU time an epoch takes when the runs split
the GPU evenly). The modes of one cell ran in different device calls beside different runs, so the comparison is
observational; a cell is listed only where at least two modes ran.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

from prism_rec.errors import OptionError
from prism_rec.experiments.headline.protocol import compile_of, width_of
from prism_rec.files import read_jsonl, write_atomically
from prism_rec.markdown import pipe_table
from prism_rec.training.compile import WHOLE_STEP_MODES

COMMAND = "python benchmarks/grid_epochs.py"
REQUIRED = ("dataset", "model")  # besides wall_seconds and epochs_run, which a diverged run lacks
UNRECORDED = "machine not recorded"
DEFAULT_MANIFEST = Path("results/headline_v3_manifest.jsonl")
DEFAULT_OUT = Path("results/step_grid.md")


def epoch_costs(entries: list[dict]) -> dict[tuple[str, str, str, str], dict[str, dict]]:
    """(machine, dataset, width, backbone) -> compile mode -> runs, concurrency, seconds per epoch and GPU share
    per epoch (medians over the runs that trained: a diverged run has no wall time). Runs on different machines
    never share a cell."""
    runs: dict[tuple[str, str, str, str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    for entry in entries:
        if entry.get("wall_seconds") and entry.get("epochs_run"):
            per_epoch = entry["wall_seconds"] / entry["epochs_run"]
            cell = (entry.get("machine") or UNRECORDED, entry["dataset"], width_of(entry), entry["model"])
            runs[(*cell, compile_of(entry))].append(
                (per_epoch, entry.get("jobs_per_device", 1.0)))
    cells: dict[tuple[str, str, str, str], dict[str, dict]] = collections.defaultdict(dict)
    for (*cell, mode), seen in runs.items():
        cells[tuple(cell)][mode] = {
            "runs": len(seen), "jobs": statistics.median(jobs for _, jobs in seen),
            "seconds": statistics.median(seconds for seconds, _ in seen),
            "share": statistics.median(seconds / jobs for seconds, jobs in seen)}
    return dict(cells)


def check_entries(entries: list[dict], path: Path) -> None:
    """A clear error naming the manifest line that lacks a key the report groups by."""
    for number, entry in enumerate(entries, start=1):
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            raise OptionError(f"option --manifest: {path}: run {number} has no {', '.join(missing)}")


def against_eager(cells: dict[tuple[str, str, str, str], dict[str, dict]]) -> list[tuple[tuple, str, float, float]]:
    """Per cell and compiled mode seen beside eager ("off"): its GPU share and wall seconds per epoch over
    eager's."""
    rows = []
    for key, modes in sorted(cells.items()):
        if "off" in modes:
            rows += [(key, mode, cost["share"] / modes["off"]["share"], cost["seconds"] / modes["off"]["seconds"])
                     for mode, cost in sorted(modes.items()) if mode != "off"]
    return rows


def whole_step_ratios(cells: dict[tuple[str, str, str, str], dict[str, dict]]
                      ) -> list[tuple[tuple, str, str, float, float]]:
    """Per cell and whole-step mode: its GPU share per epoch over the smallest of the cell's other modes (the
    eager step and the encoder-only modes), that mode's name, and the same ratio of wall seconds per epoch."""
    ratios = []
    for key, modes in sorted(cells.items()):
        others = {mode: cost for mode, cost in modes.items() if mode not in WHOLE_STEP_MODES}
        if not others:
            continue
        best = min(others, key=lambda mode: others[mode]["share"])
        for mode in sorted(set(modes) & set(WHOLE_STEP_MODES)):
            ratios.append((key, mode, best, modes[mode]["share"] / others[best]["share"],
                           modes[mode]["seconds"] / others[best]["seconds"]))
    return ratios


def report(entries: list[dict], source: str) -> str:
    cells = {key: modes for key, modes in epoch_costs(entries).items() if len(modes) > 1}
    rows = [[*key, mode, str(cost["runs"]), f"{cost['jobs']:g}", f"{cost['seconds']:.1f}", f"{cost['share']:.2f}"]
            for key, modes in sorted(cells.items()) for mode, cost in sorted(modes.items())]
    ratios = whole_step_ratios(cells)
    ratio_rows = [[*key, mode, best, f"{share:.1f}x", f"{wall:.1f}x"] for key, mode, best, share, wall in ratios]
    slower, slower_wall = sum(share > 1 for *_, share, _ in ratios), sum(wall > 1 for *_, wall in ratios)
    eager = against_eager(cells)
    eager_rows = [[*key, mode, f"{share:.2f}x", f"{wall:.2f}x"] for key, mode, share, wall in eager]
    lines = [
        "# Training cost in the headline grid, per compile mode", "",
        f"Written {time.strftime('%Y-%m-%d')} by `{COMMAND} --manifest {source}` from {len(entries)} manifest lines "
        "(runs sharing a GPU through CUDA MPS; a cell holds one machine's runs). s/epoch: the run's wall seconds over"
        " its epochs (validation after every epoch, compilation and the test included); GPU share: s/epoch over the "
        "runs sharing the GPU (concurrency). The modes of a cell ran in different device calls, beside different runs"
        " and at different commits (each line's git_commit): an observation, not a controlled measurement. Only cells"
        " where two or more modes ran.", "",
        pipe_table(["machine", "dataset", "width", "backbone", "compile", "runs", "concurrency", "s/epoch",
                    "GPU share s/epoch"], rows, "lllllrrrr"), "",
        "## The whole-step modes against the others", "",
        f"Each whole-step mode ({', '.join(WHOLE_STEP_MODES)}) over the cell's cheapest other mode (eager or an "
        f"encoder-only mode, by GPU share): its GPU share per epoch is larger in {slower} of {len(ratios)} cells, "
        f"its wall seconds per epoch in {slower_wall}. The share penalises a run that shared the GPU with fewer "
        "others (a GPU it did not fill); the wall time favours it (less contention).", "",
        pipe_table(["machine", "dataset", "width", "backbone", "whole-step mode", "cheapest other",
                    "GPU share ratio", "s/epoch ratio"], ratio_rows, "llllllrr"), "",
        "## The compiled modes against eager", "",
        "Each compiled mode over eager (off) in the cells where both ran. "
        + " ".join(f"{name}: GPU share per epoch smaller in {sum(r[2] < 1 for r in rows)} of {len(rows)} cells, "
                   f"wall seconds per epoch in {sum(r[3] < 1 for r in rows)}."
                   for name, rows in (("The encoder modes", [r for r in eager if r[1] not in WHOLE_STEP_MODES]),
                                      ("The whole-step modes", [r for r in eager if r[1] in WHOLE_STEP_MODES])))
        + " A run's compilation (seconds to tens of seconds, results/step.md) counts in its s/epoch, most where "
        "epochs are short.", "",
        pipe_table(["machine", "dataset", "width", "backbone", "compile", "GPU share ratio", "s/epoch ratio"],
                   eager_rows, "lllllrr"), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="a headline manifest (.jsonl)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the report to write (markdown)")
    args = parser.parse_args(argv)
    try:
        if not args.manifest.is_file():
            raise OptionError(f"option --manifest: no file {args.manifest}")
        entries = read_jsonl(args.manifest)
        if not entries:
            raise OptionError(f"option --manifest: {args.manifest} holds no runs")
        check_entries(entries, args.manifest)
    except (OptionError, ValueError) as error:  # read_jsonl names the line that is not JSON
        print(error, file=sys.stderr)
        return 2
    write_atomically(args.out, report(entries, str(args.manifest)))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
