"""Where a training step's time goes: torch.profiler over real batches of a dataset, per backbone.

    python benchmarks/step_profile.py --dataset books-dealrec --models prism,sasrec [--steps 20] [--compile MODE]
                                      [--out FILE]

For each backbone it trains ``--warmup`` steps, then profiles ``--steps`` steps of the headline settings
(d_model 64, 2 layers, batch 256, the dataset's window) and reports the wall time per step, the device
time per step (CUDA kernels; on CPU the operators' self time), the number of kernel launches per step and
the operators that take the most device time. Wall time far above device time means the step is bound by
launches and Python, not by the GPU. ``--compile`` profiles the compiled step of prism_rec/training/compile.py
(off, inductor, cudagraphs, graphs, auto). The markdown table goes to stdout and, with ``--out``, to a file.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from prism_rec.training.compile import optimizer_options, resolve_compile, training_encoder
from prism_rec.data.batching import training_windows
from prism_rec.data.sources import load_dataset
from prism_rec.files import write_atomically
from prism_rec.experiments.headline.protocol import training_config
from prism_rec.markdown import pipe_table
from prism_rec.tracking.store import machine_description
from prism_rec.training.trainer import NextItemObjective, build_model, set_seed
from prism_rec.training.devices import resolve_device

TOP_OPERATORS = 6


def profile_backbone(dataset, backbone: str, device: torch.device, warmup: int, steps: int,
                     compile_mode: str = "off") -> dict:
    config = training_config(dataset.name, backbone, 0, str(device), {}, lr=1e-3)  # a step costs the same at any rate
    set_seed(0)
    model = build_model(dataset, backbone, config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay,
                                  **optimizer_options(compile_mode, device))
    objective = NextItemObjective(model, config, torch.Generator(device=device).manual_seed(0))
    objective.encode = training_encoder(model, config.batch_size, compile_mode)
    windows = torch.from_numpy(training_windows(dataset, config.max_len))  # [W, T + 1]
    batches = torch.randperm(len(windows), generator=torch.Generator().manual_seed(0)).split(config.batch_size)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step(index: int) -> None:
        with autocast:
            loss_sum, targets = objective(windows[batches[index % len(batches)]].to(device))
        optimizer.zero_grad(set_to_none=True)
        (loss_sum / max(targets, 1)).backward()
        optimizer.step()

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for index in range(warmup):
        step(index)
    synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        for index in range(warmup, warmup + steps):
            step(index)
        synchronize()
        wall = (time.perf_counter() - started) / steps
    events = profiler.key_averages()
    if device.type == "cuda":
        kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        device_us = sum(e.device_time for e in kernels) / steps
        launches = len(kernels) / steps
        top = sorted(events, key=lambda e: e.self_device_time_total, reverse=True)[:TOP_OPERATORS]
        top_text = ", ".join(f"{e.key} {e.self_device_time_total / steps / 1000:.2f}" for e in top)
    else:
        device_us = sum(e.self_cpu_time_total for e in events) / steps
        launches = sum(e.count for e in events) / steps
        top = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:TOP_OPERATORS]
        top_text = ", ".join(f"{e.key} {e.self_cpu_time_total / steps / 1000:.2f}" for e in top)
    return {"backbone": backbone, "wall_ms": wall * 1000, "device_ms": device_us / 1000, "launches": launches,
            "top": top_text, "tokens": int((windows[batches[0]][:, :-1] > 0).sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--models", default="sasrec,gated_deltanet,prism")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", default="off", help="step mode (prism_rec/training/compile.py)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = resolve_device(args.device)
    compile_mode = resolve_compile(args.compile, device)
    dataset = load_dataset(args.dataset)
    unit = "CUDA kernel" if device.type == "cuda" else "operator self CPU"
    rows = [profile_backbone(dataset, name, device, args.warmup, args.steps, compile_mode)
            for name in args.models.split(",")]
    lines = [
        f"# Training-step profile: {args.dataset} on {machine_description(device)}",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; torch {torch.__version__}; command "
        f"`python benchmarks/step_profile.py --dataset {args.dataset} --models {args.models} --device {args.device} "
        f"--warmup {args.warmup} --steps {args.steps} --compile {args.compile}` (step mode {compile_mode}). "
        "Headline settings (d_model 64, 2 layers, batch 256, bf16 "
        f"autocast on CUDA); one step = forward, backward, AdamW. Device time = {unit} time per step.",
        "",
        pipe_table(["backbone", "wall ms/step", "device ms/step",
                    f"{'kernel launches' if device.type == 'cuda' else 'operator calls'}/step",
                    "tokens in the first batch", "top operators (device ms/step)"],
                   [[r["backbone"], f"{r['wall_ms']:.1f}", f"{r['device_ms']:.1f}", f"{r['launches']:.0f}",
                     f"{r['tokens']:,}", str(r["top"])] for r in rows], align="lrrrrl"),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        write_atomically(args.out, text)


if __name__ == "__main__":
    main()
