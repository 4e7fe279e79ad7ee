"""Training and evaluation of one (backbone, seed) on a processed dataset.

Next-item prediction at every position of every training window (``training_windows``); full softmax
cross-entropy over all items (default) or sampled softmax with shared uniform negatives; AdamW; early
stopping on validation AUC; the best weights are restored for the test evaluation. Runs can be
checkpointed and resumed exactly, and trained data-parallel under torchrun. The step itself is
prism_rec/training/step.py's, the evaluation evaluation.py's and the checkpoint format checkpoint.py's.
"""

from __future__ import annotations

import contextlib
import copy
import math
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..data.batching import training_windows
from ..data.core import ProcessedDataset
from ..models.popularity import PopularityRecommender, training_counts
from ..models.recommender import SequentialRecommender
from ..registry import trains
from .candidates import check_sampled
from .checkpoint import StopRequest, capture_rng, read_checkpoint, restore_rng, run_identity, write_checkpoint
from .compile import auto_compile
from .config import TrainConfig
from .devices import resolve_device
from .distributed import SINGLE_PROCESS, World
from .evaluation import evaluate
from .step import TrainingStep, to_device, trained_positions

# batches between two readings of the epoch's mean loss for the progress bar (each waits for the GPU)
PROGRESS_INTERVAL = 50


def build_model(dataset: ProcessedDataset, backbone: str,
                config: TrainConfig) -> SequentialRecommender | PopularityRecommender:
    """The recommender of ``backbone``: a ``SequentialRecommender`` around it, or for one that does not train
    (``registry.trains``: ``pop``) the dataset's training counts."""
    if not trains(backbone):
        return PopularityRecommender(training_counts(dataset))
    return SequentialRecommender(
        dataset.n_items, backbone, d_model=config.d_model, max_len=config.max_len, dropout=config.dropout,
        n_layers=config.n_layers, n_heads=config.n_heads, **config.backbone_options,
    )


def set_seed(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class FitResult:
    """What ``fit`` returns: the model at its best epoch, its metrics and its cost."""

    model: nn.Module
    best_epoch: int  # 1-based
    epochs_run: int
    history: list[dict]  # per epoch: train_loss and valid_<metric>
    valid: dict[str, float]  # the best epoch's validation metrics
    test: dict[str, float]
    test_case_ranks: dict  # users, twice_rank, n_items of every test case (case_ranks.py)
    diverged_epoch: int  # the epoch whose validation scores were not finite, which ended training, or 0
    train_tokens_per_s: float
    peak_memory_mb: float
    wall_seconds: float
    n_parameters: int


@dataclass
class Progress:
    """The loop state of a run; a checkpoint holds it as the dict ``vars(progress)`` under "progress"."""

    epoch: int = 0
    next_batch: int = 0
    order: torch.Tensor | None = None  # the epoch's window order [U']
    best_valid_auc: float = -math.inf
    best_epoch: int = -1  # 0-based
    best_state: dict | None = None
    history: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    trained_tokens: int = 0
    wall_seconds: float = 0.0
    epoch_loss_count: int = 0
    diverged_epoch: int = 0
    done: bool = False


def fit(dataset: ProcessedDataset, backbone: str, config: TrainConfig,
        on_epoch: Callable[[int, dict], None] | None = None, checkpoint_path: Path | None = None,
        resume: bool = False, world: World = SINGLE_PROCESS) -> FitResult:
    """Train ``backbone`` on ``dataset`` and return validation and test metrics plus cost figures.

    ``on_epoch(epoch, metrics)`` is called after every epoch with train_loss and valid_* metrics.
    With ``checkpoint_path``, a checkpoint is written after every epoch (the last included) and when
    Ctrl-C, SIGTERM or SIGHUP stops training, mid-epoch or after the epoch's validation (then
    KeyboardInterrupt is raised); ``resume`` continues from that file and reaches the same result as an
    uninterrupted run. In a data-parallel ``world`` (torchrun), each
    rank trains on its share of every global batch of ``config.batch_size`` windows and rank 0 writes
    the checkpoint. ``config.precision`` "fp32" turns TF32 off while it trains (restored after). On the
    CPU, PyTorch's deterministic algorithms are on while it trains (see :func:`_deterministic`).
    ``config.compile`` "auto" is replaced by the mode it resolves to for the backbone and device (compile.py's
    ``auto_compile``, said on CUDA), so that what records the run after ``fit`` records the mode it trained in.
    """
    on_cpu = world.device(resolve_device(config.device)).type == "cpu"
    with _tf32_off(config.precision == "fp32"), _deterministic(on_cpu):
        return _fit(dataset, backbone, config, on_epoch, checkpoint_path, resume, world)


@contextlib.contextmanager
def _deterministic(enabled: bool):
    """``torch.use_deterministic_algorithms(True)`` inside the block when ``enabled``, restored after.

    On the CPU, the backward of advanced indexing (``table[targets]``: ``index_put_`` with accumulation)
    otherwise adds rows with atomics from several threads, in whatever order the threads get there, so
    the same run gave other gradients whenever the machine was busy; the deterministic path sorts the
    indices first.
    """
    saved = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    if enabled:
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])


