"""Titans (Behrouz, Zhong & Mirrokni 2025, "Titans: Learning to Memorize at Test Time", arXiv 2501.00663),
the MAL variant: a neural long-term memory layer followed by sliding-window attention.

Neural memory, per head (width Dh): M(x) = x + GELU(x W1) W2 (a two-layer MLP with a residual, tanh
GELU, hidden width 4 Dh; W1, W2 start from learned initial values). Keys, values and queries come from
linear maps of the token, each followed by a causal depthwise convolution (kernel 4) and SiLU; q and k
are L2-normalised per head. With the associative loss l(M; k, v) = ||M(k) - v||^2 and data-dependent
gates alpha_t (forgetting), eta_t (momentum decay) and theta_t (step size), all sigmoids of linear maps
of x_t (theta scaled by ``base_lr``):

    S_t = eta_t S_{t-1} - theta_t grad l(M_{t-1}; k_t, v_t)        (surprise with momentum)
    M_t = (1 - alpha_t) M_{t-1} + S_t                               (forgetting)
    y_t = M_t(q_t)                                                  (retrieval from the memory after token t)

Training is the paper's tensorized mini-batch gradient descent (section 3.2): the sequence is cut into
chunks of ``chunk_size`` tokens, every gradient in a chunk is taken at the chunk's starting memory, and
momentum and decay are linear scans inside the chunk, written as decay-weighted C x C matrices so that
each y_t is computed from closed-form gradients without materialising M_t; chunks run serially.
Padded positions get theta = 0, alpha = 0, eta = 1: they leave S and M unchanged. The retrieved y is
RMS-normalised, gated by SiLU of a linear map of x, and projected out (the paper's normalisation and
gating before the output projection).

MAL: each of the ``n_layers`` layers is a memory block followed by a sliding-window attention block
(causal softmax attention over the last ``window`` positions plus ``persistent_tokens`` learned
key/value pairs that every query sees, the paper's persistent memory), each a pre-norm residual block
with a SwiGLU MLP. The MAC and MAG variants are not implemented.

As in ``baselines/ttt.py``, chunks start at each sequence's first real item (``align_to_chunks``,
``prism_rec.models.inner_loop``), so outputs do not depend on the amount of left padding.

Initialisation (``init_policy = "titans"``, ``prism_rec.models.init``), as lucidrains/titans-pytorch (the public code;
the authors published none): titans_pytorch/neural_memory.py, memory_models.py and mac_transformer.py set
no global rule, so every Linear (projections, gates, attention, MLP) and the short convolutions keep
PyTorch's default (kaiming-uniform weights, biases U(+-1/sqrt(fan_in))); the gate biases are not offset
(``init_*_bias`` default None there); the memory MLP's initial weights are xavier-uniform per head
(``MemoryMLP``); the persistent memory starts at 0 (``persistent_memory`` in mac_transformer.py); norms at 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.init import apply_init
from prism_rec.models.inner_loop import align_to_chunks, gelu_tanh_grad, restore_alignment
from prism_rec.models.nn import GatedRMSNorm, PreNormStack, ShortConv, l2norm
from prism_rec.registry import register_backbone


def xavier_uniform_per_head(weight: torch.Tensor) -> torch.Tensor:
    """Each head's [fan_in, fan_out] slice of weight [H, fan_in, fan_out] from xavier-uniform, in place."""
    for head in weight:
        nn.init.xavier_uniform_(head)
    return weight


def decay_matrix(cumulative_log: torch.Tensor) -> torch.Tensor:
    """[..., C] cumulative log-decays -> [..., C, C] with entry [t, r] = exp(cum_t - cum_r) for r <= t, else 0."""
    C = cumulative_log.shape[-1]
    difference = cumulative_log[..., :, None] - cumulative_log[..., None, :]
    causal = torch.ones(C, C, dtype=torch.bool, device=cumulative_log.device).tril()
    return difference.masked_fill(~causal, float("-inf")).exp()


