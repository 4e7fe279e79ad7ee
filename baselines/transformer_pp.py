"""Transformer++: the LLaMA-style attention baseline of the PRISM throughput study (Touvron et al. 2023).

Pre-norm residual blocks (``PreNormStack``): x = x + Attention(RMSNorm(x)), x = x + SwiGLU(RMSNorm(x)).
Attention is causal multi-head softmax attention through ``scaled_dot_product_attention``, with no
biases and rotary position embeddings (RoPE, Su et al. 2021) on q and k: pair (2i, 2i+1) of each head
is rotated by the angle m * theta_i at position m, theta_i = base^(-2i / head_dim). Positions are
counted from the first real item, so extra left-padding does not move them. Padded keys are masked out
and a padded query attends only to itself. The SwiGLU hidden width is 4 d: LLaMA's 8/3 d rounded up to a
multiple of 256, as fla's Transformer++ does, is 4 d at d = 64.

Initialisation (``init_policy = "fla"``, ``prism_rec.models.init``), as fla's ``TransformerPreTrainedModel.
_init_weights`` (fla/models/transformer/modeling_transformer.py): every Linear ~ N(0, 0.02), norms at 1; no
residual rescaling (``rescale_prenorm_residual`` defaults to False there).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.attention import apply_rotary, causal_padding_mask, rotary_angles
from prism_rec.models.init import apply_init
from prism_rec.models.nn import PreNormStack, positions_from_first_item
from prism_rec.registry import register_backbone


class RotaryAttention(nn.Module):
    """Causal multi-head attention with RoPE: called as attention(x [B, T, d], mask [B, T]) -> [B, T, d]."""

    def __init__(self, d_model: int, n_heads: int = 2, rope_base: float = 10000.0):
        super().__init__()
        if d_model % n_heads or (d_model // n_heads) % 2:
            raise ValueError(f"transformer++: d_model={d_model} must split into n_heads={n_heads} heads of even width")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.rope_base = rope_base
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(2)  # each [B, T, H, Dh]
        angles = rotary_angles(positions_from_first_item(mask), self.head_dim, self.rope_base)
        q, k = apply_rotary(q, angles), apply_rotary(k, angles)
        attended = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=causal_padding_mask(mask)
        )  # [B, H, T, Dh]
        return self.out(attended.transpose(1, 2).reshape(B, T, D))


@register_backbone("transformer++", description="Transformer++: LLaMA-style RoPE/RMSNorm/SwiGLU attention")
class TransformerPP(nn.Module):
    """Pre-norm stack of rotary attention and SwiGLU blocks (see the module docstring)."""

    init_policy = "fla"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1,
                 rope_base: float = 10000.0, ffn_mult: float = 4.0):
        super().__init__()
        self.stack = PreNormStack(d_model, n_layers, lambda i: RotaryAttention(d_model, n_heads, rope_base),
                                  dropout=dropout, ffn_mult=ffn_mult)
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.stack(x, mask)
