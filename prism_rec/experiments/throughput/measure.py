"""Timing training steps: one case (length x batch) of one backbone, warm-up then timed steps of the
training step ``fit`` runs (prism_rec/training/step.py), eager, with the full-softmax loss."""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field

import torch

from ...models.recommender import SequentialRecommender
from ...training.config import TrainConfig
from ...training.step import TrainingStep, to_device, trained_positions
from .shapes import Configuration, Shape, head_options


@dataclass
class CaseResult:
    """One (backbone, shape, length, batch) measurement; ``status``: ok, out of memory, over time, failed, not run."""

    backbone: str
    shape: str
    length: int
    batch: int
    status: str
    step_s: float | None = None  # median timed step; for "over time", the last warm-up step
    steps: int = 0
    peak_memory_mib: float | None = None
    detail: str = ""

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.step_s is None else self.batch * self.length / self.step_s


@dataclass
class BackboneResults:
    backbone: str
    shape: Shape
    options: dict
    parameters: int | None
    cases: list[CaseResult] = field(default_factory=list)


def timed_step(step, device: torch.device) -> float:
    """Seconds one call of ``step`` takes: CUDA events on CUDA, the host clock elsewhere."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000
    begin = time.perf_counter()
    step()
    return time.perf_counter() - begin


def release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_steps(training_step: TrainingStep, case: CaseResult, vocabulary: int, configuration: Configuration,
                  device: torch.device) -> CaseResult:
    """Warm up, then time training steps of ``case`` within the per-case budget."""
    window = torch.randint(1, vocabulary + 1, (case.batch, case.length + 1), generator=torch.Generator().manual_seed(0))
    positions = int(trained_positions(window).sum())
    window = to_device(window, device)

    def step() -> None:
        training_step(window, positions, 1 / positions)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timed_step(step, device)  # compiles kernels and fills caches: outside the budget
    began = time.perf_counter()
    for _ in range(configuration.warmup - 1):
        last_warmup_s = timed_step(step, device)
        if time.perf_counter() - began > configuration.case_budget_s / 2:
            break
    if time.perf_counter() - began > configuration.case_budget_s:
        case.status, case.step_s = "over time", last_warmup_s
        return case
    times = []
    while len(times) < configuration.steps and (not times
                                                 or time.perf_counter() - began <= configuration.case_budget_s):
        times.append(timed_step(step, device))
    case.status, case.step_s, case.steps = "ok", statistics.median(times), len(times)
    if device.type == "cuda":
        case.peak_memory_mib = torch.cuda.max_memory_allocated(device) / 2**20
    return case


def run_case(training_step: TrainingStep, case: CaseResult, vocabulary: int, configuration: Configuration,
             device: torch.device) -> CaseResult:
    try:
        measure_steps(training_step, case, vocabulary, configuration, device)
    except torch.OutOfMemoryError:
        case.status = "out of memory"
    except Exception as error:  # a backbone that breaks at one shape must not stop the others
        case.status, case.detail = "failed", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    training_step.optimizer.zero_grad(set_to_none=True)
    release_memory(device)
    return case


def measure_backbone(backbone: str, shape: Shape, configuration: Configuration, device: torch.device,
                     deadline: float | None) -> BackboneResults:
    """Every case of ``shape`` for ``backbone``, longer lengths skipped once a shorter one ran over time."""
    options = head_options(backbone, shape)
    results = BackboneResults(backbone, shape, options, None)
    pending = [CaseResult(backbone, shape.name, length, batch, "not run") for length, batch in shape.cases]
    if deadline is not None and time.perf_counter() > deadline:
        for case in pending:
            case.detail = "total budget spent"
        results.cases = pending
        return results
    try:
        with torch.device(device):
            model = SequentialRecommender(shape.vocabulary, backbone, d_model=shape.d_model,
                                          max_len=max(length for length, _ in shape.cases), dropout=shape.dropout,
                                          n_layers=shape.n_layers, **options)
    except torch.OutOfMemoryError:
        for case in pending:
            case.status = "out of memory"
        results.cases = pending
        release_memory(device)
        return results
    results.parameters = sum(parameter.numel() for parameter in model.parameters())
    training_step = TrainingStep(model, TrainConfig(lr=1e-4, compile="off"), device, backbone)
    model.train()
    slow_length = None
    for case in pending:
        if slow_length is not None:
            case.status, case.detail = "over time", f"skipped: over time at length {slow_length}"
        elif deadline is not None and time.perf_counter() > deadline:
            case.detail = "total budget spent"
        else:
            run_case(training_step, case, shape.vocabulary, configuration, device)
            if case.status == "over time":
                slow_length = case.length
        results.cases.append(case)
        print(f"{backbone:>16} {shape.name:>12} {case.length:>6} x {case.batch:<4} {format_case(case, configuration)}",
              flush=True)
    del model, training_step
    release_memory(device)
    return results


def format_rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s / 1000:.1f}K" if tokens_per_s >= 100 else f"{tokens_per_s:.1f}"


def format_case(case: CaseResult, configuration: Configuration) -> str:
    if case.status == "ok":
        text = f"{format_rate(case.tokens_per_s)} tok/s"
        if case.peak_memory_mib is not None:
            text += f", {case.peak_memory_mib / 1024:.1f} GiB"
        if case.steps < configuration.steps:
            text += f" ({case.steps} step{'s' if case.steps > 1 else ''})"
        return text
    if case.status == "over time" and case.step_s is not None:
        return f"over time (~{format_rate(case.tokens_per_s)} tok/s from one warm-up step)"
    return f"{case.status} ({case.detail})" if case.detail else case.status
