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

In a whole-step mode (compile.py's ``WHOLE_STEP_MODES``) the step runs on tensors of static shape that stay
in place: the windows are copied into a buffer [batch_size, T + 1] (a smaller batch padded with empty
windows, which hold no target), ``scale`` into a device scalar, and the whole step (forward, loss, backward,
AdamW fused and capturable; no gradient clipping) is one CUDA graph (``CapturedStep``), one graph per
``TrainingStep`` (one window length). The same stable sort orders all B T positions, the trained ones first
in the order the index picks them, and the loss counts the first ``trained.sum()`` rows, a device scalar
(losses.py's ``valid_rows``: the fused kernels skip the row tiles past it, so the loss costs what the
trained positions cost, not what the buffer holds): the same loss and gradients as the index (up to the
order of the sums). ``static_shapes=True`` runs that step on the CPU without the graph, which is how it is
tested.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..models.recommender import SequentialRecommender
from .compile import WHOLE_STEP_MODES, CapturedStep, optimizer_options, resolve_compile, training_encoder
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
    batch. ``targets`` None (the full loss only): every position, the trained ones first and counted on
    the device, so that no shape depends on the batch. ``loss_path`` is the full-softmax path of losses.py
    ("auto": fused on CUDA).
    """

    def __init__(self, model: SequentialRecommender, config: TrainConfig, generator: torch.Generator,
                 loss_path: str = "auto"):
        super().__init__()
        self.model, self.config, self.generator, self.loss_path = model, config, generator, loss_path
        # replaced by a compiled encoder when the step is compiled (prism_rec/training/compile.py)
        self.encode = model.encode

    def forward(self, window: torch.Tensor, targets: int | None) -> torch.Tensor:
        inputs, following = window[:, :-1], window[:, 1:]
        hidden = self.encode(inputs).flatten(0, 1)  # [B T, d]
        trained = ((inputs > 0) & (following > 0)).flatten()  # [B T]
        rows = torch.argsort((~trained).byte(), stable=True)  # [B T]: the trained positions first, in order
        if targets is None:
            hidden, following = hidden.index_select(0, rows), following.flatten().index_select(0, rows)
            columns = following.clamp_min(1) - 1  # [B T]: padding's column 0, past the count
            return full_softmax_loss_sum(hidden, self.model.item_table(), columns, path=self.loss_path,
                                         valid_rows=trained.sum())
        rows = rows[:targets]  # [N]
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
    negatives (seeded with ``config.seed``; a checkpoint saves and restores it). ``static_shapes``: the
    step on static shapes (see the module docstring); default: in a whole-step mode.
    """

    def __init__(self, model: SequentialRecommender, config: TrainConfig, device: torch.device,
                 backbone: str | None = None, world: World = SINGLE_PROCESS, loss_path: str = "auto",
                 static_shapes: bool | None = None):
        self.model, self.device, self.batch_size = model, device, config.batch_size
        self.compile = resolve_compile(config.compile, device, world.distributed, backbone, config.loss)
        self.static_shapes = self.compile in WHOLE_STEP_MODES if static_shapes is None else static_shapes
        if self.static_shapes and (config.loss != "full" or world.distributed):
            raise ValueError("a training step of static shapes trains the full-softmax loss in one process only")
        self.optimizer = torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr,
                                           **optimizer_options(self.compile, device))
        self.generator = torch.Generator(device=device).manual_seed(config.seed)
        objective = NextItemObjective(model, config, self.generator, loss_path)
        objective.encode = training_encoder(model, config.batch_size, self.compile)
        self.module = (DistributedDataParallel(objective, device_ids=[device] if device.type == "cuda" else None)
                       if world.distributed else objective)
        autocast = device.type == "cuda" and config.precision == "bf16"
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast)
        # a graph replays the casts it captured: none may come from autocast's cache of an earlier step
        self.static_autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast,
                                              cache_enabled=False)
        self.captured = CapturedStep(self._static_step, device) if self.static_shapes else None
        self.static_windows: torch.Tensor | None = None  # [batch_size, T + 1], made by the first call
        self.static_scale = torch.zeros((), device=device) if self.static_shapes else None

    def __call__(self, windows: torch.Tensor, targets: int, scale: float) -> torch.Tensor:
        """One optimizer step on ``windows`` [B, T + 1] (on the device) with ``targets`` trained positions
        (``trained_positions``); the gradients are those of the loss sum times ``scale``. Returns the loss
        sum, an fp32 scalar on the device, not waited for."""
        if self.static_shapes:
            self._fill_static(windows, scale)
            return self.captured().clone()  # the graph's output is overwritten by the next replay
        with self.autocast:
            loss_sum = self.module(windows, targets)
        self.optimizer.zero_grad(set_to_none=True)
        (loss_sum * scale).backward()
        self.optimizer.step()
        return loss_sum

    def _fill_static(self, windows: torch.Tensor, scale: float) -> None:
        """``windows`` [B, T + 1] and ``scale`` into the step's static inputs (no wait for the GPU)."""
        rows = windows.shape[0]
        if self.static_windows is None:
            self.static_windows = windows.new_zeros(self.batch_size, windows.shape[1])
        if rows > self.batch_size or windows.shape[1] != self.static_windows.shape[1]:
            raise ValueError(f"a step of static shape {tuple(self.static_windows.shape)} cannot train a batch "
                             f"of shape {tuple(windows.shape)}")
        self.static_windows[:rows].copy_(windows)
        self.static_windows[rows:].zero_()  # empty windows: no target
        self.static_scale.fill_(scale)

    def _static_step(self) -> torch.Tensor:
        """The step on the static inputs; returns the loss sum (detached)."""
        with self.static_autocast:
            loss_sum = self.module(self.static_windows, None)
        self.optimizer.zero_grad(set_to_none=True)
        (loss_sum * self.static_scale).backward()
        self.optimizer.step()
        return loss_sum.detach()

    def load_optimizer_state(self, state: dict) -> None:
        """AdamW's state from a checkpoint, kept under this step's options (fused, capturable, foreach):
        ``load_state_dict`` would take those of the run that wrote it; the step counts moved to where these
        options keep them (the parameters' device when fused or capturable, else the CPU)."""
        options = {key: self.optimizer.param_groups[0][key] for key in ("fused", "capturable", "foreach")}
        self.optimizer.load_state_dict(state)
        for group in self.optimizer.param_groups:
            group.update(options)
            on_device = bool(options["fused"] or options["capturable"])
            for parameter in group["params"]:
                own = self.optimizer.state.get(parameter, {})
                if "step" in own:
                    own["step"] = own["step"].to(parameter.device if on_device else "cpu", torch.float32)

    def on_batch(self, windows: torch.Tensor) -> torch.Tensor:
        """The step on a whole batch of ``windows`` [B, T + 1] on the host, in one process, its loss the
        mean over the batch's trained positions (as ``fit`` weighs a batch); returns the loss sum."""
        targets = int(trained_positions(windows).sum())
        return self(to_device(windows, self.device), targets, 1 / max(targets, 1))


