"""Building blocks shared by the backbones: norms, causal short convolution, feed-forwards, positions counted
from the first item, residual stacks."""

from __future__ import annotations

import importlib.util
import math

import torch
import torch.nn.functional as F
from torch import nn

TRITON_INSTALLED = importlib.util.find_spec("triton") is not None


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale (fp32 statistics)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


class GatedRMSNorm(RMSNorm):
    """RMSNorm(x) * SiLU(gate), as at the output of Mamba-2 and Gated DeltaNet layers."""

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * F.silu(gate)


class ShortConv(nn.Module):
    """Causal depthwise 1-D convolution over time followed by an optional SiLU.

    Input [B, T, C] -> output [B, T, C]; position t sees positions t-kernel_size+1 .. t. Callers zero the
    padded positions of the input, so extra left-padding is indistinguishable from the conv's own zeros.
    ``conv_backend``: "torch" (nn.Conv1d, then SiLU), "triton" (the fused kernel of kernels/short_conv.py, in the
    [B, T, C] layout), "auto" (``auto_conv_backend``: triton only for the CUDA inputs where it measured faster,
    torch elsewhere, so CPU runs keep the bit-reproducible PyTorch path).
    """

    BACKENDS = ("auto", "torch", "triton")
    # results/short_conv.md (forward+backward, bf16 autocast): the fused kernel was ahead of cuDNN at 256
    # channels from 49,152 tokens on (B x T 256 x 200, 12 x 4096, 3 x 16384) and behind it at 256 x 50 and at
    # 64 and 128 channels, the delta-rule layers' q, k and v convs at d_model 64
    TRITON_MIN_CHANNELS = 256
    TRITON_MIN_TOKENS = 49152

    def __init__(self, channels: int, kernel_size: int = 4, activation: bool = True, bias: bool = False,
                 conv_backend: str = "auto"):
        super().__init__()
        if conv_backend not in self.BACKENDS:
            raise ValueError(f"ShortConv conv_backend must be one of {self.BACKENDS}, got {conv_backend!r}")
        self.kernel_size = kernel_size
        self.activation = activation
        self.conv_backend = conv_backend
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=bias, padding=kernel_size - 1)

    def auto_conv_backend(self, x: torch.Tensor) -> str:
        """What "auto" runs for the input x [B, T, C]."""
        B, T, C = x.shape
        fast = C >= self.TRITON_MIN_CHANNELS and B * T >= self.TRITON_MIN_TOKENS
        return "triton" if x.is_cuda and TRITON_INSTALLED and fast else "torch"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        backend = self.auto_conv_backend(x) if self.conv_backend == "auto" else self.conv_backend
        if backend == "triton":
            from prism_rec.kernels.short_conv import triton_short_conv

            return triton_short_conv(x, self.conv.weight.squeeze(1), self.conv.bias, self.activation)
        T = x.shape[1]
        y = self.conv(x.transpose(1, 2))[..., :T].transpose(1, 2)  # [B, T, C]
        return F.silu(y) if self.activation else y


class SwiGLU(nn.Module):
    """Feed-forward W_down(SiLU(W_gate x) * W_up x) with hidden width ``hidden``."""

    def __init__(self, dim: int, hidden: int | None = None, dropout: float = 0.0):
        super().__init__()
        hidden = hidden or 4 * dim
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))


def silu_mlp(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    """Linear - SiLU - Linear, with biases (the small MLP of the authors' PRISM and Mamba-2 blocks)."""
    return nn.Sequential(nn.Linear(d_in, hidden), nn.SiLU(), nn.Linear(hidden, d_out))


def positions_from_first_item(mask: torch.Tensor) -> torch.Tensor:
    """Position of each item counted from the first real item of its row [B, T] (0 at padded positions),
    so extra left-padding does not shift it."""
    return (mask.long().cumsum(1) - 1).clamp(min=0)


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Normalise the last dimension to unit L2 norm (zero vectors stay zero)."""
    return x * torch.rsqrt(x.float().pow(2).sum(-1, keepdim=True) + eps).to(x.dtype)


class PreNormStack(nn.Module):
    """``n_layers`` pre-norm residual blocks: x + mixer(norm(x), mask), then x + SwiGLU(norm(x)).

    ``make_mixer(layer_index)`` builds each token mixer (a module called as mixer(x, mask)). Padded
    positions are zeroed after every block so they never leak into real positions.
    """

    def __init__(self, d_model: int, n_layers: int, make_mixer, dropout: float = 0.0, ffn_mult: float = 4.0):
        super().__init__()
        self.mixers = nn.ModuleList(make_mixer(i) for i in range(n_layers))
        self.mixer_norms = nn.ModuleList(RMSNorm(d_model) for _ in range(n_layers))
        self.ffns = nn.ModuleList(SwiGLU(d_model, int(ffn_mult * d_model), dropout) for _ in range(n_layers))
        self.ffn_norms = nn.ModuleList(RMSNorm(d_model) for _ in range(n_layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        x = x * keep
        for mixer, mixer_norm, ffn, ffn_norm in zip(self.mixers, self.mixer_norms, self.ffns, self.ffn_norms):
            x = x + self.dropout(mixer(mixer_norm(x), mask))
            x = (x + ffn(ffn_norm(x))) * keep
        return x


class BlockStack(nn.Module):
    """Plain stack of residual blocks called as block(x, mask); the input is zeroed at padded positions."""

    blocks: nn.ModuleList

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x * mask.unsqueeze(-1).to(x.dtype)
        for block in self.blocks:
            x = block(x, mask)
        return x


def ssd_gate_init(n_heads: int, a_range=(1.0, 16.0), dt_range=(1e-3, 0.1), dt_floor: float = 1e-4):
    """(A_log, dt_bias) [H] as in the official Mamba-2: A ~ U[a_range] (fla's Gated DeltaNet passes [0, 16]),
    dt log-uniform in dt_range (clamped at dt_floor), dt_bias = softplus^-1(dt)."""
    A = torch.empty(n_heads).uniform_(*a_range)
    log_dt_min, log_dt_max = math.log(dt_range[0]), math.log(dt_range[1])
    dt = torch.exp(torch.rand(n_heads) * (log_dt_max - log_dt_min) + log_dt_min).clamp(min=dt_floor)
    return torch.log(A), dt + torch.log(-torch.expm1(-dt))
