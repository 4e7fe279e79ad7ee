"""The step benchmark's files: step.csv, step.md, solo_throughput.csv and step.json (everything, which
``merge`` reads back to make one report of runs made side by side)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from step_floor import floor_sections

from prism_rec.experiments.throughput.solo import SOLO_COLUMNS, SOLO_NAME
from prism_rec.files import write_atomically
from prism_rec.markdown import pipe_table

STEP_COLUMNS = ("section", "model", "seq_len", "n_items", "batch_size", "loss_path", "compile", "dtype", "step_ms",
                "peak_memory_gib", "target_tokens", "status", "warmup_s")


def csv_text(rows: list[dict], columns) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()



def ms_cell(row: dict | None) -> str:
    if row is None:
        return ""
    if row["status"] != "ok":
        return row["status"]
    memory = f" ({row['peak_memory_gib']})" if row["peak_memory_gib"] else ""
    return f"{float(row['step_ms']):.2f}{memory}"


def step_markdown(report: Report) -> str:
    """step.md: the header, the checks, the step table, the floor ratios (floor_sections), Books scale, the
    profiles and the solo throughput."""
    rows, profiles, solo_rows = report.rows, report.profiles, report.solo_rows
    lines = [*report.header, ""]
    if report.checks:
        lines += ["## Checked on this device before timing", "", *report.checks]
    for section, title in (("step", "Step table"), ("books", "Books scale")):
        own = [r for r in rows if r["section"] == section]
        if not own:
            continue
        columns = list(dict.fromkeys((r["batch_size"], r["seq_len"], r["n_items"], r["loss_path"], r["compile"])
                                     for r in own))
        cells = {(r["model"], r["batch_size"], r["seq_len"], r["n_items"], r["loss_path"], r["compile"]): r
                 for r in own}
        table = [[model, *(ms_cell(cells.get((model, *column))) for column in columns)]
                 for model in dict.fromkeys(r["model"] for r in own)]
        lines += [f"## {title}: median ms per step (peak GiB)", "",
                  pipe_table(["backbone", *(f"{b} x {t}, {int(i):,} items, {p}, compile {c}"
                                            for b, t, i, p, c in columns)], table, align="l" + "r" * len(columns))]
        warmups = [f"{r['model']} {r['batch_size']} x {r['seq_len']} {r['compile']} {r['warmup_s']}" for r in own
                   if r["status"] == "ok" and r["compile"] != "off"]
        lines += ["", *speedup_lines(own)]
        if warmups:
            lines.append("Warm-up seconds of the compiled cells (compilation included): " + "; ".join(warmups) + ".")
        lines.append("")
        if section == "step":
            lines += floor_sections(own, report.verified)
    if profiles:
        lines += ["## Where the time goes (torch.profiler; top operators by device time, ms per step)", "",
                  "Wall ms far above device ms: the step waits on launches and Python, not on the GPU.", "",
                  pipe_table(["backbone", "shape", "compile", "wall ms/step", "device ms/step",
                              "GPU kernels (CPU: operator calls)/step", "top operators"],
                             [[p["model"], f"T {p['seq_len']}, {p['loss_path']}", p["compile"], str(p["wall_ms"]),
                               str(p["device_ms"]), str(p["launches"]), str(p["top"])] for p in profiles],
                             align="lllrrrl")]
        lines.append("")
    if solo_rows:
        modes = list(dict.fromkeys(r["compile"] for r in solo_rows))
        solo = {(r["dataset"], r["model"], r["compile"]): r for r in solo_rows}
        table = []
        for dataset, model in dict.fromkeys((r["dataset"], r["model"]) for r in solo_rows):
            cells = [solo.get((dataset, model, m)) for m in modes]
            table.append([dataset, model, *("failed or skipped" if c is None else
                                            f"{float(c['tokens_per_s']):,.0f} ({float(c['step_ms']):.1f}; "
                                            f"{c.get('epoch_gpu_s', '-')} s)" for c in cells)])
        lines += ["## Solo training throughput on real windows: tokens/s (ms per step; GPU seconds per epoch)", "",
                  "GPU seconds per epoch: the median step times the epoch's batches (its last, short one "
                  "included), alone on the GPU.", "",
                  pipe_table(["dataset", "backbone", *(f"compile {m}" for m in modes)], table,
                             align="ll" + "r" * len(modes)),
                  "", *grid_speedup_lines(solo_rows), ""]
    return "\n".join(lines)


def speedup_lines(rows: list[dict]) -> list[str]:
    """Eager step time over each compiled mode's, per backbone and shape, where both ran."""
    timed = {(r["model"], r["batch_size"], r["seq_len"], r["n_items"], r["loss_path"], r["compile"]):
             float(r["step_ms"]) for r in rows if r["status"] == "ok"}
    ratios = []
    for (model, batch, length, items, path, mode), ms in timed.items():
        eager = timed.get((model, batch, length, items, path, "off"))
        if mode != "off" and eager is not None:
            ratios.append(f"{model} {batch} x {length} {path} {mode} {eager / ms:.2f}x")
    lines = ["Speed-up of the compiled step over eager: " + "; ".join(ratios) + "."] if ratios else []
    for shape in dict.fromkeys(key[1:] for key in timed if key[-1] != "off"):
        pairs = [(timed[(key[0], *shape[:-1], "off")], ms) for key, ms in timed.items()
                 if key[1:] == shape and (key[0], *shape[:-1], "off") in timed]
        if not pairs:  # no backbone of this shape ran eager too (--compile without off)
            continue
        batch, length, _, path, mode = shape
        lines.append(f"All {len(pairs)} backbones measured both ways at {batch} x {length} ({path}), one step of "
                     f"each: eager {sum(e for e, _ in pairs):.1f} ms, {mode} {sum(c for _, c in pairs):.1f} ms, "
                     f"{sum(e for e, _ in pairs) / sum(c for _, c in pairs):.2f}x.")
    return lines


