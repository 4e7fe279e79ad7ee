"""The manifest of finished probe runs (JSON lines) and results/probes.md built from it."""

from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path

from ..files import write_atomically, write_jsonl
from .settings import ProbeSettings
from .tasks import PAPER_TABLE4, TASKS

MANIFEST_NAME = "probes_manifest.jsonl"
TABLE_NAME = "probes.md"
CHECKPOINTS_NAME = "probes_checkpoints.pt"


def run_identity(task: str, model: str, seed: int, settings: ProbeSettings, version: int | None = None) -> str:
    """The key under which a finished run is found again: task, model spec, seed, every setting and the
    task's format version (the current one unless given; version 1 stays out, as before versions existed)."""
    version = TASKS[task].version if version is None else version
    return json.dumps([task, model, seed, settings.as_dict(), *([version] if version != 1 else [])], sort_keys=True)


def load_manifest(out_dir: Path) -> list[dict]:
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return []
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not a JSON line ({error})") from None
    return entries


def save_manifest(out_dir: Path, entries: list[dict]) -> None:
    write_jsonl(Path(out_dir) / MANIFEST_NAME, entries)


def entry_identity(entry: dict) -> str:
    return run_identity(entry["task"], entry["model"], entry["seed"], ProbeSettings(**entry["settings"]),
                        entry.get("task_version", 1))


def _cell(accuracies: list[float], n_seeds: int) -> str:
    if not accuracies:
        return "missing"
    text = f"{statistics.fmean(accuracies):.3f}"
    if len(accuracies) > 1:
        text += f" ± {statistics.stdev(accuracies):.3f}"
    return text if len(accuracies) == n_seeds else f"{text} ({len(accuracies)}/{n_seeds} seeds)"


def write_results_table(out_dir: Path, tasks: list[str], models: list[str], seeds: list[int],
                        settings_by_task: dict[str, ProbeSettings], profile: str, command: str,
                        unfinished: list[str]) -> Path:
    """probes.md: mean final-token accuracy per task (rows) and model (columns) over ``seeds``, beside
    the paper's Table 4; only manifest runs with exactly the settings of this invocation count."""
    wanted = {run_identity(t, m, s, settings_by_task[t]): (t, m) for t in tasks for m in models for s in seeds}
    accuracies: dict[tuple[str, str], list[float]] = {}
    machines, commits = set(), set()
    for entry in load_manifest(out_dir):
        cell = wanted.get(entry_identity(entry))
        if cell is not None:
            accuracies.setdefault(cell, []).append(entry["accuracy"])
            machines.add(entry["machine"])
            commits.add(entry["git_commit"])
    header = ["task", *models, "paper Transformer", "paper linear attn", "paper PRISM"]
    lines = [
        "# Mechanistic probes: final-token accuracy",
        "",
        f"Mean ± sample std over seeds {', '.join(map(str, seeds))} (fewer seeds are marked; `missing` = no",
        "finished run, never guessed). Paper columns: Table 4 of arXiv 2602.10796 (D = 16, vocabulary 64,",
        "length 128, 10k steps, PRISM L = 2). Task formats: `prism_rec/probes/tasks.py`; settings:",
        "`prism_rec/probes/settings.py`. Chance level: 0.5 for parity, local XOR, palindrome; 1/16 for",
        "modulo add; about 1/vocabulary for the recall tasks.",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |",
    ]
    for task in tasks:
        paper = [f"{value:.2f}" for value in PAPER_TABLE4[task]]
        row = [task, *(_cell(accuracies.get((task, model), []), len(seeds)) for model in models), *paper]
        lines.append("| " + " | ".join(row) + " |")
    groups: dict[ProbeSettings, list[str]] = {}
    for task in tasks:
        groups.setdefault(settings_by_task[task], []).append(task)
    described = ("{}: {}".format(", ".join(group), ", ".join(f"{k} {v}" for k, v in settings.as_dict().items()))
                 for settings, group in groups.items())
    lines += ["", f"Profile `{profile}`. Settings per task ({'; '.join(described)})."]
    lines += [
        "",
        f"Command: `{command}`",
        f"Machine: {'; '.join(sorted(machines)) or 'none (no finished run)'}. "
        f"Commit: {', '.join(sorted(commits)) or 'none'}. Written {datetime.date.today().isoformat()}.",
    ]
    if unfinished:
        lines += ["", f"Not finished in this invocation ({len(unfinished)}): {', '.join(unfinished)}."]
    path = Path(out_dir) / TABLE_NAME
    write_atomically(path, "\n".join(lines) + "\n")
    return path
