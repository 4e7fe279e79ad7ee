"""Chunked delta scan in pure PyTorch (differentiable by autograd): the CPU path.

Derivation (per batch element and head; S has shape [K, V]; plain-text math).

Split the sequence into chunks of C tokens. Inside one chunk, let S0 be the state before it, index
tokens t = 1..C, and let G_t = g_1 + ... + g_t (cumulative log-decay), gamma_t = exp(G_t). Extra
writes are rows r = (t, l) with key ek_r, value ev_r and token index t(r); they carry the decay of
their token, Ge_r = G_t(r).

Write the beta recurrence as S_t = alpha_t S_{t-1} + k_t u_t^T + E_t with E_t = sum_l ek_{t,l} ev_{t,l}^T
and the "value seen by the erase"

    u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t).

Unrolling inside the chunk,

    alpha_t S_{t-1} = gamma_t S0 + sum_{s<t} exp(G_t - G_s) (k_s u_s^T + E_s),

so the extra rows act exactly like additional (key, value) rows with no erase of their own, applied
after the erase of their token. Substituting,

    u_t + sum_{s<t} beta_t exp(G_t - G_s) (k_t . k_s) u_s
        = beta_t v_t - beta_t gamma_t S0^T k_t - sum_{r: t(r)<t} beta_t exp(G_t - Ge_r) (k_t . ek_r) ev_r.

In matrix form, with strictly lower-triangular (masked, decayed) blocks

    A [C, C]:   A[t, s]  = beta_t exp(G_t - G_s)  (k_t . k_s)    for s < t
    Bx [C, CL]: Bx[t, r] = beta_t exp(G_t - Ge_r) (k_t . ek_r)   for t(r) < t

the UT/WY transform T = (I + A)^{-1} (unit lower triangular, found by forward substitution) gives

    U = T (beta * V - Bx EV) - T (beta * gamma * K) S0 = U_in - W S0,

where U_in [C, V] and W [C, K] depend only on the inputs of the chunk; only "- W S0" needs the
state, so the work that runs sequentially over chunks is a few [C, K] x [K, V] products and no loop
over l. The outputs (o_t = scale S_t^T q_t) and the next state are

    o_t  = scale (gamma_t S0^T q_t + sum_{s<=t} exp(G_t - G_s) (q_t . k_s) u_s
                                   + sum_{r: t(r)<=t} exp(G_t - Ge_r) (q_t . ek_r) ev_r)
    S_C  = gamma_C S0 + sum_s exp(G_C - G_s) k_s u_s^T + sum_r exp(G_C - Ge_r) ek_r ev_r^T,

the extra rows entering with masked decayed products q_t . ek_r (t(r) <= t) next to q_t . k_s.
Without beta (gated linear attention / SSD) there is no erase: A = Bx = 0, W = 0 and U = V.
A padded tail (k = v = 0, extra = 0, g = 0, beta = 0) leaves the state unchanged, so the sequence is
zero-padded to a multiple of C.
"""

import torch
import torch.nn.functional as F


def _decay_matrix(G_rows, G_cols, mask):
    """exp(G_rows[:, None] - G_cols[None, :]) where mask holds, else 0 (no overflow off the mask)."""
    diff = G_rows[..., :, None] - G_cols[..., None, :]
    return torch.where(mask, diff, torch.full_like(diff, float("-inf"))).exp()


def chunk_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state, chunk_size=64):
    """Chunked scan; returns (o [B, T, H, V] fp32, S_T [B, H, K, V] fp32)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = min(chunk_size, T)
    num_chunks = (T + C - 1) // C
    pad = num_chunks * C - T

    def to_chunks(x):
        # [B, T, H, ...] -> [B, H, N, C, ...] in fp32, zero-padded along T
        x = x.float().transpose(1, 2)
        x = F.pad(x, [0, 0] * (x.dim() - 3) + [0, pad])
        return x.reshape(B, H, num_chunks, C, *x.shape[3:])

    q_c, k_c, v_c = to_chunks(q), to_chunks(k), to_chunks(v)  # [B, H, N, C, K|V]
    G = to_chunks(g).cumsum(-1)  # [B, H, N, C]
    gamma = G.exp()
    tokens = torch.arange(C, device=q.device)
    inclusive = tokens[:, None] >= tokens[None, :]
    strict = tokens[:, None] > tokens[None, :]
    to_chunk_end = (G[..., -1:] - G).exp()  # [B, H, N, C]

    scores = _decay_matrix(G, G, inclusive) * (q_c @ k_c.transpose(-1, -2))  # [B, H, N, C, C]
    intra_out = 0.0
    extra_state = 0.0
    has_extra = extra_k is not None
    if has_extra:
        L = extra_k.shape[3]
        ek_c = to_chunks(extra_k).reshape(B, H, num_chunks, C * L, K)  # rows r = t * L + l
        ev_c = to_chunks(extra_v).reshape(B, H, num_chunks, C * L, V)
        row_token = tokens.repeat_interleave(L)  # [C * L]
        G_extra = G.repeat_interleave(L, dim=-1)  # [B, H, N, C * L]
        extra_scores = _decay_matrix(G, G_extra, tokens[:, None] >= row_token[None, :]) * (q_c @ ek_c.transpose(-1, -2))
        intra_out = extra_scores @ ev_c
        extra_state = ek_c.transpose(-1, -2) @ ((G[..., -1:] - G_extra).exp()[..., None] * ev_c)

    if beta is None:
        u_in, w = v_c, None
    else:
        b = to_chunks(beta)  # [B, H, N, C]
        A = b[..., None] * _decay_matrix(G, G, strict) * (k_c @ k_c.transpose(-1, -2))
        rhs = b[..., None] * v_c
        if has_extra:
            Bx = (b[..., None] * _decay_matrix(G, G_extra, tokens[:, None] > row_token[None, :])
                  * (k_c @ ek_c.transpose(-1, -2)))
            rhs = rhs - Bx @ ev_c
        unit_lower = A + torch.eye(C, device=q.device)
        u_in = torch.linalg.solve_triangular(unit_lower, rhs, upper=False, unitriangular=True)
        w = torch.linalg.solve_triangular(unit_lower, (b * gamma)[..., None] * k_c, upper=False, unitriangular=True)

    state = q.new_zeros(B, H, K, V, dtype=torch.float32) if initial_state is None else initial_state.float()
    outputs = []
    for n in range(num_chunks):
        u = u_in[:, :, n] if w is None else u_in[:, :, n] - w[:, :, n] @ state  # [B, H, C, V]
        o = gamma[:, :, n, :, None] * (q_c[:, :, n] @ state) + scores[:, :, n] @ u
        if has_extra:
            o = o + intra_out[:, :, n]
        outputs.append(scale * o)
        state = (gamma[:, :, n, -1, None, None] * state
                 + k_c[:, :, n].transpose(-1, -2) @ (to_chunk_end[:, :, n, :, None] * u))
        if has_extra:
            state = state + extra_state[:, :, n]
    o = torch.stack(outputs, dim=2).reshape(B, H, num_chunks * C, V)[:, :, :T].transpose(1, 2)
    return o, state
