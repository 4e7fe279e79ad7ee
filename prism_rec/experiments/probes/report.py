"""results/probes.md from the manifest: the v2 grid report (``write_grid_report``) or the table of one
ad-hoc invocation (``write_results_table``). Only finished manifest runs with exactly a planned run's
identity count (``manifest.run_identity``); nothing is guessed.

A cell is ``mean ± sample std (solved/finished)`` over seeds, where a seed *solved* the task when its
final-token accuracy is at least ``SOLVED``; planned seeds without a finished run are named.
"""

from __future__ import annotations

import collections
import datetime
import statistics
from dataclasses import dataclass
from pathlib import Path

from ...files import write_atomically
from ...markdown import fill, pipe_table
from ...paths import TEMPLATES_DIR
from .grid import (
    PAPER_COLUMNS,
    SEEDS,
    SWEEP_LENGTHS,
    SWEEP_MODELS,
    SWEEP_PROFILE,
    SWEEP_TASK,
    TABLE_MODELS,
    ProbeRun,
    grid_runs,
)
from .manifest import PROTOCOL, entry_identity, load_manifest
from .settings import PROFILES, ProbeSettings, settings_for
from .tasks import PAPER_TABLE4, TASKS

TABLE_NAME = "probes.md"
SOLVED = 0.9
AT_CHANCE_MARGIN = 0.05
UNFINISHED_SHOWN = 10  # the grid report names this many of the runs still to do
PAPER_NAMES = ("Transformer", "linear attention", "PRISM")
PAPER_FIGURES_NOTE = ("Paper columns: Table 4 of arXiv 2602.10796 (D = 16, vocabulary 64, length 128, 10k steps, "
                      "PRISM L = 2).")


def chance_level(task: str, settings: ProbeSettings) -> float:
    """Accuracy of a uniform guess among the task's possible answers (silence gate: always NULL, right
    half the time)."""
    if task in ("parity", "local_xor", "palindrome", "silence_gate"):
        return 0.5
    if task == "modulo_add":
        return 1 / 16
    return 1 / (settings.vocab_size - 4)  # recall tasks: about one content token in vocabulary - specials


def level(task: str, accuracy: float, settings: ProbeSettings) -> str:
    """'solves' (>= SOLVED), 'fails' (within AT_CHANCE_MARGIN of chance or below) or 'partial'."""
    if accuracy >= SOLVED:
        return "solves"
    return "fails" if accuracy <= chance_level(task, settings) + AT_CHANCE_MARGIN else "partial"


# The paper's claim per task, read from Table 4 (Transformer, linear attention, PRISM): each column's
# level (at paper settings, chance as ``chance_level``), and the orderings it states among partial ones.
PAPER_ORDERS: dict[str, tuple[tuple[int, int], ...]] = {
    "modulo_add": ((2, 0), (0, 1)),  # PRISM .50 > Transformer .23 > linear attention .07
    "silence_gate": ((0, 2), (2, 1)),  # Transformer .82 > PRISM .66 > linear attention .51
}


@dataclass
class Cell:
    """The finished accuracies of one (task, model, settings) over its planned seeds."""

    accuracies: list[float]
    planned: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.accuracies)

    @property
    def solved(self) -> int:
        """Seeds with accuracy >= SOLVED."""
        return sum(accuracy >= SOLVED for accuracy in self.accuracies)

    def __str__(self) -> str:
        if not self.accuracies:
            return "missing"
        text = f"{self.mean:.3f}"
        if len(self.accuracies) > 1:
            text += f" ± {statistics.stdev(self.accuracies):.3f}"
        missing = self.planned - len(self.accuracies)
        return f"{text} ({self.solved}/{len(self.accuracies)}{f'; {missing} missing' if missing else ''})"