def step_gaps(eager: TrainingStep, other: TrainingStep, batches: list[torch.Tensor]) -> dict:
    """How far the step ``other`` is from the step ``eager`` (both of models alike, from the same seed)
    trained one step on each of ``batches`` (windows [B, T + 1] on the host; under CUDA graphs the
    warm-up, the capture and the replays, a short last batch padding the replay): the largest
    |other - eager| over the largest |eager| of the loss sums over the steps ("loss") and of each
    parameter's gradient after the last step ("gradients": the worst parameter, named in "worst"); and
    the largest |other - eager| of a parameter after the last step over the largest change of any
    parameter in eager's steps ("parameters": the worst, named in "worst_parameter"; AdamW's update is
    about the learning rate everywhere, so a parameter's own change could be rounding noise). A NaN counts
    as an infinite gap."""
    start = {name: p.detach().float().clone() for name, p in eager.model.named_parameters()}
    losses = [(float(eager.on_batch(batch).detach()), float(other.on_batch(batch))) for batch in batches]

    def gap(difference: torch.Tensor, scale: torch.Tensor) -> float:
        relative = difference.abs().max() / scale.abs().max().clamp_min(1e-12)
        return torch.nan_to_num(relative, nan=math.inf).item()

    mine = dict(other.model.named_parameters())
    gradients, parameters = {}, {}
    for name, p in eager.model.named_parameters():
        q = mine[name]
        if (p.grad is None) != (q.grad is None):
            raise AssertionError(f"the two steps differ in whether {name} has a gradient")
        if p.grad is not None:
            gradients[name] = gap(q.grad.float() - p.grad.float(), p.grad.float())
        parameters[name] = (q.detach().float() - p.detach().float()).abs().max()
    change = torch.stack([(p.detach().float() - start[name]).abs().max() for name, p in eager.model.named_parameters()])
    parameters = {name: gap(difference, change) for name, difference in parameters.items()}
    loss = torch.tensor([o - e for e, o in losses]), torch.tensor([e for e, _ in losses])
    worst, worst_parameter = max(gradients, key=gradients.get), max(parameters, key=parameters.get)
    return {"loss": gap(*loss), "gradients": gradients[worst], "worst": worst,
            "parameters": parameters[worst_parameter], "worst_parameter": worst_parameter}
