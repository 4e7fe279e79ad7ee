"""Training-step time of every backbone with the full-softmax loss, and solo training throughput.

    python benchmarks/step_bench.py [--models all|a,b] [--loss-path fused,chunked] [--compile off,cudagraphs]
                                    [--datasets all|a,b] [--time-budget SECONDS]

One step = forward, backward, AdamW step (bf16 autocast on CUDA, fp32 on CPU), built as
prism_rec/training/trainer.py builds it (build_model, TrainConfig, NextItemObjective; the full-softmax branch
goes through prism_rec.training.losses.full_softmax_loss_sum with the path named by --loss-path). Step table:
random full windows of --batch-size x T for T in --lengths over --items items (d_model 64, 2 layers, 2
heads), the median wall time of --steps steps after --warmup (synchronised per step) and the peak
memory, for every loss path and every step mode of --compile (prism_rec/training/compile.py: off = eager,
inductor, cudagraphs); Books scale: --books-models at --books-items items, T 200; a torch.profiler
breakdown of each backbone and step mode at the first length (wall and device ms per step, kernel
launches, top operators by device time). Solo throughput (--datasets): per dataset, backbone and
--solo-compile mode, real training windows (full batches of --batch-size, the dataset's window), tokens/s
= the mean real target positions of a batch (counted as trainer.py does) over the median of --solo-steps
steps after --solo-warmup (fewer, at least 2, where they would take more than --cell-seconds; each step
synchronised, the slowest kept as step_ms_max); from them, the speed-up of the
compiled step per dataset (sum of the backbones' eager step times over the compiled ones). On CUDA the
script first checks the fused loss against the chunked one (loss and gradients) and stops if they differ.

Every cell is caught on its own (its status says why it failed) and the files are rewritten after every
cell, so a run cut short keeps what it measured; once --time-budget seconds have passed, the cells not
started are recorded as skipped. Writes <out>/step.md, step.csv and step.json (everything, for
--merge), and with --datasets <out>/solo_throughput.csv (the rows of the last --solo-compile mode, the
one a grid would train with). ``--merge DIR,DIR,...`` makes one report of runs made side by side, one
per GPU:

    CUDA_VISIBLE_DEVICES=0 python benchmarks/step_bench.py --lengths 50 ... --out-dir /tmp/a &
    CUDA_VISIBLE_DEVICES=1 python benchmarks/step_bench.py --lengths 200 ... --out-dir /tmp/b & wait
    python benchmarks/step_bench.py --merge /tmp/a,/tmp/b --out-dir $OUT/step
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.profiler import ProfilerActivity, profile

from prism_rec.data.batching import training_windows
from prism_rec.data.core import MissingDataError
from prism_rec.data.sources import load_dataset
from prism_rec.files import write_atomically
from prism_rec.markdown import pipe_table
from prism_rec.training.losses import full_softmax_loss_sum, resolve_path
from prism_rec.registry import backbone_entry, get_dataset, list_backbones
from prism_rec.tracking.store import machine_description, triton_version
from prism_rec.training.compile import gaps_to_eager, optimizer_options, resolve_compile, training_encoder
from prism_rec.models.recommender import SequentialRecommender
from prism_rec.training.trainer import NextItemObjective, build_model, set_seed
from prism_rec.training.devices import resolve_device
from prism_rec.training.config import TrainConfig

HEADLINE_DATASETS = ("ml-100k", "yelp-iclrec", "electronics-gerec", "books-dealrec", "movies-long", "movies-fedcsr")
SOLO_COLUMNS = ("dataset", "model", "tokens_per_s", "step_ms", "step_ms_max", "batch_size", "max_len", "n_items",
                "dtype", "machine", "command", "compile")
STEP_COLUMNS = ("section", "model", "seq_len", "n_items", "batch_size", "loss_path", "compile", "dtype", "step_ms",
                "peak_memory_gib", "target_tokens", "status", "warmup_s")
TOP_OPERATORS = 8


class BenchObjective(NextItemObjective):
    """NextItemObjective whose full-softmax loss goes through ``full_softmax_loss_sum`` on ``loss_path``."""

    def __init__(self, model, config, generator, loss_path: str):
        super().__init__(model, config, generator)
        self.loss_path = loss_path

    def forward(self, window: torch.Tensor) -> tuple[torch.Tensor, int]:
        inputs, targets = window[:, :-1], window[:, 1:]
        trained = (inputs > 0) & (targets > 0)
        hidden = self.encode(inputs)[trained]
        loss_sum = full_softmax_loss_sum(hidden, self.model.item_table(), targets[trained] - 1, path=self.loss_path)
        return loss_sum, int(trained.sum())


class Trainer:
    """One backbone's model, optimizer and step, as in prism_rec.training.trainer's loop."""

    def __init__(self, n_items: int, backbone: str, max_len: int, args, device: torch.device, loss_path: str,
                 compile_mode: str = "off"):
        self.config = TrainConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, max_len=max_len,
                                  batch_size=args.batch_size, device=str(device), progress=False)
        set_seed(0)
        self.model = build_model(SimpleNamespace(n_items=n_items), backbone, self.config).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr,
                                           weight_decay=self.config.weight_decay,
                                           **optimizer_options(compile_mode, device))
        self.objective = BenchObjective(self.model, self.config, torch.Generator(device=device).manual_seed(0),
                                        loss_path)
        self.objective.encode = training_encoder(self.model, args.batch_size, compile_mode)
        self.device = device
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step(self, window: torch.Tensor) -> None:
        with self.autocast:
            loss_sum, targets = self.objective(window.to(self.device, non_blocking=True))
        self.optimizer.zero_grad(set_to_none=True)
        (loss_sum / max(targets, 1)).backward()
        self.optimizer.step()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warm_up(trainer: Trainer, batches: list[torch.Tensor]) -> float:
    """Trains on ``batches``; returns the seconds of the last one (the first ones compile kernels)."""
    per_step = 0.0
    for batch in batches:
        started = time.perf_counter()
        trainer.step(batch)
        synchronize(trainer.device)
        per_step = time.perf_counter() - started
    return per_step


def cycled(batches: list[torch.Tensor], start: int, stop: int) -> list[torch.Tensor]:
    """The batches of steps start..stop-1, going round ``batches`` again when the steps outnumber them."""
    return [batches[index % len(batches)] for index in range(start, stop)]


def timed_steps(trainer: Trainer, batches: list[torch.Tensor], warmup: int, steps: int,
                cell_seconds: float) -> list[float]:
    """Wall ms of each timed step (synchronised per step), after ``warmup`` steps; fewer timed steps when
    one step would make the cell last more than ``cell_seconds``. Step i trains on cycled(batches, i, i + 1)."""
    per_step = warm_up(trainer, cycled(batches, 0, warmup))
    steps = max(2, min(steps, int(cell_seconds / max(per_step, 1e-9))))
    times = []
    for batch in cycled(batches, warmup, warmup + steps):
        begin = time.perf_counter()
        trainer.step(batch)
        synchronize(trainer.device)
        times.append((time.perf_counter() - begin) * 1000)
    return times


def reset_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def random_windows(n_items: int, batch_size: int, length: int, count: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(1, n_items + 1, (batch_size, length + 1), generator=generator) for _ in range(count)]


def failure(error: BaseException) -> str:
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return "out of memory"
    first_line = str(error).splitlines()[0][:120] if str(error) else ""
    return f"failed: {type(error).__name__}: {first_line}"


class Budget:
    """The wall seconds a run may spend starting cells; a cell not started in time is recorded as skipped."""

    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds

    def spent(self) -> bool:
        return time.perf_counter() > self.deadline


def step_cell(section: str, backbone: str, n_items: int, length: int, loss_path: str, compile_mode: str, args,
              device, budget: Budget) -> dict:
    row = {"section": section, "model": backbone, "seq_len": length, "n_items": n_items, "batch_size": args.batch_size,
           "loss_path": loss_path, "compile": compile_mode, "dtype": dtype_label(device), "step_ms": "",
           "peak_memory_gib": "", "target_tokens": args.batch_size * length, "status": "ok", "warmup_s": ""}
    if budget.spent():
        row["status"] = "skipped: time budget"
        return row
    trainer = None
    try:
        trainer = Trainer(n_items, backbone, length, args, device, loss_path, compile_mode)
        reset_memory(device)
        batches = random_windows(n_items, args.batch_size, length, 4)
        started = time.perf_counter()
        times = timed_steps(trainer, batches, args.warmup, args.steps, args.cell_seconds)
        row["warmup_s"] = f"{time.perf_counter() - started - sum(times) / 1000:.1f}"  # compilation included
        row["step_ms"] = f"{statistics.median(times):.3f}"
        memory = peak_memory_gib(device)
        row["peak_memory_gib"] = "" if memory is None else f"{memory:.2f}"
    except Exception as error:  # one cell's failure is reported in its cell, the others still run
        row["status"] = failure(error)
    finally:
        del trainer
        reset_memory(device)
    print(f"{section} {backbone} T={length} items={n_items} {loss_path} compile={compile_mode}: "
          f"{row['step_ms'] or row['status']} ms, peak {row['peak_memory_gib'] or '-'} GiB", flush=True)
    return row


def profile_backbone(backbone: str, n_items: int, length: int, loss_path: str, compile_mode: str, args,
                     device) -> dict:
    """Wall and device ms per step, kernel launches per step and the top operators by device time (CUDA
    kernels; on CPU the operators' self CPU time), over --profile-steps steps after warm-up."""
    try:
        trainer = Trainer(n_items, backbone, length, args, device, loss_path, compile_mode)
        batches = random_windows(n_items, args.batch_size, length, 2)
        warm_up(trainer, [batches[index % 2] for index in range(args.warmup + 1)])
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as profiler:
            started = time.perf_counter()
            for index in range(args.profile_steps):
                trainer.step(batches[index % 2])
            synchronize(device)
            wall_ms = (time.perf_counter() - started) * 1000 / args.profile_steps
        events = profiler.key_averages()
        key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
        if device.type == "cuda":
            kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            launches = len(kernels) / args.profile_steps
        else:
            launches = sum(e.count for e in events) / args.profile_steps
        device_ms = sum(getattr(e, key) for e in events) / args.profile_steps / 1000
        top = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:TOP_OPERATORS]
        top_text = ", ".join(f"`{e.key[:60]}` {getattr(e, key) / args.profile_steps / 1000:.2f}" for e in top)
        return {"wall_ms": f"{wall_ms:.2f}", "device_ms": f"{device_ms:.2f}", "launches": f"{launches:.0f}",
                "top": top_text}
    except Exception as error:
        return {"wall_ms": "", "device_ms": "", "launches": "", "top": f"profile {failure(error)}"}
    finally:
        reset_memory(device)

