"""Ranking metrics: the target is ranked against its candidates, by default ALL items.

For one test case with target score s* among n candidates (the target included):
- AUC = (#candidates scored below s* + 0.5 * #other candidates tied with s*) / (n - 1)
- rank = #candidates scored above s* + #other candidates tied with s* (0-based, ties counted against the target)
- MRR = 1 / (rank + 1);  Hit@K = [rank < K];  NDCG@K = [rank < K] / log2(rank + 2)
Every metric is averaged over test cases. The candidates are every item by default (history items kept);
:func:`candidate_counts` narrows them to the items outside the user's history (``excluded``) or to the target
and N sampled negatives (``negatives``).

Beyond accuracy, from each case's top-K recommended items (:func:`top_items`, the K of :func:`kept_top_k`):
- coverage@K = #distinct items in any case's top K / n_items
- average popularity@K = mean over cases of the mean training count (training rows only) of its top K items
These are not means of per-case values that a data-parallel world can add up, so they come from the kept
lists of every case (evaluation.evaluate with ``case_ranks``).
"""

from __future__ import annotations

import numpy as np
import torch

CUTOFFS = (10, 200, 500)  # the default table's cutoffs: every evaluation computes them
TOP_K_LIMIT = 50  # the most top items a test evaluation lists per case (for coverage@K and avg_pop@K)
METRIC_NAMES = ("auc",) + tuple(f"{kind}_{k}" for k in CUTOFFS for kind in ("hit", "ndcg"))  # the table's columns


def metric_names(cutoffs: tuple[int, ...] = CUTOFFS) -> tuple[str, ...]:
    """Every metric an evaluation with ``cutoffs`` reports: AUC, MRR, Hit@K and NDCG@K."""
    return ("auc", "mrr") + tuple(f"{kind}_{k}" for k in evaluation_cutoffs(cutoffs) for kind in ("hit", "ndcg"))


def evaluation_cutoffs(cutoffs: tuple[int, ...]) -> tuple[int, ...]:
    """The cutoffs computed for a run asking for ``cutoffs``: those and the table's (sorted, once each)."""
    return tuple(sorted(set(CUTOFFS) | set(cutoffs)))


def kept_top_k(cutoffs: tuple[int, ...] = CUTOFFS) -> int:
    """How many top items a test evaluation keeps per case: the largest of :func:`evaluation_cutoffs` up to
    :data:`TOP_K_LIMIT` (10 at the default cutoffs), the largest K of coverage@K and average popularity@K."""
    return max(k for k in evaluation_cutoffs(cutoffs) if k <= TOP_K_LIMIT)


def beyond_accuracy_names(cutoffs: tuple[int, ...] = CUTOFFS) -> tuple[str, ...]:
    """The beyond-accuracy metrics a test evaluation with ``cutoffs`` reports: coverage_K and avg_pop_K."""
    return tuple(f"{kind}_{k}" for k in evaluation_cutoffs(cutoffs) if k <= kept_top_k(cutoffs)
                 for kind in ("coverage", "avg_pop"))


def top_items(scores: torch.Tensor, k: int, excluded: torch.Tensor | None = None) -> torch.Tensor:
    """Item columns [N, k] of the ``k`` highest scores of [N, n_items], best first, ties going to the lower
    column; columns ``excluded`` marks (bool [N, n_items]) are never among them."""
    if excluded is not None:
        scores = scores.masked_fill(excluded, -torch.inf)
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]