def titans_memory_chunked(q, k, v, log_keep, log_momentum, step, weight1, weight2):
    """Chunked Titans memory: returns y_t = M_t(q_t) [B, H, N, C, Dh].

    q, k, v [B, H, N, C, Dh]; log_keep = log(1 - alpha), log_momentum = log(eta), step = theta, each
    [B, H, N, C]; weight1 [H, Dh, F], weight2 [H, F, Dh] the initial memory M_0 (momentum S_0 = 0).

    Inside a chunk with starting memory M_0, momentum S_0 and u_s = grad l(M_0; k_s, v_s), unrolling
    the two scans gives M_t = A_t M_0 + c_t S_0 - sum_{s<=t} w_ts u_s with A_t = prod_{j<=t}(1 - alpha_j),
    E_t = prod_{j<=t} eta_j, c_t = sum_{r<=t} (A_t/A_r) E_r, w_ts = theta_s sum_{s<=r<=t} (A_t/A_r)(E_r/E_s),
    and S_C = E_C S_0 - sum_s theta_s (E_C/E_s) u_s. The gradients of the two layers are rank-one per
    token (k_s^T g1_s and h_s^T g2_s), so M_t(q_t) needs only inner products with the chunk's tokens.
    """
    B, H, N, C, Dh = q.shape
    hidden_width = weight1.shape[-1]
    cumulative_keep, cumulative_momentum = log_keep.cumsum(-1), log_momentum.cumsum(-1)
    forget = decay_matrix(cumulative_keep)  # [B, H, N, C, C]: A_t / A_r
    momentum = decay_matrix(cumulative_momentum)  # [B, H, N, C, C]: E_r / E_s
    keep, momentum_total = cumulative_keep.exp(), cumulative_momentum.exp()  # A_t, E_t [B, H, N, C]
    carry = (forget @ momentum_total[..., None]).squeeze(-1)  # c_t [B, H, N, C]
    write = (forget @ momentum) * step[..., None, :]  # w_ts [B, H, N, C, C]
    momentum_write = momentum[..., -1, :] * step  # theta_s E_C / E_s [B, H, N, C]

    W1, W2 = weight1.expand(B, H, Dh, hidden_width), weight2.expand(B, H, hidden_width, Dh)
    S1, S2 = torch.zeros_like(W1), torch.zeros_like(W2)
    outputs = []
    for n in range(N):
        q_n, k_n = q[:, :, n], k[:, :, n]  # [B, H, C, Dh]
        pre = k_n @ W1  # [B, H, C, F]
        hidden = F.gelu(pre, approximate="tanh")
        grad_out = 2.0 * (k_n + hidden @ W2 - v[:, :, n])  # dl/dM(k) [B, H, C, Dh]
        grad_pre = (grad_out @ W2.transpose(-1, -2)) * gelu_tanh_grad(pre)  # [B, H, C, F]
        a, c, w = keep[:, :, n, :, None], carry[:, :, n, :, None], write[:, :, n]
        hidden_q = F.gelu(a * (q_n @ W1) + c * (q_n @ S1) - (w * (q_n @ k_n.transpose(-1, -2))) @ grad_pre,
                          approximate="tanh")
        outputs.append(q_n + a * (hidden_q @ W2) + c * (hidden_q @ S2)
                       - (w * (hidden_q @ hidden.transpose(-1, -2))) @ grad_out)
        a_end, c_end = keep[:, :, n, -1, None, None], carry[:, :, n, -1, None, None]
        e_end = momentum_total[:, :, n, -1, None, None]
        w_end, s_end = write[:, :, n, -1, :, None], momentum_write[:, :, n, :, None]  # [B, H, C, 1]
        W1, S1 = (a_end * W1 + c_end * S1 - (w_end * k_n).transpose(-1, -2) @ grad_pre,
                  e_end * S1 - (s_end * k_n).transpose(-1, -2) @ grad_pre)
        W2, S2 = (a_end * W2 + c_end * S2 - (w_end * hidden).transpose(-1, -2) @ grad_out,
                  e_end * S2 - (s_end * hidden).transpose(-1, -2) @ grad_out)
    return torch.stack(outputs, dim=2)