def check_fused(device: torch.device) -> list[str]:
    """Fused against chunked loss and gradients on this device (fp32 inputs under bf16 autocast, and fp32
    inputs without autocast, TF32 off); raises AssertionError when they differ. Returns report lines."""
    lines = []
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for n, items, d, autocast in ((4096, 20000, 64, True), (1000, 3001, 48, True), (1000, 3001, 48, False)):
            generator = torch.Generator(device=device).manual_seed(0)
            hidden = torch.randn(n, d, device=device, generator=generator)
            table = torch.randn(items, d, device=device, generator=generator) * 0.3
            targets = torch.randint(0, items, (n,), device=device, generator=generator)
            results = {}
            for path in ("fused", "chunked"):
                h, t = hidden.clone().requires_grad_(), table.clone().requires_grad_()
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    loss = full_softmax_loss_sum(h, t, targets, path=path)
                loss.backward()
                results[path] = (loss.detach().float(), h.grad, t.grad)
            gaps = [float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))
                    for a, b in zip(results["fused"], results["chunked"])]
            limit = (1e-3, 0.03) if autocast else (1e-5, 1e-4)
            label = f"N {n}, I {items}, d {d}, {'bf16 autocast' if autocast else 'fp32'}"
            lines.append(f"- {label}: relative gap of loss {gaps[0]:.1e}, d(hidden) {gaps[1]:.1e}, "
                         f"d(table) {gaps[2]:.1e}")
            assert gaps[0] < limit[0] and max(gaps[1:]) < limit[1], \
                f"fused loss differs from chunked at {label}: {gaps}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return lines