def beyond_accuracy(top: np.ndarray, counts: np.ndarray, cutoffs: tuple[int, ...] = CUTOFFS) -> dict[str, float]:
    """Coverage@K and average popularity@K (module docstring) of the kept top items [N, K'] (item columns, best
    first) of every case, with ``counts`` [n_items] the items' training counts, at every K of
    :func:`beyond_accuracy_names`."""
    top = np.asarray(top)
    if top.ndim != 2 or not len(top):
        raise ValueError(f"beyond-accuracy metrics need top items [N, K] of at least one case, got {top.shape}")
    metrics = {}
    for name in beyond_accuracy_names(cutoffs):
        kind, _, k = name.rpartition("_")
        if int(k) > top.shape[1]:
            raise ValueError(f"{name}: the run kept only its top {top.shape[1]} items per case")
        head = top[:, : int(k)]  # [N, k]
        metrics[name] = (len(np.unique(head)) / len(counts) if kind == "coverage"
                         else float(np.asarray(counts, dtype=np.float64)[head].mean()))
    return metrics


def target_counts(scores: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(#items scored above the target, #other items tied with it) [N] each, for scores [N, n_items] and
    target columns [N] (0-based item columns)."""
    if scores.shape[1] < 2:
        raise ValueError("full-ranking metrics need at least 2 items")
    if not torch.isfinite(scores).all():
        raise FloatingPointError("non-finite item scores: the model diverged (NaN or inf)")
    target_scores = scores.gather(1, targets.long().unsqueeze(1))  # [N, 1]
    return (scores > target_scores).sum(1), (scores == target_scores).sum(1) - 1


def candidate_counts(scores: torch.Tensor, targets: torch.Tensor, excluded: torch.Tensor | None = None,
                     negatives: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(#candidates above the target, #other candidates tied with it, #candidates) [N] each, for scores
    [N, n_items] and target columns [N]. The candidates are every item, less the columns ``excluded`` marks
    (bool [N, n_items], never the target's), or, with ``negatives`` (columns [N, S]), the target and those."""
    if negatives is not None:
        target_scores = scores.gather(1, targets.long().unsqueeze(1))  # [N, 1]
        candidates = torch.cat([target_scores, scores.gather(1, negatives.long())], dim=1)  # [N, 1 + S]
        above, tied = target_counts(candidates, torch.zeros_like(targets))
        return above, tied, torch.full_like(above, candidates.shape[1])
    above, tied = target_counts(scores, targets)
    n_candidates = torch.full_like(above, scores.shape[1])
    if excluded is None:
        return above, tied, n_candidates
    target_scores = scores.gather(1, targets.long().unsqueeze(1))  # [N, 1]
    above = above - (excluded & (scores > target_scores)).sum(1)
    tied = tied - (excluded & (scores == target_scores)).sum(1)
    return above, tied, n_candidates - excluded.sum(1)


def rank_metrics(scores: torch.Tensor, targets: torch.Tensor, cutoffs: tuple[int, ...] = CUTOFFS) -> dict:
    """Per-case metrics for scores [N, n_items] and target columns [N] (0-based item columns)."""
    return metrics_from_counts(*target_counts(scores, targets), scores.shape[1], cutoffs)


def metrics_from_counts(above: torch.Tensor, tied_others: torch.Tensor, n_candidates: int | torch.Tensor,
                        cutoffs: tuple[int, ...] = CUTOFFS) -> dict[str, torch.Tensor]:
    """Per-case metrics from :func:`target_counts` among ``n_candidates`` candidates (one count, or one per
    case [N]), at :func:`evaluation_cutoffs` of ``cutoffs``."""
    above, tied_others = above.double(), tied_others.double()
    n_candidates = torch.as_tensor(n_candidates, dtype=torch.float64, device=above.device)
    below = n_candidates - 1 - above - tied_others
    rank = above + tied_others
    metrics = {"auc": (below + 0.5 * tied_others) / (n_candidates - 1), "mrr": 1.0 / (rank + 1)}
    for k in evaluation_cutoffs(cutoffs):
        hit = (rank < k).double()
        metrics[f"hit_{k}"] = hit
        metrics[f"ndcg_{k}"] = hit / torch.log2(rank + 2)
    return metrics


class MetricMeans:
    """Running sums of per-case metrics; ``means()`` gives the averages over all cases added."""

    def __init__(self, names: tuple[str, ...] = metric_names()):
        self.sums = {name: 0.0 for name in names}
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
