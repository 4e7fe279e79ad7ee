"""Solo training throughput of the step benchmark: tokens/s of each backbone's training step on real
training windows of a dataset, alone on the device."""

from __future__ import annotations

import statistics

import torch
from step_timing import bench_step, cycled, dtype_label, failure, reset_memory, timed_steps

from prism_rec.data.batching import training_windows
from prism_rec.data.core import MissingDataError
from prism_rec.data.sources import load_dataset
from prism_rec.registry import get_dataset
from prism_rec.tracking.store import machine_description

HEADLINE_DATASETS = ("ml-100k", "yelp-iclrec", "electronics-gerec", "books-dealrec", "movies-long", "movies-fedcsr")


def solo_cell(dataset, windows: torch.Tensor, backbone: str, compile_mode: str, args, device, command: str,
              budget) -> dict | None:
    """Training tokens/s of ``backbone`` on real windows of ``dataset`` alone on the device: the mean real
    targets of a timed batch over the median step (each step synchronised), so one slow step (a kernel
    tuned or compiled again) does not move it; the slowest step is kept as ``step_ms_max``, and the median
    step times the batches of an epoch as ``epoch_gpu_s`` (GPU seconds per epoch, step.md only)."""
    if budget.spent():
        print(f"solo {dataset.name} {backbone} compile={compile_mode}: skipped (time budget)", flush=True)
        return None
    max_len = windows.shape[1] - 1
    order = torch.randperm(len(windows), generator=torch.Generator().manual_seed(0))
    # full batches only: an epoch's last, smaller batch is one more shape to tune and compile kernels for
    batches = [windows[index] for index in order.split(args.batch_size)]
    epoch_batches = len(batches)
    batches = [batch for batch in batches if len(batch) == args.batch_size] or batches
    step = None
    try:
        step = bench_step(dataset.n_items, backbone, args.batch_size, max_len, args, device, args.solo_loss_path,
                          compile_mode)
        compile_mode = step.compile
        times = timed_steps(step, batches, args.solo_warmup, args.solo_steps, args.cell_seconds)
    except Exception as error:
        print(f"solo {dataset.name} {backbone} compile={compile_mode}: {failure(error)}", flush=True)
        return None
    finally:
        del step
        reset_memory(device)
    timed = cycled(batches, args.solo_warmup, args.solo_warmup + len(times))
    targets = statistics.fmean(int(((b[:, :-1] > 0) & (b[:, 1:] > 0)).sum()) for b in timed)
    step_ms = statistics.median(times)
    row = {"dataset": dataset.name, "model": backbone, "tokens_per_s": f"{targets / step_ms * 1000:.0f}",
           "step_ms": f"{step_ms:.3f}", "step_ms_max": f"{max(times):.3f}", "batch_size": args.batch_size,
           "max_len": max_len, "n_items": dataset.n_items, "dtype": dtype_label(device),
           "machine": machine_description(device), "command": command, "compile": compile_mode,
           "epoch_gpu_s": f"{step_ms * epoch_batches / 1000:.2f}"}
    print(f"solo {dataset.name} {backbone} compile={compile_mode}: {row['tokens_per_s']} tokens/s, "
          f"{row['step_ms']} ms/step", flush=True)
    return row


def measure_solo(report, args, models: list[str], solo_modes: list[str], device: torch.device, command: str,
                 budget) -> None:
    """Solo training tokens/s of every backbone of ``models`` on each dataset of ``--datasets`` present here."""
    for name in [part for part in args.datasets.split(",") if part] if args.datasets != "all" else HEADLINE_DATASETS:
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
        for backbone in models:
            for mode in solo_modes:
                row = solo_cell(dataset, windows, backbone, mode, args, device, command, budget)
                if row is not None:
                    report.solo_rows.append(row)
                    report.write()
