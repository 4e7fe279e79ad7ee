"""Fused Triton delta scan: one program per (batch, head, value block) walks all chunks, state on chip.

Forward: with beta, one launch parallel over chunks computes each chunk's (I + A)^{-1} of the UT/WY
transform (kernels/chunk.py), which does not depend on the state; then one launch, grid
(value blocks, B * H), walks the chunks and writes o, the final state and, when gradients are
needed, the state at the start of every chunk. Backward: one launch, grid (value blocks, B * H),
walking the chunks in reverse with d(state) on chip, recomputing each chunk's intra-chunk terms from
the stored chunk-start state and inverse. The chunk steps (`_chunk_forward`, `_chunk_backward`) are
shared with the chunk-parallel backend (kernels/chunk_parallel.py). All accumulation is fp32; the
matrix products use tf32 for bf16/fp16 inputs and full fp32 for fp32 inputs.
"""

import contextlib
import functools

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources


@triton.jit
def _unit_lower_inverse(A, BT: tl.constexpr):
    """(I + A)^{-1} for strictly lower-triangular A [BT, BT] (BT = 16, 32 or 64).

    Forward substitution inside the 16 x 16 diagonal blocks, all blocks at once (15 steps); then,
    with D the inverse of the block-diagonal part and N = D A_off (strictly block-lower, N^(BT/16) = 0),
    (I + A)^{-1} = (I + N)^{-1} D = (I - N)(I + N^2) D for BT = 64 and (I - N) D for BT = 32."""
    rows = tl.arange(0, BT)
    identity = (rows[:, None] == rows[None, :]).to(tl.float32)
    same_block = (rows[:, None] // 16) == (rows[None, :] // 16)
    A_diag = tl.where(same_block, A, 0.0)
    inverse = identity
    for i in range(1, 16):
        selected = (rows % 16) == i
        substituted = identity - tl.dot(tl.where(selected[:, None], A_diag, 0.0), inverse, input_precision="ieee")
        inverse = tl.where(selected[:, None], substituted, inverse)
    if BT > 16:
        N = tl.dot(inverse, A - A_diag, input_precision="ieee")
        if BT > 32:
            inverse += tl.dot(tl.dot(N, N, input_precision="ieee"), inverse, input_precision="ieee")
        inverse -= tl.dot(N, inverse, input_precision="ieee")
    return inverse


@triton.jit
def _load_chunk(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, b, h, t0, v0, T, H, K, V,
                HAS_BETA: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Tiles of one chunk in fp32, zero outside the sequence: q, k [BT, BK], v [BT, BV], g, beta [BT]."""
    t = t0 + tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    cols_v = v0 + tl.arange(0, BV)
    token_row = (b * T + t) * H + h  # [BT] int64
    in_seq = t < T
    mask_k = in_seq[:, None] & (cols_k[None, :] < K)
    mask_v = in_seq[:, None] & (cols_v[None, :] < V)
    q = tl.load(q_ptr + token_row[:, None] * K + cols_k[None, :], mask=mask_k, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + token_row[:, None] * K + cols_k[None, :], mask=mask_k, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + token_row[:, None] * V + cols_v[None, :], mask=mask_v, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + token_row, mask=in_seq, other=0.0).to(tl.float32)
    if HAS_BETA:
        beta = tl.load(beta_ptr + token_row, mask=in_seq, other=0.0).to(tl.float32)
    else:
        beta = tl.zeros([BT], dtype=tl.float32)
    return q, k, v, g, beta


@triton.jit
def _extra_offsets(b, h, t0, v0, l, T, H, K, V, L, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Offsets and masks of write l of every token of a chunk in extra_k [.., K] and extra_v [.., V]."""
    t = t0 + tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    cols_v = v0 + tl.arange(0, BV)
    row = ((b * T + t) * H + h) * L + l
    offsets_k = row[:, None] * K + cols_k[None, :]
    offsets_v = row[:, None] * V + cols_v[None, :]
    return offsets_k, (t[:, None] < T) & (cols_k[None, :] < K), offsets_v, (t[:, None] < T) & (cols_v[None, :] < V)


@triton.jit
def _masked_decay(G, mask):
    """exp(G_t - G_s) where mask[t, s] holds, else 0."""
    return _masked_decay_between(G, G, mask)


@triton.jit
def _masked_decay_between(G_rows, G_cols, mask):
    """exp(G_rows[t] - G_cols[s]) where mask[t, s] holds, else 0 (exp taken only there: no overflow outside)."""
    return tl.where(mask, tl.exp(tl.where(mask, G_rows[:, None] - G_cols[None, :], 0.0)), 0.0)


@triton.jit
def _chunk_inverse(k, G, beta, PRECISION: tl.constexpr, BT: tl.constexpr):
    """(I + A)^{-1} [BT, BT] of one chunk, A[t, s] = beta_t exp(G_t - G_s) (k_t . k_s) for s < t."""
    tokens = tl.arange(0, BT)
    A = (beta[:, None] * _masked_decay(G, tokens[:, None] > tokens[None, :])
         * tl.dot(k, tl.trans(k), input_precision=PRECISION))
    return _unit_lower_inverse(A, BT)


@triton.jit
def _chunk_tokens(b, h, chunk, T, H, BT: tl.constexpr):
    """Token indices t [BT] of a chunk (some past T in the last one) and their rows (b * T + t) * H + h."""
    t = chunk * BT + tl.arange(0, BT)
    return t, (b * T + t) * H + h


@triton.jit
def _chunk_inverse_kernel(k_ptr, g_ptr, beta_ptr, inverse_ptr, T, H, K, NT,
                          PRECISION: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """(I + A)^{-1} of every chunk, in parallel over chunks: it does not depend on the state."""
    chunk = tl.cast(tl.program_id(0), tl.int64)
    bh = tl.cast(tl.program_id(1), tl.int64)
    b = bh // H
    h = bh % H
    tokens = tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    t, token_row = _chunk_tokens(b, h, chunk, T, H, BT)
    k = tl.load(k_ptr + token_row[:, None] * K + cols_k[None, :], mask=(t[:, None] < T) & (cols_k[None, :] < K),
                other=0.0).to(tl.float32)
    g = tl.load(g_ptr + token_row, mask=t < T, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + token_row, mask=t < T, other=0.0).to(tl.float32)
    inverse_offsets = ((bh * NT + chunk) * BT + tokens)[:, None] * BT + tokens[None, :]
    tl.store(inverse_ptr + inverse_offsets, _chunk_inverse(k, tl.cumsum(g, 0), beta, PRECISION, BT))


@triton.jit
def _state_block(v0, K, V, BK: tl.constexpr, BV: tl.constexpr):
    """Offsets [BK, BV] of the value block starting at column v0 of a [K, V] state, and their mask."""
    cols_k = tl.arange(0, BK)
    cols_v = v0 + tl.arange(0, BV)
    return cols_k[:, None] * V + cols_v[None, :], (cols_k[:, None] < K) & (cols_v[None, :] < V)


@triton.jit
def _given_or_zeros(ptr, offsets, mask, GIVEN: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """A state block in fp32, loaded from ptr + offsets when GIVEN, else zeros."""
    block = tl.zeros([BK, BV], dtype=tl.float32)
    if GIVEN:
        block = tl.load(ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    return block


@triton.jit
def _chunk_forward(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, o_ptr, u_ptr, state,
                   b, h, bh, chunk, v0, scale, T, H, K, V, L, NT,
                   HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, WITH_STATE: tl.constexpr, SEPARATE_U: tl.constexpr,
                   PRECISION: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """One chunk from the state at its start, state [BK, BV] (taken as zero when not WITH_STATE): stores
    scale * o of its tokens at o_ptr ([B, T, H, V], any float dtype) and returns the state at its end.
    With SEPARATE_U the returned state leaves out the write k^T (exp(G_C - G) * u) of u, the values written
    after the erase, and u is stored at u_ptr ([B, T, H, V] fp32) when beta is given (else u = v)."""
    t0 = chunk * BT
    q, k, v, g, beta = _load_chunk(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, b, h, t0, v0, T, H, K, V, HAS_BETA, BT, BK, BV)
    tokens = tl.arange(0, BT)
    cols_v = v0 + tl.arange(0, BV)
    G = tl.cumsum(g, 0)
    G_last = tl.sum(g, 0)
    gamma = tl.exp(G)
    to_end = tl.exp(G_last - G)
    decay_incl = _masked_decay(G, tokens[:, None] >= tokens[None, :])
    decay_strict = _masked_decay(G, tokens[:, None] > tokens[None, :])
    if WITH_STATE:
        o = gamma[:, None] * tl.dot(q, state, input_precision=PRECISION)
        next_state = tl.exp(G_last) * state
    else:
        o = tl.zeros([BT, BV], dtype=tl.float32)
        next_state = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_BETA:
        rhs = beta[:, None] * v
        if WITH_STATE:
            rhs -= (beta * gamma)[:, None] * tl.dot(k, state, input_precision=PRECISION)
    # extra writes l = 0..L-1: key/value rows with the decay of their token and no erase of their own
    if HAS_EXTRA:
        for l in range(L):
            offsets_k, mask_k, offsets_v, mask_v = _extra_offsets(b, h, t0, v0, l, T, H, K, V, L, BT, BK, BV)
            ek = tl.load(ek_ptr + offsets_k, mask=mask_k, other=0.0).to(tl.float32)
            ev = tl.load(ev_ptr + offsets_v, mask=mask_v, other=0.0).to(tl.float32)
            o += tl.dot(decay_incl * tl.dot(q, tl.trans(ek), input_precision=PRECISION), ev, input_precision=PRECISION)
            next_state += tl.dot(tl.trans(ek * to_end[:, None]), ev, input_precision=PRECISION)
            if HAS_BETA:
                erase_seen = beta[:, None] * decay_strict * tl.dot(k, tl.trans(ek), input_precision=PRECISION)
                rhs -= tl.dot(erase_seen, ev, input_precision=PRECISION)
    if HAS_BETA:
        inverse = tl.load(inverse_ptr + ((bh * NT + chunk) * BT + tokens)[:, None] * BT + tokens[None, :])
        u = tl.dot(inverse, rhs, input_precision=PRECISION)  # [BT, BV]
    else:
        u = v
    o += tl.dot(decay_incl * tl.dot(q, tl.trans(k), input_precision=PRECISION), u, input_precision=PRECISION)
    t = t0 + tokens
    o_offsets = ((b * T + t) * H + h)[:, None] * V + cols_v[None, :]
    tl.store(o_ptr + o_offsets, (scale * o).to(o_ptr.dtype.element_ty), mask=(t[:, None] < T) & (cols_v[None, :] < V))
    if SEPARATE_U:
        if HAS_BETA:
            tl.store(u_ptr + o_offsets, u, mask=(t[:, None] < T) & (cols_v[None, :] < V))
    else:
        next_state += tl.dot(tl.trans(k * to_end[:, None]), u, input_precision=PRECISION)
    return next_state


@triton.jit
def _forward_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, s0_ptr, inverse_ptr,
                    o_ptr, final_ptr, chunk_states_ptr, scale, T, H, K, V, L, NT,
                    HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, HAS_INITIAL: tl.constexpr,
                    STORE_CHUNK_STATES: tl.constexpr, PRECISION: tl.constexpr,
                    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    v_block = tl.program_id(0)
    bh = tl.cast(tl.program_id(1), tl.int64)
    b = bh // H
    h = bh % H
    v0 = v_block * BV
    state_offsets, state_mask = _state_block(v0, K, V, BK, BV)  # [BK, BV]
    state = _given_or_zeros(s0_ptr + bh * K * V, state_offsets, state_mask, HAS_INITIAL, BK, BV)
    for n in range(NT):
        chunk = tl.cast(n, tl.int64)
        if STORE_CHUNK_STATES:
            tl.store(chunk_states_ptr + (bh * NT + chunk) * K * V + state_offsets, state, mask=state_mask)
        state = _chunk_forward(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, o_ptr, o_ptr, state,
                               b, h, bh, chunk, v0, scale, T, H, K, V, L, NT,
                               HAS_BETA, HAS_EXTRA, True, False, PRECISION, BT, BK, BV)
    tl.store(final_ptr + bh * K * V + state_offsets, state, mask=state_mask)


@triton.jit
def _partial_sum_slots(dq_ptr, dk_ptr, dg_ptr, dbeta_ptr, dek_ptr, v_block, B, T, H, K, L):
    """Value block v_block writes its partial sums of dq, dk, dg, dbeta and d(extra_k) at slot v_block."""
    tokens_total = tl.cast(v_block, tl.int64) * B * T * H
    return (dq_ptr + tokens_total * K, dk_ptr + tokens_total * K, dg_ptr + tokens_total, dbeta_ptr + tokens_total,
            dek_ptr + tokens_total * L * K)


@triton.jit
def _chunk_backward(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, do_ptr,
                    dq_ptr, dk_ptr, dv_ptr, dg_ptr, dbeta_ptr, dek_ptr, dev_ptr, state, d_state,
                    b, h, bh, chunk, v0, scale, T, H, K, V, L, NT,
                    HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, PRECISION: tl.constexpr,
                    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Gradients of one chunk's inputs, given the state at its start and d(state) at its end (both
    [BK, BV]) and d_o: stores them (key-side ones as this value block's partial sums) and returns
    d(state) at its start."""
    tokens = tl.arange(0, BT)
    inclusive = tokens[:, None] >= tokens[None, :]
    strict = tokens[:, None] > tokens[None, :]
    cols_k = tl.arange(0, BK)
    cols_v = v0 + tl.arange(0, BV)
    t0 = chunk * BT
    q, k, v, g, beta = _load_chunk(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, b, h, t0, v0, T, H, K, V, HAS_BETA, BT, BK, BV)
    t = t0 + tokens
    token_row = (b * T + t) * H + h
    mask_v = (t[:, None] < T) & (cols_v[None, :] < V)
    mask_k = (t[:, None] < T) & (cols_k[None, :] < K)
    d_o = scale * tl.load(do_ptr + token_row[:, None] * V + cols_v[None, :], mask=mask_v, other=0.0).to(tl.float32)
    G = tl.cumsum(g, 0)
    G_last = tl.sum(g, 0)
    gamma = tl.exp(G)
    to_end = tl.exp(G_last - G)
    decay_incl = _masked_decay(G, inclusive)
    decay_strict = _masked_decay(G, strict)
    # recompute u, the values written after the erase
    if HAS_BETA:
        kk = tl.dot(k, tl.trans(k), input_precision=PRECISION)
        A = beta[:, None] * decay_strict * kk
        ks = tl.dot(k, state, input_precision=PRECISION)  # [BT, BV]
        rhs = beta[:, None] * v - (beta * gamma)[:, None] * ks
        if HAS_EXTRA:
            for l in range(L):
                offsets_k, mask_ek, offsets_v, mask_ev = _extra_offsets(b, h, t0, v0, l, T, H, K, V, L, BT, BK, BV)
                ek = tl.load(ek_ptr + offsets_k, mask=mask_ek, other=0.0).to(tl.float32)
                ev = tl.load(ev_ptr + offsets_v, mask=mask_ev, other=0.0).to(tl.float32)
                rhs -= tl.dot(beta[:, None] * decay_strict * tl.dot(k, tl.trans(ek), input_precision=PRECISION), ev,
                              input_precision=PRECISION)
        inverse = tl.load(inverse_ptr + ((bh * NT + chunk) * BT + tokens)[:, None] * BT + tokens[None, :])
        u = tl.dot(inverse, rhs, input_precision=PRECISION)
    else:
        u = v
    # o = gamma * q S0 + (decay_incl * q k^T) u + sum_l (decay_incl * q ek_l^T) ev_l
    scores = decay_incl * tl.dot(q, tl.trans(k), input_precision=PRECISION)
    dq = gamma[:, None] * tl.dot(d_o, tl.trans(state), input_precision=PRECISION)
    dG = tl.sum(dq * q, 1)
    d_state_in = tl.dot(tl.trans(q * gamma[:, None]), d_o, input_precision=PRECISION)
    d_scores = tl.where(inclusive, tl.dot(d_o, tl.trans(u), input_precision=PRECISION), 0.0)
    du = tl.dot(tl.trans(scores), d_o, input_precision=PRECISION)
    z = d_scores * scores
    dG += tl.sum(z, 1) - tl.sum(z, 0)
    d_qk = d_scores * decay_incl
    dq += tl.dot(d_qk, k, input_precision=PRECISION)
    dk = tl.dot(tl.trans(d_qk), q, input_precision=PRECISION)
    # S1 = exp(G_last) S0 + k^T (to_end * u) + sum_l ek_l^T (to_end * ev_l)
    k_ds = tl.dot(k, d_state, input_precision=PRECISION)  # [BT, BV]
    dk += to_end[:, None] * tl.dot(u, tl.trans(d_state), input_precision=PRECISION)
    du += to_end[:, None] * k_ds
    z_end = to_end * tl.sum(k_ds * u, 1)
    dG -= z_end
    d_last = tl.exp(G_last) * tl.sum(tl.sum(state * d_state, 1), 0) + tl.sum(z_end, 0)
    d_state_in += tl.exp(G_last) * d_state
    # u = (I + A)^{-1} (beta v - beta gamma k S0 - sum_l (beta decay_strict k ek_l^T) ev_l)
    if HAS_BETA:
        d_rhs = tl.dot(tl.trans(inverse), du, input_precision=PRECISION)
        dA = -tl.where(strict, tl.dot(d_rhs, tl.trans(u), input_precision=PRECISION), 0.0)
        dv = beta[:, None] * d_rhs
        d_rhs_ks = tl.sum(d_rhs * ks, 1)
        dbeta = tl.sum(d_rhs * v, 1) - gamma * d_rhs_ks
        dG -= beta * gamma * d_rhs_ks
        dk -= (beta * gamma)[:, None] * tl.dot(d_rhs, tl.trans(state), input_precision=PRECISION)
        d_state_in -= tl.dot(tl.trans(k * (beta * gamma)[:, None]), d_rhs, input_precision=PRECISION)
        d_kk = dA * decay_strict * beta[:, None]
        dk += tl.dot(d_kk, k, input_precision=PRECISION) + tl.dot(tl.trans(d_kk), k, input_precision=PRECISION)
        dbeta += tl.sum(dA * decay_strict * kk, 1)
        za = dA * A
        dG += tl.sum(za, 1) - tl.sum(za, 0)
    else:
        dv = du
    if HAS_EXTRA:
        for l in range(L):
            offsets_k, mask_ek, offsets_v, mask_ev = _extra_offsets(b, h, t0, v0, l, T, H, K, V, L, BT, BK, BV)
            ek = tl.load(ek_ptr + offsets_k, mask=mask_ek, other=0.0).to(tl.float32)
            ev = tl.load(ev_ptr + offsets_v, mask=mask_ev, other=0.0).to(tl.float32)
            extra_scores = decay_incl * tl.dot(q, tl.trans(ek), input_precision=PRECISION)
            d_extra_scores = tl.where(inclusive, tl.dot(d_o, tl.trans(ev), input_precision=PRECISION), 0.0)
            dev = tl.dot(tl.trans(extra_scores), d_o, input_precision=PRECISION)
            zx = d_extra_scores * extra_scores
            dG += tl.sum(zx, 1) - tl.sum(zx, 0)
            d_qek = d_extra_scores * decay_incl
            dq += tl.dot(d_qek, ek, input_precision=PRECISION)
            dek = tl.dot(tl.trans(d_qek), q, input_precision=PRECISION)
            ek_ds = tl.dot(ek, d_state, input_precision=PRECISION)
            dek += to_end[:, None] * tl.dot(ev, tl.trans(d_state), input_precision=PRECISION)
            dev += to_end[:, None] * ek_ds
            z_end_extra = to_end * tl.sum(ek_ds * ev, 1)
            dG -= z_end_extra
            d_last += tl.sum(z_end_extra, 0)
            if HAS_BETA:
                kek = tl.dot(k, tl.trans(ek), input_precision=PRECISION)
                erase_seen = beta[:, None] * decay_strict * kek
                d_erase_seen = -tl.where(strict, tl.dot(d_rhs, tl.trans(ev), input_precision=PRECISION), 0.0)
                dev -= tl.dot(tl.trans(erase_seen), d_rhs, input_precision=PRECISION)
                d_kek = d_erase_seen * decay_strict * beta[:, None]
                dk += tl.dot(d_kek, ek, input_precision=PRECISION)
                dek += tl.dot(tl.trans(d_kek), k, input_precision=PRECISION)
                dbeta += tl.sum(d_erase_seen * decay_strict * kek, 1)
                zb = d_erase_seen * erase_seen
                dG += tl.sum(zb, 1) - tl.sum(zb, 0)
            tl.store(dek_ptr + offsets_k, dek.to(dek_ptr.dtype.element_ty), mask=mask_ek)
            tl.store(dev_ptr + offsets_v, dev.to(dev_ptr.dtype.element_ty), mask=mask_ev)
    if HAS_BETA:
        tl.store(dbeta_ptr + token_row, dbeta.to(dbeta_ptr.dtype.element_ty), mask=t < T)
    # G_t = g_1 + ... + g_t, so dg_s = sum_{t >= s} dG_t; G_last is the sum of every g in the chunk
    dg = tl.sum(dG, 0) - tl.cumsum(dG, 0) + dG + d_last
    tl.store(dq_ptr + token_row[:, None] * K + cols_k[None, :], dq.to(dq_ptr.dtype.element_ty), mask=mask_k)
    tl.store(dk_ptr + token_row[:, None] * K + cols_k[None, :], dk.to(dk_ptr.dtype.element_ty), mask=mask_k)
    tl.store(dv_ptr + token_row[:, None] * V + cols_v[None, :], dv.to(dv_ptr.dtype.element_ty), mask=mask_v)
    tl.store(dg_ptr + token_row, dg.to(dg_ptr.dtype.element_ty), mask=t < T)
    return d_state_in


@triton.jit
def _backward_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, chunk_states_ptr, inverse_ptr,
                     do_ptr, dfinal_ptr, dq_ptr, dk_ptr, dv_ptr, dg_ptr, dbeta_ptr, dek_ptr, dev_ptr, ds0_ptr,
                     scale, T, H, K, V, L, NT,
                     HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, HAS_DFINAL: tl.constexpr,
                     PRECISION: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    v_block = tl.program_id(0)
    bh = tl.cast(tl.program_id(1), tl.int64)
    b = bh // H
    h = bh % H
    v0 = v_block * BV
    dq_ptr, dk_ptr, dg_ptr, dbeta_ptr, dek_ptr = _partial_sum_slots(dq_ptr, dk_ptr, dg_ptr, dbeta_ptr, dek_ptr, v_block,
                                                                    tl.num_programs(1) // H, T, H, K, L)
    state_offsets, state_mask = _state_block(v0, K, V, BK, BV)
    d_state = _given_or_zeros(dfinal_ptr + bh * K * V, state_offsets, state_mask, HAS_DFINAL, BK, BV)
    for i in range(NT):
        chunk = tl.cast(NT - 1 - i, tl.int64)
        state = tl.load(chunk_states_ptr + (bh * NT + chunk) * K * V + state_offsets, mask=state_mask, other=0.0)
        d_state = _chunk_backward(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, do_ptr,
                                  dq_ptr, dk_ptr, dv_ptr, dg_ptr, dbeta_ptr, dek_ptr, dev_ptr, state, d_state,
                                  b, h, bh, chunk, v0, scale, T, H, K, V, L, NT,
                                  HAS_BETA, HAS_EXTRA, PRECISION, BT, BK, BV)
    tl.store(ds0_ptr + bh * K * V + state_offsets, d_state, mask=state_mask)


def _block_sizes(T, K, V):
    """Chunk length and padded key/value widths. Chunks of 16 at key width <= 64: on an H200,
    forward+backward at L=0 / L=3, they time 0.63 / 1.44 ms at (256, 200, 4, 32) against 1.43 / 11.2 ms
    with chunks of 32 (whose L>0 backward spills registers), 0.78 / 2.10 against 1.14 / 4.17 ms at
    (256, 200, 2, 64) and 3.06 / 7.85 against 3.24 / 11.98 ms at (64, 1024, 4, 64) (results/kernels.md);
    key width 128 was not timed and keeps chunks of 32."""
    BT = 16 if T <= 16 or K <= 64 else 32
    return BT, max(16, triton.next_power_of_2(K)), max(16, triton.next_power_of_2(V))


def _num_warps(BK, BV):
    return 4 if BK * BV <= 32 * 32 else 8


def _value_block(programs, BV, busy=264):
    """Split the value dimension until about ``busy`` programs run (default two per SM of an H100/H200,
    which has 132 SMs)."""
    while programs < busy and BV >= 64:
        BV //= 2
        programs *= 2
    return BV


# The value block that fits the GPU's shared memory, per (kernel, T's chunk, BK, BV asked for, L, flags):
# learnt from the first launch that is refused (fitting_value_block), so the refusal costs one try.
_FITTING_VALUE_BLOCKS: dict[tuple, int] = {}


def fitting_value_block(key: tuple, BV: int, launch):
    """``launch(BV)`` with the value block halved (down to 16) while Triton refuses it for want of shared
    memory (e.g. the L > 0 backward at key and value width 128 asks for 256 KiB, an H200 has 227 KiB); splitting
    the value dimension changes only which program sums which columns. Returns launch's result."""
    BV = _FITTING_VALUE_BLOCKS.get(key, BV)
    while True:
        try:
            result = launch(BV)
        except OutOfResources:
            if BV <= 16:
                raise
            BV //= 2
            continue
        _FITTING_VALUE_BLOCKS[key] = BV
        return result


def _on_input_device(function):
    """Launch the kernels on the CUDA device of the first tensor argument: Triton launches on the current
    device, which is cuda:0 unless set, so tensors on cuda:1 would otherwise fail or be read wrongly."""

    @functools.wraps(function)
    def launch(ctx, *args):
        tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
        on_cuda = tensor is not None and tensor.is_cuda
        with torch.cuda.device(tensor.device) if on_cuda else contextlib.nullcontext():
            return function(ctx, *args)

    return launch


KEY_SIDE_GRADS = (0, 1, 3, 4, 5)  # positions of dq, dk, dg, dbeta, d(extra_k) in (q, k, v, g, beta, extra_k, extra_v)


def _grad_buffers(inputs, value_blocks):
    """Gradient outputs of (q, k, v, g, beta, extra_k, extra_v), None where absent; the key-side ones with
    one fp32 slot of partial sums per value block when there are several."""
    def buffer(i, x):
        if x is None:
            return None
        if value_blocks > 1 and i in KEY_SIDE_GRADS:
            return x.new_empty(value_blocks, *x.shape, dtype=torch.float32)
        return torch.empty_like(x)

    return tuple(buffer(i, x) for i, x in enumerate(inputs))


def _summed_over_value_blocks(grads, inputs):
    """The key-side gradients' partial sums added up, in their inputs' dtypes."""
    return tuple(d.sum(0).to(x.dtype) if d is not None and d.dim() > x.dim() else d for d, x in zip(grads, inputs))


class _DeltaScanFunction(torch.autograd.Function):
    @staticmethod
    @_on_input_device
    def forward(ctx, q, k, v, g, beta, extra_k, extra_v, initial_state, scale, chunk_size, value_block):
        B, T, H, K = q.shape
        V = v.shape[-1]
        L = 0 if extra_k is None else extra_k.shape[3]
        BT, BK, BV = _block_sizes(T, K, V)
        BT = chunk_size or BT
        BV = value_block or _value_block(B * H, BV)
        NT = triton.cdiv(T, BT)
        q, k, v, g = (x.contiguous() for x in (q, k, v, g))
        beta, extra_k, extra_v, initial_state = (None if x is None else x.contiguous()
                                                 for x in (beta, extra_k, extra_v, initial_state))
        needs_grad = any(ctx.needs_input_grad[:8])
        o = torch.empty(B, T, H, V, device=q.device, dtype=v.dtype)
        final_state = torch.empty(B, H, K, V, device=q.device, dtype=torch.float32)
        chunk_states = torch.empty(B, H, NT, K, V, device=q.device, dtype=torch.float32) if needs_grad else final_state
        precision = "ieee" if q.dtype == torch.float32 else "tf32"
        inverses = final_state  # [B, H, NT, BT, BT] when beta is given
        if beta is not None:
            inverses = torch.empty(B, H, NT, BT, BT, device=q.device, dtype=torch.float32)
            _chunk_inverse_kernel[(NT, B * H)](k, g, beta, inverses, T, H, K, NT, PRECISION=precision, BT=BT, BK=BK,
                                               num_warps=4 if BT <= 32 else 8)

        def forward_launch(BV):
            _forward_kernel[(triton.cdiv(V, BV), B * H)](
                q, k, v, g, q if beta is None else beta, q if extra_k is None else extra_k,
                q if extra_v is None else extra_v, q if initial_state is None else initial_state, inverses, o,
                final_state, chunk_states, scale, T, H, K, V, L, NT,
                HAS_BETA=beta is not None, HAS_EXTRA=extra_k is not None, HAS_INITIAL=initial_state is not None,
                STORE_CHUNK_STATES=needs_grad, PRECISION=precision, BT=BT, BK=BK, BV=BV,
                num_warps=_num_warps(BK, BV))
            return BV

        BV = fitting_value_block(("forward", BT, BK, BV, L > 0, beta is not None, needs_grad, precision), BV,
                                 forward_launch)
        if needs_grad:
            ctx.save_for_backward(q, k, v, g, beta, extra_k, extra_v, chunk_states, inverses)
            ctx.config = (scale, BT, BK, BV, NT, precision, initial_state is not None)
        return o, final_state

    @staticmethod
    @_on_input_device
    def backward(ctx, d_o, d_final_state):
        q, k, v, g, beta, extra_k, extra_v, chunk_states, inverses = ctx.saved_tensors
        scale, BT, BK, BV, NT, precision, has_initial = ctx.config
        B, T, H, K = q.shape
        V = v.shape[-1]
        L = 0 if extra_k is None else extra_k.shape[3]
        inputs = (q, k, v, g, beta, extra_k, extra_v)
        d_initial = torch.empty(B, H, K, V, device=q.device, dtype=torch.float32)

        def backward_launch(BV):
            value_blocks = triton.cdiv(V, BV)
            dq, dk, dv, dg, dbeta, dek, dev = grads = _grad_buffers(inputs, value_blocks)
            _backward_kernel[(value_blocks, B * H)](
                q, k, v, g, q if beta is None else beta, q if extra_k is None else extra_k,
                q if extra_v is None else extra_v,
                chunk_states, inverses, d_o.contiguous(), d_o if d_final_state is None else d_final_state.contiguous(),
                dq, dk, dv, dg, dq if dbeta is None else dbeta, dq if dek is None else dek, dq if dev is None else dev,
                d_initial, scale, T, H, K, V, L, NT,
                HAS_BETA=beta is not None, HAS_EXTRA=extra_k is not None, HAS_DFINAL=d_final_state is not None,
                PRECISION=precision, BT=BT, BK=BK, BV=BV, num_warps=_num_warps(BK, BV))
            return grads

        grads = fitting_value_block(("backward", BT, BK, BV, L > 0, beta is not None, d_final_state is not None,
                                     precision), BV, backward_launch)
        return (*_summed_over_value_blocks(grads, inputs), d_initial if has_initial else None, None, None, None)


def triton_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state, chunk_size=None, value_block=None):
    """Fused Triton scan; returns (o [B, T, H, V] in v's dtype, S_T [B, H, K, V] fp32).

    chunk_size and value_block (a power of two >= 16) override the automatic block sizes."""
    return _DeltaScanFunction.apply(q, k, v, g, beta, extra_k, extra_v, initial_state, scale, chunk_size, value_block)
