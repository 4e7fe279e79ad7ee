"""Attention pieces that several backbones share: the causal padding mask, rotary positions (RoPE), and
causal linear attention with a per-channel decay."""

from __future__ import annotations

import torch


def causal_padding_mask(mask: torch.Tensor) -> torch.Tensor:
    """Boolean attention mask [B, 1, T, T]: query t may attend key s <= t when s is a real item.

    A padded query attends only to itself, so its softmax is defined; its output is zeroed afterwards.
    """
    T = mask.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=mask.device).tril()
    allowed = causal & mask[:, None, :]  # [B, T, T]
    allowed = allowed | torch.eye(T, dtype=torch.bool, device=mask.device)
    return allowed.unsqueeze(1)


def rotary_angles(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """Angles m * theta_i for positions m [B, T] and pairs i < head_dim / 2 -> [B, T, head_dim / 2]."""
    theta = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    return positions.float()[..., None] * theta


def apply_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_2i, x_2i+1) of x [B, T, H, D] by angles [B, T, D / 2] (same for every head)."""
    pairs = x.float().unflatten(-1, (-1, 2))  # [B, T, H, D / 2, 2]
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = angles.cos().unsqueeze(2), angles.sin().unsqueeze(2)  # [B, T, 1, D / 2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def channel_decay_attention(q, k, v, log_decay, extra_k=None, extra_v=None, chunk_size: int = 16):
    """Causal linear attention with a per-channel decay (the recurrence of GLA, and of the authors' SSMs).

    With state S [K, V] per head:  S_t = diag(exp(log_decay_t)) S_{t-1} + k_t v_t^T + sum_l ek_{t,l} ev_{t,l}^T,
    o_t = S_t^T q_t.  q, k, log_decay (<= 0): [B, T, H, K]; v: [B, T, H, V]; extra_k [B, T, H, L, K] and
    extra_v [B, T, H, L, V] or None. Returns o [B, T, H, V] in v's dtype. Exact (no epsilon): chunks of
    ``chunk_size`` with within-chunk cumulative log-decays, so every exponent is <= 0.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    k = k.unsqueeze(3) if extra_k is None else torch.cat([k.unsqueeze(3), extra_k], dim=3)  # [B, T, H, R, K]
    vv = v.unsqueeze(3) if extra_v is None else torch.cat([v.unsqueeze(3), extra_v], dim=3)  # [B, T, H, R, V]
    C = chunk_size
    pad = (-T) % C
    n = (T + pad) // C

    def chunks(x):  # [B, T, H, ...] -> [B, H, n, C, ...] in fp32, zero-padded at the end
        x = x.float()
        if pad:
            x = torch.cat([x, x.new_zeros(B, pad, *x.shape[2:])], dim=1)
        x = x.view(B, n, C, *x.shape[2:])
        return x.permute(0, 3, 1, 2, *range(4, x.dim()))

    q, k, vv, b = chunks(q), chunks(k), chunks(vv), chunks(log_decay).cumsum(dim=3)  # b: inclusive cumulative log-decay
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    # [B, H, n, C(t), C(s), K]
    exponent = (b.unsqueeze(4) - b.unsqueeze(3)).masked_fill(~causal[:, :, None], float("-inf"))
    scores = torch.einsum("bhntk,bhnsrk,bhntsk->bhntsr", q, k, exponent.exp())
    out = torch.einsum("bhntsr,bhnsrv->bhntv", scores, vv)
    q_from_start = q * b.exp()  # decay from the chunk's start to t
    k_to_end = k * (b[:, :, :, -1:] - b).exp().unsqueeze(4)  # decay from s to the chunk's end
    chunk_decay = b[:, :, :, -1].exp()  # [B, H, n, K]
    state = q.new_zeros(B, H, K, V)
    carried = []
    for j in range(n):
        carried.append(q_from_start[:, :, j] @ state)
        state = (chunk_decay[:, :, j].unsqueeze(-1) * state
                 + torch.einsum("bhcrk,bhcrv->bhkv", k_to_end[:, :, j], vv[:, :, j]))
    out = out + torch.stack(carried, dim=2)
    return out.permute(0, 2, 3, 1, 4).reshape(B, n * C, H, V)[:, :T].to(v.dtype)
