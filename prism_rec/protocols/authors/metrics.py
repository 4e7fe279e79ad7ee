"""Metrics of the authors' protocol, and this suite's full-ranking AUC on the same cases.

Link metrics (rec/utils/metrics.py:12-26): average precision and ROC-AUC (scikit-learn) of the positive
edges of a batch against one random negative destination each, per batch of 256, then averaged over
batches (train_link_prediction.py:369-373).

Retrieval (evaluate_models_utils.py:121-209, metrics.py:29-129): each case scores its true item against
every candidate; the true item's own column is set to -1e9, so it stays among the N columns and counts as
scored below. Per case, with ``above`` = other items scored above the target and ``ties`` = other items
scored equal: their AUC = (N - above - ties / 2) / N, their rank = above + 1 (ties rank below the
target), Hit@K = rank <= K, NDCG@K = 1 / log2(rank + 1) when rank <= K, MRR = 1 / rank; means per batch of
256 cases, then over batches. This suite's AUC (prism_rec/training/metrics.py): (N - 1 - above - ties / 2)
/ (N - 1), over the other items only, averaged over cases; per-case values are kept for the cluster
bootstrap over users.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

BATCH = 256  # --batch_size, load_configs.py:16: the unit their means are taken over
HIT_KS = (10, 200, 500)


def link_metrics(positive: np.ndarray, negative: np.ndarray) -> dict[str, float]:
    """AP and ROC-AUC of one batch: positive scores [B] (label 1) against negative scores [B] (label 0)."""
    labels = np.concatenate([np.ones(len(positive)), np.zeros(len(negative))])
    scores = np.concatenate([positive, negative])
    return {"average_precision": float(average_precision_score(labels, scores)),
            "roc_auc": float(roc_auc_score(labels, scores))}


def batch_mean(values: np.ndarray, batch: int = BATCH) -> float:
    """The mean over consecutive batches of ``batch`` values of each batch's mean (the last may be short)."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.mean([values[start:start + batch].mean() for start in range(0, len(values), batch)]))


def case_counts(scores: torch.Tensor, target: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``above`` and ``ties`` [B]: other candidates scored above and equal to each case's target, from
    scores [B, N] and the target's column [B], counted where the scores are (on the device)."""
    target_score = scores.gather(1, target[:, None])                      # [B, 1]
    above = (scores > target_score).sum(dim=1)
    ties = (scores == target_score).sum(dim=1) - 1                        # the target's own column
    return above.cpu().numpy().astype(np.int64), ties.cpu().numpy().astype(np.int64)


def retrieval_metrics(above: np.ndarray, ties: np.ndarray, n_items: int) -> dict[str, float]:
    """The authors' retrieval metrics (batch means, module docstring) and this suite's AUC (case mean)."""
    rank = above + 1
    metrics = {"auc": batch_mean((n_items - above - ties / 2) / n_items), "mrr": batch_mean(1.0 / rank)}
    for k in HIT_KS:
        metrics[f"hit@{k}"] = batch_mean(rank <= k)
        metrics[f"ndcg@{k}"] = batch_mean(np.where(rank <= k, 1.0 / np.log2(rank + 1), 0.0))
    metrics["full_auc"] = float(np.mean(full_ranking_auc(above, ties, n_items)))
    return metrics


def full_ranking_auc(above: np.ndarray, ties: np.ndarray, n_items: int) -> np.ndarray:
    """This suite's per-case AUC [B]: the fraction of the other n_items - 1 items below the target."""
    return (n_items - 1 - above - ties / 2) / (n_items - 1)
