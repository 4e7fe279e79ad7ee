"""Evaluation of a trained recommender on (user, position) cases: metric means in the run's evaluation mode
(full ranking by default; history excluded or sampled negatives, candidates.py), each test case's
full-ranking rank for the paired tests (prism_rec/tracking/case_ranks.py), and the beyond-accuracy metrics
of the test cases' top-K items."""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data.batching import evaluation_batch
from ..data.core import ProcessedDataset
from ..models.popularity import training_counts
from .candidates import history_mask, sample_negatives
from .config import TrainConfig
from .distributed import SINGLE_PROCESS, World
from .metrics import (
    MetricMeans,
    beyond_accuracy,
    candidate_counts,
    kept_top_k,
    metric_names,
    metrics_from_counts,
    top_items,
)


def case_scores(model, histories: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
    """Scores [C, n_items] (fp32; column i is item i + 1) of left-padded histories [C, T] of ``users`` [C]:
    ``model.score_histories`` where the model has one (the RecBole bridge's), else the last position's
    features through ``model.score_all``."""
    if hasattr(model, "score_histories"):
        return model.score_histories(histories, users)
    hidden = model.encode(histories)[:, -1]  # [C, d]
    with torch.autocast(histories.device.type, enabled=False):  # bf16 scores would tie many items with the target
        return model.score_all(hidden.float())  # [C, I]


@torch.no_grad()
def evaluate(model, dataset: ProcessedDataset, cases: np.ndarray, config: TrainConfig,
             device: torch.device, description: str = "eval", world: World = SINGLE_PROCESS,
             case_ranks: dict | None = None) -> dict[str, float]:
    """Metrics of ``cases`` (user, position) rows at ``config.cutoffs`` among the candidates that
    ``config.exclude_history`` and ``config.sampled`` choose, batched on ``device``; in a data-parallel world
    every rank ranks its share of the cases and the metric sums and counts are added up.

    A ``case_ranks`` dict (a test evaluation) receives, in the order of ``cases``, every case's user and
    full-ranking twice-rank (2 * above + tied others among all items, history kept, case_ranks.py) as arrays
    "users" and "twice_rank", and "n_items"; the returned metrics then also hold coverage@K and average
    popularity@K (metrics.beyond_accuracy) of every case's top K = metrics.kept_top_k item columns among all
    items (less the history with ``exclude_history``; a sampled evaluation takes this full-ranking list too,
    a list of sampled candidates having no coverage). The lists are not kept: every K they serve is an
    evaluation cutoff, whose coverage and popularity are among the metrics returned."""
    model.eval()
    names = metric_names(config.cutoffs)
    means = MetricMeans(names)
    negatives = (world.share(sample_negatives(dataset, cases, config.sampled, config.seed, config.exclude_history))
                 if config.sampled != "none" else None)  # [C', N]
    own_cases = world.share(cases)
    own_ranks, own_top = [], []
    batches = range(0, len(own_cases), config.eval_batch_size)
    for start in tqdm(batches, desc=description, leave=False, disable=not (config.progress and world.is_main)):
        batch = own_cases[start : start + config.eval_batch_size]
        histories, targets = evaluation_batch(dataset, batch, config.max_len)
        scores = case_scores(model, torch.from_numpy(histories).to(device), torch.from_numpy(batch[:, 0]).to(device))
        targets = torch.from_numpy(targets - 1).to(device)
        # [C, I]: needed for the history-filtered counts (full ranking) or for the kept top items
        wanted = config.exclude_history and (negatives is None or case_ranks is not None)
        excluded = torch.from_numpy(history_mask(dataset, batch)).to(device) if wanted else None
        above, tied_others, n_all = candidate_counts(scores, targets)  # [C] each
        if negatives is not None:
            counts = candidate_counts(scores, targets, negatives=torch.from_numpy(
                negatives[start : start + config.eval_batch_size]).to(device))
        elif excluded is not None:
            counts = candidate_counts(scores, targets, excluded=excluded)
        else:
            counts = above, tied_others, n_all
        means.add(metrics_from_counts(*counts, config.cutoffs))
        if case_ranks is not None:
            own_ranks.append((2 * above + tied_others).cpu().numpy())
            own_top.append(top_items(scores, kept_top_k(config.cutoffs), excluded).cpu().numpy())
    if world.distributed:
        totals = world.sum([means.sums[name] for name in names] + [means.count], device)
        means = MetricMeans(names)
        means.add_sums(dict(zip(names, totals[:-1])), int(totals[-1]))
    if case_ranks is None:
        return means.means()
    k = kept_top_k(config.cutoffs)
    ranks = np.concatenate(world.gather_objects(np.concatenate(own_ranks) if own_ranks else np.zeros(0, np.int64)))
    top = np.concatenate(world.gather_objects(np.concatenate(own_top) if own_top else np.zeros((0, k), np.int64)))
    case_ranks.update(users=cases[:, 0].copy(), twice_rank=ranks, n_items=dataset.n_items)
    return {**means.means(), **beyond_accuracy(top, training_counts(dataset), config.cutoffs)}