# largest relative gap of the compiled encoder's output or gradients to eager (fp32, TF32 off) that passes:
# results/step_compile.md measured 2e-5 and below; an error in a compiled graph shows as order 1
COMPILED_GAP_LIMIT = 1e-3


def check_compiled(backbones: list[str], modes: list[str], device: torch.device) -> tuple[list[str], bool]:
    """The compiled encoder of each backbone and compiled mode against eager on this device (fp32, TF32 off,
    dropout 0, 6 left-padded windows of 50 items padded to 8 rows): report lines, a failure included, and
    whether every check ran and stayed within ``COMPILED_GAP_LIMIT``."""
    lines, passed = [], True
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for backbone, mode in ((b, m) for b in backbones for m in modes if m != "off"):
            try:
                set_seed(0)
                model = SequentialRecommender(2000, backbone, d_model=64, max_len=50, dropout=0.0).to(device)
                items = torch.randint(1, 2001, (6, 50), generator=torch.Generator().manual_seed(0))
                items[torch.arange(50)[None, :] < 8 * torch.arange(6)[:, None]] = 0  # row r: 8 r padded positions
                gaps = gaps_to_eager(model, mode, items.to(device))
                within = all(gaps[part] <= COMPILED_GAP_LIMIT for part in ("output", "gradients"))  # False for NaN
                text = (f"relative gap of the output {gaps['output']:.1e}, of the gradients {gaps['gradients']:.1e} "
                        f"(worst: {gaps['worst']})" + ("" if within else f": over {COMPILED_GAP_LIMIT:g}, FAILED"))
            except Exception as error:
                text, within = failure(error), False
            passed = passed and within
            lines.append(f"- {backbone}, compile {mode}: {text}")
            print(lines[-1], flush=True)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
        reset_memory(device)
    return lines, passed


