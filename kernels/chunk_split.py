"""Chunk-split Triton delta scan: the forward and the backward split into separate kernels by what they
compute, as fla's chunked Gated DeltaNet splits them; chunks of 64 by default; PRISM's rank-L extra writes
included (kernels/naive.py is the executable specification, kernels/chunk.py derives the chunk form).

Per chunk of C tokens (G the cumulative log-decay inside it, gamma = exp(G), G_C its last value,
D[t, s] = exp(G_t - G_s)), with h the state at the chunk's start and h' at its end:

    A    [C, C]  = beta_t D[t, s] (k_t . k_s), s < t            T = (I + A)^{-1}
    Bx_l [C, C]  = beta_t D[t, s] (k_t . ek_{s,l}), s < t       (the extra writes the erase sees)
    w    [C, K]  = T (beta gamma k)                             u [C, V] = T (beta v - sum_l Bx_l ev_l)
    v_new        = u - w h                                      (the values written after the erase)
    o            = scale (gamma q h + (M D q k^T) v_new + sum_l (M D q ek_l^T) ev_l), M: s <= t
    h'           = exp(G_C) h + (exp(G_C - G) k)^T v_new + E,   E = sum_l (exp(G_C - G) ek_l)^T ev_l

Without beta (SSD / gated linear attention) A = Bx = 0, w = 0 and u = v.

Forward: `_wy_forward_kernel` (grid chunks x B*H: G, T, w, u, E; A from one k k^T product per key block,
T on its 16 x 16 blocks: forward substitution inside the diagonal ones, then block substitution
T_ij = -T_ii sum_m A_im T_mj, through the inverse's buffer; CUDA-core fp32 products on 16 x 16 tiles only;
results/kernel_profile.md section 5), `_state_forward_kernel` (grid value blocks x B*H, sequential over
chunks: h at every chunk start and v_new), `_output_kernel` (grid value blocks x
chunks x B*H: o). Backward, dh' being the gradient of a chunk's end state: `_local_value_grad_kernel`
(scale (M D q k^T)^T do), `_state_backward_kernel` (sequential in reverse: dv_new = that + (exp(G_C - G) k)
dh', dh = exp(G_C) dh' + scale (gamma q)^T do - w^T dv_new), `_key_grads_kernel` (grid key blocks x chunks
x B*H: dq, dw = -dv_new h^T and the parts of dk, d(extra_k) and dG through o and h'),
`_extra_value_grads_kernel` (L > 0: d(extra_v) through o and h'), `_wy_backward_kernel` (back through
w = T X, u = T Y and T, with X = beta gamma k, Y = beta v - sum_l Bx_l ev_l and dA = -T^T (dw X^T +
dv_new Y^T) T^T: the rest of dk, d(extra_k), d(extra_v), dv, dbeta, and dg as the reverse cumulative sum
of dG inside the chunk). The extra writes add loops over l to the parallel kernels only; the sequential
passes read E.

Kept between kernels in the inputs' dtype (as fla keeps them): w and h; in fp32: G, T, u and v_new (in
bf16 they raised the error of o with bf16 inputs most; results/kernels.md, chunk_split section), E, the
final state and every gradient part that a later kernel adds to; the kernel that completes an input's gradient
stores it in that input's dtype. Products take their operands in the inputs' dtype with fp32
accumulation (bf16 tensor cores for bf16 inputs, full fp32 for fp32 inputs); the products with T
(w, u and their gradients) take fp32 operands (tf32 for bf16 inputs), off the sequential passes.
"""

import os

import torch
import triton
import triton.language as tl

from .triton_chunk import (
    _given_or_zeros,
    _masked_decay,
    _on_input_device,
    _state_block,
    _unit_lower_inverse,
    _value_block,
)

CHUNK = 64
CHUNKS = (16, 32, 64)  # whole 16 x 16 blocks of the inverse, at most 4 x 4 of them
# Launch sizes, chosen from ptxas -v for sm_90a (bf16, head width 128; not timed; the table is in
# results/kernels.md, chunk_split section): the sequential passes spill least with value blocks of 32 and
# 4 warps, as fla's state pass does in its best configuration there, so they split the value width until
# about SEQUENTIAL_PROGRAMS programs; the parallel kernels take 8 warps (with 4 the gradient and WY kernels
# spill several times more).
SEQUENTIAL_PROGRAMS = 256
SEQUENTIAL_WARPS = 4
SEQUENTIAL_STAGES = 2
PARALLEL_WARPS = 8
# Pipelining stages of the parallel kernels by the inputs' element size, from Triton's shared-memory count for
# sm_90a (benchmarks/kernel_resources.py; results/kernels.md, chunk_split section): 3 (Triton's default) for
# bf16 / fp16; fp32 inputs take 2, as with 3 `_wy_backward_kernel` needs more than the H200's 227 KB at L = 3.
PARALLEL_STAGES = {2: 3, 4: 2}
# Key and value widths below 64 are padded to 64 (masked): at key width 32 with extra writes the kernels hit
# an illegal address on the H200 (Triton 3.6) that the interpreter, with every tensor fenced by NaN, does not
# show (tests/kernels/test_chunk_split.py); Triton's Hopper dot code is known to fault with several dots of
# widths 16 or 32 in one kernel (results/kernels.md, chunk_split section). Block overrides below 64 stay allowed.
MIN_DOT_WIDTH = 64


@triton.jit
def _tile(ptr, row0, step, t0, T, width, col0, BT: tl.constexpr, BW: tl.constexpr):
    """Pointers and mask of columns col0..col0+BW of the rows row0 + i * step (token t0 + i, i < BT) of a
    [.., width] tensor: the int64 part is a scalar, the tile's offsets are int32 (fewer registers)."""
    tokens = tl.arange(0, BT)
    cols = tl.arange(0, BW)
    pointers = ptr + (row0 * width + col0) + ((tokens * step)[:, None] * width + cols[None, :])
    return pointers, (t0 + tokens < T)[:, None] & (col0 + cols < width)[None, :]