@contextlib.contextmanager
def _tf32_off(enabled: bool):
    """TF32 matrix products and convolutions off inside the block when ``enabled``, the flags restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    if enabled:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _fit(dataset: ProcessedDataset, backbone: str, config: TrainConfig, on_epoch, checkpoint_path: Path | None,
         resume: bool, world: World) -> FitResult:
    config.validate()
    check_sampled(dataset, config.sampled, config.exclude_history)
    if config.batch_size < world.size:
        raise ValueError(f"option --batch-size: {config.batch_size} windows cannot be shared by {world.size} processes")
    device = world.device(resolve_device(config.device))
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # code that launches on the current device (Triton) follows the model
    set_seed(config.seed)
    model = build_model(dataset, backbone, config).to(device)
    trains = any(True for _ in model.parameters())
    if config.compile == "auto":
        config.compile, reason = auto_compile(backbone, device, world.distributed, config.loss)
        if trains and device.type == "cuda" and world.is_main:
            print(f"compile auto: {backbone} trains with compile {config.compile} ({reason})", flush=True)
    if not trains:
        return _evaluate_untrained(model, dataset, backbone, config, device, world)
    training = Training(dataset, backbone, config, model, device, world, checkpoint_path, resume)
    with StopRequest() as stop:
        while training.progress.epoch < config.epochs and not training.progress.done:
            epoch = training.progress.epoch
            training.train_epoch(stop)
            metrics = training.validate()
            training.save_checkpoint()  # before on_epoch: a run killed in between logs the epoch when resumed
            if on_epoch and metrics:
                on_epoch(epoch, metrics)
            if world.any(stop.requested, device):  # a stop requested during the validation
                raise KeyboardInterrupt(f"training stopped after epoch {epoch + 1}")
    return training.test()


class Training:
    """One run's model, optimizer, data and loop state, with the steps of ``fit``: ``train_epoch``,
    ``validate``, ``save_checkpoint`` and ``test``."""

    def __init__(self, dataset: ProcessedDataset, backbone: str, config: TrainConfig, model: SequentialRecommender,
                 device: torch.device, world: World, checkpoint_path: Path | None, resume: bool):
        self.dataset, self.backbone, self.config, self.model = dataset, backbone, config, model
        self.device, self.world, self.checkpoint_path = device, world, checkpoint_path
        self.step = TrainingStep(model, config, device, backbone, world)
        self.optimizer = self.step.optimizer
        self.windows = torch.from_numpy(training_windows(dataset, config.max_len))  # [U', T + 1]
        if not len(self.windows):
            raise ValueError(f"{dataset.name}: no user has two training interactions")
        self.targets_per_window = trained_positions(self.windows)  # [U']
        self.generators = {"shuffler": torch.Generator().manual_seed(config.seed), "sampler": self.step.generator}
        self.progress, self.epoch_loss_sum = Progress(), 0.0  # the loss sum of the epoch's batches so far
        self.identity = run_identity(backbone, config, dataset, world.size)
        if resume:
            self.progress, self.epoch_loss_sum = _restore(checkpoint_path, self.identity, world, model,
                                                          self.step, self.generators)
        self.autocast = self.step.autocast
        self.wall_start = time.perf_counter() - self.progress.wall_seconds

    def train_epoch(self, stop: StopRequest) -> None:
        """Train the current epoch's batches from ``progress.next_batch`` on; a stop request saves a
        checkpoint and raises KeyboardInterrupt."""
        progress, config, world, device = self.progress, self.config, self.world, self.device
        self.model.train()
        if progress.order is None:
            progress.order = torch.randperm(len(self.windows), generator=self.generators["shuffler"])
        batches = progress.order.split(config.batch_size)
        shown = tqdm(total=len(batches), initial=progress.next_batch,
                     desc=f"{self.backbone} epoch {progress.epoch + 1}/{config.epochs}",
                     leave=False, disable=not (config.progress and world.is_main))
        epoch_start = time.perf_counter()
        # the loss sum stays on the device until the epoch ends, one host sync fewer per step (float64:
        # the same sum as adding each step's value on the host)
        loss_accumulator = torch.tensor(self.epoch_loss_sum, dtype=torch.float64, device=device)
        for batch_index in range(progress.next_batch, len(batches)):
            if world.any(stop.requested, device):
                progress.next_batch = batch_index
                progress.train_seconds += time.perf_counter() - epoch_start
                self.epoch_loss_sum = float(loss_accumulator)
                self.save_checkpoint()
                raise KeyboardInterrupt(f"training stopped at epoch {progress.epoch + 1}, batch {batch_index}")
            loss_sum, weight = self._step(batches[batch_index])
            loss_accumulator += loss_sum.detach().double() * weight
            shown.update()
            if not shown.disable and (batch_index + 1) % PROGRESS_INTERVAL == 0:  # reading the loss waits
                # the epoch's mean so far (data-parallel: this rank's sum scaled by the world size, about it)
                mean = float(loss_accumulator) * world.size / max(progress.epoch_loss_count, 1)
                shown.set_postfix(loss=f"{mean:.4f}")
            stop.count_batch()
        shown.close()
        self.epoch_loss_sum = float(loss_accumulator)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        progress.train_seconds += time.perf_counter() - epoch_start
        progress.trained_tokens += progress.epoch_loss_count

    def _step(self, index: torch.Tensor) -> tuple[torch.Tensor, float]:
        """One optimizer step on the global batch ``index`` [b] of windows, this rank's share of it;
        returns this rank's loss sum and the weight its loss counts with."""
        own, weight = self.world.share(index), 1.0
        if not len(own):  # fewer windows than processes: train on one with weight 0 to keep in step
            own, weight = index[:1], 0.0
        batch_targets = int(self.targets_per_window[index].sum())
        own_targets = int(self.targets_per_window[own].sum())
        # DistributedDataParallel averages gradients over ranks: scale so they add up to the global mean
        loss_sum = self.step(to_device(self.windows[own], self.device), own_targets,
                             weight * self.world.size / batch_targets)
        self.progress.epoch_loss_count += batch_targets
        return loss_sum, weight

    def validate(self) -> dict | None:
        """Validate the epoch just trained: its metrics (train_loss, valid_*), recorded in the history, the
        best weights kept and early stopping decided; None when the scores diverged (training ends at the
        best epoch so far)."""
        progress, config, epoch = self.progress, self.config, self.progress.epoch
        loss_total = self.world.sum([self.epoch_loss_sum], self.device)[0]
        try:
            with self.autocast:
                valid = evaluate(self.model, self.dataset, self.dataset.valid_cases, config, self.device,
                                 f"{self.backbone} valid", self.world)
        except FloatingPointError:  # diverged: like early stopping, keep the best epoch (if there is one)
            if progress.best_state is None:
                raise
            progress.diverged_epoch, progress.done = epoch + 1, True
            return None
        metrics = {"train_loss": loss_total / max(progress.epoch_loss_count, 1),
                   **{f"valid_{k}": v for k, v in valid.items()}}
        progress.history.append(metrics)
        improved = metrics["valid_auc"] > progress.best_valid_auc
        if improved:
            progress.best_valid_auc, progress.best_epoch = metrics["valid_auc"], epoch
            progress.best_state = copy.deepcopy(self.model.state_dict())
        progress.epoch, progress.next_batch, progress.order, progress.epoch_loss_count = epoch + 1, 0, None, 0
        progress.done = not improved and epoch - progress.best_epoch >= config.patience
        self.epoch_loss_sum = 0.0
        return metrics

    def save_checkpoint(self) -> None:
        """Write the checkpoint (rank 0, when the run has a checkpoint path): every rank's generators and
        loss sum, the model, the optimizer and the loop state."""
        world = self.world
        per_rank = world.gather_objects({"rng": capture_rng(self.generators), "epoch_loss_sum": self.epoch_loss_sum})
        if self.checkpoint_path is not None and world.is_main:
            progress = {**vars(self.progress), "wall_seconds": time.perf_counter() - self.wall_start}
            write_checkpoint({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                              "per_rank": per_rank, "progress": progress}, self.identity, self.checkpoint_path)
        world.barrier()

    def test(self) -> FitResult:
        """The best epoch's weights back in the model, evaluated on the test cases."""
        progress = self.progress
        self.model.load_state_dict(progress.best_state)
        case_ranks: dict = {}
        with self.autocast:
            test = evaluate(self.model, self.dataset, self.dataset.test_cases, self.config, self.device,
                            f"{self.backbone} test", self.world, case_ranks)
        return _result(self.model, self.device, progress.history, progress.best_epoch, test, case_ranks,
                       self.wall_start, progress.trained_tokens / max(progress.train_seconds, 1e-9),
                       progress.diverged_epoch)