def solo_cell(dataset, windows: torch.Tensor, backbone: str, compile_mode: str, args, device, command: str,
              budget: Budget) -> dict | None:
    """Training tokens/s of ``backbone`` on real windows of ``dataset`` alone on the device: the mean real
    targets of a timed batch over the median step (each step synchronised), so one slow step (a kernel
    tuned or compiled again) does not move it; the slowest step is kept as ``step_ms_max``."""
    if budget.spent():
        print(f"solo {dataset.name} {backbone} compile={compile_mode}: skipped (time budget)", flush=True)
        return None
    max_len = windows.shape[1] - 1
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(0))
    # full batches only: an epoch's last, smaller batch is one more shape to tune and compile kernels for
    batches = [windows[index] for index in order.split(args.batch_size)]
    batches = [batch for batch in batches if len(batch) == args.batch_size] or batches
    trainer = None
    try:
        trainer = Trainer(dataset.n_items, backbone, max_len, args, device, args.solo_loss_path, compile_mode)
        times = timed_steps(trainer, batches, args.solo_warmup, args.solo_steps, args.cell_seconds)
    except Exception as error:
        print(f"solo {dataset.name} {backbone} compile={compile_mode}: {failure(error)}", flush=True)
        return None
    finally:
        del trainer
        reset_memory(device)
    timed = cycled(batches, args.solo_warmup, args.solo_warmup + len(times))
    targets = statistics.fmean(int(((b[:, :-1] > 0) & (b[:, 1:] > 0)).sum()) for b in timed)
    step_ms = statistics.median(times)
    row = {"dataset": dataset.name, "model": backbone, "tokens_per_s": f"{targets / step_ms * 1000:.0f}",
           "step_ms": f"{step_ms:.3f}", "step_ms_max": f"{max(times):.3f}", "batch_size": args.batch_size,
           "max_len": max_len,
           "n_items": dataset.n_items, "dtype": dtype_label(device), "machine": machine_description(device),
           "command": command, "compile": compile_mode}
    print(f"solo {dataset.name} {backbone} compile={compile_mode}: {row['tokens_per_s']} tokens/s, "
          f"{row['step_ms']} ms/step", flush=True)
    return row

def dtype_label(device: torch.device) -> str:
    return "bf16 autocast" if device.type == "cuda" else "fp32"


def csv_text(rows: list[dict], columns) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
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


