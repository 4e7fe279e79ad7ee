"""``mamba2-authors``: the recommendation "Mamba-2" that the authors' code trains: mostly linear attention.

Source read: github.com/gpr-prism/prism at commit 435f392227b261707deb89c72dae68725861f367,
``rec/models/MAMBA2.py`` (class ``MAMBA2Block``, lines 154-393; the model builds it at lines 65-79 with
state_dim 16 and mimo_rank 1, as ``rec/train_link_prediction.py`` line 179 passes, and stacks it at lines
111-112; the last position is read at line 114).

What one block computes (d = width, H heads of width D = d / H, N = 16 states; every Linear has a bias;
n = LayerNorm(x)):

    u, v, q, k = split(W_uvqk n)                          no activation (188, 338-354)
    o_att_t    = sum_{s<=t} (q_t . k_s) v_s               causal linear attention, no decay, no feature map,
                                                          no normalisation, no RoPE (285-331, 358)
    xi         = W_x n [H]   (one scalar input per head);  dt = softplus(W_dt n) [H, N];
    B, C       = W_B n + b_B, W_C n + b_C  [H, N];         A = -exp(A_log) [H, N], A_log ~ N(0, 1)
                                                          (179-202, 257-265, 361-366)
    h_t        = exp(dt_t * A) * h_{t-1} + dt_t * B_t xi_t,  y_t = sum_N C_t h_t  [H]
                                                          per (head, state) decay (228-283)
    c          = 0.7 o_att + 0.3 W_y y                     W_y: H -> d (205, 374-378)
    x          = x + MLP(Dropout(u * LayerNorm(SiLU(W_g2 W_g1 n) * c)))
                                                          MLP: Linear(d, 5d)-SiLU-Linear(5d, d) (189-193, 380-393)

Why a separate preset: this differs from ``mamba2`` (the SSD mixer of Dao & Gu) in substance, not in detail.
70 % of the mixer output is an undecayed causal linear attention (an "SLA" branch, the file's own
docstring: "SSD-style SSM + SLA linear attention"); the SSM branch feeds each head a single scalar channel
(mimo_rank 1) and reads one scalar back, with a separate step size dt per (head, state) instead of one per
head; there is no convolution, no D skip, no z-gate on the SSM, and the blocks carry an MLP.

Where the authors' code departs from the paper's text (PAPER.md section 7: "SSD - scalar-decay gated
linear recurrence with conv, gating, RMSNorm"): all of the above; the block is built with
``if_use_rope=True`` (line 74) but forward never applies RoPE; the chunk size is the sequence length
(line 73), which for an undecayed linear attention gives the same result as any other chunk size.

Where this preset departs from the authors' code:
- Only the sequence mixer, inside this suite's next-item protocol; the authors' framework is dynamic link
  prediction over [node, 20 recent neighbours] sequences of concatenated node/edge/time/ID features (width
  4 x 50), scored as (source, destination) pairs (PAPER.md section 8). Widths here are the suite's d_model.
- Padding: the authors pass no mask, so padded neighbour slots are processed as tokens and write into
  the attention sums and the SSM state of later positions. Here padded positions are zeroed before the
  block, write nothing (k = v = 0, dt = 0, so no decay and no input) and are zeroed at the output, so
  extra left-padding changes nothing. On a sequence without padding this is the authors' function.
- The per-token loop of the SSM (lines 270-278) is computed as a chunked scan with a per-channel decay
  (``channel_decay_attention``: q = C, k = dt * B, v = xi, log-decay = dt * A), and the linear attention
  through ``delta_scan`` (no decay, no erase, scale 1); same values.
- Causal, as the authors' block (its attention mask is lower-triangular, its SSM a forward loop).

Initialisation: the authors apply none of their own (PyTorch defaults for Linear and LayerNorm,
A_log ~ N(0, 1), the B and C biases at zero).

``init_policy = "torch"`` (prism_rec/models/init.py): PyTorch's defaults, norms 1/0; the item table, which the
authors' link-prediction model does not have (it scores pairs with an MLP; its ID embedding is
nn.Embedding's N(0, 1)), U(+-1/sqrt(d)), the default of an untied Linear head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from prism_rec.kernels.compiled_scan import delta_scan
from torch import nn

from prism_rec.models.attention import channel_decay_attention
from prism_rec.models.nn import BlockStack, silu_mlp
from prism_rec.registry import register_backbone


class AuthorsMamba2Block(nn.Module):
    """One block of the authors' "Mamba-2" (residual included): block(x [B, T, d], mask) -> [B, T, d]."""

    def __init__(self, d_model: int, n_heads: int = 2, d_state: int = 16, dropout: float = 0.1,
                 attention_weight: float = 0.7, backend: str = "auto", chunk_size: int = 16):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"mamba2-authors: d_model={d_model} is not divisible by n_heads={n_heads}")
        d = d_model
        self.n_heads = H = n_heads
        self.d_state = N = d_state
        self.attention_weight = attention_weight
        self.backend = backend
        self.chunk_size = chunk_size
        self.input_norm = nn.LayerNorm(d)
        self.uvqk = nn.Linear(d, 4 * d)
        self.A_log = nn.Parameter(torch.randn(H, N))
        self.B_proj = nn.Linear(d, H * N)
        self.C_proj = nn.Linear(d, H * N)
        self.dt_proj = nn.Linear(d, H * N)
        self.x_proj = nn.Linear(d, H)
        self.B_bias = nn.Parameter(torch.zeros(H, N))
        self.C_bias = nn.Parameter(torch.zeros(H, N))
        self.ssm_out = nn.Linear(H, d)
        self.gate_in = nn.Linear(d, d)
        self.gate_proj = nn.Linear(d, d)
        self.output_norm = nn.LayerNorm(d)
        self.output_mlp = silu_mlp(d, 5 * d, d)
        self.dropout = nn.Dropout(dropout)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:2], self.n_heads, -1)

    def ssm(self, n: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """The SISO SSM branch: y [B, T, H] (real [B, T, 1, 1] zeroes the padded steps' input and step size)."""
        dt = self.heads(F.softplus(self.dt_proj(n).float())) * real  # [B, T, H, N]
        B = self.heads(self.B_proj(n)) + self.B_bias
        C = self.heads(self.C_proj(n)) + self.C_bias
        xi = self.heads(self.x_proj(n))  # [B, T, H, 1]
        A = -self.A_log.float().exp()  # [H, N]
        return channel_decay_attention(C, dt * B, xi, dt * A, chunk_size=self.chunk_size).squeeze(-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        real = keep.unsqueeze(-1)  # [B, T, 1, 1]
        n = self.input_norm(x) * keep
        u, v, q, k = self.uvqk(n).chunk(4, dim=-1)
        g = torch.zeros(*x.shape[:2], self.n_heads, device=x.device)
        attended = delta_scan(self.heads(q), self.heads(k) * real, self.heads(v) * real, g, scale=1.0,
                             backend=self.backend)
        combined = (self.attention_weight * attended.flatten(2)
                    + (1 - self.attention_weight) * self.ssm_out(self.ssm(n, real.float()).to(x.dtype)))
        gated = F.silu(self.gate_proj(self.gate_in(n))) * combined
        return (x + self.output_mlp(self.dropout(u * self.output_norm(gated)))) * keep


@register_backbone("mamba2-authors",
                   description="Mamba-2 as the authors' recsys code trains it (0.7 linear attention + 0.3 SISO SSM)")
class AuthorsMamba2(BlockStack):
    """Plain stack of the authors' "Mamba-2" blocks (see the module docstring); padded positions stay zero."""

    init_policy = "torch"  # PyTorch defaults, as the authors' code

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1,
                 d_state: int = 16, backend: str = "auto"):
        super().__init__()
        self.blocks = nn.ModuleList(AuthorsMamba2Block(d_model, n_heads, d_state, dropout, backend=backend)
                                    for _ in range(n_layers))
