"""Training-step time of every backbone with the full-softmax loss, and solo training throughput.

    python benchmarks/step_bench.py [--models all|a,b] [--loss-path fused,chunked] [--datasets all|a,b]

One step = forward, backward, AdamW step (bf16 autocast on CUDA, fp32 on CPU), built as
prism_rec/train.py builds it (build_model, TrainConfig, NextItemObjective; the full-softmax branch
goes through prism_rec.losses.full_softmax_loss_sum with the path named by --loss-path). Step table:
random full windows of --batch-size x T for T in --lengths over --items items (d_model 64, 2 layers, 2
heads), the median wall time of --steps steps after --warmup (synchronised per step) and the peak
memory; Books scale: --books-models at --books-items items, T 200; a torch.profiler breakdown of each
backbone at the first length. Solo throughput (--datasets): per dataset and backbone, real training
windows (batch --batch-size, the dataset's window), tokens/s over --solo-steps steps after
--solo-warmup (fewer, at least 2, where they would take more than --cell-seconds), counting the real
target positions as train.py does. On CUDA the script first checks
the fused loss against the chunked one (loss and gradients) and stops if they differ.

Writes <out>/step.md and step.csv, and with --datasets <out>/solo_throughput.csv.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
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
from prism_rec.losses import full_softmax_loss_sum, resolve_path
from prism_rec.registry import backbone_entry, get_dataset, list_backbones
from prism_rec.tracking import machine_description
from prism_rec.train import NextItemObjective, TrainConfig, build_model, resolve_device, set_seed

HEADLINE_DATASETS = ("ml-100k", "yelp-iclrec", "electronics-gerec", "books-dealrec", "movies-long", "movies-fedcsr")
SOLO_COLUMNS = ("dataset", "model", "tokens_per_s", "step_ms", "batch_size", "max_len", "n_items", "dtype", "machine",
                "command")
STEP_COLUMNS = ("section", "model", "seq_len", "n_items", "batch_size", "loss_path", "dtype", "step_ms",
                "peak_memory_gib", "target_tokens", "status")
TOP_OPERATORS = 5


class BenchObjective(NextItemObjective):
    """NextItemObjective whose full-softmax loss goes through ``full_softmax_loss_sum`` on ``loss_path``."""

    def __init__(self, model, config, generator, loss_path: str):
        super().__init__(model, config, generator)
        self.loss_path = loss_path

    def forward(self, window: torch.Tensor) -> tuple[torch.Tensor, int]:
        inputs, targets = window[:, :-1], window[:, 1:]
        trained = (inputs > 0) & (targets > 0)
        hidden = self.model.encode(inputs)[trained]
        loss_sum = full_softmax_loss_sum(hidden, self.model.item_table(), targets[trained] - 1, path=self.loss_path)
        return loss_sum, int(trained.sum())


class Trainer:
    """One backbone's model, optimizer and step, as in prism_rec.train's loop."""

    def __init__(self, n_items: int, backbone: str, max_len: int, args, device: torch.device, loss_path: str):
        self.config = TrainConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, max_len=max_len,
                                  batch_size=args.batch_size, device=str(device), progress=False)
        set_seed(0)
        self.model = build_model(SimpleNamespace(n_items=n_items), backbone, self.config).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.config.lr,
                                           weight_decay=self.config.weight_decay)
        self.objective = BenchObjective(self.model, self.config, torch.Generator(device=device).manual_seed(0),
                                        loss_path)
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


def timed_steps(trainer: Trainer, batches: list[torch.Tensor], warmup: int, steps: int,
                cell_seconds: float) -> list[float]:
    """Wall ms of each timed step (synchronised per step), after ``warmup`` steps; fewer timed steps when
    one step would make the cell last more than ``cell_seconds``."""
    per_step = warm_up(trainer, [batches[index % len(batches)] for index in range(warmup)])
    steps = max(2, min(steps, int(cell_seconds / max(per_step, 1e-9))))
    times = []
    for index in range(warmup, warmup + steps):
        begin = time.perf_counter()
        trainer.step(batches[index % len(batches)])
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


def step_cell(section: str, backbone: str, n_items: int, length: int, loss_path: str, args, device) -> dict:
    row = {"section": section, "model": backbone, "seq_len": length, "n_items": n_items, "batch_size": args.batch_size,
           "loss_path": loss_path, "dtype": dtype_label(device), "step_ms": "", "peak_memory_gib": "",
           "target_tokens": args.batch_size * length, "status": "ok"}
    trainer = None
    try:
        trainer = Trainer(n_items, backbone, length, args, device, loss_path)
        reset_memory(device)
        batches = random_windows(n_items, args.batch_size, length, 4)
        times = timed_steps(trainer, batches, args.warmup, args.steps, args.cell_seconds)
        row["step_ms"] = f"{statistics.median(times):.3f}"
        memory = peak_memory_gib(device)
        row["peak_memory_gib"] = "" if memory is None else f"{memory:.2f}"
    except torch.cuda.OutOfMemoryError:
        row["status"] = "out of memory"
    except Exception as error:  # one backbone's failure is reported in its cell, the others still run
        row["status"] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    finally:
        del trainer
        reset_memory(device)
    print(f"{section} {backbone} T={length} items={n_items} {loss_path}: {row['step_ms'] or row['status']} ms, "
          f"peak {row['peak_memory_gib'] or '-'} GiB", flush=True)
    return row


def profile_backbone(backbone: str, n_items: int, length: int, loss_path: str, args, device) -> str:
    """The top operators of a few steps by device time (CUDA kernels; operators' self CPU time on CPU)."""
    try:
        trainer = Trainer(n_items, backbone, length, args, device, loss_path)
        batches = random_windows(n_items, args.batch_size, length, 2)
        for index in range(2):
            trainer.step(batches[index])
        synchronize(device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with profile(activities=activities) as profiler:
            for index in range(args.profile_steps):
                trainer.step(batches[index % 2])
            synchronize(device)
    except Exception as error:
        return f"profile failed: {type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    events = profiler.key_averages()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    total = sum(getattr(e, key) for e in events) / args.profile_steps / 1000
    top = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:TOP_OPERATORS]
    return f"{total:.2f} ms/step in all; " + ", ".join(
        f"`{e.key[:60]}` {getattr(e, key) / args.profile_steps / 1000:.2f}" for e in top)


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
            lines.append(f"- {label}: relative gap of loss {gaps[0]:.1e}, d(hidden) {gaps[1]:.1e}, d(table) {gaps[2]:.1e}")
            assert gaps[0] < limit[0] and max(gaps[1:]) < limit[1], f"fused loss differs from chunked at {label}: {gaps}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return lines


def solo_cell(dataset, windows: torch.Tensor, backbone: str, args, device, command: str) -> dict | None:
    """Training tokens/s of ``backbone`` on real windows of ``dataset`` alone on the device."""
    max_len = windows.shape[1] - 1
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(0))
    batches = [windows[index] for index in order.split(args.batch_size)]
    batches = (batches * (-(-(args.solo_warmup + args.solo_steps) // len(batches))))[: args.solo_warmup + args.solo_steps]
    tokens = [int(((b[:, :-1] > 0) & (b[:, 1:] > 0)).sum()) for b in batches]
    try:
        trainer = Trainer(dataset.n_items, backbone, max_len, args, device, args.solo_loss_path)
        per_step = warm_up(trainer, batches[: args.solo_warmup])
        timed = max(2, min(args.solo_steps, int(args.cell_seconds / max(per_step, 1e-9))))
        batches, tokens = batches[: args.solo_warmup + timed], tokens[: args.solo_warmup + timed]
        started = time.perf_counter()
        for batch in batches[args.solo_warmup :]:
            trainer.step(batch)
        synchronize(device)
        seconds = time.perf_counter() - started
    except Exception as error:
        print(f"solo {dataset.name} {backbone}: failed ({type(error).__name__}: {str(error)[:120]})", flush=True)
        return None
    finally:
        reset_memory(device)
    row = {"dataset": dataset.name, "model": backbone, "tokens_per_s": f"{sum(tokens[args.solo_warmup:]) / seconds:.0f}",
           "step_ms": f"{seconds / timed * 1000:.3f}", "batch_size": args.batch_size, "max_len": max_len,
           "n_items": dataset.n_items, "dtype": dtype_label(device), "machine": machine_description(device),
           "command": command}
    print(f"solo {dataset.name} {backbone}: {row['tokens_per_s']} tokens/s, {row['step_ms']} ms/step", flush=True)
    return row


def dtype_label(device: torch.device) -> str:
    return "bf16 autocast" if device.type == "cuda" else "fp32"


def csv_text(rows: list[dict], columns) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def step_markdown(rows: list[dict], profiles: dict[str, str], checks: list[str], header: list[str],
                  loss_paths: list[str]) -> str:
    lines = [*header, ""]
    if checks:
        lines += ["Fused loss checked against the chunked one on this device before timing:", *checks, ""]
    for section, title in (("step", "Step table"), ("books", "Books scale")):
        own = [r for r in rows if r["section"] == section]
        if not own:
            continue
        shapes = sorted({(r["seq_len"], r["n_items"]) for r in own})
        columns = [(length, items, path) for length, items in shapes for path in loss_paths]
        lines += [f"## {title}: median ms per step (peak GiB)", "",
                  "| backbone | " + " | ".join(f"T {t}, {i:,} items, {p}" for t, i, p in columns) + " |",
                  "|---|" + "---:|" * len(columns)]
        cells = {(r["model"], r["seq_len"], r["n_items"], r["loss_path"]): r for r in own}
        for model in dict.fromkeys(r["model"] for r in own):
            values = []
            for length, items, path in columns:
                cell = cells.get((model, length, items, path))
                if cell is None:
                    values.append("")
                elif cell["status"] != "ok":
                    values.append(cell["status"])
                else:
                    memory = f" ({cell['peak_memory_gib']})" if cell["peak_memory_gib"] else ""
                    values.append(f"{float(cell['step_ms']):.2f}{memory}")
            lines.append(f"| {model} | " + " | ".join(values) + " |")
        lines.append("")
    if profiles:
        lines += ["## Where the time goes (torch.profiler, top operators by device time, ms per step)", ""]
        lines += [f"- {model}: {text}" for model, text in profiles.items()]
        lines.append("")
    return "\n".join(lines)


def parse_list(value: str, everything: list[str] | tuple[str, ...]) -> list[str]:
    return list(everything) if value == "all" else [part for part in value.split(",") if part]


def main(argv: list[str] | None = None) -> None:
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
    parser.add_argument("--books-models", default="sasrec", help="backbones at Books scale ('' for none)")
    parser.add_argument("--books-items", type=int, default=340000)
    parser.add_argument("--books-length", type=int, default=200)
    parser.add_argument("--profile-steps", type=int, default=3, help="0: no per-operator breakdown")
    parser.add_argument("--datasets", default="", help="solo throughput on these datasets (all: the headline six)")
    parser.add_argument("--solo-steps", type=int, default=30)
    parser.add_argument("--solo-warmup", type=int, default=5)
    parser.add_argument("--solo-loss-path", default="auto", help="loss path of the solo runs (auto: fused on CUDA)")
    parser.add_argument("--no-steps", action="store_true", help="only the solo throughput")
    parser.add_argument("--out-dir", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)
    command = "python benchmarks/step_bench.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    machine = machine_description(device)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    models = []
    for backbone in parse_list(args.models, list_backbones()):
        if getattr(backbone_entry(backbone).factory, "ranks_by_popularity", False):
            print(f"{backbone}: ranks by popularity and trains nothing; skipped", flush=True)
        else:
            models.append(backbone)
    loss_paths = []
    for path in args.loss_path.split(","):
        try:
            loss_paths.append(resolve_path(path, device))
        except ValueError as error:
            print(f"loss path {path!r} skipped on {device}: {error}", flush=True)
    header = [f"# Training step: {machine}", "",
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; triton "
              f"{triton_version}; {dtype_label(device)}; command `{command}`.",
              f"One step = forward, backward, AdamW (prism_rec.train's model and objective, full softmax through "
              f"prism_rec.losses), batch {args.batch_size}, d_model {args.d_model}, {args.n_layers} layers, "
              f"{args.n_heads} heads, random full windows; median wall time of up to {args.steps} steps after "
              f"{args.warmup} warm-up steps, synchronised per step; peak = torch.cuda.max_memory_allocated."]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if not args.no_steps:
        checks = check_fused(device) if device.type == "cuda" and "fused" in loss_paths else []
        rows, profiles = [], {}
        lengths = [int(x) for x in args.lengths.split(",") if x]
        for backbone in models:
            for length in lengths:
                for path in loss_paths:
                    rows.append(step_cell("step", backbone, args.items, length, path, args, device))
            if args.profile_steps and lengths and loss_paths:
                profiles[f"{backbone} (T {lengths[0]}, {loss_paths[0]})"] = profile_backbone(
                    backbone, args.items, lengths[0], loss_paths[0], args, device)
        for backbone in parse_list(args.books_models, models):
            for path in loss_paths:
                rows.append(step_cell("books", backbone, args.books_items, args.books_length, path, args, device))
        write_atomically(args.out_dir / "step.csv", csv_text(rows, STEP_COLUMNS))
        text = step_markdown(rows, profiles, checks, header, loss_paths)
        write_atomically(args.out_dir / "step.md", text)
        print(text, flush=True)
    if args.datasets:
        solo_rows = []
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
            max_len = get_dataset(name).max_len
            windows = torch.from_numpy(training_windows(dataset, max_len))
            for backbone in models:
                row = solo_cell(dataset, windows, backbone, args, device, command)
                if row is not None:
                    solo_rows.append(row)
        write_atomically(args.out_dir / "solo_throughput.csv", csv_text(solo_rows, SOLO_COLUMNS))


if __name__ == "__main__":
    main()
