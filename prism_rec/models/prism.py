"""PRISM (arXiv 2602.10796): Gated DeltaNet with an input-anchored rank-L write (../shared/PAPER.md section 3).

Per layer (H heads, key width K, value width V; the Gated DeltaNet path is ``GatedDeltaNetLayer``, reused):

    u        = SiLU(ShortConv(W_u x))                   anchor, per head of width V (state-free proxy of S_{t-1}^T k_t)
    r(1)     = v - u
    for l = 1..L (on whole tensors, parallel over time, sequential only over l):
      kappa(l) = L2norm(W_k(l) u)                       [H, K]
      p(l)     = W_p(l) u                               [H, V] gain
      delta(l) = GELU(p(l) * r(l));  r(l+1) = r(l) - delta(l)
      beta(l)  = sigmoid(W_beta(l) u)                   [H] step gate
      w(l)     = beta(l) * delta(l)
    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T + sum_l kappa_t(l) w_t(l)^T

The scan is ``delta_scan(q, k, v, g, beta, extra_k=kappa, extra_v=w)``: every token's rank-L write goes
through the state (there is no chunk-boundary shortcut), so it reaches all later outputs.

W_k(l), W_p(l), W_beta(l) read the whole anchor u (all heads, width H * V), like every other projection of
the layer; they are stored stacked over l (one matmul each). No projection has a bias, so padded (zeroed)
tokens give u = 0, kappa = 0 and w = 0.

Switches (paper Table 3): ``L`` (0 = exactly Gated DeltaNet: the anchor is not even built), ``nonlinearity``
("gelu" | "identity"), ``anchor_conv`` (on | off: u = SiLU(W_u x)), ``gain`` (on | off: p = 1, W_p not built),
``variant`` ("canonical" | "paper-eq18": no base write beta v k^T and the erase uses beta(1), kappa(1), i.e.
S_t = alpha_t (I - beta_t(1) kappa_t(1) kappa_t(1)^T) S_{t-1} + sum_l kappa_t(l) w_t(l)^T; W_k, its conv and
W_b are then unused and not built).

Initialisation: ``Prism`` inherits Gated DeltaNet's ``init_policy = "fla"`` (fla's ``_init_weights``,
fla/models/gated_deltanet/modeling_gated_deltanet.py; see ``prism_rec.models.gated_deltanet`` and
``prism_rec.models.init``), applied at the end of ``GatedDeltaNet.__init__`` after every layer is built: the added
projections W_u, W_k(l), W_p(l), W_beta(l) and the anchor's conv ~ N(0, 0.02) like the rest. At L = 0 no
extra module is built, so PRISM draws exactly Gated DeltaNet's weights for the same seed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.gated_deltanet import GatedDeltaNet, GatedDeltaNetLayer
from prism_rec.models.nn import ShortConv, l2norm
from prism_rec.options import parse_on_off
from prism_rec.registry import register_backbone

NONLINEARITIES = ("gelu", "identity")
VARIANTS = ("canonical", "paper-eq18")


class PrismLayer(GatedDeltaNetLayer):
    """The PRISM token mixer: a Gated DeltaNet layer whose scan gets L extra (kappa, w) rows per token."""

    def __init__(self, d_model: int, n_heads: int = 2, head_k_dim: int | None = None, head_v_dim: int | None = None,
                 conv_kernel: int = 4, norm_eps: float = 1e-5, backend: str = "auto", L: int = 3,
                 nonlinearity: str = "gelu", anchor_conv=True, gain=True, variant: str = "canonical"):
        super().__init__(d_model, n_heads=n_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim,
                         conv_kernel=conv_kernel, norm_eps=norm_eps, backend=backend)
        L = int(L)
        if L < 0:
            raise ValueError(f"L must be >= 0, got {L}")
        if nonlinearity not in NONLINEARITIES:
            raise ValueError(f"nonlinearity must be one of {NONLINEARITIES}, got {nonlinearity!r}")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if variant == "paper-eq18" and L < 1:
            raise ValueError("variant paper-eq18 erases with beta(1), kappa(1) and needs L >= 1")
        self.L = L
        self.nonlinearity = nonlinearity
        self.anchor_conv = parse_on_off(anchor_conv, "anchor_conv")
        self.gain = parse_on_off(gain, "gain")
        self.variant = variant
        H, K, V = self.n_heads, self.head_k_dim, self.head_v_dim
        if L > 0:
            self.u_proj = nn.Linear(d_model, H * V, bias=False)
            self.u_conv = ShortConv(H * V, conv_kernel) if self.anchor_conv else None
            self.kappa_proj = nn.Linear(H * V, L * H * K, bias=False)  # W_k(l), stacked over l
            self.gain_proj = nn.Linear(H * V, L * H * V, bias=False) if self.gain else None  # W_p(l)
            self.step_beta_proj = nn.Linear(H * V, L * H, bias=False)  # W_beta(l)
        if variant == "paper-eq18":  # the base key and beta are replaced by kappa(1), beta(1)
            self.k_proj = None
            self.k_conv = None
            self.b_proj = None

    def step_weights(self, name: str, l: int) -> torch.Tensor:
        """The rows of the stacked projection ``name`` ("kappa" | "gain" | "step_beta") that belong to step l
        (0-based)."""
        weight = getattr(self, f"{name}_proj").weight
        return weight.view(self.L, -1, weight.shape[-1])[l]

    def anchor(self, x: torch.Tensor) -> torch.Tensor:
        """u = SiLU(ShortConv(W_u x)) (or SiLU(W_u x) with anchor_conv off), per head [B, T, H, V]."""
        u = self.u_proj(x)
        u = self.u_conv(u) if self.u_conv is not None else F.silu(u)
        return self.heads(u)

    def refine(self, u: torch.Tensor, v: torch.Tensor) -> dict:
        """The L refinement steps on whole tensors; u, v [B, T, H, V].

        Returns kappa [B, T, H, L, K], p and delta and w [B, T, H, L, V], step_beta [B, T, H, L].
        """
        B, T, H, V = u.shape
        L, K = self.L, self.head_k_dim
        flat = u.reshape(B, T, H * V)
        kappa = l2norm(self.kappa_proj(flat).view(B, T, L, H, K)).transpose(2, 3)
        if self.gain_proj is not None:
            p = self.gain_proj(flat).view(B, T, L, H, V).transpose(2, 3)
        else:
            p = torch.ones(B, T, H, L, V, dtype=u.dtype, device=u.device)
        step_beta = torch.sigmoid(self.step_beta_proj(flat).view(B, T, L, H)).transpose(2, 3)
        phi = F.gelu if self.nonlinearity == "gelu" else (lambda z: z)
        r = v - u
        deltas = []
        for l in range(L):
            delta = phi(p[:, :, :, l] * r)
            r = r - delta
            deltas.append(delta)
        delta = torch.stack(deltas, dim=3)
        w = step_beta.unsqueeze(-1) * delta
        return dict(kappa=kappa, p=p, delta=delta, step_beta=step_beta, w=w)

    def scan_inputs(self, x: torch.Tensor) -> dict:
        if self.L == 0:
            return super().scan_inputs(x)
        q, v, g = self.query(x), self.value(x), self.gate(x)
        steps = self.refine(self.anchor(x), v)
        if self.variant == "canonical":
            k, beta, v_write = self.key(x), self.erase_strength(x), v
        else:  # paper-eq18: erase with (beta(1), kappa(1)); v = 0 removes the base write beta k v^T
            k, beta, v_write = steps["kappa"][:, :, :, 0], steps["step_beta"][:, :, :, 0], torch.zeros_like(v)
        return dict(q=q, k=k, v=v_write, g=g, beta=beta, extra_k=steps["kappa"], extra_v=steps["w"])


PRESETS = {
    "prism": dict(description="PRISM: Gated DeltaNet with an input-anchored rank-L write (L=3)"),
    "prism-L0": dict(L=0, description="PRISM at L=0: exactly Gated DeltaNet (reduction check)"),
    "prism-L1": dict(L=1, description="PRISM ablation: L=1"),
    "prism-nogelu": dict(nonlinearity="identity", description="PRISM ablation: no nonlinearity (GELU -> identity)"),
    "prism-noconv": dict(anchor_conv=False, description="PRISM ablation: no ShortConv in the anchor"),
    "prism-nogain": dict(gain=False, description="PRISM ablation: no gain predictor (p = 1)"),
    "prism-eq18": dict(variant="paper-eq18",
                       description="PRISM, paper Eq. 18 variant: no base write, erase with beta(1), kappa(1)"),
}


class Prism(GatedDeltaNet):
    """Pre-norm residual stack of PRISM layers with SwiGLU feed-forwards."""

    layer_class = PrismLayer

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, head_k_dim: int | None = None,
                 head_v_dim: int | None = None, conv_kernel: int = 4, dropout: float = 0.1, backend: str = "auto",
                 ffn_mult: float = 4.0, L: int = 3, nonlinearity: str = "gelu", anchor_conv=True, gain=True,
                 variant: str = "canonical"):
        super().__init__(d_model, n_layers=n_layers, n_heads=n_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim,
                         conv_kernel=conv_kernel, dropout=dropout, backend=backend, ffn_mult=ffn_mult, L=L,
                         nonlinearity=nonlinearity, anchor_conv=anchor_conv, gain=gain, variant=variant)


for _name, _options in PRESETS.items():
    _options = dict(_options)
    register_backbone(_name, description=_options.pop("description"), **_options)(Prism)
