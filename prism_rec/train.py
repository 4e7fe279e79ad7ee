"""Training and evaluation of one (backbone, seed) on a processed dataset.

Next-item prediction at every position of each user's most recent training window; full softmax
cross-entropy over all items (default) or sampled softmax with shared uniform negatives; AdamW; early
stopping on validation AUC; the best weights are restored for the test evaluation.
"""

from __future__ import annotations

import copy
import math
import resource
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from tqdm.auto import tqdm

from .data.batching import evaluation_batch, training_windows
from .data.core import ProcessedDataset
from .metrics import MetricMeans, rank_metrics
from .model import SequentialRecommender

LOSSES = ("full", "sampled")
LOGIT_CHUNK_ROWS = 4096


@dataclass
class TrainConfig:
    """Every knob of one training run; all of it is logged as MLflow params."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    dropout: float = 0.1
    max_len: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    epochs: int = 50
    patience: int = 5
    loss: str = "full"
    n_negatives: int = 1024
    eval_batch_size: int = 256
    seed: int = 0
    device: str = "auto"
    progress: bool = True
    backbone_options: dict = field(default_factory=dict)

    def validate(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"option --loss: {self.loss!r} is not one of {LOSSES}")
        for name in ("d_model", "n_layers", "max_len", "batch_size", "epochs", "eval_batch_size", "n_negatives"):
            if getattr(self, name) < 1:
                raise ValueError(f"option --{name.replace('_', '-')}: must be >= 1, got {getattr(self, name)}")
        if self.patience < 0:
            raise ValueError(f"option --patience: must be >= 0, got {self.patience}")

    def params(self) -> dict:
        flat = asdict(self)
        options = flat.pop("backbone_options")
        flat.pop("progress")
        flat.update({f"backbone.{key}": value for key, value in sorted(options.items())})
        return flat


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"option --device: {name!r} requested but CUDA is not available")
    return device


def build_model(dataset: ProcessedDataset, backbone: str, config: TrainConfig) -> SequentialRecommender:
    return SequentialRecommender(
        dataset.n_items, backbone, d_model=config.d_model, max_len=config.max_len, dropout=config.dropout,
        n_layers=config.n_layers, n_heads=config.n_heads, **config.backbone_options,
    )


def _logsumexp_rows(hidden: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp((hidden @ table.t()).float(), dim=-1)


def next_item_loss(model: SequentialRecommender, window: torch.Tensor, config: TrainConfig,
                   generator: torch.Generator) -> tuple[torch.Tensor, int]:
    """Mean next-item cross-entropy over the real positions of ``window`` [B, T + 1]; returns
    (loss, number of trained positions)."""
    inputs, targets = window[:, :-1], window[:, 1:]
    hidden = model.encode(inputs)  # [B, T, d]
    trained = (inputs > 0) & (targets > 0)  # [B, T]
    hidden, targets = hidden[trained], targets[trained]  # [N, d], [N]
    table = model.item_table()  # [I, d]
    positive = (hidden * table[targets - 1]).sum(-1).float()  # [N]
    if config.loss == "full":
        parts = [
            checkpoint(_logsumexp_rows, chunk, table, use_reentrant=False) if torch.is_grad_enabled() else
            _logsumexp_rows(chunk, table)
            for chunk in hidden.split(LOGIT_CHUNK_ROWS)
        ]
        loss = (torch.cat(parts) - positive).mean()
    else:
        negatives = torch.randint(1, model.n_items + 1, (config.n_negatives,), device=window.device, generator=generator)
        negative_logits = (hidden @ table[negatives - 1].t()).float()  # [N, k]
        negative_logits = negative_logits.masked_fill(negatives[None, :] == targets[:, None], float("-inf"))
        logits = torch.cat([positive[:, None], negative_logits], dim=1)
        loss = F.cross_entropy(logits, torch.zeros_like(targets))
    return loss, int(trained.sum())


@torch.no_grad()
def evaluate(model: SequentialRecommender, dataset: ProcessedDataset, cases: np.ndarray, config: TrainConfig,
             device: torch.device, description: str = "eval") -> dict[str, float]:
    """Full-ranking metrics of ``cases`` (user, position) rows, batched on ``device``."""
    model.eval()
    means = MetricMeans()
    batches = range(0, len(cases), config.eval_batch_size)
    for start in tqdm(batches, desc=description, leave=False, disable=not config.progress):
        histories, targets = evaluation_batch(dataset, cases[start : start + config.eval_batch_size], config.max_len)
        hidden = model.encode(torch.from_numpy(histories).to(device))[:, -1]  # [C, d]
        scores = model.score_all(hidden).float()  # [C, I]
        means.add(rank_metrics(scores, torch.from_numpy(targets - 1).to(device)))
    return means.means()


def set_seed(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fit(dataset: ProcessedDataset, backbone: str, config: TrainConfig,
        on_epoch: Callable[[int, dict], None] | None = None) -> dict:
    """Train ``backbone`` on ``dataset`` and return validation and test metrics plus cost figures.

    ``on_epoch(epoch, metrics)`` is called after every epoch with train_loss and valid_* metrics.
    """
    config.validate()
    device = resolve_device(config.device)
    set_seed(config.seed)
    model = build_model(dataset, backbone, config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    windows = torch.from_numpy(training_windows(dataset, config.max_len))  # [U', T + 1]
    if not len(windows):
        raise ValueError(f"{dataset.name}: no user has two training interactions")
    shuffler = torch.Generator().manual_seed(config.seed)
    sampler = torch.Generator(device=device).manual_seed(config.seed)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    best = {"valid_auc": -math.inf, "epoch": -1, "state": None}
    train_seconds, trained_tokens, history = 0.0, 0, []
    wall_start = time.perf_counter()
    for epoch in range(config.epochs):
        model.train()
        order = torch.randperm(len(windows), generator=shuffler)
        batches = order.split(config.batch_size)
        progress = tqdm(batches, desc=f"{backbone} epoch {epoch + 1}/{config.epochs}", leave=False,
                        disable=not config.progress)
        loss_sum, loss_count = 0.0, 0
        epoch_start = time.perf_counter()
        for index in progress:
            with autocast:
                loss, n_tokens = next_item_loss(model, windows[index].to(device), config, sampler)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += float(loss.detach()) * n_tokens
            loss_count += n_tokens
            progress.set_postfix(loss=f"{float(loss.detach()):.4f}")
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_seconds += time.perf_counter() - epoch_start
        trained_tokens += loss_count
        with autocast:
            valid = evaluate(model, dataset, dataset.valid_cases, config, device, f"{backbone} valid")
        metrics = {"train_loss": loss_sum / max(loss_count, 1), **{f"valid_{k}": v for k, v in valid.items()}}
        history.append(metrics)
        if on_epoch:
            on_epoch(epoch, metrics)
        if metrics["valid_auc"] > best["valid_auc"]:
            best = {"valid_auc": metrics["valid_auc"], "epoch": epoch, "state": copy.deepcopy(model.state_dict())}
        elif epoch - best["epoch"] >= config.patience:
            break
    model.load_state_dict(best["state"])
    with autocast:
        test = evaluate(model, dataset, dataset.test_cases, config, device, f"{backbone} test")
    return {
        "model": model,
        "best_epoch": best["epoch"] + 1,
        "epochs_run": len(history),
        "history": history,
        "valid": {k.removeprefix("valid_"): v for k, v in history[best["epoch"]].items() if k.startswith("valid_")},
        "test": test,
        "train_tokens_per_s": trained_tokens / max(train_seconds, 1e-9),
        "peak_memory_mb": peak_memory_mb(device),
        "wall_seconds": time.perf_counter() - wall_start,
        "n_parameters": sum(p.numel() for p in model.parameters()),
    }