def step_markdown(rows: list[dict], profiles: list[dict], solo_rows: list[dict], checks: list[str],
                  header: list[str]) -> str:
    lines = [*header, ""]
    if checks:
        lines += ["## Checked on this device before timing", "", *checks]
    for section, title in (("step", "Step table"), ("books", "Books scale")):
        own = [r for r in rows if r["section"] == section]
        if not own:
            continue
        columns = list(dict.fromkeys((r["seq_len"], r["n_items"], r["loss_path"], r["compile"]) for r in own))
        cells = {(r["model"], r["seq_len"], r["n_items"], r["loss_path"], r["compile"]): r for r in own}
        table = [[model, *(ms_cell(cells.get((model, *column))) for column in columns)]
                 for model in dict.fromkeys(r["model"] for r in own)]
        lines += [f"## {title}: median ms per step (peak GiB)", "",
                  pipe_table(["backbone", *(f"T {t}, {i:,} items, {p}, compile {c}" for t, i, p, c in columns)], table,
                             align="l" + "r" * len(columns))]
        warmups = [f"{r['model']} T {r['seq_len']} {r['compile']} {r['warmup_s']}" for r in own
                   if r["status"] == "ok" and r["compile"] != "off"]
        lines += ["", *speedup_lines(own)]
        if warmups:
            lines.append("Warm-up seconds of the compiled cells (compilation included): " + "; ".join(warmups) + ".")
        lines.append("")
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
                                            f"{float(c['tokens_per_s']):,.0f} ({float(c['step_ms']):.1f})"
                                            for c in cells)])
        lines += ["## Solo training throughput on real windows: tokens/s (ms per step)", "",
                  pipe_table(["dataset", "backbone", *(f"compile {m}" for m in modes)], table,
                             align="ll" + "r" * len(modes)),
                  "", *grid_speedup_lines(solo_rows), ""]
    return "\n".join(lines)