def grid_speedup_lines(solo_rows: list[dict]) -> list[str]:
    """Per dataset and over all, the GPU time of one step of every backbone (a grid with equal steps per
    backbone) eager over compiled, for the backbones measured in both modes."""
    step_ms = {(r["dataset"], r["model"], r["compile"]): float(r["step_ms"]) for r in solo_rows}
    lines = []
    for mode in dict.fromkeys(r["compile"] for r in solo_rows if r["compile"] != "off"):
        pairs = {(d, m): (ms, step_ms[(d, m, mode)]) for (d, m, c), ms in step_ms.items()
                 if c == "off" and (d, m, mode) in step_ms}
        if not pairs:
            continue
        per_dataset = []
        for dataset in dict.fromkeys(d for d, _ in pairs):
            own = [times for (d, _), times in pairs.items() if d == dataset]
            per_dataset.append(f"{dataset} {sum(e for e, _ in own) / sum(c for _, c in own):.2f}x "
                               f"({len(own)} backbones)")
        total = sum(e for e, _ in pairs.values()) / sum(c for _, c in pairs.values())
        lines.append(f"Grid speed-up per GPU-hour, compile {mode} over eager (sum of the backbones' solo step times, "
                     f"equal steps per backbone; one job alone on the GPU, not the grid's MPS sharing): "
                     f"{total:.2f}x over all; " + "; ".join(per_dataset) + ".")
    return lines


class Report:
    """The rows measured so far, rewritten after every cell to step.csv, step.md, solo_throughput.csv and
    step.json (all of it, which ``merge`` reads back)."""

    def __init__(self, out_dir: Path, header: list[str], checks: list[str], solo_mode: str | None, command: str,
                 verified: list | None = None):
        self.out_dir, self.header, self.checks, self.solo_mode = out_dir, header, checks, solo_mode
        self.command = command
        self.verified = verified or []  # [backbone, compile mode, whether its check against eager passed]
        self.rows, self.profiles, self.solo_rows = [], [], []

    def write(self) -> None:
        write_atomically(self.out_dir / "step.csv", csv_text(self.rows, STEP_COLUMNS))
        write_atomically(self.out_dir / "step.md",
                         step_markdown(self))
        if self.solo_mode is not None:
            write_atomically(self.out_dir / SOLO_NAME,
                             csv_text([r for r in self.solo_rows if r["compile"] == self.solo_mode], SOLO_COLUMNS))
        write_atomically(self.out_dir / "step.json", json.dumps(vars(self) | {"out_dir": str(self.out_dir)}))


def merge(run_dirs: list[Path], out_dir: Path) -> Report:
    """One report from the step.json of runs made side by side (one per GPU, say): their rows, profiles,
    solo rows and checks in the order given, the first run's header and every run's command. A run that
    left no step.json is named in the header."""
    runs, missing = [], []
    for run_dir in run_dirs:
        try:
            runs.append(json.loads((run_dir / "step.json").read_text()))
        except (OSError, ValueError):
            missing.append(str(run_dir))
    if not runs:
        raise SystemExit(f"--merge: no step.json in {', '.join(map(str, run_dirs))}")
    commands = [run["command"] for run in runs]
    header = [*runs[0]["header"], "", f"Merged from {len(runs)} runs (their commands; each row is from one of them): "
              + "; ".join(f"`{command}`" for command in commands) + "."]
    if missing:
        header.append(f"Runs that left no results: {', '.join(missing)}.")
    report = Report(out_dir, header, [line for run in runs for line in run["checks"]],
                    next((run["solo_mode"] for run in runs if run["solo_mode"] is not None), None),
                    "; ".join(commands), [entry for run in runs for entry in run.get("verified", [])])
    for run in runs:
        report.rows += run["rows"]
        report.profiles += run["profiles"]
        report.solo_rows += run["solo_rows"]
    out_dir.mkdir(parents=True, exist_ok=True)
    report.write()
    return report
