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

Up to ``dense_max_length`` (256: every recommendation length) A is materialised as [B, H, T, T]. Longer
sequences take the blockwise path: query blocks of ``block_size`` rows, each against the keys up to its
last row and recomputed in the backward (activation checkpointing), so memory is O(T * block_size); a
block's bias is a Toeplitz matrix of overlapping windows of one vector of per-distance weights (as the
reference builds its position bias in generative_recommenders/research/modeling/sequential/hstu.py). The
reference's fused kernel tiles the same way on the GPU
(generative_recommenders/ops/triton/triton_hstu_attention.py); this path is plain PyTorch.

Initialisation (``init_policy = "hstu"``, ``prism_rec.models.init``), as generative-recommenders
(generative_recommenders/research/modeling/sequential/hstu.py, embedding_modules.py): each layer draws its
own weights, f1 (``uvqk``) ~ N(0, 0.02), f2's weight xavier-uniform with PyTorch's default bias
U(+-1/sqrt(fan_in)) (the reference does not zero it), rab ~ N(0, 0.02); the item table (the recommender's)
~ N(0, 0.02) truncated at +-2 std.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from prism_rec.models.init import apply_init
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

    def block(self, start: int, rows: int, columns: int) -> torch.Tensor:
        """Bias [rows, columns] for queries start .. start + rows - 1 and keys 0 .. columns - 1.

        A Toeplitz matrix: overlapping windows of the vector of its rows + columns - 1 distances, so the
        backward sums windows instead of scattering rows * columns gradients into max_distance weights.
        """
        distance = torch.arange(start - columns + 1, start + rows, device=self.weight.device)  # key columns - 1 first
        return self.weight[distance.clamp(0, self.max_distance - 1)].unfold(0, columns, 1).flip(1).contiguous()


class HSTULayer(nn.Module):
    """One HSTU layer: called as layer(x [B, T, d], mask [B, T]) -> [B, T, d] (residual included)."""

    def __init__(self, d_model: int, n_heads: int = 2, attention_dim: int | None = None,
                 linear_dim: int | None = None, dropout: float = 0.1, max_distance: int = 200, eps: float = 1e-6,
                 dense_max_length: int = 256, block_size: int = 512):
        super().__init__()
        if (attention_dim is None or linear_dim is None) and d_model % n_heads:
            raise ValueError(f"hstu: d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.attention_dim = attention_dim or d_model // n_heads
        self.linear_dim = linear_dim or d_model // n_heads
        self.eps = eps
        self.dense_max_length, self.block_size = dense_max_length, block_size
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

    def blockwise_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            mask: torch.Tensor) -> torch.Tensor:
        """A V without the [T, T] matrix: q, k [B, T, H, d_qk], v [B, T, H, d_v], mask [B, T] -> [B, T, H, d_v].

        The same sum as ``attention_weights``, rearranged: padded keys drop out by zeroing their values,
        and 1 / n_i scales each output row instead of each weight.
        """
        T = q.shape[1]
        v = v * mask[:, :, None, None].to(v.dtype)
        length = mask.cumsum(1).clamp(min=1).to(q.dtype)[:, :, None, None]  # n_i [B, T, 1, 1]
        blocks = []
        for start in range(0, T, self.block_size):
            end = min(start + self.block_size, T)
            block = checkpoint(self.attend_block, q[:, start:end], k[:, :end], v[:, :end], start,
                               use_reentrant=False, preserve_rng_state=False)
            blocks.append(block / length[:, start:end])
        return torch.cat(blocks, dim=1)

    def attend_block(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
        """sum_{j <= i} SiLU(q_i . k_j + rab(i - j)) v_j for queries i = start .. start + Q - 1.

        q [B, Q, H, d_qk]; k [B, E, H, d_qk], v [B, E, H, d_v] the keys up to the block's end E -> [B, Q, H, d_v].
        """
        Q, E = q.shape[1], k.shape[1]
        scores = torch.einsum("bihd,bjhd->bhij", q, k) + self.relative_bias.block(start, Q, E)  # [B, H, Q, E]
        causal = torch.arange(E, device=q.device)[None, :] <= torch.arange(start, start + Q, device=q.device)[:, None]
        return torch.einsum("bhij,bjhd->bihd", torch.where(causal, F.silu(scores), 0.0), v)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        projected = F.silu(self.uvqk(F.layer_norm(x, x.shape[-1:], eps=self.eps)))
        u, v, q, k = projected.split([self.n_heads * self.linear_dim] * 2 + [self.n_heads * self.attention_dim] * 2, -1)
        q, k, v = (t.view(B, T, self.n_heads, -1) for t in (q, k, v))
        if self.dense_max_length >= T:
            attended = torch.einsum("bhij,bjhd->bihd", self.attention_weights(q, k, mask), v)
        else:
            attended = self.blockwise_attention(q, k, v, mask)
        attended = attended.reshape(B, T, -1)  # A V, heads concatenated [B, T, H * d_v]
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