def speedup_lines(rows: list[dict]) -> list[str]:
    """Eager step time over each compiled mode's, per backbone and shape, where both ran."""
    timed = {(r["model"], r["seq_len"], r["n_items"], r["loss_path"], r["compile"]): float(r["step_ms"])
             for r in rows if r["status"] == "ok"}
    ratios = []
    for (model, length, items, path, mode), ms in timed.items():
        eager = timed.get((model, length, items, path, "off"))
        if mode != "off" and eager is not None:
            ratios.append(f"{model} T {length} {path} {mode} {eager / ms:.2f}x")
    lines = ["Speed-up of the compiled step over eager: " + "; ".join(ratios) + "."] if ratios else []
    for (length, items, path, mode) in dict.fromkeys((t, i, p, c) for (_, t, i, p, c) in timed if c != "off"):
        pairs = [(timed[(m, t, i, p, "off")], ms) for (m, t, i, p, c), ms in timed.items()
                 if (t, i, p, c) == (length, items, path, mode) and (m, t, i, p, "off") in timed]
        lines.append(f"All {len(pairs)} backbones measured both ways at T {length} ({path}), one step of each: eager "
                     f"{sum(e for e, _ in pairs):.1f} ms, {mode} {sum(c for _, c in pairs):.1f} ms, "
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

    def __init__(self, out_dir: Path, header: list[str], checks: list[str], solo_mode: str | None, command: str):
        self.out_dir, self.header, self.checks, self.solo_mode = out_dir, header, checks, solo_mode
        self.command = command
        self.rows, self.profiles, self.solo_rows = [], [], []

    def write(self) -> None:
        write_atomically(self.out_dir / "step.csv", csv_text(self.rows, STEP_COLUMNS))
        write_atomically(self.out_dir / "step.md",
                         step_markdown(self.rows, self.profiles, self.solo_rows, self.checks, self.header))
        if self.solo_mode is not None:
            write_atomically(self.out_dir / "solo_throughput.csv",
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
    header = [*runs[0]["header"], "", f"Merged from {len(runs)} runs made side by side, each on a GPU of its own: "
              + "; ".join(f"`{command}`" for command in commands) + "."]
    if missing:
        header.append(f"Runs that left no results: {', '.join(missing)}.")
    report = Report(out_dir, header, [line for run in runs for line in run["checks"]],
                    next((run["solo_mode"] for run in runs if run["solo_mode"] is not None), None),
                    "; ".join(commands))
    for run in runs:
        report.rows += run["rows"]
        report.profiles += run["profiles"]
        report.solo_rows += run["solo_rows"]
    out_dir.mkdir(parents=True, exist_ok=True)
    report.write()
    return report


def parse_list(value: str, everything: list[str] | tuple[str, ...]) -> list[str]:
    return list(everything) if value == "all" else [part for part in value.split(",") if part]



def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="all", help="backbones, comma-separated, or all (default)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--lengths", default="50,200")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--n-heads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--cell-seconds", type=float, default=3.0,
                        help="fewer timed steps (at least 2) when a cell would take longer than this")
    parser.add_argument("--loss-path", default="fused,chunked", help="fused, chunked or both (comma-separated)")
    parser.add_argument("--compile", default="off",
                        help="step modes, comma-separated: off, inductor, cudagraphs, graphs, auto")
    parser.add_argument("--check-compiled", default="prism",
                        help="backbones whose compiled encoder is checked against eager first ('' for none)")
    parser.add_argument("--check-only", action="store_true",
                        help="only the checks of --check-compiled in the modes of --compile; exit 1 if one fails")
    parser.add_argument("--books-models", default="sasrec", help="backbones at Books scale ('' for none)")
    parser.add_argument("--books-items", type=int, default=340000)
    parser.add_argument("--books-length", type=int, default=200)
    parser.add_argument("--profile-steps", type=int, default=3, help="0: no per-operator breakdown")
    parser.add_argument("--datasets", default="", help="solo throughput on these datasets (all: the headline six)")
    parser.add_argument("--solo-models", default="", help="backbones of the solo runs ('': those of --models)")
    parser.add_argument("--solo-compile", default="", help="step modes of the solo runs ('': those of --compile)")
    parser.add_argument("--solo-steps", type=int, default=30)
    parser.add_argument("--solo-warmup", type=int, default=5)
    parser.add_argument("--solo-loss-path", default="auto", help="loss path of the solo runs (auto: fused on CUDA)")
    parser.add_argument("--no-steps", action="store_true", help="only the solo throughput")
    parser.add_argument("--time-budget", type=float, default=float("inf"),
                        help="seconds after which no further cell starts (those left are recorded as skipped)")
    parser.add_argument("--merge", default="",
                        help="only merge the step.json of these run folders (comma-separated) into --out-dir")
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.merge:
        report = merge([Path(part) for part in args.merge.split(",") if part], args.out_dir)
        print(step_markdown(report.rows, report.profiles, report.solo_rows, report.checks, report.header), flush=True)
        return
    budget = Budget(args.time_budget)
    device = resolve_device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)
    command = "python benchmarks/step_bench.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    models = trained_backbones(parse_list(args.models, list_backbones()))
    loss_paths = usable_loss_paths(args.loss_path, device)
    compile_modes = list(dict.fromkeys(resolve_compile(mode, device) for mode in args.compile.split(",") if mode))
    solo_modes = list(dict.fromkeys(resolve_compile(mode, device) for mode in args.solo_compile.split(",") if mode))
    solo_modes = solo_modes or compile_modes
    header = report_header(args, device, command)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    checks, compiled_passed = startup_checks(args, device, loss_paths, compile_modes)
    if args.check_only:
        sys.exit(0 if compiled_passed else 1)
    report = Report(args.out_dir, header, checks, solo_modes[-1] if args.datasets and solo_modes else None, command)
    if not args.no_steps:
        measure_step_cells(report, args, models, loss_paths, compile_modes, device, budget)
    if args.datasets:
        measure_solo(report, args, models, solo_modes, device, command, budget)
    report.write()
    print(step_markdown(report.rows, report.profiles, report.solo_rows, checks, header), flush=True)


def usable_loss_paths(option: str, device: torch.device) -> list[str]:
    """The loss paths of ``--loss-path`` that run on ``device`` (the others said and skipped)."""
    loss_paths = []
    for path in option.split(","):
        try:
            loss_paths.append(resolve_path(path, device))
        except ValueError as error:
            print(f"loss path {path!r} skipped on {device}: {error}", flush=True)
    return loss_paths


def report_header(args: argparse.Namespace, device: torch.device, command: str) -> list[str]:
    return [f"# Training step: {machine_description(device)}", "",
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; triton "
            f"{triton_version()}; {dtype_label(device)}; command `{command}`.",
            f"One step = forward, backward, AdamW (prism_rec.training.trainer's model and objective, full softmax "
            f"through prism_rec.training.losses), batch {args.batch_size}, d_model {args.d_model}, {args.n_layers} "
            f"layers, {args.n_heads} heads, random full windows; median wall time of up to {args.steps} steps after "
            f"{args.warmup} warm-up steps, synchronised per step; peak = torch.cuda.max_memory_allocated. "
            f"Compile modes (prism_rec/training/compile.py): off = eager; inductor = the encoder through "
            f"torch.compile (TorchInductor); cudagraphs = the same replayed as CUDA graphs; graphs = the eager "
            f"kernels, unfused, replayed as CUDA graphs; compiled steps use fused AdamW on CUDA. "
            f"The warm-up steps include the compilation, which the timed steps do not."]


