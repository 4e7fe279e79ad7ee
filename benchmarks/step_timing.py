"""Timing and profiling the training step of prism_rec/training/step.py, for the step benchmark and profile.

``bench_step`` builds the ``TrainingStep`` that ``fit`` trains with (build_model, TrainConfig, parameter
groups, the compile mode, bf16 autocast on CUDA) for one backbone, or for the floor (``FLOOR``: the same
recommender and step with an identity mixer, the cost of the item embedding, final norm, loss and optimizer
alone); ``timed_steps`` and ``profile_steps`` call its ``on_batch``, the step ``fit`` runs on a batch.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.training.config import TrainConfig
from prism_rec.training.step import TrainingStep
from prism_rec.training.trainer import build_model, set_seed

FLOOR = "floor"
# a backbone without positions: the floor's recommender is this backbone's with the backbone replaced
FLOOR_BASE = "gated_deltanet"


class IdentityMixer(nn.Module):
    """The floor's backbone: hidden states [B, T, d] pass through unmixed."""

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return hidden


def floor_model(n_items: int, config: TrainConfig) -> SequentialRecommender:
    """The recommender of ``FLOOR_BASE`` (no positions; its item-table initialisation) with an identity mixer."""
    model = SequentialRecommender(n_items, FLOOR_BASE, d_model=config.d_model, max_len=config.max_len,
                                  dropout=config.dropout, n_layers=1, n_heads=config.n_heads)
    model.backbone = IdentityMixer()
    return model


def bench_step(n_items: int, backbone: str, batch_size: int, length: int, args, device: torch.device,
               loss_path: str, compile_mode: str) -> TrainingStep:
    """The training step of ``backbone`` (or ``FLOOR``) at width args.d_model, args.n_layers layers and
    args.n_heads heads, for batches of ``batch_size`` windows of ``length`` items, seeded with 0."""
    config = TrainConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, max_len=length,
                         batch_size=batch_size, device=str(device), progress=False, compile=compile_mode)
    set_seed(0)
    model = (floor_model(n_items, config) if backbone == FLOOR
             else build_model(SimpleNamespace(n_items=n_items), backbone, config))
    return TrainingStep(model.to(device), config, device, backbone, loss_path=loss_path)


class Budget:
    """The wall seconds a run may spend starting cells; a cell not started in time is recorded as skipped."""

    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds

    def spent(self) -> bool:
        return time.perf_counter() > self.deadline


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cycled(batches: list[torch.Tensor], start: int, stop: int) -> list[torch.Tensor]:
    """The batches of steps start..stop-1, going round ``batches`` again when the steps outnumber them."""
    return [batches[index % len(batches)] for index in range(start, stop)]


def warm_up(step: TrainingStep, batches: list[torch.Tensor]) -> float:
    """Trains on ``batches``; returns the seconds of the last one (the first ones compile kernels)."""
    per_step = 0.0
    for batch in batches:
        started = time.perf_counter()
        step.on_batch(batch)
        synchronize(step.device)
        per_step = time.perf_counter() - started
    return per_step


def timed_steps(step: TrainingStep, batches: list[torch.Tensor], warmup: int, steps: int,
                cell_seconds: float) -> list[float]:
    """Wall ms of each timed step (synchronised per step), after ``warmup`` steps; fewer timed steps when
    one step would make the cell last more than ``cell_seconds``. Step i trains on cycled(batches, i, i + 1)."""
    per_step = warm_up(step, cycled(batches, 0, warmup))
    steps = max(2, min(steps, int(cell_seconds / max(per_step, 1e-9))))
    times = []
    for batch in cycled(batches, warmup, warmup + steps):
        begin = time.perf_counter()
        step.on_batch(batch)
        synchronize(step.device)
        times.append((time.perf_counter() - begin) * 1000)
    return times


def profile_steps(step: TrainingStep, batches: list[torch.Tensor], warmup: int, steps: int,
                  top_operators: int) -> dict:
    """torch.profiler over ``steps`` steps after ``warmup`` (batches cycled): wall and device ms per step
    (CUDA kernels; on CPU the operators' self CPU time), kernel launches (CPU: operator calls) per step
    and the ``top_operators`` operators by device time as (name, ms per step)."""
    device = step.device
    warm_up(step, cycled(batches, 0, warmup))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        for batch in cycled(batches, warmup, warmup + steps):
            step.on_batch(batch)
        synchronize(device)
        wall_ms = (time.perf_counter() - started) * 1000 / steps
    events = profiler.key_averages()
    if device.type == "cuda":
        kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        key, launches, device_us = "self_device_time_total", len(kernels), sum(e.device_time for e in kernels)
    else:
        key = "self_cpu_time_total"
        launches, device_us = sum(e.count for e in events), sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:top_operators]
    return {"wall_ms": wall_ms, "device_ms": device_us / steps / 1000, "launches": launches / steps,
            "top": [(e.key, getattr(e, key) / steps / 1000) for e in top]}


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


def dtype_label(device: torch.device) -> str:
    return "bf16 autocast" if device.type == "cuda" else "fp32"