def _result(model: nn.Module, device: torch.device, history: list[dict], best_epoch: int, test: dict,
            case_ranks: dict, wall_start: float, tokens_per_s: float, diverged_epoch: int = 0) -> FitResult:
    """What ``fit`` returns (``best_epoch`` 0-based into ``history``)."""
    return FitResult(
        model=model, best_epoch=best_epoch + 1, epochs_run=len(history), history=history,
        valid={k.removeprefix("valid_"): v for k, v in history[best_epoch].items() if k.startswith("valid_")},
        test=test, test_case_ranks=case_ranks, diverged_epoch=diverged_epoch, train_tokens_per_s=tokens_per_s,
        peak_memory_mb=peak_memory_mb(device), wall_seconds=time.perf_counter() - wall_start,
        n_parameters=sum(p.numel() for p in model.parameters()),
    )


def _evaluate_untrained(model: nn.Module, dataset: ProcessedDataset, backbone: str, config: TrainConfig,
                        device: torch.device, world: World) -> FitResult:
    """``fit`` of a model with nothing to train (``pop``): one validation and one test evaluation; its
    history is that one validation row, reported as epoch 1 of 1 with no training tokens."""
    wall_start = time.perf_counter()
    valid = evaluate(model, dataset, dataset.valid_cases, config, device, f"{backbone} valid", world)
    case_ranks: dict = {}
    test = evaluate(model, dataset, dataset.test_cases, config, device, f"{backbone} test", world, case_ranks)
    history = [{"train_loss": math.nan, **{f"valid_{k}": v for k, v in valid.items()}}]
    return _result(model, device, history, 0, test, case_ranks, wall_start, 0.0)


def _restore(path: Path | None, identity: dict, world: World, model: SequentialRecommender,
             step: TrainingStep, generators: dict[str, torch.Generator]) -> tuple[Progress, float]:
    """Load ``path`` (checked to be of the run ``identity``) into the model, the step's optimizer and the
    generators; returns the saved loop state and this rank's loss sum of the interrupted epoch."""
    if path is None:
        raise ValueError("option --resume: no checkpoint file given")
    state = read_checkpoint(path, identity)
    model.load_state_dict(state["model"])
    step.load_optimizer_state(state["optimizer"])
    own = state["per_rank"][world.rank]
    restore_rng(own["rng"], generators)
    # keys added to the loop state since a checkpoint was written (diverged_epoch) start fresh
    return Progress(**state["progress"]), own["epoch_loss_sum"]
