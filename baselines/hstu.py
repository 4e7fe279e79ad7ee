"""HSTU (Zhai et al., "Actions Speak Louder than Words", ICML 2024): the generative recommender's encoder.

Each layer (Hierarchical Sequential Transduction Unit), with H heads of attention width d_qk and value
width d_v:

    U, V, Q, K = Split(SiLU(f1(LayerNorm(x))))                          f1 linear, no bias
    A[i, j]    = SiLU(q_i . k_j + rab(i - j)) / n_i    for j <= i, j a real item; 0 otherwise
    Y          = f2(Dropout(LayerNorm(A V) * U))                        f2 linear with bias
    x          = x + Y

Pointwise aggregated attention: no softmax and no 1/sqrt(d) scale; the weights are divided by a length.
The official code divides by the padded length (constant there, as every batch is padded to the same
maximum length); here n_i is the number of real items up to and including position i, so the layer stays
causal (a position never learns how many items follow it) and extra left-padding changes nothing (the
LayerNorm that follows removes most of this scale).
Both LayerNorms have no learned affine, as in the official code.

rab is the relative attention bias: one learned weight per relative distance i - j, shared by the heads;
distances of ``max_distance`` or more share the last weight. The paper's bias also has a bucketed
timestamp term; the backbone contract carries no timestamps, so only the position term is used. The
official input preprocessor also adds learned absolute positions; this backbone relies on the relative
bias alone (``wants_positions`` is False). HSTU has no separate feed-forward: U's gating replaces it.

Initialisation (``init_policy = "hstu"``, ``prism_rec.init``), as generative-recommenders
(generative_recommenders/research/modeling/sequential/hstu.py, embedding_modules.py): each layer draws its
own weights, f1 (``uvqk``) ~ N(0, 0.02), f2's weight xavier-uniform with PyTorch's default bias
U(+-1/sqrt(fan_in)) (the reference does not zero it), rab ~ N(0, 0.02); the item table (the recommender's)
~ N(0, 0.02) truncated at +-2 std.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.init import apply_init
from prism_rec.registry import register_backbone


class RelativePositionBias(nn.Module):
    """Learned bias rab(i - j) per relative distance, the last weight shared by distances >= max_distance - 1."""

    def __init__(self, max_distance: int = 200):
        super().__init__()
        self.max_distance = max_distance
        self.weight = nn.Parameter(torch.empty(max_distance).normal_(0.0, 0.02))

    def forward(self, T: int) -> torch.Tensor:
        """Bias [T, T] for query i and key j (only j <= i is used)."""
        position = torch.arange(T, device=self.weight.device)
        distance = (position[:, None] - position[None, :]).clamp(0, self.max_distance - 1)
        return self.weight[distance]


class HSTULayer(nn.Module):
    """One HSTU layer: called as layer(x [B, T, d], mask [B, T]) -> [B, T, d] (residual included)."""

    def __init__(self, d_model: int, n_heads: int = 2, attention_dim: int | None = None,
                 linear_dim: int | None = None, dropout: float = 0.1, max_distance: int = 200, eps: float = 1e-6):
        super().__init__()
        if (attention_dim is None or linear_dim is None) and d_model % n_heads:
            raise ValueError(f"hstu: d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.attention_dim = attention_dim or d_model // n_heads
        self.linear_dim = linear_dim or d_model // n_heads
        self.eps = eps
        self.uvqk = nn.Linear(d_model, n_heads * (2 * self.linear_dim + 2 * self.attention_dim), bias=False)
        nn.init.normal_(self.uvqk.weight, std=0.02)
        self.relative_bias = RelativePositionBias(max_distance)
        self.output = nn.Linear(n_heads * self.linear_dim, d_model)
        nn.init.xavier_uniform_(self.output.weight)
        self.dropout = nn.Dropout(dropout)

    def attention_weights(self, q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """SiLU(q_i . k_j + rab(i - j)) / n_i over causal real keys: q, k [B, T, H, d_qk] -> [B, H, T, T]."""
        T = q.shape[1]
        scores = torch.einsum("bihd,bjhd->bhij", q, k) + self.relative_bias(T)
        allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril() & mask[:, None, None, :]  # [B, 1, T, T]
        length = mask.cumsum(1).clamp(min=1).to(q.dtype)[:, None, :, None]  # n_i: real items up to i [B, 1, T, 1]
        return F.silu(scores) * allowed / length

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        projected = F.silu(self.uvqk(F.layer_norm(x, x.shape[-1:], eps=self.eps)))
        u, v, q, k = projected.split([self.n_heads * self.linear_dim] * 2 + [self.n_heads * self.attention_dim] * 2, -1)
        heads = (B, T, self.n_heads, -1)
        attended = torch.einsum("bhij,bjhd->bihd", self.attention_weights(q.view(heads), k.view(heads), mask),
                                v.view(heads)).reshape(B, T, -1)  # A V, heads concatenated [B, T, H * d_v]
        gated = F.layer_norm(attended, attended.shape[-1:], eps=self.eps) * u
        return x + self.output(self.dropout(gated))


@register_backbone("hstu", description="HSTU: pointwise aggregated attention with relative bias (Zhai et al. 2024)")
class HSTU(nn.Module):
    """Stack of HSTU layers (see the module docstring); padded positions are zeroed after every layer."""

    init_policy = "hstu"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1,
                 attention_dim: int | None = None, linear_dim: int | None = None, max_distance: int = 200):
        super().__init__()
        self.layers = nn.ModuleList(
            HSTULayer(d_model, n_heads, attention_dim, linear_dim, dropout, max_distance) for _ in range(n_layers)
        )
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        x = x * keep
        for layer in self.layers:
            x = layer(x, mask) * keep
        return x
