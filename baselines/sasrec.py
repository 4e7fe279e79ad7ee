"""SASRec (Kang & McAuley, ICDM 2018): self-attentive sequential recommendation.

Each block: Q = LayerNorm(x); x = Q + MultiHeadAttention(Q, x, x) with a causal mask; then
x = LayerNorm(x); x = x + FFN(x) with a point-wise two-layer ReLU network; padded positions are zeroed
after every block. Learned absolute positions and the item embedding scaled by sqrt(d) are added by the
shared recommender (``wants_positions``); the final LayerNorm is the recommender's.

Initialisation (``init_policy = "recbole"``, ``prism_rec.models.init``), as RecBole's ``SASRec._init_weights``
(recbole/model/sequential_recommender/sasrec.py): every Linear weight ~ N(0, 0.02) with zero biases,
LayerNorms at weight 1, bias 0; the item table and positions (the recommender's) ~ N(0, 0.02).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.attention import causal_padding_mask
from prism_rec.models.init import apply_init
from prism_rec.registry import register_backbone


class SASRecBlock(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"sasrec: d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.attention_norm = nn.LayerNorm(d_model, eps=1e-8)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.ffn_norm = nn.LayerNorm(d_model, eps=1e-8)
        self.ffn = nn.Sequential(
            nn.Linear(d_model,
                      d_model), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_model, d_model), nn.Dropout(dropout)
        )
        self.dropout = dropout

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        queries = self.attention_norm(x)
        q_proj, k_proj, v_proj = self.qkv.weight.chunk(3)
        q_bias, k_bias, v_bias = self.qkv.bias.chunk(3)
        q = F.linear(queries, q_proj, q_bias)  # queries come from the normalised input,
        k = F.linear(x, k_proj, k_bias)  # keys and values from the block input, as in SASRec
        v = F.linear(x, v_proj, v_bias)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v))  # [B, H, T, Dh]
        attended = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, dropout_p=self.dropout if self.training else 0.0
        )
        x = queries + F.dropout(self.out(attended.transpose(1, 2).reshape(B, T, D)), self.dropout, self.training)
        x = self.ffn_norm(x)
        return x + self.ffn(x)


@register_backbone("sasrec", description="SASRec: causal self-attention, learned positions (Kang & McAuley 2018)")
class SASRec(nn.Module):
    """Stack of SASRec blocks over item embeddings (see the module docstring)."""

    wants_positions = True
    init_policy = "recbole"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1):
        super().__init__()
        self.blocks = nn.ModuleList(SASRecBlock(d_model, n_heads, dropout) for _ in range(n_layers))
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attention_mask = causal_padding_mask(mask)
        keep = mask.unsqueeze(-1).to(x.dtype)
        x = x * keep
        for block in self.blocks:
            x = block(x, attention_mask) * keep
        return x
