"""Full-ranking metrics against sklearn's AUC and hand-computed cases."""

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from prism_rec.training.metrics import MetricMeans, rank_metrics


def test_hand_computed_case_with_ties():
    scores = torch.tensor([[0.1, 0.5, 0.9, 0.5, 0.2]])
    metrics = rank_metrics(scores, torch.tensor([1]))  # target 0.5; one item tied, two below, one above
    assert metrics["auc"].item() == pytest.approx((2 + 0.5) / 4)
    # rank counts the item above and the tied item: 0-based rank 2
    assert metrics["hit_10"].item() == 1.0
    assert metrics["ndcg_10"].item() == pytest.approx(1 / math.log2(4))


def test_top_and_bottom():
    scores = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])
    metrics = rank_metrics(scores, torch.tensor([0, 2]))
    assert metrics["auc"].tolist() == [1.0, 0.0]
    assert metrics["ndcg_10"].tolist() == [1.0, 0.5]


def test_auc_matches_sklearn():
    generator = np.random.default_rng(0)
    scores = np.round(generator.normal(size=(50, 300)), 1)  # rounding makes ties
    targets = generator.integers(0, 300, size=50)
    ours = rank_metrics(torch.from_numpy(scores), torch.from_numpy(targets))["auc"].numpy()
    for row, target in enumerate(targets):
        labels = np.zeros(300)
        labels[target] = 1
        assert ours[row] == pytest.approx(roc_auc_score(labels, scores[row]))


def test_hit_cutoff():
    scores = torch.arange(1000, 0, -1, dtype=torch.float32).unsqueeze(0)  # item i has rank i
    for target, expected in ((9, 1.0), (10, 0.0)):
        assert rank_metrics(scores, torch.tensor([target]))["hit_10"].item() == expected
    assert rank_metrics(scores, torch.tensor([499]))["hit_500"].item() == 1.0
    assert rank_metrics(scores, torch.tensor([500]))["hit_500"].item() == 0.0


def test_means_average_over_cases():
    means = MetricMeans()
    means.add(rank_metrics(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([0])))
    means.add(rank_metrics(torch.tensor([[3.0, 2.0, 1.0]]), torch.tensor([2])))
    assert means.means()["auc"] == 0.5
    with pytest.raises(ValueError):
        MetricMeans().means()


def test_non_finite_scores_are_refused():
    for bad in (float("nan"), float("inf")):
        with pytest.raises(FloatingPointError, match="diverged"):
            rank_metrics(torch.tensor([[0.1, bad, 0.3]]), torch.tensor([1]))
