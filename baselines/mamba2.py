"""Mamba-2 (Dao & Gu, "Transformers are SSMs", ICML 2024): the SSD mixer in residual blocks.

Per layer, with d_inner = expand * d_model split into H heads of width P = d_inner / H and a state of
width N shared by all heads (n_groups = 1):

    z, x, B, C, dt_raw = in_proj(u)                                 widths d_inner, d_inner, N, N, H
    x, B, C = SiLU(causal depthwise conv_4([x, B, C]))
    dt      = softplus(dt_raw + dt_bias)                            [B, T, H]
    A       = -exp(A_log)                                           [H]
    h_t     = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T                  per head, h [N, P]
    y_t     = C_t^T h_t + D x_t
    out     = out_proj(RMSNorm(y * SiLU(z)))                        (gate, then norm: norm_before_gate=False)

The recurrence runs through ``delta_scan`` with beta=None, q = C, k = dt * B, v = x, g = dt * A and
scale 1. Widths are scaled down with the model: d_model 64, expand 2, 2 heads gives
heads of width 64 (the official default head width), and the state width N defaults to 64 (official 128).

Blocks follow the official Mamba-2 language model: u = u + Mixer(RMSNorm(u)) with no MLP. With
``mlp=True`` each block also gets a SwiGLU feed-forward (the official ``d_intermediate > 0`` option),
through ``PreNormStack``. Padded positions are zeroed after every block.

Initialisation (``init_policy = "fla"``, ``prism_rec.models.init``), as fla's ``Mamba2PreTrainedModel._init_weights``
(fla/models/mamba2/modeling_mamba2.py, config defaults of configuration_mamba2.py): every Linear and the
conv weight ~ N(0, 0.02) (``conv_init`` is None), biases (the conv's) 0, norms at 1; A ~ U[1, 16],
A_log = log A; dt log-uniform in [1e-3, 0.1] (floor 1e-4), dt_bias = softplus^-1(dt); D = 1; A_log, dt_bias
and D flagged ``_no_weight_decay``. ``rescale_prenorm_residual`` defaults to True there with one residual
per layer: each mixer's ``out_proj`` (and, with ``mlp=True``, each SwiGLU's down projection, fla's
``down_proj``) is redrawn kaiming-uniform, U(+-1/sqrt(fan_in)), and divided by sqrt(n_layers).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from prism_rec.kernels.compiled_scan import delta_scan
from torch import nn

from prism_rec.models.init import apply_init
from prism_rec.models.nn import PreNormStack, RMSNorm, ShortConv, ssd_gate_init
from prism_rec.registry import register_backbone


class Mamba2Mixer(nn.Module):
    """One Mamba-2 (SSD) token mixer: called as mixer(u [B, T, d], mask [B, T]) -> [B, T, d]."""

    def __init__(self, d_model: int, n_heads: int = 2, d_state: int = 64, expand: int = 2, conv_kernel: int = 4,
                 norm_eps: float = 1e-5, backend: str = "auto"):
        super().__init__()
        self.d_inner = expand * d_model
        if self.d_inner % n_heads:
            raise ValueError(f"mamba2: d_inner={self.d_inner} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.head_dim = self.d_inner // n_heads
        self.d_state = d_state
        self.backend = backend
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 2 * d_state + n_heads, bias=False)
        self.conv = ShortConv(self.d_inner + 2 * d_state, conv_kernel, activation=True, bias=True)
        A_log, dt_bias = ssd_gate_init(n_heads)
        self.A_log = nn.Parameter(A_log)
        self.dt_bias = nn.Parameter(dt_bias)
        self.D = nn.Parameter(torch.ones(n_heads))
        for parameter in (self.A_log, self.dt_bias, self.D):
            parameter._no_weight_decay = True
        self.norm = RMSNorm(self.d_inner, eps=norm_eps)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def ssd_inputs(self, u: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """z [B, T, d_inner], x [B, T, H, P], B and C [B, T, N], dt [B, T, H] (zero at padded positions)."""
        keep = mask.unsqueeze(-1).to(u.dtype)  # [B, T, 1]
        z, xBC, dt_raw = self.in_proj(u * keep).split([self.d_inner, self.d_inner + 2 * self.d_state, self.n_heads], -1)
        # the conv bias makes padded positions nonzero: zero them again, in the conv's dtype (an fp32 mask would
        # promote x, B and C to fp32 under bf16 autocast and send the scan down its fp32 path)
        xBC = self.conv(xBC) * keep.to(xBC.dtype)
        x, B, C = xBC.split([self.d_inner, self.d_state, self.d_state], -1)
        dt = F.softplus(dt_raw.float() + self.dt_bias.float()) * keep.float()  # [B, T, H]
        return z, x.unflatten(-1, (self.n_heads, self.head_dim)), B, C, dt

    def forward(self, u: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z, x, B, C, dt = self.ssd_inputs(u, mask)
        A = -self.A_log.float().exp()  # [H]
        heads = (-1, -1, self.n_heads, -1)
        y = delta_scan(
            q=C.unsqueeze(2).expand(heads),  # [B, T, H, N]
            k=(B.unsqueeze(2) * dt.unsqueeze(-1).to(B.dtype)),  # [B, T, H, N]
            v=x,  # [B, T, H, P]
            g=dt * A,  # [B, T, H], log-decay <= 0
            beta=None, scale=1.0, backend=self.backend,
        )
        y = y + self.D.to(x.dtype)[:, None] * x  # [B, T, H, P]
        return self.out_proj(self.norm(y.flatten(2) * F.silu(z)))


class Mamba2Stack(nn.Module):
    """Official Mamba-2 blocks without MLP: u = u + dropout(Mixer(RMSNorm(u))), padded positions zeroed."""

    def __init__(self, d_model: int, n_layers: int, make_mixer, dropout: float):
        super().__init__()
        self.mixers = nn.ModuleList(make_mixer(i) for i in range(n_layers))
        self.norms = nn.ModuleList(RMSNorm(d_model) for _ in range(n_layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, u: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).to(u.dtype)  # [B, T, 1]
        u = u * keep
        for mixer, norm in zip(self.mixers, self.norms):
            u = (u + self.dropout(mixer(norm(u), mask))) * keep
        return u


@register_backbone("mamba2", description="Mamba-2: SSD scalar-decay state-space mixer (Dao & Gu 2024)")
class Mamba2(nn.Module):
    """Stack of Mamba-2 blocks (see the module docstring)."""

    init_policy = "fla"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1,
                 d_state: int = 64, expand: int = 2, conv_kernel: int = 4, mlp: bool = False,
                 ffn_mult: float = 4.0, backend: str = "auto"):
        super().__init__()

        def make_mixer(_layer_index: int) -> Mamba2Mixer:
            return Mamba2Mixer(d_model, n_heads=n_heads, d_state=d_state, expand=expand, conv_kernel=conv_kernel,
                               backend=backend)

        if mlp:
            self.stack = PreNormStack(d_model, n_layers, make_mixer, dropout=dropout, ffn_mult=ffn_mult)
        else:
            self.stack = Mamba2Stack(d_model, n_layers, make_mixer, dropout)
        residual_outputs = [mixer.out_proj for mixer in self.stack.mixers]
        residual_outputs += [ffn.down for ffn in getattr(self.stack, "ffns", [])]
        apply_init(self, rescaled=residual_outputs, n_residuals=n_layers)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.stack(x, mask)
