"""The popularity ranker that ``--models pop`` evaluates (see baselines/pop.py)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..data.core import ProcessedDataset


def training_counts(dataset: ProcessedDataset) -> np.ndarray:
    """Training interactions per item [n_items] (column i is item i + 1): each user's training prefix."""
    prefix = np.arange(len(dataset.items)) - np.repeat(dataset.offsets[:-1], np.diff(dataset.offsets))
    in_training = prefix < np.repeat(dataset.train_length, np.diff(dataset.offsets))
    return np.bincount(dataset.items[in_training], minlength=dataset.n_items + 1)[1:]


class PopularityRecommender(nn.Module):
    """Scores every item by its training count, whatever the history: ``encode`` returns one placeholder
    feature per position and ``score_all`` broadcasts the counts. It has no parameters."""

    def __init__(self, counts: np.ndarray):
        super().__init__()
        self.n_items = len(counts)
        self.register_buffer("counts", torch.as_tensor(counts, dtype=torch.float32))

    def encode(self, items: torch.Tensor) -> torch.Tensor:
        """Left-padded item ids [B, T] -> placeholder states [B, T, 1]."""
        return torch.zeros(*items.shape, 1, device=items.device)

    def score_all(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores [N, n_items]: the counts, the same for every row of ``hidden`` [N, 1]."""
        return self.counts.expand(hidden.shape[0], -1)