@triton.jit
def _rows(ptr, row0, step, t0, T, width, col0, BT: tl.constexpr, BW: tl.constexpr):
    """The [BT, BW] tile of `_tile`, zero past T and width."""
    pointers, mask = _tile(ptr, row0, step, t0, T, width, col0, BT, BW)
    return tl.load(pointers, mask=mask, other=0.0)


@triton.jit
def _store_rows(ptr, row0, step, t0, T, width, col0, x, BT: tl.constexpr, BW: tl.constexpr):
    pointers, mask = _tile(ptr, row0, step, t0, T, width, col0, BT, BW)
    tl.store(pointers, x.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _mm(a, b, DT: tl.constexpr, PRECISION: tl.constexpr):
    """a @ b with both operands in DT (`_dot_dtype`), accumulated in fp32."""
    return tl.dot(a.to(DT), b.to(DT), input_precision=PRECISION)


@triton.jit
def _chunk_rows(bh, chunk, T, H, BT: tl.constexpr):
    """A chunk's first token t0 and its row row0 = (b * T + t0) * H + h (int64 scalars), and the tokens t
    [BT] and rows of the chunk (some past T in the last one)."""
    b = bh // H
    h = bh % H
    t0 = chunk * BT
    row0 = (b * T + t0) * H + h
    t = t0 + tl.arange(0, BT)
    return t0, row0, t, row0 + tl.arange(0, BT) * H


@triton.jit
def _chunk_G(G_ptr, bh, chunk, T, H, BT: tl.constexpr):
    """`_chunk_rows`, then G [BT] (G_C past T, so no decay there exceeds 1), G_C and the chunk's last token."""
    t0, row0, t, row = _chunk_rows(bh, chunk, T, H, BT)
    last = tl.minimum(t0 + BT, T) - 1
    G_last = tl.load(G_ptr + row0 + (last - t0) * H)
    G = tl.where(t < T, tl.load(G_ptr + row, mask=t < T, other=0.0), G_last)
    return t0, row0, t, row, G, G_last, last


@triton.jit
def _block(inverse_ptr, I: tl.constexpr, J: tl.constexpr, BT: tl.constexpr):
    """Pointers of block (I, J) [16, 16] of a chunk's [BT, BT] inverse."""
    tokens = tl.arange(0, 16)
    return inverse_ptr + (I * 16 + tokens)[:, None] * BT + (J * 16 + tokens)[None, :]


@triton.jit
def _blocked_inverse(k_ptr, inverse_ptr, row0, t0, T, beta, decay_strict, H: tl.constexpr, K: tl.constexpr,
                     DT: tl.constexpr, PRECISION: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """T = (I + A)^{-1} of a chunk into inverse_ptr [BT, BT], on 16 x 16 blocks kept in that buffer between
    steps (decay_strict [BT, BT]: D[t, s] for s < t, else 0). A [BT, BT] comes from one k k^T product per key
    block and is stored at once, its block A_im (i > m) waiting in the upper block (m, i); then
    D_i = (I + A_ii)^{-1} by forward substitution, and block rows in order, T_ij = -D_i sum_{m=j}^{i-1} A_im T_mj;
    the upper blocks are zeroed at the end."""
    NB: tl.constexpr = BT // 16
    tokens = tl.arange(0, BT)
    kk = tl.zeros([BT, BT], dtype=tl.float32)
    for kb in range(tl.cdiv(K, BK)):
        k = _rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
        kk += _mm(k, tl.trans(k), DT, PRECISION)
    A = beta[:, None] * decay_strict * kk
    row_block = tokens[:, None] // 16
    col_block = tokens[None, :] // 16
    lower = row_block > col_block
    rows = tl.where(lower, col_block * 16 + tokens[:, None] % 16, tokens[:, None])
    cols = tl.where(lower, row_block * 16 + tokens[None, :] % 16, tokens[None, :])
    tl.store(inverse_ptr + rows * BT + cols, A, mask=row_block >= col_block)
    tl.debug_barrier()
    for i in tl.static_range(NB):
        diagonal = tl.load(_block(inverse_ptr, i, i, BT))
        tl.debug_barrier()  # every thread has read the block before it is overwritten
        tl.store(_block(inverse_ptr, i, i, BT), _unit_lower_inverse(diagonal, 16))
    tl.debug_barrier()
    for i in tl.static_range(1, NB):
        diagonal_inverse = tl.load(_block(inverse_ptr, i, i, BT))
        for j in tl.static_range(i):
            total = tl.zeros([16, 16], dtype=tl.float32)
            for m in tl.static_range(j, i):
                total += tl.dot(tl.load(_block(inverse_ptr, m, i, BT)), tl.load(_block(inverse_ptr, m, j, BT)),
                                input_precision="ieee")
            tl.store(_block(inverse_ptr, i, j, BT), -tl.dot(diagonal_inverse, total, input_precision="ieee"))
        tl.debug_barrier()  # block row i complete before the next reads it, and the A blocks read
    for i in tl.static_range(1, NB):
        for m in tl.static_range(i):
            tl.store(_block(inverse_ptr, m, i, BT), tl.zeros([16, 16], dtype=tl.float32))
    tl.debug_barrier()


@triton.jit
def _wy_forward_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, G_ptr, inverse_ptr, w_ptr, u_ptr,
                       extra_state_ptr, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, NT,
                       HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, DT: tl.constexpr, PRECISION: tl.constexpr,
                       BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Per chunk: G; with beta T [BT, BT], w and u; with extra writes E [K, V]. Key and value widths are
    walked in blocks of BK and BV."""
    chunk = tl.cast(tl.program_id(0), tl.int64)
    bh = tl.cast(tl.program_id(1), tl.int64)
    tokens = tl.arange(0, BT)
    t0, row0, t, row = _chunk_rows(bh, chunk, T, H, BT)
    g = tl.load(g_ptr + row, mask=t < T, other=0.0).to(tl.float32)
    G = tl.cumsum(g, 0)  # past T: G_C (g = 0 there)
    tl.store(G_ptr + row, G, mask=t < T)
    if HAS_BETA:
        chunk_inverse_ptr = inverse_ptr + (bh * NT + chunk) * BT * BT
        beta = tl.load(beta_ptr + row, mask=t < T, other=0.0).to(tl.float32)
        decay_strict = _masked_decay(G, tokens[:, None] > tokens[None, :])
        _blocked_inverse(k_ptr, chunk_inverse_ptr, row0, t0, T, beta, decay_strict, H, K, DT, PRECISION, BT, BK)
        inverse = tl.load(chunk_inverse_ptr + tokens[:, None] * BT + tokens[None, :])
        for kb in range(tl.cdiv(K, BK)):
            k = _rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK).to(tl.float32)
            w = tl.dot(inverse, (beta * tl.exp(G))[:, None] * k, input_precision=PRECISION)
            _store_rows(w_ptr, row0, H, t0, T, K, kb * BK, w, BT, BK)
        for vb in range(tl.cdiv(V, BV)):
            y = beta[:, None] * _rows(v_ptr, row0, H, t0, T, V, vb * BV, BT, BV).to(tl.float32)  # [BT, BV]
            if HAS_EXTRA:
                for l in range(L):
                    kek = tl.zeros([BT, BT], dtype=tl.float32)
                    for kb in range(tl.cdiv(K, BK)):
                        ek = _rows(ek_ptr, row0 * L + l, H * L, t0, T, K, kb * BK, BT, BK)
                        kek += _mm(_rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK), tl.trans(ek), DT, PRECISION)
                    ev = _rows(ev_ptr, row0 * L + l, H * L, t0, T, V, vb * BV, BT, BV)
                    y -= _mm(beta[:, None] * decay_strict * kek, ev, DT, PRECISION)
            _store_rows(u_ptr, row0, H, t0, T, V, vb * BV, tl.dot(inverse, y, input_precision=PRECISION), BT, BV)
    if HAS_EXTRA:
        to_end = tl.exp(tl.sum(g, 0) - G)
        for kb in range(tl.cdiv(K, BK)):
            for vb in range(tl.cdiv(V, BV)):
                extra_state = tl.zeros([BK, BV], dtype=tl.float32)
                for l in range(L):
                    ev = _rows(ev_ptr, row0 * L + l, H * L, t0, T, V, vb * BV, BT, BV)
                    ek = _rows(ek_ptr, row0 * L + l, H * L, t0, T, K, kb * BK, BT, BK)
                    extra_state += _mm(tl.trans(ek), ev.to(tl.float32) * to_end[:, None], DT, PRECISION)
                offsets, mask = _state_block(vb * BV, K, V, BK, BV)
                tl.store(extra_state_ptr + (bh * NT + chunk) * K * V + kb * BK * V + offsets, extra_state,
                         mask=mask & (kb * BK + tl.arange(0, BK) < K)[:, None])


@triton.jit
def _state_forward_kernel(k_ptr, u_ptr, w_ptr, G_ptr, extra_state_ptr, s0_ptr, states_ptr, v_new_ptr, final_ptr,
                          T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, NT, HAS_BETA: tl.constexpr,
                          HAS_EXTRA: tl.constexpr, HAS_INITIAL: tl.constexpr, DT: tl.constexpr, PRECISION: tl.constexpr,
                          BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """The sequential pass over chunks: h at every chunk start, v_new = u - w h, the final state; BK covers
    the whole key width. u_ptr is v itself without beta."""
    v0 = tl.program_id(0) * BV
    bh = tl.cast(tl.program_id(1), tl.int64)
    state_offsets, state_mask = _state_block(v0, K, V, BK, BV)  # [BK, BV]
    state = _given_or_zeros(s0_ptr + bh * K * V, state_offsets, state_mask, HAS_INITIAL, BK, BV)
    for n in range(NT):
        chunk = tl.cast(n, tl.int64)
        base = (bh * NT + chunk) * K * V
        tl.store(states_ptr + base + state_offsets, state.to(states_ptr.dtype.element_ty), mask=state_mask)
        t0, row0, t, row, G, G_last, _ = _chunk_G(G_ptr, bh, chunk, T, H, BT)
        v_new = _rows(u_ptr, row0, H, t0, T, V, v0, BT, BV).to(tl.float32)
        if HAS_BETA:
            v_new -= _mm(_rows(w_ptr, row0, H, t0, T, K, 0, BT, BK), state, DT, PRECISION)
        _store_rows(v_new_ptr, row0, H, t0, T, V, v0, v_new, BT, BV)
        # (exp(G_C - G) k)^T v_new as k^T (exp(G_C - G) v_new): the narrower tile is scaled
        state = tl.exp(G_last) * state + _mm(tl.trans(_rows(k_ptr, row0, H, t0, T, K, 0, BT, BK)),
                                             v_new * tl.exp(G_last - G)[:, None], DT, PRECISION)
        if HAS_EXTRA:
            state += tl.load(extra_state_ptr + base + state_offsets, mask=state_mask, other=0.0)
    tl.store(final_ptr + bh * K * V + state_offsets, state, mask=state_mask)


@triton.jit
def _output_kernel(q_ptr, k_ptr, ek_ptr, ev_ptr, G_ptr, states_ptr, v_new_ptr, o_ptr, scale,
                   T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, NT, HAS_EXTRA: tl.constexpr,
                   DT: tl.constexpr, PRECISION: tl.constexpr,
                   BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Per chunk and value block: o = scale (gamma q h + (M D q k^T) v_new + sum_l (M D q ek_l^T) ev_l)."""
    v0 = tl.program_id(0) * BV
    chunk = tl.cast(tl.program_id(1), tl.int64)
    bh = tl.cast(tl.program_id(2), tl.int64)
    tokens = tl.arange(0, BT)
    t0, row0, t, row, G, _, _ = _chunk_G(G_ptr, bh, chunk, T, H, BT)
    decay_incl = _masked_decay(G, tokens[:, None] >= tokens[None, :])
    base = (bh * NT + chunk) * K * V
    o = tl.zeros([BT, BV], dtype=tl.float32)
    scores = tl.zeros([BT, BT], dtype=tl.float32)
    for kb in range(tl.cdiv(K, BK)):
        q = _rows(q_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
        offsets, mask = _state_block(v0, K, V, BK, BV)
        state = tl.load(states_ptr + base + kb * BK * V + offsets,
                        mask=mask & (kb * BK + tl.arange(0, BK) < K)[:, None], other=0.0)
        o += _mm(q, state, DT, PRECISION)
        scores += _mm(q, tl.trans(_rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK)), DT, PRECISION)
    v_new = _rows(v_new_ptr, row0, H, t0, T, V, v0, BT, BV)
    o = tl.exp(G)[:, None] * o + _mm(decay_incl * scores, v_new, DT, PRECISION)
    if HAS_EXTRA:
        for l in range(L):
            extra_scores = tl.zeros([BT, BT], dtype=tl.float32)
            for kb in range(tl.cdiv(K, BK)):
                ek = _rows(ek_ptr, row0 * L + l, H * L, t0, T, K, kb * BK, BT, BK)
                extra_scores += _mm(_rows(q_ptr, row0, H, t0, T, K, kb * BK, BT, BK), tl.trans(ek), DT, PRECISION)
            o += _mm(decay_incl * extra_scores, _rows(ev_ptr, row0 * L + l, H * L, t0, T, V, v0, BT, BV), DT, PRECISION)
    _store_rows(o_ptr, row0, H, t0, T, V, v0, scale * o, BT, BV)


@triton.jit
def _local_value_grad_kernel(q_ptr, k_ptr, G_ptr, do_ptr, dv_ptr, scale, T, H: tl.constexpr, K: tl.constexpr,
                             V: tl.constexpr, DT: tl.constexpr, PRECISION: tl.constexpr,
                             BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Per chunk and value block: the gradient of v_new through the chunk's own outputs, scale (M D q k^T)^T do."""
    v0 = tl.program_id(0) * BV
    chunk = tl.cast(tl.program_id(1), tl.int64)
    bh = tl.cast(tl.program_id(2), tl.int64)
    tokens = tl.arange(0, BT)
    t0, row0, t, row, G, _, _ = _chunk_G(G_ptr, bh, chunk, T, H, BT)
    kq = tl.zeros([BT, BT], dtype=tl.float32)
    for kb in range(tl.cdiv(K, BK)):
        q = _rows(q_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
        kq += _mm(_rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK), tl.trans(q), DT, PRECISION)
    scores_t = tl.trans(_masked_decay(G, tokens[:, None] >= tokens[None, :])) * kq
    d_o = _rows(do_ptr, row0, H, t0, T, V, v0, BT, BV)
    _store_rows(dv_ptr, row0, H, t0, T, V, v0, scale * _mm(scores_t, d_o, DT, PRECISION), BT, BV)


@triton.jit
def _state_backward_kernel(q_ptr, k_ptr, w_ptr, G_ptr, do_ptr, dfinal_ptr, dv_ptr, d_states_ptr, ds0_ptr, scale,
                           T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, NT, HAS_BETA: tl.constexpr,
                           HAS_DFINAL: tl.constexpr, DT: tl.constexpr, PRECISION: tl.constexpr,
                           BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """The sequential pass in reverse: dh' of every chunk, dv_new (dv_ptr holds the local part on entry) and
    dh0; BK covers the whole key width."""
    v0 = tl.program_id(0) * BV
    bh = tl.cast(tl.program_id(1), tl.int64)
    state_offsets, state_mask = _state_block(v0, K, V, BK, BV)
    d_state = _given_or_zeros(dfinal_ptr + bh * K * V, state_offsets, state_mask, HAS_DFINAL, BK, BV)
    for i in range(NT):
        chunk = tl.cast(NT - 1 - i, tl.int64)
        tl.store(d_states_ptr + (bh * NT + chunk) * K * V + state_offsets,
                 d_state.to(d_states_ptr.dtype.element_ty), mask=state_mask)
        t0, row0, t, row, G, G_last, _ = _chunk_G(G_ptr, bh, chunk, T, H, BT)
        dv = (_rows(dv_ptr, row0, H, t0, T, V, v0, BT, BV)
              + tl.exp(G_last - G)[:, None] * _mm(_rows(k_ptr, row0, H, t0, T, K, 0, BT, BK), d_state, DT, PRECISION))
        _store_rows(dv_ptr, row0, H, t0, T, V, v0, dv, BT, BV)
        d_o = _rows(do_ptr, row0, H, t0, T, V, v0, BT, BV).to(tl.float32) * (scale * tl.exp(G))[:, None]
        q = _rows(q_ptr, row0, H, t0, T, K, 0, BT, BK)
        d_state = tl.exp(G_last) * d_state + _mm(tl.trans(q), d_o, DT, PRECISION)
        if HAS_BETA:
            d_state -= _mm(tl.trans(_rows(w_ptr, row0, H, t0, T, K, 0, BT, BK)), dv, DT, PRECISION)
    tl.store(ds0_ptr + bh * K * V + state_offsets, d_state, mask=state_mask)


@triton.jit
def _key_grads_kernel(q_ptr, k_ptr, ek_ptr, ev_ptr, G_ptr, states_ptr, d_states_ptr, v_new_ptr, dv_ptr, do_ptr,
                      dq_ptr, dk_ptr, dw_ptr, dG_ptr, dek_ptr, scale,
                      T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, NT,
                      HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, DT: tl.constexpr, PRECISION: tl.constexpr,
                      BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Per key block and chunk: dq; the parts of dk and d(extra_k) through o and h'; with beta
    dw = -dv_new h^T; this key block's share of dG (before the cumulative sum). A product's share of dG is
    sum_s Z[t, s] - sum_s Z[s, t] with Z = dP * P, P = M D (q k^T), which is q_t . (dP D k)_t - k_t . ((dP D)^T q)_t:
    a sum over key blocks, so the scores themselves are never formed."""
    k_block = tl.program_id(0)
    k0 = k_block * BK
    chunk = tl.cast(tl.program_id(1), tl.int64)
    bh = tl.cast(tl.program_id(2), tl.int64)
    tokens = tl.arange(0, BT)
    inclusive = tokens[:, None] >= tokens[None, :]
    t0, row0, t, row, G, G_last, last = _chunk_G(G_ptr, bh, chunk, T, H, BT)
    to_end = tl.exp(G_last - G)
    decay_incl = _masked_decay(G, inclusive)
    base = (bh * NT + chunk) * K * V + k0 * V
    key_in = (k0 + tl.arange(0, BK) < K)[:, None]
    q = _rows(q_ptr, row0, H, t0, T, K, k0, BT, BK)
    k = _rows(k_ptr, row0, H, t0, T, K, k0, BT, BK)
    dq = tl.zeros([BT, BK], dtype=tl.float32)
    dk = tl.zeros([BT, BK], dtype=tl.float32)
    dw = tl.zeros([BT, BK], dtype=tl.float32)
    d_scores = tl.zeros([BT, BT], dtype=tl.float32)
    state_dot = tl.zeros([BK], dtype=tl.float32)  # rows of sum(h * dh')
    for vb in range(tl.cdiv(V, BV)):
        offsets, mask = _state_block(vb * BV, K, V, BK, BV)
        state = tl.load(states_ptr + base + offsets, mask=mask & key_in, other=0.0)
        d_state = tl.load(d_states_ptr + base + offsets, mask=mask & key_in, other=0.0)
        d_o = _rows(do_ptr, row0, H, t0, T, V, vb * BV, BT, BV)
        v_new = _rows(v_new_ptr, row0, H, t0, T, V, vb * BV, BT, BV)
        dq += _mm(d_o, tl.trans(state), DT, PRECISION)
        d_scores += _mm(d_o, tl.trans(v_new), DT, PRECISION)
        dk += _mm(v_new, tl.trans(d_state), DT, PRECISION)
        if HAS_BETA:
            dw -= _mm(_rows(dv_ptr, row0, H, t0, T, V, vb * BV, BT, BV), tl.trans(state), DT, PRECISION)
        state_dot += tl.sum(state.to(tl.float32) * d_state.to(tl.float32), 1)
    # o: scale gamma q h; h': exp(G_C) h + (exp(G_C - G) k)^T v_new
    dq *= (scale * tl.exp(G))[:, None]
    dG = tl.sum(dq * q.to(tl.float32), 1)
    dk *= to_end[:, None]
    z_end = tl.sum(dk * k.to(tl.float32), 1)
    dG -= z_end
    d_last = tl.exp(G_last) * tl.sum(state_dot, 0) + tl.sum(z_end, 0)
    # o: scale (M D q k^T) v_new
    d_qk = scale * tl.where(inclusive, d_scores, 0.0) * decay_incl
    dq_intra = _mm(d_qk, k, DT, PRECISION)
    dk_intra = _mm(tl.trans(d_qk), q, DT, PRECISION)
    dG += tl.sum(dq_intra * q.to(tl.float32), 1) - tl.sum(dk_intra * k.to(tl.float32), 1)
    dq += dq_intra
    dk += dk_intra
    if HAS_EXTRA:
        for l in range(L):
            ek = _rows(ek_ptr, row0 * L + l, H * L, t0, T, K, k0, BT, BK)
            d_extra = tl.zeros([BT, BT], dtype=tl.float32)
            dek = tl.zeros([BT, BK], dtype=tl.float32)
            for vb in range(tl.cdiv(V, BV)):
                offsets, mask = _state_block(vb * BV, K, V, BK, BV)
                d_state = tl.load(d_states_ptr + base + offsets, mask=mask & key_in, other=0.0)
                ev = _rows(ev_ptr, row0 * L + l, H * L, t0, T, V, vb * BV, BT, BV)
                d_extra += _mm(_rows(do_ptr, row0, H, t0, T, V, vb * BV, BT, BV), tl.trans(ev), DT, PRECISION)
                dek += _mm(ev, tl.trans(d_state), DT, PRECISION)
            dek *= to_end[:, None]
            z_end = tl.sum(dek * ek.to(tl.float32), 1)
            dG -= z_end
            d_last += tl.sum(z_end, 0)
            d_qek = scale * tl.where(inclusive, d_extra, 0.0) * decay_incl
            dq_extra = _mm(d_qek, ek, DT, PRECISION)
            dek_intra = _mm(tl.trans(d_qek), q, DT, PRECISION)
            dG += tl.sum(dq_extra * q.to(tl.float32), 1) - tl.sum(dek_intra * ek.to(tl.float32), 1)
            dq += dq_extra
            _store_rows(dek_ptr, row0 * L + l, H * L, t0, T, K, k0, dek + dek_intra, BT, BK)
    dG += tl.where(t == last, d_last, 0.0)  # G_C is the last token's G
    _store_rows(dq_ptr, row0, H, t0, T, K, k0, dq, BT, BK)
    _store_rows(dk_ptr, row0, H, t0, T, K, k0, dk, BT, BK)
    if HAS_BETA:
        _store_rows(dw_ptr, row0, H, t0, T, K, k0, dw, BT, BK)
    tl.store(dG_ptr + k_block * (tl.num_programs(2) // H) * T * H + row, dG, mask=t < T)


@triton.jit
def _extra_value_grads_kernel(q_ptr, ek_ptr, ev_ptr, G_ptr, d_states_ptr, do_ptr, dev_ptr, scale,
                              T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, NT,
                              DT: tl.constexpr, PRECISION: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                              BV: tl.constexpr):
    """Per value block and chunk: d(extra_v) through o and h', scale (M D q ek_l^T)^T do + (exp(G_C - G) ek_l) dh'."""
    v0 = tl.program_id(0) * BV
    chunk = tl.cast(tl.program_id(1), tl.int64)
    bh = tl.cast(tl.program_id(2), tl.int64)
    tokens = tl.arange(0, BT)
    t0, row0, t, row, G, G_last, _ = _chunk_G(G_ptr, bh, chunk, T, H, BT)
    decay_incl_t = tl.trans(_masked_decay(G, tokens[:, None] >= tokens[None, :]))
    base = (bh * NT + chunk) * K * V
    d_o = _rows(do_ptr, row0, H, t0, T, V, v0, BT, BV)
    for l in range(L):
        ekq = tl.zeros([BT, BT], dtype=tl.float32)
        through_state = tl.zeros([BT, BV], dtype=tl.float32)
        for kb in range(tl.cdiv(K, BK)):
            ek = _rows(ek_ptr, row0 * L + l, H * L, t0, T, K, kb * BK, BT, BK)
            ekq += _mm(ek, tl.trans(_rows(q_ptr, row0, H, t0, T, K, kb * BK, BT, BK)), DT, PRECISION)
            offsets, mask = _state_block(v0, K, V, BK, BV)
            d_state = tl.load(d_states_ptr + base + kb * BK * V + offsets,
                              mask=mask & (kb * BK + tl.arange(0, BK) < K)[:, None], other=0.0)
            through_state += _mm(ek, d_state, DT, PRECISION)
        dev = scale * _mm(decay_incl_t * ekq, d_o, DT, PRECISION) + tl.exp(G_last - G)[:, None] * through_state
        _store_rows(dev_ptr, row0 * L + l, H * L, t0, T, V, v0, dev, BT, BV)


@triton.jit
def _wy_backward_kernel(k_ptr, v_ptr, beta_ptr, ek_ptr, ev_ptr, G_ptr, inverse_ptr, dw_ptr, dv_new_ptr, dG_ptr,
                        dk_ptr, dek_ptr, dev_ptr, dk_out_ptr, dek_out_ptr, dev_out_ptr, dv_ptr, dbeta_ptr, dg_ptr,
                        T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, L: tl.constexpr, NT, NK,
                        HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, DT: tl.constexpr, PRECISION: tl.constexpr,
                        BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Per chunk, with beta: back through w = T X, u = T Y and T = (I + A)^{-1} (adding to the fp32 parts of dk,
    d(extra_k), d(extra_v) that the earlier kernels wrote and storing the sums in the *_out tensors, in their
    inputs' dtypes; writing dv and dbeta); always: dg, the reverse cumulative sum inside the chunk of dG (the NK
    key blocks' shares of `_key_grads_kernel` and this kernel's)."""
    chunk = tl.cast(tl.program_id(0), tl.int64)
    bh = tl.cast(tl.program_id(1), tl.int64)
    t0, row0, t, row, G, _, _ = _chunk_G(G_ptr, bh, chunk, T, H, BT)
    dG = tl.zeros([BT], dtype=tl.float32)
    for kb in range(NK):
        dG += tl.load(dG_ptr + kb * (tl.num_programs(1) // H) * T * H + row, mask=t < T, other=0.0)
    if HAS_BETA:
        tokens = tl.arange(0, BT)
        strict = tokens[:, None] > tokens[None, :]
        decay_strict = _masked_decay(G, strict)
        beta_gamma = tl.load(beta_ptr + row, mask=t < T, other=0.0).to(tl.float32) * tl.exp(G)
        beta = tl.load(beta_ptr + row, mask=t < T, other=0.0).to(tl.float32)
        inverse_t = tl.trans(tl.load(inverse_ptr + ((bh * NT + chunk) * BT + tokens)[:, None] * BT + tokens[None, :]))
        # w = T X, X = beta gamma k
        dbeta = tl.zeros([BT], dtype=tl.float32)
        d_inverse = tl.zeros([BT, BT], dtype=tl.float32)
        kk = tl.zeros([BT, BT], dtype=tl.float32)
        for kb in range(tl.cdiv(K, BK)):
            k = _rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
            dw = _rows(dw_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
            dx = tl.dot(inverse_t, dw, input_precision=PRECISION)
            xk = tl.sum(dx * k.to(tl.float32), 1)
            dbeta += xk
            d_inverse += _mm(dw, tl.trans(k), DT, PRECISION)
            kk += _mm(k, tl.trans(k), DT, PRECISION)
            _store_rows(dk_ptr, row0, H, t0, T, K, kb * BK, _rows(dk_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
                        + beta_gamma[:, None] * dx, BT, BK)
        dG += beta_gamma * dbeta
        dbeta *= tl.exp(G)
        d_inverse *= beta_gamma[None, :]
        # u = T Y, Y = beta v - sum_l Bx_l ev_l
        for vb in range(tl.cdiv(V, BV)):
            du = _rows(dv_new_ptr, row0, H, t0, T, V, vb * BV, BT, BV)
            v = _rows(v_ptr, row0, H, t0, T, V, vb * BV, BT, BV).to(tl.float32)
            dy = tl.dot(inverse_t, du, input_precision=PRECISION)
            _store_rows(dv_ptr, row0, H, t0, T, V, vb * BV, beta[:, None] * dy, BT, BV)
            dbeta += tl.sum(dy * v, 1)
            d_inverse += _mm(du, tl.trans(beta[:, None] * v), DT, PRECISION)
        if HAS_EXTRA:
            for l in range(L):
                kek = tl.zeros([BT, BT], dtype=tl.float32)
                for kb in range(tl.cdiv(K, BK)):
                    kek += _mm(_rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK),
                               tl.trans(_rows(ek_ptr, row0 * L + l, H * L, t0, T, K, kb * BK, BT, BK)), DT, PRECISION)
                bx_t = tl.trans(beta[:, None] * decay_strict * kek)
                du_ev = tl.zeros([BT, BT], dtype=tl.float32)
                for vb in range(tl.cdiv(V, BV)):
                    du = _rows(dv_new_ptr, row0, H, t0, T, V, vb * BV, BT, BV)
                    ev = _rows(ev_ptr, row0 * L + l, H * L, t0, T, V, vb * BV, BT, BV)
                    du_ev += _mm(du, tl.trans(ev), DT, PRECISION)
                    dy = tl.dot(inverse_t, du, input_precision=PRECISION)
                    dev = _rows(dev_ptr, row0 * L + l, H * L, t0, T, V, vb * BV, BT, BV) - _mm(bx_t, dy, DT, PRECISION)
                    _store_rows(dev_out_ptr, row0 * L + l, H * L, t0, T, V, vb * BV, dev, BT, BV)
                d_inverse -= tl.dot(du_ev, bx_t, input_precision=PRECISION)
                d_bx = -tl.where(strict, tl.dot(inverse_t, du_ev, input_precision=PRECISION), 0.0)
                dbeta += tl.sum(d_bx * decay_strict * kek, 1)
                d_kek = d_bx * decay_strict * beta[:, None]
                for kb in range(tl.cdiv(K, BK)):
                    k = _rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
                    ek = _rows(ek_ptr, row0 * L + l, H * L, t0, T, K, kb * BK, BT, BK)
                    dk_extra = _mm(d_kek, ek, DT, PRECISION)
                    dek_extra = _mm(tl.trans(d_kek), k, DT, PRECISION)
                    dG += tl.sum(dk_extra * k.to(tl.float32), 1) - tl.sum(dek_extra * ek.to(tl.float32), 1)
                    dk_extra += _rows(dk_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
                    _store_rows(dk_ptr, row0, H, t0, T, K, kb * BK, dk_extra, BT, BK)
                    _store_rows(dek_out_ptr, row0 * L + l, H * L, t0, T, K, kb * BK,
                                _rows(dek_ptr, row0 * L + l, H * L, t0, T, K, kb * BK, BT, BK) + dek_extra, BT, BK)
        # T = (I + A)^{-1}: dA = -T^T dT T^T on the strictly lower part, A = beta D (k k^T)
        dA = -tl.where(strict, tl.dot(tl.dot(inverse_t, d_inverse, input_precision=PRECISION), inverse_t,
                                      input_precision=PRECISION), 0.0)
        dbeta += tl.sum(dA * decay_strict * kk, 1)
        d_kk = dA * decay_strict * beta[:, None]
        for kb in range(tl.cdiv(K, BK)):
            k = _rows(k_ptr, row0, H, t0, T, K, kb * BK, BT, BK)
            dk_left = _mm(d_kk, k, DT, PRECISION)
            dk_right = _mm(tl.trans(d_kk), k, DT, PRECISION)
            dG += tl.sum((dk_left - dk_right) * k.to(tl.float32), 1)
            dk_total = _rows(dk_ptr, row0, H, t0, T, K, kb * BK, BT, BK) + dk_left + dk_right
            _store_rows(dk_out_ptr, row0, H, t0, T, K, kb * BK, dk_total, BT, BK)
        tl.store(dbeta_ptr + row, dbeta, mask=t < T)
    # G_t = g_1 + ... + g_t inside the chunk: dg_s = sum_{t >= s} dG_t
    tl.store(dg_ptr + row, tl.sum(dG, 0) - tl.cumsum(dG, 0) + dG, mask=t < T)


def _dot_dtype(x):
    """The operand type of the products: the inputs' dtype, but fp32 under TRITON_INTERPRET=1, whose tl.dot
    mishandles bf16 operands (there only the bf16 intermediates are rounded as on the GPU)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return tl.float32
    return {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}[x.dtype]


def _config(B, H, K, V, chunk, key_block, value_block, sequential_value):
    """Chunk length, the whole padded key width (the sequential kernels hold [K, value block] states), and
    the key / value blocks of the parallel kernels and the value block of the sequential ones; key and value
    widths are padded to at least MIN_DOT_WIDTH."""
    if chunk not in CHUNKS:
        raise ValueError(f"chunk must be one of {CHUNKS}, got {chunk}")
    for name, block in (("key_block", key_block), ("value_block", value_block), ("sequential_value", sequential_value)):
        if block is not None and (block < 16 or block & (block - 1)):
            raise ValueError(f"{name} must be a power of two >= 16, got {block}")
    BK = max(MIN_DOT_WIDTH, triton.next_power_of_2(K))
    BV = max(MIN_DOT_WIDTH, triton.next_power_of_2(V))
    return (chunk, BK, min(BK, key_block or 64), min(BV, value_block or 64),
            min(BV, sequential_value or _value_block(B * H, BV, busy=SEQUENTIAL_PROGRAMS)))


def _parallel_launch(k):
    """Warps and pipelining stages of the parallel kernels for inputs of k's dtype."""
    return dict(num_warps=PARALLEL_WARPS, num_stages=PARALLEL_STAGES[k.element_size()])


def _pointer_or(x, placeholder):
    """x, or any tensor where a kernel takes a pointer it does not read (its flag is off)."""
    return placeholder if x is None else x


def _gradient(shape, dtype, device, staged):
    """(part, result) of an input's gradient: `result` in the input's dtype, written once by the last kernel
    that adds to it; `part` the fp32 sum the earlier kernels write, when `staged` (else the same tensor)."""
    result = torch.empty(*shape, device=device, dtype=dtype)
    if not staged or dtype == torch.float32:
        return result, result
    return torch.empty(*shape, device=device, dtype=torch.float32), result


class _ChunkSplitScan(torch.autograd.Function):
    @staticmethod
    @_on_input_device
    def forward(ctx, q, k, v, g, beta, extra_k, extra_v, initial_state, scale, blocks):
        B, T, H, K = q.shape
        V = v.shape[-1]
        L = 0 if extra_k is None else extra_k.shape[3]
        BT, BK, KB, VB, VS = _config(B, H, K, V, *blocks)
        NT = triton.cdiv(T, BT)
        q, k, v, g = (x.contiguous() for x in (q, k, v, g))
        beta, extra_k, extra_v, initial_state = (None if x is None else x.contiguous()
                                                 for x in (beta, extra_k, extra_v, initial_state))
        dtypes = tuple(None if x is None else x.dtype for x in (q, k, v, g, beta, extra_k, extra_v))
        q, v, extra_k, extra_v = (None if x is None else x.to(k.dtype) for x in (q, v, extra_k, extra_v))
        precision = "ieee" if k.dtype == torch.float32 else "tf32"
        fp32 = dict(device=q.device, dtype=torch.float32)
        G = torch.empty(B, T, H, **fp32)  # chunk-local cumulative log-decay
        inverses = torch.empty(B, H, NT, BT, BT, **fp32) if beta is not None else G
        w = torch.empty_like(k) if beta is not None else k
        u = torch.empty_like(v, dtype=torch.float32) if beta is not None else v
        extra_states = torch.empty(B, H, NT, K, V, **fp32) if extra_k is not None else G
        flags = dict(HAS_EXTRA=extra_k is not None, DT=_dot_dtype(k), PRECISION=precision, BT=BT)
        parallel_launch = _parallel_launch(k)
        _wy_forward_kernel[(NT, B * H)](
            k, v, g, _pointer_or(beta, g), _pointer_or(extra_k, k), _pointer_or(extra_v, v), G, inverses, w, u,
            extra_states, T, H, K, V, L, NT, HAS_BETA=beta is not None, **flags, BK=KB, BV=VB, **parallel_launch)
        states = torch.empty(B, H, NT, K, V, device=q.device, dtype=k.dtype)  # h at every chunk start
        v_new = torch.empty_like(v, dtype=torch.float32)
        final_state = torch.empty(B, H, K, V, **fp32)
        _state_forward_kernel[(triton.cdiv(V, VS), B * H)](
            k, u, w, G, extra_states, _pointer_or(initial_state, final_state), states, v_new, final_state,
            T, H, K, V, NT, HAS_BETA=beta is not None, HAS_INITIAL=initial_state is not None, **flags, BK=BK, BV=VS,
            num_warps=SEQUENTIAL_WARPS, num_stages=SEQUENTIAL_STAGES)
        o = torch.empty(B, T, H, V, device=q.device, dtype=v.dtype)
        _output_kernel[(triton.cdiv(V, VB), NT, B * H)](
            q, k, _pointer_or(extra_k, k), _pointer_or(extra_v, v), G, states, v_new, o, scale, T, H, K, V, L, NT,
            **flags, BK=KB, BV=VB, **parallel_launch)
        ctx.save_for_backward(q, k, v, beta, extra_k, extra_v, G, inverses, w, states, v_new)
        ctx.config = (scale, (BT, BK, KB, VB, VS), NT, precision, initial_state is not None, dtypes)
        return o, final_state

    @staticmethod
    @_on_input_device
    def backward(ctx, d_o, d_final_state):
        q, k, v, beta, extra_k, extra_v, G, inverses, w, states, v_new = ctx.saved_tensors
        scale, (BT, BK, KB, VB, VS), NT, precision, has_initial, dtypes = ctx.config
        B, T, H, K = q.shape
        V = v.shape[-1]
        L = 0 if extra_k is None else extra_k.shape[3]
        NK = triton.cdiv(K, KB)
        d_o = d_o.to(k.dtype).contiguous()
        fp32 = dict(device=q.device, dtype=torch.float32)
        flags = dict(DT=_dot_dtype(k), PRECISION=precision, BT=BT)
        parallel_launch = _parallel_launch(k)
        parallel = dict(HAS_BETA=beta is not None, HAS_EXTRA=extra_k is not None, **flags, BK=KB, BV=VB)
        dv_new = torch.empty(B, T, H, V, **fp32)
        _local_value_grad_kernel[(triton.cdiv(V, VB), NT, B * H)](q, k, G, d_o, dv_new, scale, T, H, K, V, **flags,
                                                                  BK=KB, BV=VB, **parallel_launch)
        d_states = torch.empty_like(states)  # dh' of every chunk
        d_initial = torch.empty(B, H, K, V, **fp32)
        _state_backward_kernel[(triton.cdiv(V, VS), B * H)](
            q, k, w, G, d_o, _pointer_or(d_final_state, d_initial).contiguous(), dv_new, d_states, d_initial, scale,
            T, H, K, V, NT, HAS_BETA=beta is not None, HAS_DFINAL=d_final_state is not None, **flags, BK=BK, BV=VS,
            num_warps=SEQUENTIAL_WARPS, num_stages=SEQUENTIAL_STAGES)
        # with beta, _wy_backward_kernel adds the last parts of dk, d(extra_k) and d(extra_v)
        staged = beta is not None
        dq = torch.empty(B, T, H, K, device=q.device, dtype=dtypes[0])
        dk, dk_out = _gradient((B, T, H, K), dtypes[1], q.device, staged)
        dw = torch.empty(B, T, H, K, **fp32) if beta is not None else dk
        dG = torch.empty(NK, B, T, H, **fp32)  # each key block's share
        dek, dek_out = (dk, dk) if extra_k is None else _gradient(extra_k.shape, dtypes[5], q.device, staged)
        dev, dev_out = (dv_new, dv_new) if extra_v is None else _gradient(extra_v.shape, dtypes[6], q.device, staged)
        _key_grads_kernel[(NK, NT, B * H)](
            q, k, _pointer_or(extra_k, k), _pointer_or(extra_v, v), G, states, d_states, v_new, dv_new, d_o,
            dq, dk, dw, dG, dek, scale, T, H, K, V, L, NT, **parallel, **parallel_launch)
        if extra_k is not None:
            _extra_value_grads_kernel[(triton.cdiv(V, VB), NT, B * H)](
                q, extra_k, extra_v, G, d_states, d_o, dev, scale, T, H, K, V, L, NT, **flags, BK=KB, BV=VB,
                **parallel_launch)
        dv = torch.empty(B, T, H, V, device=q.device, dtype=dtypes[2]) if beta is not None else dv_new
        dbeta = torch.empty(B, T, H, **fp32) if beta is not None else None
        dg = torch.empty(B, T, H, **fp32)
        _wy_backward_kernel[(NT, B * H)](
            k, v, _pointer_or(beta, G), _pointer_or(extra_k, k), _pointer_or(extra_v, v), G, inverses, dw, dv_new,
            dG, dk, dek, dev, dk_out, dek_out, dev_out, dv, _pointer_or(dbeta, dg), dg, T, H, K, V, L, NT, NK,
            **parallel, **parallel_launch)
        grads = (dq, dk_out, dv, dg, dbeta, dek_out if extra_k is not None else None,
                 dev_out if extra_v is not None else None)
        return (*(None if d is None else d.to(dtype) for d, dtype in zip(grads, dtypes)),
                d_initial if has_initial else None, None, None)


def chunk_split_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state, chunk=CHUNK, key_block=None,
                           value_block=None, sequential_value=None):
    """Chunk-split Triton scan; returns (o [B, T, H, V] in k's dtype, S_T [B, H, K, V] fp32).

    chunk: 16, 32 or 64; key_block / value_block: the key and value blocks of the parallel kernels (powers
    of two >= 16, default 64); sequential_value: the value block of the two sequential passes (default:
    split until about SEQUENTIAL_PROGRAMS programs)."""
    return _ChunkSplitScan.apply(q, k, v, g, beta, extra_k, extra_v, initial_state, scale,
                                 (chunk, key_block, value_block, sequential_value))
