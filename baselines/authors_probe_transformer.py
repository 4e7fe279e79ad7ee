"""``transformer-authors-probe``: the Transformer of the authors' synthetic-probe script (paper Table 4).

Source read: github.com/gpr-prism/prism at commit 435f392227b261707deb89c72dae68725861f367,
``rec/test_syntheticdata.py``:
- lines 336-342 ``CausalConv1d``: a depthwise ``nn.Conv1d`` (groups = width, with bias), left context only;
- lines 345-350 ``MLP``: Linear(d, 4d) - GELU - Linear(4d, d), with biases;
- lines 17-39 RoPE: per head of width D, frequencies 10000^(-2i / D), the "rotate half" pairing (channel i
  with channel i + D/2), positions 0..T-1;
- lines 378-406 ``TransformerMixer``: c = SiLU(CausalConv1d_3(x)), q, k, v = W c (no biases), RoPE on q and
  k, causal softmax attention scaled by 1/sqrt(D), W_o (no bias);
- lines 601-636 ``UniversalModel``: pre-norm blocks x = x + Mixer(LayerNorm(x)), x = x + MLP(LayerNorm(x)),
  built at line 610 as ``TransformerMixer(d_model, 1)`` (one head, whatever the script's HEADS), then a
  final LayerNorm and a bias-free vocabulary head (lines 628-629, 636); no positional embedding, no
  dropout, no initialisation of its own (PyTorch defaults).

This module is the block stack (lines 624-627, 633-635); the token embedding, the final LayerNorm and the
head are the probe model's (``prism_rec/experiments/probes/model.py``), as for every probed backbone.

Where it differs from our ``transformer++`` (baselines/transformer_pp.py), every place:
- a causal depthwise convolution (kernel 3, bias) and a SiLU before the q, k, v projections of every
  layer (the residual stream itself is not convolved); transformer++ has none;
- LayerNorm (weight and bias) instead of RMSNorm, before the mixer and before the MLP;
- a GELU MLP with biases (hidden 4d) instead of the bias-free SwiGLU (hidden 4d);
- RoPE pairs channel i with i + D/2 ("rotate half"); transformer++ pairs 2i with 2i + 1 (the same family
  of rotations up to a fixed permutation of the head's channels, which the learned projections absorb);
- separate q, k, v projections (transformer++ fuses them into one; same function and same default init);
- PyTorch's default initialisation (``init_policy = "torch"``), transformer++ fla's N(0, 0.02);
- no dropout (``dropout`` is accepted for the common interface and never applied); transformer++ drops
  out the mixer and MLP outputs.

Where this preset differs from the authors' script:
- Heads: ``n_heads`` is honoured; the script always builds one head (line 610). The probes' ``authors-code``
  profile passes 1, the ``paper`` profile 2 (the same for every probed model).
- Padding, which the script never has: padded positions are zeroed before the convolution (so it sees
  zeros before a sequence's first real token, as the script's zero padding), padded keys are masked out,
  RoPE positions count from the first real token, and outputs at padded positions are zero. On a
  sequence without padding this is the script's function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.attention import causal_padding_mask, rotary_angles
from prism_rec.models.init import apply_init
from prism_rec.models.nn import ShortConv, positions_from_first_item


def rotate_half_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate each channel pair (x_i, x_{i + D/2}) of x [B, T, H, D] by angles [B, T, D / 2], as the script's
    ``apply_rotary_pos_emb`` (x cos + rotate_half(x) sin with the frequency table repeated twice)."""
    first, second = x.float().chunk(2, dim=-1)  # [B, T, H, D / 2] each
    cos, sin = angles.cos().unsqueeze(2), angles.sin().unsqueeze(2)  # [B, T, 1, D / 2]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1).to(x.dtype)


class ConvAttention(nn.Module):
    """The script's ``TransformerMixer``: mixer(x [B, T, d], mask [B, T]) -> [B, T, d]."""

    def __init__(self, d_model: int, n_heads: int, conv_kernel: int = 3, rope_base: float = 10000.0):
        super().__init__()
        if d_model % n_heads or (d_model // n_heads) % 2:
            raise ValueError(f"transformer-authors-probe: d_model={d_model} must split into n_heads={n_heads} "
                             f"heads of even width")
        self.n_heads, self.head_dim, self.rope_base = n_heads, d_model // n_heads, rope_base
        self.conv = ShortConv(d_model, conv_kernel, activation=True, bias=True)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        mixed = self.conv(x * mask.unsqueeze(-1).to(x.dtype))  # [B, T, d]; padded inputs are zeros
        q, k, v = (projection(mixed).view(B, T, self.n_heads, self.head_dim)
                   for projection in (self.q_proj, self.k_proj, self.v_proj))
        angles = rotary_angles(positions_from_first_item(mask), self.head_dim, self.rope_base)
        q, k = rotate_half_rotary(q, angles), rotate_half_rotary(k, angles)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  attn_mask=causal_padding_mask(mask))  # [B, H, T, Dh]
        return self.out_proj(attended.transpose(1, 2).reshape(B, T, d))


class AuthorsProbeTransformer(nn.Module):
    """Pre-LayerNorm blocks of ``ConvAttention`` and a GELU MLP (see the module docstring)."""

    init_policy = "torch"  # PyTorch defaults, as the authors' script

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 1, dropout: float = 0.0,
                 conv_kernel: int = 3, rope_base: float = 10000.0):
        super().__init__()
        self.dropout = dropout  # accepted for the common interface; the script has no dropout
        self.mixer_norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.mixers = nn.ModuleList(ConvAttention(d_model, n_heads, conv_kernel, rope_base) for _ in range(n_layers))
        self.mlp_norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.mlps = nn.ModuleList(nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                                nn.Linear(4 * d_model, d_model)) for _ in range(n_layers))
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        x = x * keep
        for mixer_norm, mixer, mlp_norm, mlp in zip(self.mixer_norms, self.mixers, self.mlp_norms, self.mlps):
            x = x + mixer(mixer_norm(x), mask)
            x = (x + mlp(mlp_norm(x))) * keep
        return x
