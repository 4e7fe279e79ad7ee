"""``prism-authors``: the recommendation "PRISM" that the authors' code trains (not the paper's equations).

Source read: github.com/gpr-prism/prism at commit 435f392227b261707deb89c72dae68725861f367,
``rec/models/prism.py`` (class ``PRISMBlock``, lines 168-467; the model builds it at lines 78-98 and
stacks it at lines 132-134). Hyper-parameters from ``rec/utils/load_configs.py`` (``--num_experts`` 3,
line 33, passed as ``solver_steps`` at ``rec/train_link_prediction.py`` line 202; ``--num_neighbors`` 20,
line 25, so T = 21; best configs lines 88-95: 2 layers, dropout 0.1).

What one block computes (d = width, H heads of width D = d / H, L = solver steps = 3; every Linear has a
bias; n_t = LayerNorm(x_t)):

    u, v, q, k  = split(W_uvqk n)                               no activation (prism.py 194-195, 412-420)
    gamma       = clamp(sigmoid(W_2 W_1 n) ** (1/16), 1e-4, 1)  per channel [H * D], W_1 of rank 16
                                                                (203-207, 425-428)
    c           = mean over heads of gamma [D];  s = sigmoid(W_s c) [d], h = sigmoid(W_h c) [H],
    j           = sigmoid(MLP_j(c)) [1]                         (209-215, 431-434)
    q, k        = RoPE(q), RoPE(k)                              per head, positions 0..T-1 (262-277, 436-437)
    a           = LayerNorm(CausalDepthwiseConv_5(n) + bias) * (1 + s)          anchor (222-224, 279-283, 440-442)
    p           = sigmoid(MLP_p(a)) * (1 + s)                   gain (227-231, 443-444)
    r           = LayerNorm(W_r a)                              (233-234, 292)
    for l = 1..L:                                               (298-333)
        b_l     = sigmoid(W_b(l) a) * (1 + h)      [H];  bbar_l = mean_h b_l
        delta_l = MLP_l(bbar_l * p * r * (1 + s) * (1 + j))     Linear-SiLU-Linear, no GELU
        U      += delta_l;  r -= delta_l
        kappa_l = W_k(l) a * (1 + h),  w_l = W_v(l) delta_l * b_l * (1 + h) * (1 + j)   (see below)
    o_t         = sum_{s<=t} (q_t * prod_{s<r<=t} gamma_r) . k_s  v_s                  (337-406, chunk = T)
    y           = MLP_o(Dropout(u * LayerNorm(SiLU(W_g n) * o)))
                                                            MLP_o: Linear(d, 4d)-SiLU-Linear(4d, d) (196-200, 453-457)
    x           = x + Dropout(y) + Dropout(Linear(LayerNorm(U)) * sigmoid(rho) * (1 + j))
                                                            rho = -2 at init (251-259, 461-466)

Blocks are stacked without any other norm, residual or feed-forward (132-134); the model reads the last
position (136).

Where the authors' code departs from the paper's text (PAPER.md sections 2-3):
- The forget path is HSTU/SLA-style gated linear attention with a per-channel decay gamma (sigmoid raised
  to 1/16) and RoPE, not Gated DeltaNet: there is no delta-rule erase (no beta k k^T term), no L2 norm of
  q, k, no ShortConv on q, k, v, no activation on q, k, v; the output is u * LayerNorm(o) into an MLP.
- The "rank-L write" never reaches the state or any output. ``_gated_linear_attention_with_injection``
  adds the injection k_l v_l^T only to the state carried *between* chunks (loop at line 379,
  ``range(num_chunks - 1)``), and the model sets chunk_size = max_seq_len = num_neighbors + 1 (line 86),
  so num_chunks = 1 and the loop never runs: W_k(l), W_v(l) (237-240) and the injection logit (258)
  never receive a gradient. Only the parallel branch U (lines 316, 462) carries the refinement steps
  to the output, as a per-token MLP residual that mixes no time steps.
- The refinement uses no GELU (Eq. 15): delta is a two-layer SiLU MLP of a gated product; the gain p
  is a sigmoid MLP of the anchor, shared by all steps; the anchor is LayerNorm(conv(n)), not
  SiLU(ShortConv(W_u x)); r(1) = LayerNorm(W_r a), not v - u (v plays no part in it).
- The step gate b_l is per head but the delta uses its mean over heads; extra scales (1 + s), (1 + h),
  (1 + j) computed from the forget gate multiply the anchor, gain, delta and writes (lines 302-330).
- The anchor convolution has kernel 5 with bias (paper: ShortConv kernel 4).

Where this preset departs from the authors' code:
- Only the sequence mixer. The authors' framework is dynamic link prediction: each source node's
  sequence is [the node itself at the query time, left-padding, its 20 most recent neighbours], every
  token the concatenation of projected node, edge, time-encoding and ID features (width 4 x 50); the
  destination is encoded from node and ID features alone; an MLP scores (source, destination) pairs
  with one random negative per positive (PAPER.md section 8). Here the mixer runs on item embeddings
  inside this suite's next-item protocol (shared recommender, full-softmax or sampled loss, final LayerNorm).
- Padding. The authors pass no mask: padded neighbour slots (node id 0: its ID embedding, the time
  encoding of t - 0, ...) are processed as real tokens and mix into later positions, and RoPE positions
  are counted from the left edge including padding. Because the decay is per channel, the two channels
  of a RoPE pair decay differently and the scores depend on absolute positions, so padding changes the
  outputs. Here, as the backbone contract requires: the block input is zeroed at padded positions
  before the convolution, padded tokens write nothing (k = v = 0) and do not decay (gamma = 1), RoPE
  positions count from the first real item, and outputs at padded positions are zeroed. On a sequence
  without padding this is the authors' function (tested).
- Causality. The authors' block is causal (tril mask, left-padded convolution); so is this one.
- The dead injection parameters (W_k(l), W_v(l), the injection logit) are not built with the default
  ``injection="dropped"``: they cannot affect the output in the authors' model, so the function is the
  same, and every parameter here gets a gradient. ``injection="state"`` (not registered; an option)
  instead writes sum_l kappa_l (sigmoid(lambda) (1 + j) w_l)^T into the same decayed state at every token,
  as the paper's text intends, with lambda = -2 at init as in the code.
- The decay: the authors compute q_t cumprod(gamma)_t . k_s / (cumprod(gamma)_s + 1e-6) over the whole
  sequence (lines 347, 395-399). Here the same quantity without the 1e-6 is computed exactly, chunk by
  chunk in log space (``channel_decay_attention``); the two differ by a relative 1e-6 / cumprod(gamma)
  (under 1e-3 while the cumulative decay stays above 1e-3; tested at T = 21), and this form stays exact on
  this suite's sequences of 50-200 items, where the authors' cumulative product from position 0 falls
  towards the 1e-6 and their division loses the distant tokens.
- Widths: the authors run d = 4 x 50 = 200 with 2 heads; here d is the suite's d_model (64 by default).

Initialisation: the authors apply no initialisation of their own to this model (PyTorch defaults for
Linear, Conv1d, LayerNorm; the two logits start at -2).

``init_policy = "torch"`` (prism_rec/models/init.py): PyTorch's defaults, norms 1/0; the item table, which the
authors' link-prediction model does not have (it scores pairs with an MLP; its ID embedding is
nn.Embedding's N(0, 1)), U(+-1/sqrt(d)), the default of an untied Linear head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.attention import apply_rotary, channel_decay_attention, rotary_angles
from prism_rec.models.nn import BlockStack, ShortConv, positions_from_first_item, silu_mlp
from prism_rec.registry import register_backbone

INJECTIONS = ("dropped", "state")


class AuthorsPrismBlock(nn.Module):
    """One block of the authors' recommendation PRISM (residual included): block(x [B, T, d], mask) -> [B, T, d]."""

    def __init__(self, d_model: int, n_heads: int = 2, dropout: float = 0.1, L: int = 3, conv_kernel: int = 5,
                 gate_rank: int = 16, gate_temperature: float = 16.0, gate_min: float = 1e-4,
                 solver_out_init: float = -2.0, injection: str = "dropped", injection_init: float = -2.0,
                 rope_base: float = 10000.0, chunk_size: int = 16):
        super().__init__()
        if d_model % n_heads or (d_model // n_heads) % 2:
            raise ValueError(f"prism-authors: d_model={d_model} must split into n_heads={n_heads} heads of even width")
        if injection not in INJECTIONS:
            raise ValueError(f"injection must be one of {INJECTIONS}, got {injection!r}")
        d = d_model
        self.n_heads = H = n_heads
        self.head_dim = D = d // n_heads
        self.L = L = max(1, int(L))  # the authors' max(1, solver_steps)
        self.gate_temperature = gate_temperature
        self.gate_min = gate_min
        self.injection = injection
        self.rope_base = rope_base
        self.chunk_size = chunk_size
        self.input_norm = nn.LayerNorm(d)
        self.uvqk = nn.Linear(d, 4 * d)
        self.output_mlp = silu_mlp(d, 4 * d, d)
        self.forget_gate = nn.Sequential(nn.Linear(d, gate_rank), nn.Linear(gate_rank, d))
        self.gate_to_scale = nn.Linear(D, d)
        self.gate_to_heads = nn.Linear(D, H)
        self.gate_to_inject = silu_mlp(D, D, 1)
        self.output_norm = nn.LayerNorm(d)
        self.output_gate = nn.Linear(d, d)
        self.anchor_conv = ShortConv(d, conv_kernel, activation=False, bias=True)
        self.anchor_norm = nn.LayerNorm(d)
        self.gain_mlp = silu_mlp(d, 2 * d, d)
        self.residual_proj = nn.Linear(d, d)
        self.residual_norm = nn.LayerNorm(d)
        self.step_gate = nn.ModuleList(nn.Linear(d, H) for _ in range(L))
        self.step_delta = nn.ModuleList(silu_mlp(d, d, d) for _ in range(L))
        self.solver_out = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d))
        self.solver_out_logit = nn.Parameter(torch.tensor(float(solver_out_init)))
        if injection == "state":
            self.step_k = nn.ModuleList(nn.Linear(d, d) for _ in range(L))
            self.step_v = nn.ModuleList(nn.Linear(d, d) for _ in range(L))
            self.injection_logit = nn.Parameter(torch.tensor(float(injection_init)))
        self.dropout = nn.Dropout(dropout)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:2], self.n_heads, -1)

    def log_forget(self, n: torch.Tensor) -> torch.Tensor:
        """log gamma = log clamp(sigmoid(z) ** (1 / temperature), gate_min, 1) [B, T, d], in fp32."""
        return (F.logsigmoid(self.forget_gate(n).float()) / self.gate_temperature).clamp(min=math.log(self.gate_min))

    def refine(self, anchor, gain, scale, head_scale, inject):
        """The L solver steps: returns U (sum of deltas) [B, T, d] and the per-step (kappa, w) [B, T, H, L, D]
        or None."""
        residual = self.residual_norm(self.residual_proj(anchor))
        update = torch.zeros_like(residual)
        kappas, writes = [], []
        for l in range(self.L):
            head_gate = torch.sigmoid(self.step_gate[l](anchor)) * (1 + head_scale)  # [B, T, H]
            delta = self.step_delta[l](head_gate.mean(-1, keepdim=True) * gain * residual * (1 + scale) * (1 + inject))
            update = update + delta
            residual = residual - delta
            if self.injection == "state":
                kappas.append(self.heads(self.step_k[l](anchor)) * (1 + head_scale).unsqueeze(-1))
                gate = (head_gate * (1 + head_scale) * (1 + inject)).unsqueeze(-1)
                writes.append(self.heads(self.step_v[l](delta)) * gate)
        if not kappas:
            return update, None, None
        return update, torch.stack(kappas, dim=3), torch.stack(writes, dim=3)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        n = self.input_norm(x) * keep  # padded tokens: zeros, like the convolution's own padding
        u, v, q, k = self.uvqk(n).chunk(4, dim=-1)
        log_gamma = self.log_forget(n)  # [B, T, d]
        gamma_mean = self.heads(log_gamma.exp()).mean(2).to(x.dtype)  # [B, T, D]
        scale = torch.sigmoid(self.gate_to_scale(gamma_mean))  # [B, T, d]
        head_scale = torch.sigmoid(self.gate_to_heads(gamma_mean))  # [B, T, H]
        inject = torch.sigmoid(self.gate_to_inject(gamma_mean))  # [B, T, 1]
        angles = rotary_angles(positions_from_first_item(mask), self.head_dim, self.rope_base)
        q, k = apply_rotary(self.heads(q), angles), apply_rotary(self.heads(k), angles)
        anchor = self.anchor_norm(self.anchor_conv(n)) * (1 + scale)
        gain = torch.sigmoid(self.gain_mlp(anchor)) * (1 + scale)
        update, kappa, w = self.refine(anchor, gain, scale, head_scale, inject)
        real = keep.unsqueeze(-1)  # [B, T, 1, 1]
        if w is not None:
            injection = (torch.sigmoid(self.injection_logit) * (1 + inject)).view(*inject.shape[:2], 1, 1, 1)
            w = w * injection * real.unsqueeze(-1)
        o = channel_decay_attention(q, k * real, self.heads(v) * real, self.heads(log_gamma) * real.float(),
                                    extra_k=kappa, extra_v=w, chunk_size=self.chunk_size)
        attended = (F.silu(self.heads(self.output_gate(n))) * o).flatten(2)
        y = self.output_mlp(self.dropout(u * self.output_norm(attended)))
        solver = self.solver_out(update) * torch.sigmoid(self.solver_out_logit) * (1 + inject)
        return (x + self.dropout(y) + self.dropout(solver)) * keep


@register_backbone("prism-authors",
                   description="PRISM as the authors' recsys code trains it (HSTU/SLA template, rank-L write inert)")
class AuthorsPrism(BlockStack):
    """Plain stack of the authors' PRISM blocks (see the module docstring); padded positions stay zero."""

    init_policy = "torch"  # PyTorch defaults, as the authors' code

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1, L: int = 3,
                 injection: str = "dropped", **block_options):
        super().__init__()
        self.blocks = nn.ModuleList(
            AuthorsPrismBlock(d_model, n_heads=n_heads, dropout=dropout, L=L, injection=injection, **block_options)
            for _ in range(n_layers))
