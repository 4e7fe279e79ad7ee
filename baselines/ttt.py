"""TTT-Linear and TTT-MLP (Sun et al. 2024, "Learning to (Learn at Test Time): RNNs with Expressive Hidden
States", arXiv 2407.04620).

The hidden state of a TTT layer is the weights of an inner model f, one per head, trained while the
sequence is read. Per head (width Dh), with theta_K, theta_Q, theta_V learned projections of the token:

    k_t, q_t, v_t = theta_K x_t, theta_Q x_t, theta_V x_t
    inner loss     l(W; t) = 1/2 || LN(f(k_t; W)) - (v_t - k_t) ||^2
    read-out       z_t = q_t + LN(f(q_t; W_t))

LN is a LayerNorm over Dh with learned per-head scale and shift, shared by the loss and the read-out
(the "z = x + LN(f(x))" wrapper of the paper); f is x W + b (TTT-Linear) or a two-layer MLP with
tanh-GELU and hidden width 4 Dh (TTT-MLP). The 1/2 in the loss is the authors' code's convention.

Mini-batch gradient descent with mini-batches of b = 16 tokens: every gradient in mini-batch n is
taken at the weights W_{n-1} reached at the end of the previous one, the weights change only at
mini-batch boundaries, and position t inside a mini-batch reads with

    W_t = W_{n-1} - sum_{s <= t in the mini-batch} eta_{t,s} grad l(W_{n-1}; s),      W_n = W_{last}.

eta_{t,s} = tau_t * lr_s with the token-dependent inner learning rate
lr_s = base_lr * sigmoid(W_lr x_s) / Dh (paper section 2.7; base_lr 1 for TTT-Linear, 0.1 for
TTT-MLP) and the authors' code's learnable position scale tau_t = max(0, 1/(t+1) + bias_t) over the
position t = 0..b-1 inside the mini-batch (so the boundary step is a mean over the mini-batch). The
dual form computes all W_t of a mini-batch from closed-form gradients (LayerNorm, GELU and the linear
maps differentiated by hand, no autograd inside the layer) without materialising them; the loop over
mini-batches stays serial, as in the paper. Padded positions get lr = 0: they never train the inner
model.

The layer's output, as in the authors' TTT layer with a gate: o_proj(LN_post(z) * GELU(W_g x)).
It sits in the paper's Transformer backbone (pre-norm residual blocks with a SwiGLU MLP). The paper's
Mamba-backbone variant (a causal convolution before theta_K/theta_Q) and the rotary positions the
authors apply inside each mini-batch are not used here.

Mini-batches start at each sequence's first real item: the backbone moves every left-padded row so
that its number of padding positions is a multiple of the mini-batch size (``align_to_chunks``), runs,
and moves the rows back. Outputs therefore depend on neither the amount of left padding nor the
other rows of the batch, and no ``padding_granularity`` is needed.

Initialisation (``init_policy = "ttt"``, ``prism_rec.models.init``), as ttt-lm-pytorch (ttt.py,
``TTTPreTrainedModel._init_weights`` and ``TTTBase``/``TTTLinear``/``TTTMLP``): every Linear (theta_Q, theta_K,
theta_V, W_lr, the gate, o_proj, the SwiGLU MLP) ~ N(0, 0.02) with zero biases; the inner model's initial
weights ~ N(0, 0.02) and biases 0; the TTT LayerNorm at 1/0 (flagged ``_no_weight_decay`` as a norm); the
position-scale bias 0; the other norms at 1. No residual rescaling.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.init import apply_init
from prism_rec.models.inner_loop import align_to_chunks, gelu_tanh_grad, restore_alignment
from prism_rec.models.nn import PreNormStack
from prism_rec.registry import register_backbone


def layer_norm_l2_grad(z, target, weight, bias, eps):
    """d/dz of 1/2 || weight * LN(z) + bias - target ||^2 over the last dimension, in closed form.

    z, target [..., D]; weight, bias broadcastable to z. With z_hat = (z - mean) / std and
    g = weight * (LN(z) - target): dl/dz = (D g - sum(g) - z_hat sum(g z_hat)) / (D std).
    """
    D = z.shape[-1]
    mean = z.mean(-1, keepdim=True)
    std = (z.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    z_hat = (z - mean) / std
    g = weight * (weight * z_hat + bias - target)
    return (D * g - g.sum(-1, keepdim=True) - z_hat * (g * z_hat).sum(-1, keepdim=True)) / (D * std)


def ttt_linear_dual(q, k, v, eta, weight, bias, ln_weight, ln_bias, eps=1e-6):
    """TTT-Linear over mini-batches in the dual form; returns f(q_t; W_t) before the LN read-out.

    q, k, v [B, H, N, C, Dh] (N mini-batches of C tokens); eta [B, H, N, C, C] lower-triangular,
    eta[..., t, s] = step of token s's gradient in the weights read at t (the last row is the update);
    weight [H, Dh, Dh], bias [H, Dh] the initial inner model; ln_weight, ln_bias [H, Dh].
    """
    B, H, N, C, Dh = q.shape
    ln_weight, ln_bias = ln_weight[None, :, None], ln_bias[None, :, None]  # [1, H, 1, Dh]
    W = weight.expand(B, H, Dh, Dh)
    b = bias[None, :, None].expand(B, H, 1, Dh)
    target = v - k
    # Read-out coefficients: q_t (W - sum_s eta_ts k_s g_s^T) + b - sum_s eta_ts g_s.
    read = eta * (q @ k.transpose(-1, -2) + 1.0)  # [B, H, N, C, C]
    outputs = []
    for n in range(N):
        k_n, step = k[:, :, n], eta[:, :, n, -1, :, None]  # [B, H, C, Dh], [B, H, C, 1]
        grad_z = layer_norm_l2_grad(k_n @ W + b, target[:, :, n], ln_weight, ln_bias, eps)  # [B, H, C, Dh]
        outputs.append(q[:, :, n] @ W + b - read[:, :, n] @ grad_z)
        W = W - (step * k_n).transpose(-1, -2) @ grad_z
        b = b - (step * grad_z).sum(-2, keepdim=True)
    return torch.stack(outputs, dim=2)


def ttt_mlp_dual(q, k, v, eta, weight1, bias1, weight2, bias2, ln_weight, ln_bias, eps=1e-6):
    """TTT-MLP (f(x) = GELU(x W1 + b1) W2 + b2) over mini-batches in the dual form; returns f(q_t; W_t).

    Shapes as in ``ttt_linear_dual``; weight1 [H, Dh, F], bias1 [H, F], weight2 [H, F, Dh], bias2 [H, Dh].
    The read-out at t applies the updated first layer to q_t, then the updated second layer to its
    activation, each update being a sum of rank-one gradient terms from the tokens s <= t.
    """
    B, H, N, C, Dh = q.shape
    F_ = weight1.shape[-1]
    ln_weight, ln_bias = ln_weight[None, :, None], ln_bias[None, :, None]
    W1, W2 = weight1.expand(B, H, Dh, F_), weight2.expand(B, H, F_, Dh)
    b1, b2 = bias1[None, :, None].expand(B, H, 1, F_), bias2[None, :, None].expand(B, H, 1, Dh)
    target = v - k
    read1 = eta * (q @ k.transpose(-1, -2) + 1.0)  # [B, H, N, C, C]
    outputs = []
    for n in range(N):
        k_n, eta_n, step = k[:, :, n], eta[:, :, n], eta[:, :, n, -1, :, None]
        pre1 = k_n @ W1 + b1  # [B, H, C, F]
        hidden = F.gelu(pre1, approximate="tanh")
        grad_z2 = layer_norm_l2_grad(hidden @ W2 + b2, target[:, :, n], ln_weight, ln_bias, eps)  # [B, H, C, Dh]
        grad_z1 = (grad_z2 @ W2.transpose(-1, -2)) * gelu_tanh_grad(pre1)  # [B, H, C, F]
        hidden_q = F.gelu(q[:, :, n] @ W1 + b1 - read1[:, :, n] @ grad_z1, approximate="tanh")
        read2 = eta_n * (hidden_q @ hidden.transpose(-1, -2) + 1.0)  # [B, H, C, C]
        outputs.append(hidden_q @ W2 + b2 - read2 @ grad_z2)
        W1 = W1 - (step * k_n).transpose(-1, -2) @ grad_z1
        b1 = b1 - (step * grad_z1).sum(-2, keepdim=True)
        W2 = W2 - (step * hidden).transpose(-1, -2) @ grad_z2
        b2 = b2 - (step * grad_z2).sum(-2, keepdim=True)
    return torch.stack(outputs, dim=2)


class TTTLayer(nn.Module):
    """One TTT layer (token mixer): projections, inner-loop read-out per head, post-norm, gate, output."""

    def __init__(self, d_model: int, n_heads: int, inner: str = "linear", mini_batch_size: int = 16,
                 base_lr: float = 1.0, mlp_expansion: int = 4, eps: float = 1e-6):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"ttt: d_model={d_model} is not divisible by n_heads={n_heads}")
        if inner not in ("linear", "mlp"):
            raise ValueError(f"ttt: inner model must be 'linear' or 'mlp', got {inner!r}")
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.inner, self.mini_batch_size, self.base_lr, self.eps = inner, mini_batch_size, base_lr, eps
        H, Dh = n_heads, self.head_dim
        self.q_proj = nn.Linear(d_model, d_model, bias=False)  # theta_Q
        self.k_proj = nn.Linear(d_model, d_model, bias=False)  # theta_K
        self.v_proj = nn.Linear(d_model, d_model, bias=False)  # theta_V
        self.lr_proj = nn.Linear(d_model, n_heads)  # W_lr: one inner learning rate per head and token
        nn.init.normal_(self.lr_proj.weight, std=0.02)
        nn.init.zeros_(self.lr_proj.bias)
        self.position_scale_bias = nn.Parameter(torch.zeros(mini_batch_size))
        if inner == "linear":
            self.weight = nn.Parameter(torch.randn(H, Dh, Dh) * 0.02)
            self.bias = nn.Parameter(torch.zeros(H, Dh))
        else:
            hidden = mlp_expansion * Dh
            self.weight1 = nn.Parameter(torch.randn(H, Dh, hidden) * 0.02)
            self.bias1 = nn.Parameter(torch.zeros(H, hidden))
            self.weight2 = nn.Parameter(torch.randn(H, hidden, Dh) * 0.02)
            self.bias2 = nn.Parameter(torch.zeros(H, Dh))
        self.ln_weight = nn.Parameter(torch.ones(H, Dh))
        self.ln_bias = nn.Parameter(torch.zeros(H, Dh))
        self.ln_weight._no_weight_decay = True  # a norm's scale, held as a raw parameter
        self.post_norm = nn.LayerNorm(d_model, eps=eps)
        self.gate_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def step_sizes(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """eta[b, h, n, t, s] = tau_t lr_s for s <= t inside mini-batch n, else 0 -> [B, H, N, C, C].

        x [B, T, d] with T a multiple of C; lr is 0 at padded positions.
        """
        B, T, _ = x.shape
        C = self.mini_batch_size
        lr = self.base_lr * torch.sigmoid(self.lr_proj(x)) / self.head_dim * mask[..., None]  # [B, T, H]
        lr = lr.transpose(1, 2).reshape(B, self.n_heads, T // C, 1, C)
        positions = torch.arange(1, C + 1, device=x.device, dtype=x.dtype)
        tau = (1.0 / positions + self.position_scale_bias).clamp(min=0.0)  # [C]
        causal = torch.ones(C, C, dtype=torch.bool, device=x.device).tril()
        return tau[:, None] * lr * causal

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        C, H, Dh = self.mini_batch_size, self.n_heads, self.head_dim
        pad = -T % C
        x_full, mask_full = F.pad(x, (0, 0, 0, pad)), F.pad(mask, (0, pad))
        N = (T + pad) // C
        keep = mask_full[..., None].to(x.dtype)

        def heads(projection):  # [B, T', d] -> [B, H, N, C, Dh]
            return (projection(x_full) * keep).view(B, N, C, H, Dh).permute(0, 3, 1, 2, 4)

        q, k, v = heads(self.q_proj), heads(self.k_proj), heads(self.v_proj)
        eta = self.step_sizes(x_full, mask_full)
        if self.inner == "linear":
            inner_out = ttt_linear_dual(q, k, v, eta, self.weight, self.bias, self.ln_weight, self.ln_bias, self.eps)
        else:
            inner_out = ttt_mlp_dual(q, k, v, eta, self.weight1, self.bias1, self.weight2, self.bias2,
                                     self.ln_weight, self.ln_bias, self.eps)
        z = q + F.layer_norm(inner_out, (Dh,),
                             eps=self.eps) * self.ln_weight[:, None, None] + self.ln_bias[:, None, None]
        z = z.permute(0, 2, 3, 1, 4).reshape(B, N * C, d)[:, :T]  # [B, T, d]
        return self.o_proj(self.post_norm(z) * F.gelu(self.gate_proj(x), approximate="tanh"))


@register_backbone("ttt-linear",
                   description="TTT-Linear: linear inner model trained at test time, mini-batch 16 (Sun et al. 2024)",
                   inner="linear", base_lr=1.0)
@register_backbone("ttt-mlp",
                   description="TTT-MLP: two-layer GELU inner model trained at test time, mini-batch 16 "
                               "(Sun et al. 2024)",
                   inner="mlp", base_lr=0.1)
class TTT(nn.Module):
    """Pre-norm residual stack of TTT layers with SwiGLU MLPs (see the module docstring)."""

    init_policy = "ttt"

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1,
                 inner: str = "linear", mini_batch_size: int = 16, base_lr: float = 1.0, mlp_expansion: int = 4):
        super().__init__()
        self.mini_batch_size = mini_batch_size
        self.stack = PreNormStack(
            d_model, n_layers,
            lambda _: TTTLayer(d_model, n_heads, inner, mini_batch_size, base_lr, mlp_expansion),
            dropout,
        )
        apply_init(self)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        aligned_x, aligned_mask, shift = align_to_chunks(x, mask, self.mini_batch_size)
        return restore_alignment(self.stack(aligned_x, aligned_mask), shift, x.shape[1])
