"""The null backbone: no token mixing, so the output at a position is that position's own item alone.

Issue 39's design asks for a backbone without token mixing under each protocol: the floor that shows what
a sequence model adds over the last item. Under the next-item protocol (``prism_rec.models.recommender``)
the output at the last position is the last item's embedding, through the shared final LayerNorm, scored
against the item table: a learned "next item given the last item" model with nothing from earlier items.
Under the authors' protocol, whose source sequence starts with the user token, the null backbone adds that
user token to the last item (``prism_rec.protocols.authors.model.NullMixer``), which the user-token-free
sequences of this contract have no place for.

It has no parameters of its own (the item table and the final norm are the recommender's), and it trains
(unlike ``pop``): the item table learns. ``init_policy = "fla"``: the item table is drawn as for the faithful
backbones it is the floor of (gated_deltanet, prism, mamba2: N(0, 0.02)); as a parameterless module it needs
no ``apply_init`` call. Identity keeps the backbone contract trivially (causal, left-padding invariant).
"""

from __future__ import annotations

import torch
from torch import nn

from prism_rec.registry import register_backbone


@register_backbone("null", description="No token mixing: each position's own item only (the last item's floor)")
class NullBackbone(nn.Module):
    """The identity token mixer: hidden states [B, T, d] unchanged (see the module docstring)."""

    init_policy = "fla"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.0):
        super().__init__()  # the shared settings are accepted and have nothing to act on

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x
