"""Train and evaluate one (task, model, seed) probe; pausable at a wall-clock deadline and resumable.

Training batches come from a NumPy generator seeded by (seed, task), so every model sees the same data
at a given seed; the evaluation set is seeded by the task alone (the same for every model and seed) and
is drawn from a separate stream, never from training batches. Loss is cross-entropy at the target
positions (the final token); the optimiser is AdamW with a constant learning rate and gradient clipping.
"""

from __future__ import annotations

import io
import time
import zlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..train import resolve_device
from .model import ProbeModel
from .settings import ProbeSettings
from .tasks import IGNORE, make_batch

EVAL_STREAM = 1_000_003
EVAL_BATCH = 512
LOSS_CURVE_POINTS = 20


@dataclass(frozen=True)
class ProbeJob:
    task: str
    model: str
    seed: int
    settings: ProbeSettings
    device: str = "cpu"
    deadline: float = float("inf")  # time.time() after which the run pauses and returns a checkpoint
    checkpoint: bytes | None = None  # from an earlier paused run of the same job


def task_code(task: str) -> int:
    return zlib.crc32(task.encode())


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(array).to(device, non_blocking=True)


@torch.no_grad()
def evaluate(model: ProbeModel, task: str, settings: ProbeSettings, device: torch.device) -> float:
    """Accuracy at the target positions over ``eval_size`` sequences of the task's fixed evaluation set."""
    rng = np.random.default_rng([EVAL_STREAM, task_code(task)])
    model.eval()
    correct = total = 0
    for start in range(0, settings.eval_size, EVAL_BATCH):
        size = min(EVAL_BATCH, settings.eval_size - start)
        tokens, targets = make_batch(task, rng, size, settings.seq_len, settings.vocab_size)
        tokens, targets = _to_device(tokens, device), _to_device(targets, device)
        positions = targets != IGNORE
        predictions = model(tokens, positions).argmax(-1)  # [N]
        correct += int((predictions == targets[positions]).sum())
        total += int(positions.sum())
    model.train()
    return correct / total


def train_probe(job: ProbeJob) -> dict:
    """Run ``job``; returns {'status': 'finished', 'accuracy', ...} or {'status': 'paused', 'checkpoint', ...}."""
    settings, device = job.settings, resolve_device(job.device)
    if device.type == "cuda" and device.index is None:  # plain "cuda": the worker's current device
        device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(job.seed)
    model = ProbeModel(job.model, settings.vocab_size, settings.seq_len, settings.d_model, settings.n_layers,
                       settings.n_heads).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    rng = np.random.default_rng([job.seed, task_code(job.task)])
    step, elapsed, loss_curve = 0, 0.0, []
    if job.checkpoint is not None:
        state = torch.load(io.BytesIO(job.checkpoint), map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        rng.bit_generator.state = state["rng"]
        step, elapsed, loss_curve = state["step"], state["elapsed"], state["loss_curve"]
    log_every = max(1, settings.steps // LOSS_CURVE_POINTS)
    window_loss, window_steps = torch.zeros((), device=device), 0
    started = time.time()
    while step < settings.steps:
        if time.time() >= job.deadline:
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng.bit_generator.state,
                        "step": step, "elapsed": elapsed + time.time() - started, "loss_curve": loss_curve}, buffer)
            return {"status": "paused", "step": step, "checkpoint": buffer.getvalue()}
        tokens, targets = make_batch(job.task, rng, settings.batch_size, settings.seq_len, settings.vocab_size)
        tokens, targets = _to_device(tokens, device), _to_device(targets, device)
        positions = targets != IGNORE  # [B, T]
        loss = F.cross_entropy(model(tokens, positions), targets[positions])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if settings.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        window_loss += loss.detach()
        window_steps += 1
        step += 1
        if step % log_every == 0 or step == settings.steps:
            loss_curve.append((step, float(window_loss) / window_steps))
            window_loss, window_steps = torch.zeros((), device=device), 0
    wall_seconds = elapsed + time.time() - started
    return {
        "status": "finished",
        "accuracy": evaluate(model, job.task, settings, device),
        "final_train_loss": loss_curve[-1][1],
        "loss_curve": loss_curve,
        "steps": step,
        "wall_seconds": wall_seconds,
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "device": str(device),
    }
