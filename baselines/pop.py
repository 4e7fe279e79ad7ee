"""Item popularity: every history gets the same ranking, items by their number of training interactions.

Not a sequence model: the floor every trained backbone must clear. Registered as a backbone so that
``--models pop`` and ``all`` put it in every table; ``trains = False`` (``prism_rec.registry.trains``) makes
it a recommender that does not train: ``prism_rec.training.trainer.build_model`` returns a
:class:`prism_rec.models.popularity.PopularityRecommender` of the dataset's training counts instead of a
``SequentialRecommender``, which ``fit`` evaluates without training (no parameters, no epochs), and a bench
runs it once whatever the seeds (it is deterministic). Ties (items with equal counts) count 1/2 in the AUC,
as for any model. As a token mixer on its own it is the identity, so it keeps the backbone contract trivially.
"""

from __future__ import annotations

import torch
from torch import nn

from prism_rec.registry import register_backbone


@register_backbone("pop", description="Item popularity: training-interaction counts, no training (the floor)")
class ItemPopularity(nn.Module):
    """The identity token mixer that marks a popularity ranker (see the module docstring)."""

    trains = False
    init_policy = "none"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.0):
        super().__init__()  # the shared settings are accepted and have nothing to act on

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x