class Found:
    """The manifest entries of planned runs, by identity, and the cells they make."""

    def __init__(self, out_dir: Path, runs: list[ProbeRun]):
        entries = load_manifest(out_dir)
        planned = {run.identity for run in runs}
        self.entries = {entry_identity(e): e for e in entries if entry_identity(e) in planned}
        self.older = sum(1 for e in entries if e.get("protocol", 1) != PROTOCOL)
        self.runs = runs

    def cell(self, task: str, model: str, settings: ProbeSettings) -> Cell:
        runs = [r for r in self.runs if (r.task, r.model, r.settings) == (task, model, settings)]
        return Cell([self.entries[r.identity]["accuracy"] for r in runs if r.identity in self.entries], len(runs))

    def provenance(self) -> str:
        machines = sorted({e["machine"] for e in self.entries.values()})
        commits = sorted({e["git_commit"] for e in self.entries.values()})
        torches = sorted({e["torch_version"] for e in self.entries.values() if "torch_version" in e})
        versions = f" torch {', '.join(torches)}." if torches else ""
        walls = [e["wall_seconds"] for e in self.entries.values() if "wall_seconds" in e]
        wall = f" Median wall time of a run: {statistics.median(walls):.0f} s ({len(walls)} runs)." if walls else ""
        modes = collections.Counter(e.get("compile", "off") for e in self.entries.values())
        compiled = (" Training step compile mode (prism_rec/training/compile.py; float rounding apart, "
                    "the same training): "
                    + ", ".join(f"{mode} ({count} runs)" for mode,
                                count in sorted(modes.items())) + ".") if modes else ""
        return (f"Machine: {'; '.join(machines) or 'none (no finished run)'}."
                f"{versions} Commit: {', '.join(commits) or 'none'}."
                f"{wall}{compiled} Written {datetime.date.today().isoformat()}.")


def _table(header: list[str], rows: list[list]) -> list[str]:
    return [pipe_table([str(title) for title in header], [[str(cell) for cell in row] for row in rows],
                       align="l" + "r" * (len(header) - 1))]


def _settings_line(settings_by_task: dict[str, ProbeSettings]) -> str:
    groups: dict[ProbeSettings, list[str]] = {}
    for task, settings in settings_by_task.items():
        groups.setdefault(settings, []).append(task)
    return "; ".join("{}: {}".format(", ".join(group), ", ".join(f"{k} {v}" for k, v in settings.as_dict().items()))
                     for settings, group in groups.items())


def accuracy_table(found: Found, tasks: list[str], models: list[str],
                   settings_by_task: dict[str, ProbeSettings]) -> list[str]:
    """Tasks (rows) by models (columns), with the paper's three columns beside."""
    rows = [[task, *(found.cell(task, model, settings_by_task[task]) for model in models),
             *(f"{value:.2f}" for value in PAPER_TABLE4[task])] for task in tasks]
    return _table(["task", *models, *(f"paper {name}" for name in PAPER_NAMES)], rows)


def claim_verdict(task: str, cells: list[Cell], settings: ProbeSettings) -> tuple[str, str]:
    """(ours in words, verdict) for the paper's claim on ``task``, from our cells for PAPER_COLUMNS."""
    if any(not cell.accuracies for cell in cells):
        return "not run", "not run yet"
    paper_levels = [level(task, value, settings) for value in PAPER_TABLE4[task]]
    ours = [level(task, cell.mean, settings) for cell in cells]
    misses = [f"{PAPER_NAMES[i]} {ours[i]} (paper: {paper_levels[i]})" for i in range(3) if ours[i] != paper_levels[i]]
    for higher, lower in PAPER_ORDERS.get(task, ()):
        if not cells[higher].mean > cells[lower].mean:
            misses.append(f"{PAPER_NAMES[higher]} not above {PAPER_NAMES[lower]} "
                          f"({cells[higher].mean:.3f} vs {cells[lower].mean:.3f})")
    checks = 3 + len(PAPER_ORDERS.get(task, ()))
    seeds = min(len(cell.accuracies) for cell in cells)
    partial_seeds = f" ({seeds} seed{'s' if seeds > 1 else ''})" if seeds < len(SEEDS) else ""
    words = ", ".join(f"{PAPER_NAMES[i]} {ours[i]}" for i in range(3))
    if not misses:
        return words, f"holds{partial_seeds}"
    kept = checks - len(misses)
    return words, f"{'partly holds' if kept else 'does not hold'} ({kept} of {checks} checks){partial_seeds}: " + \
        "; ".join(misses)


def claims_table(found: Found, profile: str, settings_by_task: dict[str, ProbeSettings]) -> list[str]:
    rows = []
    for task in TASKS:
        settings = settings_by_task[task]
        cells = [found.cell(task, model, settings) for model in PAPER_COLUMNS]
        paper = " / ".join(f"{value:.2f} {level(task, value, settings)}" for value in PAPER_TABLE4[task])
        orders = "; ".join(f"{PAPER_NAMES[h]} > {PAPER_NAMES[l]}" for h, l in PAPER_ORDERS.get(task, ()))
        ours, verdict = claim_verdict(task, cells, settings)
        rows.append([task, paper + (f"; {orders}" if orders else ""), " / ".join(str(c) for c in cells), ours, verdict])
    header = ["task", "paper (Transformer / linear attn / PRISM)", f"here ({' / '.join(PAPER_COLUMNS)})",
              "here, levels",
              "claim"]
    return _table(header, rows)


