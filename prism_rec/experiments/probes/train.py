"""Train and evaluate one (task, model, seed) probe; pausable at a wall-clock deadline and resumable.

Training batches come from a NumPy generator seeded by (seed, task), so every model sees the same data
at a given seed; the evaluation set is seeded by the task alone (the same for every model and seed) and
is drawn from a separate stream, never from training batches. Loss is cross-entropy at the final token
(every task's only target); the optimiser is AdamW (fused on CUDA) with a constant learning rate and
gradient clipping. A training step never waits for the device (no host read of a device value: the loss
is read back only at the loss curve's 20 points), so many runs share one GPU well. Checkpoints hold only
tensors and plain values and load with ``weights_only=True``.

With ``ProbeJob.compile`` (``prism_rec.training.compile``'s modes) the model's forward and loss, and their
backward, run compiled for the run's fixed batch shape: on CUDA, "graphs" replays the eager kernels as CUDA
graphs and "cudagraphs" fuses them with TorchInductor first; gradient clipping and the fused AdamW step stay
eager. The model, the data order and the optimiser are the same as eager; the numbers differ only by float
rounding (``compiled_step_gaps`` measures it), which a long training can carry further, as the GPU's own
run-to-run differences do, so the compile mode is recorded but is not part of a run's identity.
"""

from __future__ import annotations

import io
import time
import zlib
from dataclasses import dataclass, replace

import numpy as np
import torch

from ...training.compile import CompiledFunction, compiled_gaps, resolve_compile
from ...training.devices import resolve_device
from .manifest import run_identity
from .model import ProbeModel
from .settings import ProbeSettings
from .tasks import make_batch

EVAL_STREAM = 1_000_003
EVAL_BATCH = 512
LOSS_CURVE_POINTS = 20
CHECK_STEPS = 40  # training steps of compiled_step_gaps's short runs


@dataclass(frozen=True)
class ProbeJob:
    task: str
    model: str
    seed: int
    settings: ProbeSettings
    device: str = "cpu"
    deadline: float = float("inf")  # time.time() after which the run pauses and returns a checkpoint
    checkpoint: bytes | None = None  # from an earlier paused run of the same job
    profile: str = "paper"  # the settings profile the run belongs to (recorded in the manifest)
    label: str = ""  # how log lines name the run
    compile: str = "off"  # prism_rec.training.compile's mode of the training step, resolved for the device

    @property
    def identity(self) -> str:
        return run_identity(self.task, self.model, self.seed, self.settings)


def task_code(task: str) -> int:
    return zlib.crc32(task.encode())


def _to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` on ``device``; to CUDA from pinned memory, so the copy never makes the host wait for the device."""
    tensor = torch.from_numpy(array)
    return (tensor.pin_memory() if device.type == "cuda" else tensor).to(device, non_blocking=True)


def _final_batch(task: str, rng: np.random.Generator, size: int, settings: ProbeSettings,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [B, T], final-token targets [B]) on ``device``."""
    tokens, targets = make_batch(task, rng, size, settings.seq_len, settings.vocab_size)
    return _to_device(tokens, device), _to_device(np.ascontiguousarray(targets[:, -1]), device)


@torch.no_grad()
def evaluate(model: ProbeModel, task: str, settings: ProbeSettings, device: torch.device) -> float:
    """Final-token accuracy over ``eval_size`` sequences of the task's fixed evaluation set."""
    rng = np.random.default_rng([EVAL_STREAM, task_code(task)])
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    for start in range(0, settings.eval_size, EVAL_BATCH):
        tokens, targets = _final_batch(task, rng, min(EVAL_BATCH, settings.eval_size - start), settings, device)
        correct += (model(tokens).argmax(-1) == targets).sum()
    model.train()
    return int(correct) / settings.eval_size


def _probe_model(model: str, settings: ProbeSettings, device: torch.device) -> ProbeModel:
    return ProbeModel(model, settings.vocab_size, settings.seq_len, settings.d_model, settings.n_layers,
                      settings.n_heads).to(device)


def compiled_step_gaps(model: str, task: str, settings: ProbeSettings, mode: str, device: str = "cpu",
                       steps: int = CHECK_STEPS) -> dict:
    """How far the compiled training of ``model`` on ``task`` is from eager (``mode`` resolved for
    ``device``): "output" and "gradients" (the worst parameter in "worst") are the relative gaps of the loss
    and of its gradients on one batch at seed 0's initialisation (``prism_rec.training.compile.compiled_gaps``);
    "loss_curve" the largest gap between the loss curves of ``steps`` whole training steps (clipping and
    AdamW included) trained both ways at seed 0, over the largest eager loss."""
    target = resolve_device(device)
    resolved = resolve_compile(mode, target)
    if resolved == "off":
        raise ValueError(f"option --compile: {mode} compiles nothing on {target}, nothing to check")
    torch.manual_seed(0)
    probe = _probe_model(model, settings, target)
    tokens, targets = _final_batch(task, np.random.default_rng(0), settings.batch_size, settings, target)
    gaps = compiled_gaps(probe, probe.loss, CompiledFunction(probe.loss, resolved), tokens, targets)
    short = replace(settings, steps=steps, eval_size=EVAL_BATCH)
    eager, compiled = (np.array([loss for _, loss in train_probe(ProbeJob(task, model, 0, short, device,
                                                                          compile=step_mode))["loss_curve"]])
                       for step_mode in ("off", resolved))
    return {**gaps, "loss_curve": float(np.abs(compiled - eager).max() / np.abs(eager).max())}


def train_probe(job: ProbeJob) -> dict:
    """Run ``job``; returns {'status': 'finished', 'accuracy', ...} or {'status': 'paused', 'checkpoint', ...}."""
    settings, device = job.settings, resolve_device(job.device)
    if device.type == "cuda" and device.index is None:  # plain "cuda": the worker's current device
        device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(job.seed)
    model = _probe_model(job.model, settings, device)
    mode = resolve_compile(job.compile, device)
    training_loss = model.loss if mode == "off" else CompiledFunction(model.loss, mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay,
                                  fused=device.type == "cuda")
    rng = np.random.default_rng([job.seed, task_code(job.task)])
    step, elapsed, loss_curve = 0, 0.0, []
    if job.checkpoint is not None:
        state = torch.load(io.BytesIO(job.checkpoint), map_location=device, weights_only=True)
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
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "rng": rng.bit_generator.state,
                        "step": step, "elapsed": elapsed + time.time() - started, "loss_curve": loss_curve}, buffer)
            return {"status": "paused", "step": step, "checkpoint": buffer.getvalue()}
        tokens, targets = _final_batch(job.task, rng, settings.batch_size, settings, device)
        loss = training_loss(tokens, targets)
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
        "compile": mode,
    }
