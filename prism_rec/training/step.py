"""One training step of next-item prediction: the step ``fit`` trains with and the step benchmarks time.

``TrainingStep(model, config, device)`` holds what a step needs: the objective (``NextItemObjective``: the
encoder, plain or compiled as ``config.compile`` resolves for the backbone, prism_rec/training/compile.py;
the full-softmax loss of losses.py or the sampled softmax), AdamW over ``parameter_groups``, bf16 autocast
on CUDA, and DistributedDataParallel in a data-parallel world. A call is one optimizer step: forward under
autocast, gradients zeroed, backward of the loss sum times ``scale``, ``optimizer.step()``.

The step reads nothing back from the GPU: the caller passes the number of trained positions, which it
counts on the host (``trained_positions``) before the windows move, so the real positions are picked by
an index of that length (stable sort: the same rows in the same order as a boolean mask) instead of a
boolean mask, whose result size the host would have to wait for.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..models.recommender import SequentialRecommender
from .compile import optimizer_options, resolve_compile, training_encoder
from .config import TrainConfig
from .distributed import SINGLE_PROCESS, World
from .losses import full_softmax_loss_sum
from .optim import parameter_groups


def trained_positions(windows: torch.Tensor) -> torch.Tensor:
    """Per window [B, T + 1], the number of positions trained: a real item followed by a real target [B]."""
    return ((windows[:, :-1] > 0) & (windows[:, 1:] > 0)).sum(1)


def to_device(windows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``windows`` on ``device``; to CUDA through pinned memory, so the copy does not wait for the GPU."""
    if device.type != "cuda" or windows.is_cuda:
        return windows.to(device)
    return windows.pin_memory().to(device, non_blocking=True)


class NextItemObjective(nn.Module):
    """Summed next-item cross-entropy of a batch of windows; the module that DistributedDataParallel wraps.

    ``forward(window [B, T + 1], targets)`` returns the sum of the losses of the ``targets`` real
    positions (an fp32 scalar); the caller divides by the number of positions of the whole (global)
    batch. ``loss_path`` is the full-softmax path of losses.py ("auto": fused on CUDA).
    """

    def __init__(self, model: SequentialRecommender, config: TrainConfig, generator: torch.Generator,
                 loss_path: str = "auto"):
        super().__init__()
        self.model, self.config, self.generator, self.loss_path = model, config, generator, loss_path
        # replaced by a compiled encoder when the step is compiled (prism_rec/training/compile.py)
        self.encode = model.encode

    def forward(self, window: torch.Tensor, targets: int) -> torch.Tensor:
        inputs, following = window[:, :-1], window[:, 1:]
        hidden = self.encode(inputs).flatten(0, 1)  # [B T, d]
        trained = ((inputs > 0) & (following > 0)).flatten()  # [B T]
        rows = torch.argsort((~trained).byte(), stable=True)[:targets]  # [N]: the trained positions in order
        hidden, following = hidden[rows], following.flatten()[rows]  # [N, d], [N]
        table = self.model.item_table()  # [I, d]
        if self.config.loss == "full":  # fused Triton kernels on CUDA, chunked logits elsewhere (losses.py)
            return full_softmax_loss_sum(hidden, table, following - 1, path=self.loss_path)
        positive = (hidden * table[following - 1]).sum(-1).float()  # [N]
        negatives = torch.randint(1, self.model.n_items + 1, (self.config.n_negatives,), device=window.device,
                                  generator=self.generator)
        negative_logits = (hidden @ table[negatives - 1].t()).float()  # [N, k]
        negative_logits = negative_logits.masked_fill(negatives[None, :] == following[:, None], float("-inf"))
        logits = torch.cat([positive[:, None], negative_logits], dim=1)
        return F.cross_entropy(logits, torch.zeros_like(following), reduction="sum")


class TrainingStep:
    """The optimizer step of ``model`` under ``config`` on ``device`` (see the module docstring).

    ``backbone`` names the model's backbone, for ``config.compile`` "auto" (compile.py's table of the modes
    verified per backbone); ``compile`` is the mode resolved. ``generator`` draws the sampled loss's
    negatives (seeded with ``config.seed``; a checkpoint saves and restores it).
    """

    def __init__(self, model: SequentialRecommender, config: TrainConfig, device: torch.device,
                 backbone: str | None = None, world: World = SINGLE_PROCESS, loss_path: str = "auto"):
        self.model, self.device = model, device
        self.compile = resolve_compile(config.compile, device, world.distributed, backbone)
        self.optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr,
                                           **optimizer_options(self.compile, device))
        self.generator = torch.Generator(device=device).manual_seed(config.seed)
        objective = NextItemObjective(model, config, self.generator, loss_path)
        objective.encode = training_encoder(model, config.batch_size, self.compile)
        self.module = (DistributedDataParallel(objective, device_ids=[device] if device.type == "cuda" else None)
                       if world.distributed else objective)
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                                       enabled=device.type == "cuda" and config.precision == "bf16")

    def __call__(self, windows: torch.Tensor, targets: int, scale: float) -> torch.Tensor:
        """One optimizer step on ``windows`` [B, T + 1] (on the device) with ``targets`` trained positions
        (``trained_positions``); the gradients are those of the loss sum times ``scale``. Returns the loss
        sum, an fp32 scalar on the device, not waited for."""
        with self.autocast:
            loss_sum = self.module(windows, targets)
        self.optimizer.zero_grad(set_to_none=True)
        (loss_sum * scale).backward()
        self.optimizer.step()
        return loss_sum

    def on_batch(self, windows: torch.Tensor) -> torch.Tensor:
        """The step on a whole batch of ``windows`` [B, T + 1] on the host, in one process, its loss the
        mean over the batch's trained positions (as ``fit`` weighs a batch); returns the loss sum."""
        targets = int(trained_positions(windows).sum())
        return self(to_device(windows, self.device), targets, 1 / max(targets, 1))
