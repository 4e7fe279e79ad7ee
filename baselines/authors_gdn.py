"""``gdn-authors``: the recommendation "Gated DeltaNet" that the authors' code trains: causal softmax attention.

Sources read: github.com/gpr-prism/prism at commit 435f392227b261707deb89c72dae68725861f367.
- ``rec/models/GDeltanet.py`` lines 72-84: each block is ``myfla.gated_deltanet.GatedDeltaNet`` with
  hidden_size = 4 x embedding_dim, expand_v = 1, head_dim = max(32, hidden_size // num_heads // 2),
  ``force_fallback=True``, ``use_rope=True``; lines 152-169: the stack; line 173: the last position is read.
- ``rec/myfla/gated_deltanet.py`` (the authors' edit of fla's layer): lines 149-154 projections (plus an
  extra ``u_proj``), 184-203 short convolutions, 209-214 gated RMSNorm and ``o_proj``, 229-242 RoPE,
  244-281 ``_fallback_causal_attention``, 307-309 unpadding, 314-344 forward up to RoPE, 349-353 beta and
  the decay, 363-365 the fallback branch taken, 401-410 output.

What one block computes with ``force_fallback=True`` (H heads of width K = head_dim, value width V = K):

    q, k, v = SiLU(ShortConv_4(W_q x)), SiLU(ShortConv_4(W_k x)), SiLU(ShortConv_4(W_v x))
    q, k    = RoPE(q), RoPE(k)    rotated as one vector of width H * K (frequencies 10000^(-2i / (H K)),
                                  i < H K / 2, spread across the heads), before the split into heads
    o       = softmax(q k^T / sqrt(K) + causal mask) v      per head, over the real tokens only
    y       = W_o (W_u x * RMSNorm(o) * SiLU(W_g x))        (RMSNorm per head, weight shared by heads)

beta = sigmoid(W_b x) and g = -exp(A_log) softplus(W_a x + dt_bias) are computed (lines 349-353) but the
fallback never reads them: there is no recurrence, no delta rule, no decay, no L2 norm of q and k (the
norm is a flag of the fla kernels only, lines 376 and 388).

Stack (GDeltanet.py 152-169): ``h = h + residual; h = block(h); residual = h`` with residual = 0 at first,
so block 1 sees x and every later block sees twice the previous block's output. There is no skip
connection around a block, no norm between blocks and no feed-forward; ``dropout`` is stored (line 56)
but never applied.

Where the authors' code departs from the paper's text: the paper's Gated DeltaNet (PAPER.md sections 2,
3.1 and 7) is the gated delta-rule recurrence S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T
with L2-normalised q, k. The code trains causal softmax attention with RoPE inside GDN's projections,
convolutions and output gate, plus a multiplicative u-gate fla's layer does not have; Table 2's GDN row is
an attention model. The blocks are not pre-norm residual blocks with an MLP.

Where this preset departs from the authors' code:
- Only the sequence mixer, inside this suite's next-item protocol. The authors' framework is dynamic link
  prediction: the source sequence is [the node itself at the query time, its 20 most recent neighbours]
  with node, edge, time-encoding and ID features concatenated (width 4 x 50), the destination is encoded
  without any sequence, an MLP scores the pair (PAPER.md section 8). Widths here are the suite's d_model.
- The dead parameters W_a, W_b, A_log, dt_bias are not built (they cannot affect the output, and the
  backbone contract wants a gradient for every parameter). The rest is the authors' function.
- Padding and positions. The authors unpad the batch (fla's ``get_unpad_data``), so the convolutions and
  the attention see only real tokens; RoPE is then applied to the flattened batch, so a token's position
  is its index among all real tokens of the batch. As attention scores under RoPE depend only on the
  distance between query and key, that offset cancels and the result equals per-sequence positions
  counted from the first real token, which is what is used here. Padded inputs are zeroed (the
  convolutions have no bias, so they see zeros as before the first token), padded keys are masked out,
  and outputs at padded positions are zero, as after the authors' ``pad_input``. Causal, as theirs.

Initialisation: the authors apply none of their own to this model (no fla ``_init_weights``: the layer is
used bare): PyTorch defaults for Linear and Conv1d, RMSNorm weight 1.

``init_policy = "torch"`` (prism_rec/models/init.py): PyTorch's defaults, norms 1/0; the item table, which the
authors' link-prediction model does not have (it scores pairs with an MLP; its ID embedding is
nn.Embedding's N(0, 1)), U(+-1/sqrt(d)), the default of an untied Linear head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from prism_rec.models.attention import apply_rotary, causal_padding_mask, rotary_angles
from prism_rec.models.gated_deltanet import GatedDeltaNetLayer
from prism_rec.models.nn import positions_from_first_item
from prism_rec.registry import register_backbone


class AuthorsGDNLayer(GatedDeltaNetLayer):
    """One block of the authors' fallback GDN: layer(x [B, T, d], mask [B, T]) -> [B, T, d] (no residual).

    Reuses Gated DeltaNet's projections, short convolutions, gated RMSNorm and output projection; drops the
    decay and erase parameters the fallback never reads, and adds the authors' u-gate.
    """

    def __init__(self, d_model: int, n_heads: int = 2, head_dim: int | None = None, conv_kernel: int = 4,
                 norm_eps: float = 1e-5, rope_base: float = 10000.0):
        head_dim = head_dim or max(32, d_model // n_heads // 2)
        super().__init__(d_model, n_heads=n_heads, head_k_dim=head_dim, head_v_dim=head_dim, conv_kernel=conv_kernel,
                         norm_eps=norm_eps)
        self.a_proj = self.b_proj = self.A_log = self.dt_bias = None  # computed but never read by the fallback
        self.rope_base = rope_base
        self.u_proj = nn.Linear(d_model, n_heads * head_dim, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        keep = mask.unsqueeze(-1).to(x.dtype)
        x = x * keep
        angles = rotary_angles(positions_from_first_item(mask), self.n_heads * self.head_k_dim, self.rope_base)
        q = apply_rotary(self.q_conv(self.q_proj(x)).unsqueeze(2), angles).view(B, T, self.n_heads, -1)
        k = apply_rotary(self.k_conv(self.k_proj(x)).unsqueeze(2), angles).view(B, T, self.n_heads, -1)
        v = self.v_conv(self.v_proj(x)).view(B, T, self.n_heads, -1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=causal_padding_mask(mask)).transpose(1, 2)  # [B, T, H, K]
        o = self.o_norm(o, self.g_proj(x).view(B, T, self.n_heads, -1)).flatten(2)
        return self.o_proj(self.u_proj(x) * o) * keep


@register_backbone("gdn-authors",
                   description="Gated DeltaNet as the authors' recsys code trains it "
                               "(fallback: causal softmax attention + RoPE)")
class AuthorsGDN(nn.Module):
    """The authors' stack: block i > 1 gets twice block i-1's output; no skip, norm or MLP (module docstring)."""

    init_policy = "torch"  # PyTorch defaults, as the authors' code

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 2, dropout: float = 0.1,
                 head_dim: int | None = None, conv_kernel: int = 4, rope_base: float = 10000.0):
        super().__init__()
        self.dropout = dropout  # accepted for the common interface; the authors' model never applies it
        self.layers = nn.ModuleList(AuthorsGDNLayer(d_model, n_heads, head_dim, conv_kernel, rope_base=rope_base)
                                    for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        residual = torch.zeros_like(x)
        for layer in self.layers:
            x = layer(x + residual, mask)
            residual = x
        return x