def sweep_section(found: Found) -> list[str]:
    settings = {length: settings_for(SWEEP_PROFILE, SWEEP_TASK, {"seq_len": length}) for length in SWEEP_LENGTHS}
    rows = [[length, *(found.cell(SWEEP_TASK, model, settings[length]) for model in SWEEP_MODELS)]
            for length in SWEEP_LENGTHS]
    lines = _table(["length", *SWEEP_MODELS], rows)
    for model in SWEEP_MODELS:
        cells = {length: found.cell(SWEEP_TASK, model, settings[length]) for length in SWEEP_LENGTHS}
        done = [length for length in SWEEP_LENGTHS if cells[length].accuracies]
        if not done:
            lines.append(f"- {model}: not run yet.")
            continue
        solved = [length for length in done if cells[length].mean >= SOLVED]
        failed = [length for length in done if cells[length].mean < SOLVED]
        by_a_seed = [length for length in done if cells[length].solved]
        if by_a_seed:
            cell = cells[by_a_seed[-1]]
            longest = (f"the longest length a seed solved: {by_a_seed[-1]} ({cell.solved} of "
                       f"{len(cell.accuracies)} seeds)")
        else:
            longest = "no seed solved any length"
        lines.append(f"- {model}: mean >= {SOLVED} at {_lengths(solved)}; below at {_lengths(failed)}; {longest}.")
    return lines


def _lengths(lengths: list[int]) -> str:
    return f"length{'s' if len(lengths) > 1 else ''} {', '.join(map(str, lengths))}" if lengths else "no length"


def write_grid_report(out_dir: Path, command: str, unfinished: list[str]) -> Path:
    """probes.md for the v2 grid (``grid.grid_runs``) from the manifest in ``out_dir``."""
    runs = grid_runs()
    found = Found(out_dir, runs)
    lines = [fill(TEMPLATES_DIR / "probes_intro.md", manifest=f"{Path(out_dir).name}/probes_manifest.jsonl",
                  finished=len(found.entries), planned=len(runs), protocol=PROTOCOL, older=found.older,
                  seeds=", ".join(map(str, SEEDS)), solved=SOLVED, paper_figures=PAPER_FIGURES_NOTE)]
    levels = fill(TEMPLATES_DIR / "probes_levels.md", solved=SOLVED, margin=AT_CHANCE_MARGIN)
    for profile in PROFILES:
        settings_by_task = {task: settings_for(profile, task) for task in TASKS}
        lines += ["", f"## Profile `{profile}`", "", *accuracy_table(found, list(TASKS), list(TABLE_MODELS),
                                                                     settings_by_task),
                  "", f"Settings: {_settings_line(settings_by_task)}.",
                  "", f"### Does the paper's claim hold here (profile `{profile}`)?", "",
                  levels,
                  "", *claims_table(found, profile, settings_by_task)]
    lines += ["", f"## Local XOR by length (profile `{SWEEP_PROFILE}` otherwise)", "", *sweep_section(found)]
    lines += ["", "## Run record", "", f"Command: `{command}`", found.provenance()]
    if unfinished:
        shown = UNFINISHED_SHOWN
        lines += [f"Not finished in this invocation: {len(unfinished)} runs, in the order they run next: "
                  f"{', '.join(unfinished[:shown])}{', ...' if len(unfinished) > shown else ''}."]
    path = Path(out_dir) / TABLE_NAME
    write_atomically(path, "\n".join(lines) + "\n")
    return path


def write_results_table(out_dir: Path, runs: list[ProbeRun], command: str, unfinished: list[str]) -> Path:
    """probes.md for one invocation's ``runs`` (one profile): tasks by models beside the paper's Table 4."""
    found = Found(out_dir, runs)
    tasks = list(dict.fromkeys(run.task for run in runs))
    models = list(dict.fromkeys(run.model for run in runs))
    settings_by_task = {run.task: run.settings for run in runs}
    lines = [
        "# Mechanistic probes: final-token accuracy",
        "",
        f"Cells: mean ± sample std over seeds, (seeds with accuracy >= {SOLVED} / finished seeds) and planned "
        f"seeds not finished; `missing` = no finished run. {PAPER_FIGURES_NOTE}",
        "",
        *accuracy_table(found, tasks, models, settings_by_task),
        "",
        f"Profile `{runs[0].profile}`. Settings per task ({_settings_line(settings_by_task)}).",
        "",
        f"Command: `{command}`",
        found.provenance(),
    ]
    if unfinished:
        lines += ["", f"Not finished in this invocation ({len(unfinished)}): {', '.join(unfinished)}."]
    path = Path(out_dir) / TABLE_NAME
    write_atomically(path, "\n".join(lines) + "\n")
    return path
