"""The shared recommender that wraps any registered backbone."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..registry import build_backbone
from .init import init_embeddings, policy_of
from .nn import positions_from_first_item


class SequentialRecommender(nn.Module):
    """Item embedding (row 0 = padding) -> [positions] -> backbone -> final norm; scores = h @ E^T.

    Backbones that set ``wants_positions = True`` (SASRec) get learned absolute positions counted from
    the first real item of each sequence, so extra left-padding does not shift them, and the item
    embedding scaled by sqrt(d) as in SASRec.

    The item table (padding row 0 zeroed) and the positions are drawn by the backbone's declared
    initialisation policy (``prism_rec.models.init``: N(0, 0.02) for fla, RecBole and TTT backbones); the final
    LayerNorm starts at weight 1, bias 0.
    """

    def __init__(self, n_items: int, backbone: str, d_model: int = 64, max_len: int = 200,
                 dropout: float = 0.1, **backbone_options):
        super().__init__()
        self.n_items = n_items
        self.item_embedding = nn.Embedding(n_items + 1, d_model, padding_idx=0)
        self.backbone = build_backbone(backbone, d_model=d_model, dropout=dropout, **backbone_options)
        self.positional = bool(getattr(self.backbone, "wants_positions", False))
        self.position_embedding = nn.Embedding(max_len, d_model) if self.positional else None
        self.embedding_scale = math.sqrt(d_model) if self.positional else 1.0
        self.embedding_dropout = nn.Dropout(dropout)
        self.final_norm = nn.LayerNorm(d_model)
        init_embeddings(policy_of(self.backbone), self.item_embedding, self.position_embedding)

    def encode(self, items: torch.Tensor) -> torch.Tensor:
        """Left-padded item ids [B, T] (0 = padding) -> hidden states [B, T, d]."""
        mask = items > 0  # [B, T]
        h = self.item_embedding(items) * self.embedding_scale
        if self.position_embedding is not None:
            h = h + self.position_embedding(positions_from_first_item(mask))
        h = self.embedding_dropout(h) * mask.unsqueeze(-1)
        return self.final_norm(self.backbone(h, mask))

    def item_table(self) -> torch.Tensor:
        """Embeddings of the real items, row i is item i + 1 [n_items, d]."""
        return self.item_embedding.weight[1:]

    def score_all(self, hidden: torch.Tensor) -> torch.Tensor:
        """Scores of every real item [N, n_items] for hidden states [N, d]."""
        return hidden @ self.item_table().t()