class NeuralMemoryLayer(nn.Module):
    """Titans' long-term memory as a token mixer (see the module docstring)."""

    def __init__(self, d_model: int, n_heads: int, chunk_size: int = 16, base_lr: float = 0.1,
                 memory_expansion: int = 4, conv_size: int = 4):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"titans: d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.chunk_size, self.base_lr = chunk_size, base_lr
        H, Dh = n_heads, self.head_dim
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.q_conv, self.k_conv, self.v_conv = (ShortConv(d_model, conv_size) for _ in range(3))
        self.gate_proj = nn.Linear(d_model, 3 * H)  # alpha, eta, theta per head (PyTorch's default init)
        self.weight1 = nn.Parameter(xavier_uniform_per_head(torch.empty(H, Dh, memory_expansion * Dh)))
        self.weight2 = nn.Parameter(xavier_uniform_per_head(torch.empty(H, memory_expansion * Dh, Dh)))
        self.out_norm = GatedRMSNorm(Dh)
        self.out_gate = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def memory_inputs(self, x: torch.Tensor, mask: torch.Tensor):
        """q, k, v [B, T, H, Dh] and log(1 - alpha), log(eta), theta [B, T, H], neutral at padding."""
        B, T, _ = x.shape
        keep = mask[..., None].to(x.dtype)
        q, k, v = (conv(proj(x) * keep).view(B, T, self.n_heads, self.head_dim)
                   for proj, conv in ((self.q_proj, self.q_conv), (self.k_proj, self.k_conv),
                                      (self.v_proj, self.v_conv)))
        alpha_logit, eta_logit, theta_logit = self.gate_proj(x).chunk(3, dim=-1)  # [B, T, H] each
        log_keep = F.logsigmoid(-alpha_logit) * keep
        log_momentum = F.logsigmoid(eta_logit) * keep
        step = self.base_lr * torch.sigmoid(theta_logit) * keep
        return l2norm(q), l2norm(k), v, log_keep, log_momentum, step

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        C, H, Dh = self.chunk_size, self.n_heads, self.head_dim
        pad = -T % C
        N = (T + pad) // C
        q, k, v, log_keep, log_momentum, step = self.memory_inputs(x, mask)
        q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).view(B, N, C, H, Dh).permute(0, 3, 1, 2, 4) for t in (q, k, v))
        log_keep, log_momentum, step = (F.pad(t, (0, 0, 0, pad)).view(B, N, C, H).permute(0, 3, 1, 2)
                                        for t in (log_keep, log_momentum, step))
        retrieved = titans_memory_chunked(q, k, v, log_keep, log_momentum, step, self.weight1, self.weight2)
        retrieved = retrieved.permute(0, 2, 3, 1, 4).reshape(B, N * C, H, Dh)[:, :T]  # [B, T, H, Dh]
        gate = self.out_gate(x).view(B, T, H, Dh)
        return self.o_proj(self.out_norm(retrieved, gate).reshape(B, T, d))


class SlidingWindowAttention(nn.Module):
    """Causal softmax attention over the last ``window`` positions and learned persistent key/values."""

    def __init__(self, d_model: int, n_heads: int, window: int = 32, persistent_tokens: int = 4, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"titans: d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.head_dim, self.window, self.dropout = n_heads, d_model // n_heads, window, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.persistent_keys = nn.Parameter(torch.zeros(n_heads, persistent_tokens, self.head_dim))
        self.persistent_values = nn.Parameter(torch.zeros(n_heads, persistent_tokens, self.head_dim))
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        H, Dh, P = self.n_heads, self.head_dim, self.persistent_keys.shape[1]
        q, k, v = self.qkv(x).view(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)  # each [B, H, T, Dh]
        k = torch.cat([self.persistent_keys.expand(B, H, P, Dh), k], dim=2)  # [B, H, P + T, Dh]
        v = torch.cat([self.persistent_values.expand(B, H, P, Dh), v], dim=2)
        positions = torch.arange(T, device=x.device)
        distance = positions[:, None] - positions[None, :]  # query - key
        in_window = (distance >= 0) & (distance < self.window)
        allowed = (in_window & mask[:, None, :]) | torch.eye(T, dtype=torch.bool, device=x.device)  # [B, T, T]
        allowed = torch.cat([mask[:, :, None].expand(B, T, P), allowed], dim=2)  # padded queries: only themselves
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None],
                                                  dropout_p=self.dropout if self.training else 0.0)
        return self.o_proj(attended.transpose(1, 2).reshape(B, T, d))


@register_backbone("titans",
                   description="Titans (MAL): neural long-term memory with momentum and forgetting, then "
                               "sliding-window attention (Behrouz et al. 2025)")
class Titans(nn.Module):
    """n_layers x (neural-memory block, sliding-window attention block), pre-norm with SwiGLU MLPs."""

    init_policy = "titans"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1,
                 chunk_size: int = 16, base_lr: float = 0.1, memory_expansion: int = 4, window: int = 32,
                 persistent_tokens: int = 4):
        super().__init__()
        self.chunk_size = chunk_size

        def make_mixer(index: int) -> nn.Module:
            if index % 2 == 0:
                return NeuralMemoryLayer(d_model, n_heads, chunk_size, base_lr, memory_expansion)
            return SlidingWindowAttention(d_model, n_heads, window, persistent_tokens, dropout)

        self.stack = PreNormStack(d_model, 2 * n_layers, make_mixer, dropout)
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        aligned_x, aligned_mask, shift = align_to_chunks(x, mask, self.chunk_size)
        return restore_alignment(self.stack(aligned_x, aligned_mask), shift, x.shape[1])
