"""Full-ranking metrics: the target is ranked against ALL items (no sampled candidates).

For one test case with target score s* among n items (the target included):
- AUC = (#items scored below s* + 0.5 * #other items tied with s*) / (n - 1)
- rank = #items scored above s* + #other items tied with s* (0-based, ties counted against the target)
- Hit@K = [rank < K];  NDCG@K = [rank < K] / log2(rank + 2)
Every metric is averaged over test cases. History items are not removed from the candidates.
"""

from __future__ import annotations

import torch

CUTOFFS = (10, 200, 500)
METRIC_NAMES = ("auc",) + tuple(f"{kind}_{k}" for k in CUTOFFS for kind in ("hit", "ndcg"))


def target_counts(scores: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(#items scored above the target, #other items tied with it) [N] each, for scores [N, n_items] and
    target columns [N] (0-based item columns)."""
    if scores.shape[1] < 2:
        raise ValueError("full-ranking metrics need at least 2 items")
    if not torch.isfinite(scores).all():
        raise FloatingPointError("non-finite item scores: the model diverged (NaN or inf)")
    target_scores = scores.gather(1, targets.long().unsqueeze(1))  # [N, 1]
    return (scores > target_scores).sum(1), (scores == target_scores).sum(1) - 1


def rank_metrics(scores: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-case metrics for scores [N, n_items] and target columns [N] (0-based item columns)."""
    return metrics_from_counts(*target_counts(scores, targets), scores.shape[1])


def metrics_from_counts(above: torch.Tensor, tied_others: torch.Tensor, n_items: int) -> dict[str, torch.Tensor]:
    """Per-case metrics from :func:`target_counts` among ``n_items`` items."""
    above, tied_others = above.double(), tied_others.double()
    below = n_items - 1 - above - tied_others
    metrics = {"auc": (below + 0.5 * tied_others) / (n_items - 1)}
    rank = above + tied_others
    for k in CUTOFFS:
        hit = (rank < k).double()
        metrics[f"hit_{k}"] = hit
        metrics[f"ndcg_{k}"] = hit / torch.log2(rank + 2)
    return metrics


class MetricMeans:
    """Running sums of per-case metrics; ``means()`` gives the averages over all cases added."""

    def __init__(self):
        self.sums = {name: 0.0 for name in METRIC_NAMES}
        self.count = 0

    def add(self, per_case: dict[str, torch.Tensor]) -> None:
        for name, values in per_case.items():
            self.sums[name] += float(values.sum())
        self.count += len(per_case["auc"])

    def add_sums(self, sums: dict[str, float], count: int) -> None:
        for name, value in sums.items():
            self.sums[name] += value
        self.count += count

    def means(self) -> dict[str, float]:
        if not self.count:
            raise ValueError("no evaluation cases")
        return {name: total / self.count for name, total in self.sums.items()}
