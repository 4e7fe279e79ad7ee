"""One run of the authors' protocol: train with one-negative BCE, stop early, evaluate by full retrieval.

Follows rec/train_link_prediction.py:80-90, 227-385, 437-535 and rec/utils/EarlyStopping.py:29-63
(gpr-prism/prism 435f392):

- each epoch walks the training edges in time order in batches of 256 (the same order every epoch);
  each positive edge gets one destination drawn uniformly from the training edges' distinct items
  (utils.py:390-405); loss = BCE with logits over [positives, negatives]; Adam, rate 1e-4, no weight decay;
- after every epoch: validation AP and ROC-AUC with one random negative per edge, drawn from all items with
  a generator reset to seed 0 at every evaluation (the test's is seeded 2); the weights are kept when
  every validation metric is >= its best so far, otherwise the patience counter grows and training stops
  at ``patience``; the kept weights are restored for the test;
- final evaluation: full retrieval (``metrics``) of the validation and test edges; the test's link AP and
  ROC-AUC too. ``pop`` scores an item by its number of training edges and trains nothing.

Differences: negatives and initialisation come from the run's seed (theirs: the global NumPy and torch
generators seeded with the run index); the validation and test negatives come from NumPy's default_rng with
their seeds 0 and 2 (theirs: a RandomState that also draws source indices first, utils.py:396-405), so the
same distribution but other draws; link AP and ROC-AUC rank the logits (theirs: float32 sigmoid outputs,
train_link_prediction.py:308, evaluate_models_utils.py:89, 93, which tie beyond a logit of about 16, so a
confident model's metric, and with it the early-stopping choice, can differ slightly); the kept weights stay in
memory (theirs: a file per run).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from ...errors import OptionError
from ...tracking.store import machine_description
from .data import EdgeTask, fallback_features
from .metrics import BATCH, case_counts, link_metrics, retrieval_metrics
from .model import CHANNEL, POP, LinkModel, check_model, check_scan_backend, head_width, scan_backend_used

VALID_NEGATIVE_SEED, TEST_NEGATIVE_SEED = 0, 2  # train_link_prediction.py:81, 83
# The models whose graphed step trains their eager one on the H200 (results/authors_step.md). The backbones on
# the project's delta scan (registry.runs_scan: prism, gated_deltanet, mamba2, mamba2-authors) are not among
# them: the grid runs of prism and gated_deltanet died there with an illegal memory access, graphed and eager
# (results/authors_step.md says what was seen; cause not found), so by default they train eager.
GRAPHED_MODELS = frozenset({"sasrec", "gdn-authors", "prism-authors"})


def step_kind(model: str, device: torch.device | str, graphs: bool | None = None) -> str:
    """How ``model`` trains on ``device`` (a torch device or a --device name; "auto": CUDA when present here):
    "cuda graphs" or "eager". ``graphs`` None: graphs on CUDA for GRAPHED_MODELS; True or False: as it says (True
    off CUDA is refused by ``run``)."""
    on_cuda = str(device).startswith("cuda") or device == "auto" and torch.cuda.is_available()
    graphed = on_cuda and model in GRAPHED_MODELS if graphs is None else graphs
    return "cuda graphs" if graphed and model != POP else "eager"


@dataclass(frozen=True)
class RunConfig:
    """Settings of one run; the defaults are the authors' (rec/README.md, load_configs.py)."""

    model: str
    seed: int = 0
    head_width: str = "per-backbone"
    epochs: int = 10
    patience: int = 5
    lr: float = 1e-4
    batch_size: int = BATCH
    n_neighbours: int = 20
    channel: int = CHANNEL
    n_layers: int = 2
    n_heads: int = 2
    dropout: float = 0.1
    feature_seed: int = 0

    def check(self) -> RunConfig:
        """This config, or OptionError naming the first bad option."""
        check_model(self.model)
        head_width(self.model, self.head_width, 1)
        for name in ("epochs", "patience", "batch_size", "n_neighbours", "channel", "n_layers", "n_heads"):
            if getattr(self, name) < 1:
                raise OptionError(f"option --{name.replace('_', '-')}: must be >= 1, got {getattr(self, name)}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise OptionError(f"option --lr: must be a positive finite number, got {self.lr}")
        if not 0 <= self.dropout < 1:
            raise OptionError(f"option --dropout: must be in [0, 1), got {self.dropout}")
        if self.seed < 0:
            raise OptionError(f"option --seed: must be >= 0, got {self.seed}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


class Scorer:
    """Scores of edges and of all candidates for a LinkModel, or for the popularity floor."""

    def __init__(self, task: EdgeTask, config: RunConfig, device: torch.device, scan_backend: str = "auto"):
        self.task, self.config, self.device = task, config, device
        self.items = torch.from_numpy(task.items).to(device)
        self.dst = torch.from_numpy(task.dst).to(device)
        self._tokens, self._cases = None, {}
        if config.model == POP:
            counts = np.bincount(task.dst[task.part == 0], minlength=task.n_nodes).astype(np.float32)
            self.popularity = torch.from_numpy(counts).to(device)
            self.model = None
            return
        torch.manual_seed(config.seed)
        features = fallback_features(task.n_nodes, config.feature_seed, device)
        edge_features = fallback_features(len(task.src) + 1, config.feature_seed + 1, device)
        width = head_width(config.model, config.head_width, features.shape[1], config.channel)
        self.model = LinkModel(config.model, features, edge_features, width, config.channel,
                               n_layers=config.n_layers, n_heads=config.n_heads, dropout=config.dropout,
                               scan_backend=scan_backend).to(device)

    def tokens(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every edge's source tokens on the device, built once: node ids, edge ids and time gaps [E, 1 + k]
        (the user at the edge's time, then its neighbours), so that a batch is one gather, not a host copy."""
        if self._tokens is None:
            task, edges = self.task, np.arange(len(self.task.src))
            nodes, edge_ids, times = task.neighbours(edges, self.config.n_neighbours)
            nodes = np.concatenate([task.src[:, None], nodes], axis=1)                 # [E, 1 + k]
            edge_ids = np.concatenate([np.zeros((len(edges), 1), np.int64), edge_ids], axis=1)
            gaps = task.time[:, None] - np.concatenate([task.time[:, None], times], axis=1)
            self._tokens = tuple(torch.from_numpy(array).to(self.device)
                                 for array in (nodes, edge_ids, gaps.astype(np.float32)))
        return self._tokens

    def edge_index(self, part: int) -> torch.Tensor:
        """Edge indices [C] of split ``part`` in time order, on the device."""
        if part not in self._cases:
            self._cases[part] = torch.from_numpy(self.task.cases(part)).to(self.device)
        return self._cases[part]

    def source(self, edges: torch.Tensor) -> torch.Tensor:
        """Source embeddings [B, W] of edges [B] (the user at the edge's time and its neighbours)."""
        nodes, edge_ids, gaps = (table[edges] for table in self.tokens())
        return self.model.source(nodes, edge_ids, gaps)

    def pairs(self, edges: torch.Tensor, negatives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [B] of each edge's true destination and of its negative destination [B] (device tensors)."""
        dst = self.dst[edges]
        if self.model is None:
            return self.popularity[dst], self.popularity[negatives]
        src = self.source(edges)
        positive = self.model.scorer(src, self.model.destination(dst))
        negative = self.model.scorer(src, self.model.destination(negatives))
        return torch.nan_to_num(positive, 0.0, 1.0, -1.0), torch.nan_to_num(negative, 0.0, 1.0, -1.0)

    def against_all(self, edges: torch.Tensor, dst_all: torch.Tensor | None) -> torch.Tensor:
        """Scores [B, N] of edges [B] against every candidate (``dst_all``: their destination embeddings)."""
        if self.model is None:
            return self.popularity[self.items].expand(len(edges), -1)
        return self.model.scorer.against_all(self.source(edges), dst_all)


def batch_negatives(rng: np.random.Generator, items: np.ndarray, n_edges: int, batch_size: int,
                    device: torch.device) -> torch.Tensor:
    """One uniform draw from ``items`` per edge [n_edges], drawn batch by batch in order (the sequence a draw
    per batch gives), moved to the device in one copy."""
    draws = [items[rng.integers(0, len(items), min(batch_size, n_edges - start))]
             for start in range(0, n_edges, batch_size)]
    return torch.from_numpy(np.concatenate(draws)).to(device)


class PairLoss(nn.Module):
    """The training step's forward: BCE with logits of a batch's true destinations [B] against its negatives [B]."""

    def __init__(self, scorer: Scorer):
        super().__init__()
        self.model = scorer.model      # registered, so that a CUDA graph of this module sees its parameters
        self.scorer = scorer

    def forward(self, edges: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        positive, negative = self.scorer.pairs(edges, negatives)
        logits = torch.cat([positive, negative])
        labels = torch.cat([torch.ones_like(positive), torch.zeros_like(negative)])
        return nn.functional.binary_cross_entropy_with_logits(logits, labels)


class TrainingLoss:
    """The loss of a training batch, whose backward gives the parameters' gradients. With ``graphs`` (CUDA) a
    full batch replays one CUDA graph of the forward and one of the backward (torch.cuda.make_graphed_callables,
    captured on the first full batch), so a step is a few launches instead of hundreds; a shorter batch (an
    epoch's last) runs eagerly. The optimizer step stays eager and the CUDA generator's state is restored after
    the capture's warm-up, so the arithmetic and the dropout draws are those of the eager step."""

    def __init__(self, scorer: Scorer, batch_size: int, graphs: bool):
        self.eager, self.batch_size, self.graphs = PairLoss(scorer), batch_size, graphs
        self.graphed = None

    def __call__(self, edges: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        if not (self.graphs and len(edges) == self.batch_size):
            return self.eager(edges, negatives)
        if self.graphed is None:
            # a second module over the same parameters: make_graphed_callables replaces its forward
            generator = torch.cuda.get_rng_state(edges.device)
            self.graphed = torch.cuda.make_graphed_callables(PairLoss(self.eager.scorer),
                                                             (edges.clone(), negatives.clone()))
            torch.cuda.set_rng_state(generator, edges.device)
        return self.graphed(edges, negatives).clone()  # the graph's output is overwritten by its next replay


def train_epoch(scorer: Scorer, optimizer, rng: np.random.Generator, batch_size: int,
                batch_loss: TrainingLoss) -> float:
    """One pass over the training edges in time order; returns the mean batch loss. Nothing in the loop waits
    for the device: the edges and negatives are there before it starts, the losses are read after it."""
    task, model = scorer.task, scorer.model
    train_edges = scorer.edge_index(0)
    negatives = batch_negatives(rng, np.unique(task.dst[task.part == 0]), len(train_edges), batch_size,
                                scorer.device)
    model.train()
    losses = []
    for start in range(0, len(train_edges), batch_size):
        loss = batch_loss(train_edges[start:start + batch_size], negatives[start:start + batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return float(np.mean(torch.stack(losses).double().cpu().numpy()))


@torch.no_grad()
def evaluate_links(scorer: Scorer, part: int, seed: int, batch_size: int) -> dict[str, float]:
    """AP and ROC-AUC of split ``part`` against one random negative per edge, means over batches."""
    if scorer.model is not None:
        scorer.model.eval()
    edges = scorer.edge_index(part)
    negatives = batch_negatives(np.random.default_rng(seed), scorer.task.items, len(edges), batch_size,
                                scorer.device)
    scores = [scorer.pairs(edges[start:start + batch_size], negatives[start:start + batch_size])
              for start in range(0, len(edges), batch_size)]
    positive, negative = (torch.cat(side).cpu().numpy() for side in zip(*scores))
    per_batch = [link_metrics(positive[start:start + batch_size], negative[start:start + batch_size])
                 for start in range(0, len(edges), batch_size)]
    return {name: float(np.mean([metrics[name] for metrics in per_batch])) for name in per_batch[0]}


@torch.no_grad()
def evaluate_retrieval(scorer: Scorer, part: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``above`` and ``ties`` [C] of every case of split ``part`` ranked against all candidates."""
    dst_all = None
    if scorer.model is not None:
        scorer.model.eval()
        dst_all = scorer.model.destination(scorer.items)
    edges = scorer.edge_index(part)
    targets = torch.searchsorted(scorer.items, scorer.dst[edges])             # [C] columns of the true items
    above, ties = [], []
    for start in range(0, len(edges), batch_size):
        batch = edges[start:start + batch_size]
        counts = case_counts(scorer.against_all(batch, dst_all).float(), targets[start:start + batch_size])
        above.append(counts[0])
        ties.append(counts[1])
    return np.concatenate(above), np.concatenate(ties)


class EarlyStopping:
    """Keep the weights when every metric is >= its best so far; stop after ``patience`` other epochs."""

    def __init__(self, patience: int):
        self.patience, self.best, self.counter, self.state, self.best_epoch = patience, None, 0, None, 0

    def step(self, metrics: dict[str, float], model: nn.Module, epoch: int) -> bool:
        """Record epoch ``epoch``'s metrics; True when training should stop."""
        if self.best is None or all(value >= self.best[name] for name, value in metrics.items()):
            self.best, self.counter, self.best_epoch = dict(metrics), 0, epoch
            self.state = {name: value.detach().clone() for name, value in model.state_dict().items()}
            return False
        self.counter += 1
        return self.counter >= self.patience


def run(task: EdgeTask, config: RunConfig, device: torch.device, deadline: float | None = None,
        log=print, graphs: bool | None = None, scan_backend: str = "auto") -> dict | None:
    """Train and evaluate ``config.model`` on ``task``; the run's record, or None when ``deadline``
    (time.monotonic) passed before it finished. ``graphs``: full training batches replay CUDA graphs
    (``TrainingLoss``; default: ``step_kind``'s choice). ``scan_backend``: the delta scan's backend in
    backbones that run it (model.LinkModel); the record's "scan" names the one used (None: no scan), its
    "machine" the device's model (tracking.store.machine_description)."""
    start = time.monotonic()
    config.check()
    check_scan_backend(scan_backend, config.model, device)
    if graphs and device.type != "cuda":
        raise OptionError(f"CUDA graphs need a CUDA device, got {device}")
    step = step_kind(config.model, device, graphs)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(device.type == "cpu" or deterministic)
    try:
        scorer = Scorer(task, config, device, scan_backend)
        curve, stopper = [], EarlyStopping(config.patience)
        if scorer.model is not None:
            optimizer = torch.optim.Adam(scorer.model.parameters(), lr=config.lr, weight_decay=0.0)
            rng = np.random.default_rng(config.seed)
            batch_loss = TrainingLoss(scorer, config.batch_size, step == "cuda graphs")
            for epoch in range(1, config.epochs + 1):
                loss = train_epoch(scorer, optimizer, rng, config.batch_size, batch_loss)
                valid = evaluate_links(scorer, 1, VALID_NEGATIVE_SEED, config.batch_size)
                curve.append({"epoch": epoch, "train_loss": loss, **{f"valid_{k}": v for k, v in valid.items()}})
                log(f"{task.name} {config.model} s{config.seed} epoch {epoch}: loss {loss:.4f} "
                    f"valid AP {valid['average_precision']:.4f} ROC-AUC {valid['roc_auc']:.4f}")
                if stopper.step(valid, scorer.model, epoch):
                    break
                if deadline is not None and time.monotonic() > deadline and epoch < config.epochs:
                    return None
            scorer.model.load_state_dict(stopper.state)
        record = {"config": config.to_dict(), "dataset": task.name, "time_kind": task.time_kind,
                  "task": task.stats, "curve": curve, "best_epoch": stopper.best_epoch, "epochs": len(curve),
                  "n_parameters": sum(p.numel() for p in scorer.model.parameters()) if scorer.model else 0,
                  "width": scorer.model.scorer.width if scorer.model else 0, "n_items": len(task.items),
                  "device": str(device), "machine": machine_description(device), "step": step,
                  "scan": scan_backend_used(config.model, scan_backend, device, 1 + config.n_neighbours)}
        for part, name, seed in ((1, "valid", VALID_NEGATIVE_SEED), (2, "test", TEST_NEGATIVE_SEED)):
            links = evaluate_links(scorer, part, seed, config.batch_size)
            above, ties = evaluate_retrieval(scorer, part, config.batch_size)
            record.update({f"{name}_link_{k}": v for k, v in links.items()})
            record.update({f"{name}_{k}": v for k, v in retrieval_metrics(above, ties, len(task.items)).items()})
            if part == 2:
                record["cases"] = {"user": task.src[task.cases(2)].tolist(), "above": above.tolist(),
                                   "ties": ties.tolist()}
        record["wall_seconds"] = time.monotonic() - start
        return record
    finally:
        torch.use_deterministic_algorithms(deterministic)


def describe(record: dict) -> str:
    """One line of a finished run's test figures."""
    return (f"{record['dataset']} {record['config']['model']} s{record['config']['seed']} width {record['width']}: "
            f"test AUC (theirs) {record['test_auc']:.4f}, full-ranking AUC {record['test_full_auc']:.4f}, "
            f"hit@200 {record['test_hit@200']:.4f}, link AP {record['test_link_average_precision']:.4f}, "
            f"ROC-AUC {record['test_link_roc_auc']:.4f}, best epoch {record['best_epoch']}/{record['epochs']}, "
            f"{record['wall_seconds']:.1f} s")

