"""Retrieval and link metrics against loops written as the authors' metrics.py computes them."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from prism_rec.protocols.authors.metrics import case_counts, full_ranking_auc, link_metrics, retrieval_metrics


def authors_loop(scores, target):
    """rec/utils/metrics.py:29-129 and evaluate_models_utils.py:202-209, case by case, batches of 256."""
    per_case = []
    for row, t in zip(scores, target):
        positive, negatives = row[t], row.copy()
        negatives[t] = -1e9
        rank = int((negatives > positive).sum()) + 1
        auc = ((positive > negatives).sum() + 0.5 * (positive == negatives).sum()) / len(negatives)
        per_case.append({"auc": auc, "mrr": 1 / rank, "hit@10": rank <= 10,
                         "ndcg@10": 1 / np.log2(rank + 1) if rank <= 10 else 0.0})
    batches = [per_case[start:start + 256] for start in range(0, len(per_case), 256)]
    return {name: np.mean([np.mean([case[name] for case in batch]) for batch in batches]) for name in per_case[0]}


def test_retrieval_metrics_equal_the_authors_loop_and_sklearn():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 6, size=(600, 30)).astype(np.float32)  # many ties; 3 batches, the last short
    target = rng.integers(0, 30, 600)
    above, ties = case_counts(torch.from_numpy(scores), torch.from_numpy(target))
    metrics = retrieval_metrics(above, ties, 30)
    for name, value in authors_loop(scores, target).items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-12)
    per_case = full_ranking_auc(above, ties, 30)
    for case in range(0, 600, 37):
        others = np.delete(scores[case], target[case])
        labels = np.r_[1, np.zeros(len(others))]
        expected = roc_auc_score(labels, np.r_[scores[case, target[case]], others])
        np.testing.assert_allclose(per_case[case], expected, rtol=1e-12)
    np.testing.assert_allclose(metrics["full_auc"], per_case.mean())


def test_link_metrics():
    metrics = link_metrics(np.array([0.9, 0.2, 0.6]), np.array([0.1, 0.7, 0.3]))
    assert metrics["roc_auc"] == pytest.approx(6 / 9)  # 6 of the 9 (positive, negative) pairs in order
    assert metrics["average_precision"] == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)  # positives at ranks 1, 3, 5
