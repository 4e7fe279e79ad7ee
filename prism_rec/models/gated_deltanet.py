"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025), as in fla's ``GatedDeltaNet`` layer.

Per layer, with H heads of key width K and value width V:

    q, k, v = SiLU(ShortConv(W_q x)), SiLU(ShortConv(W_k x)), SiLU(ShortConv(W_v x))   (causal, kernel 4)
    q, k    = L2-normalised per head
    beta_t  = sigmoid(W_b x_t)                                                      [H]
    g_t     = -exp(A_log) * softplus(W_a x_t + dt_bias)  (log alpha_t <= 0)          [H]
    S_t     = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,  o_t = K^-1/2 S_t^T q_t
    y       = W_o (RMSNorm(o) * SiLU(W_g x))         (RMSNorm per head, weight shared across heads)

Projections have no bias, so a zeroed (padded) input gives k = v = 0 and leaves the state untouched.
Blocks are ``PreNormStack`` (pre-norm, residual, SwiGLU feed-forward).

Initialisation (``init_policy = "fla"``, ``prism_rec.models.init``), as fla's ``GatedDeltaNetPreTrainedModel.
_init_weights`` (fla/models/gated_deltanet/modeling_gated_deltanet.py) with the layer of
fla/layers/gated_deltanet.py: every Linear and the short-conv weights ~ N(0, 0.02), norms at 1; A ~ U[0, 16],
A_log = log A; dt log-uniform in [1e-3, 0.1] (floor 1e-4), dt_bias = softplus^-1(dt); A_log and dt_bias
flagged ``_no_weight_decay``. No residual rescaling: fla's ``prenorm_residual_strategy`` defaults to None.

The layer exposes its pieces (``query``, ``key``, ``value``, ``gate``, ``erase_strength``, ``scan_inputs``,
``readout``) and the stack its ``layer_class``, so that PRISM (``prism_rec.models.prism``) extends them instead
of copying them; the ``gated_deltanet`` backbone is registered in baselines/gated_deltanet.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.kernels.compiled_scan import delta_scan
from prism_rec.models.init import apply_init
from prism_rec.models.nn import GatedRMSNorm, PreNormStack, ShortConv, l2norm, ssd_gate_init


class GatedDeltaNetLayer(nn.Module):
    """One Gated DeltaNet token mixer: called as layer(x [B, T, d], mask [B, T]) -> [B, T, d]."""

    def __init__(self, d_model: int, n_heads: int = 2, head_k_dim: int | None = None, head_v_dim: int | None = None,
                 conv_kernel: int = 4, norm_eps: float = 1e-5, backend: str = "auto"):
        super().__init__()
        if (head_k_dim is None or head_v_dim is None) and d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}; give head_k_dim/head_v_dim")
        self.d_model = d_model
        self.n_heads = H = n_heads
        self.head_k_dim = K = head_k_dim or d_model // n_heads
        self.head_v_dim = V = head_v_dim or d_model // n_heads
        self.backend = backend
        self.q_proj = nn.Linear(d_model, H * K, bias=False)
        self.k_proj = nn.Linear(d_model, H * K, bias=False)
        self.v_proj = nn.Linear(d_model, H * V, bias=False)
        self.q_conv = ShortConv(H * K, conv_kernel)
        self.k_conv = ShortConv(H * K, conv_kernel)
        self.v_conv = ShortConv(H * V, conv_kernel)
        self.b_proj = nn.Linear(d_model, H, bias=False)
        self.a_proj = nn.Linear(d_model, H, bias=False)
        A_log, dt_bias = ssd_gate_init(H, a_range=(0.0, 16.0))  # fla's GDN draws A from U[0, 16]
        self.A_log = nn.Parameter(A_log)
        self.dt_bias = nn.Parameter(dt_bias)
        self.A_log._no_weight_decay = True
        self.dt_bias._no_weight_decay = True
        self.g_proj = nn.Linear(d_model, H * V, bias=False)
        self.o_norm = GatedRMSNorm(V, eps=norm_eps)
        self.o_proj = nn.Linear(H * V, d_model, bias=False)

    # -- pieces ---------------------------------------------------------------------------------------
    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, H * D] -> [B, T, H, D]."""
        return x.view(*x.shape[:2], self.n_heads, -1)

    def query(self, x: torch.Tensor) -> torch.Tensor:
        return l2norm(self.heads(self.q_conv(self.q_proj(x))))  # [B, T, H, K]

    def key(self, x: torch.Tensor) -> torch.Tensor:
        return l2norm(self.heads(self.k_conv(self.k_proj(x))))  # [B, T, H, K]

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads(self.v_conv(self.v_proj(x)))  # [B, T, H, V]

    def erase_strength(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.b_proj(x))  # beta [B, T, H]

    def gate(self, x: torch.Tensor) -> torch.Tensor:
        """Log-decay g = -exp(A_log) * softplus(W_a x + dt_bias) [B, T, H], in fp32."""
        return -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias.float())

    def scan_inputs(self, x: torch.Tensor) -> dict:
        """Keyword arguments of ``delta_scan`` for input x (already zeroed at padded positions)."""
        return dict(q=self.query(x), k=self.key(x), v=self.value(x), g=self.gate(x), beta=self.erase_strength(x),
                    extra_k=None, extra_v=None)

    def readout(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """Gated per-head RMSNorm of the scan output o [B, T, H, V], then W_o."""
        y = self.o_norm(o, self.heads(self.g_proj(x)))
        return self.o_proj(y.reshape(*y.shape[:2], -1))

    # -- forward --------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None:
            x = x * mask.unsqueeze(-1).to(x.dtype)
        inputs = self.scan_inputs(x)
        if mask is not None:  # padded tokens neither decay, erase nor write (the state stays zero there)
            keep = mask.to(inputs["g"].dtype)
            for name in ("g", "beta"):
                if inputs[name] is not None:
                    inputs[name] = inputs[name] * keep.to(inputs[name].dtype).unsqueeze(-1)
            for name, extra_dims in (("k", 2), ("v", 2), ("extra_k", 3), ("extra_v", 3)):
                if inputs[name] is not None:
                    inputs[name] = inputs[name] * keep.to(inputs[name].dtype).view(*keep.shape, *([1] * extra_dims))
        o = delta_scan(**inputs, backend=self.backend)
        return self.readout(x, o)


class GatedDeltaNet(nn.Module):
    """Pre-norm residual stack of Gated DeltaNet layers with SwiGLU feed-forwards."""

    layer_class = GatedDeltaNetLayer
    init_policy = "fla"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, head_k_dim: int | None = None,
                 head_v_dim: int | None = None, conv_kernel: int = 4, dropout: float = 0.1, backend: str = "auto",
                 ffn_mult: float = 4.0, **layer_options):
        super().__init__()
        self.stack = PreNormStack(
            d_model, n_layers,
            lambda i: self.layer_class(d_model, n_heads=n_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim,
                                       conv_kernel=conv_kernel, backend=backend, **layer_options),
            dropout=dropout, ffn_mult=ffn_mult)
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.stack(x, mask)