def startup_checks(args: argparse.Namespace, device: torch.device, loss_paths: list[str],
                   compile_modes: list[str]) -> tuple[list[str], bool]:
    """The fused loss and the compiled encoders against their references, before anything is timed: report
    lines, and whether every compiled check passed."""
    checks = []
    if device.type == "cuda" and "fused" in loss_paths and not (args.no_steps or args.check_only):
        checks += ["Fused loss against the chunked one (stops the run when they differ):", *check_fused(device), ""]
    # on CUDA also TorchInductor without CUDA graphs, which tells a failure of the graphs from one of the compiler
    diagnose = device.type == "cuda" and not args.check_only
    check_modes = list(dict.fromkeys([*compile_modes, "inductor"] if diagnose else compile_modes))
    compiled_checks, compiled_passed = check_compiled(trained_backbones(parse_list(args.check_compiled, [])),
                                                      check_modes, device)
    if compiled_checks:
        checks += ["Compiled encoder against eager (fp32, TF32 off, dropout 0):", *compiled_checks, ""]
    return checks, compiled_passed


def measure_step_cells(report: Report, args: argparse.Namespace, models: list[str], loss_paths: list[str],
                       compile_modes: list[str], device: torch.device, budget: Budget) -> None:
    """Every step cell, in the order a run cut short should keep: the first length, its profiles
    (TorchInductor's cache holds their compiled graphs by then), Books scale, the other lengths."""
    lengths = [int(x) for x in args.lengths.split(",") if x]

    def measure(cells: list[tuple[str, str, int, int]]) -> None:
        for section, backbone, items, length in cells:
            for path in loss_paths:
                for mode in compile_modes:
                    report.rows.append(step_cell(section, backbone, items, length, path, mode, args, device, budget))
                    report.write()

    measure([("step", backbone, args.items, length) for length in lengths[:1] for backbone in models])
    for backbone in models if args.profile_steps and lengths and loss_paths else []:
        for mode in compile_modes:
            if not budget.spent():
                shape = {"model": backbone, "seq_len": lengths[0], "loss_path": loss_paths[0], "compile": mode}
                report.profiles.append({**shape, **profile_backbone(backbone, args.items, lengths[0],
                                                                    loss_paths[0], mode, args, device)})
                report.write()
    measure([("books", backbone, args.books_items, args.books_length)
             for backbone in parse_list(args.books_models, models)])
    measure([("step", backbone, args.items, length) for length in lengths[1:] for backbone in models])


def measure_solo(report: Report, args: argparse.Namespace, models: list[str], solo_modes: list[str],
                 device: torch.device, command: str, budget: Budget) -> None:
    """Solo training tokens/s of every backbone on each dataset of ``--datasets`` present here."""
    solo_models = trained_backbones(parse_list(args.solo_models, models)) if args.solo_models else models
    for name in parse_list(args.datasets, HEADLINE_DATASETS):
        try:
            get_dataset(name)
            dataset = load_dataset(name)
        except KeyError:
            print(f"solo: dataset {name!r} is not registered; skipped", flush=True)
            continue
        except MissingDataError as error:
            print(f"solo: dataset {name!r} has no data here ({str(error).splitlines()[0]}); skipped", flush=True)
            continue
        windows = torch.from_numpy(training_windows(dataset, get_dataset(name).max_len))
        for backbone in solo_models:
            for mode in solo_modes:
                row = solo_cell(dataset, windows, backbone, mode, args, device, command, budget)
                if row is not None:
                    report.solo_rows.append(row)
                    report.write()


def trained_backbones(names: list[str]) -> list[str]:
    """``names`` without the popularity rankers, which train nothing (said once each)."""
    models = []
    for backbone in names:
        if getattr(backbone_entry(backbone).factory, "ranks_by_popularity", False):
            print(f"{backbone}: ranks by popularity and trains nothing; skipped", flush=True)
        else:
            models.append(backbone)
    return models


if __name__ == "__main__":
    main()
