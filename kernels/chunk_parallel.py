"""Chunk-parallel Triton delta scan: the intra-chunk work runs parallel over (batch, head, chunk), only the
[K, V] state recurrence across chunks is sequential, in the forward and in the backward.

With kernels/chunk.py's terms (chunk of C tokens, G the cumulative log-decay inside it, gamma = exp(G)),
the values written after the erase are u = U - W S_c, and one chunk reads and updates the state S_c at
its start as

    o_c     = Q_c S_c + O_c
    S_{c+1} = exp(G_C) S_c + (k * exp(G_C - G))^T (U - W S_c) + E_c

    W   [C, K] = (I + A)^{-1} (beta * gamma * k)            U [C, V] = (I + A)^{-1} (beta v - Bx EV)
    Q_c [C, K] = scale (gamma * q - (decay_incl * q k^T) W)
    O_c [C, V] = the chunk's outputs from a zero start state  E_c [K, V] = sum_l (ek_l * exp(G_C - G))^T ev_l

W, U, Q, O and E depend on the chunk's inputs only (without beta W = 0 and U = v; E only with PRISM's
rank-L extra writes, whose products with q and k sit in O and U). Forward: `_wy_kernel` (grid chunks x
B*H: (I + A)^{-1}, W, Q) and `_intra_kernel` (grid value blocks x B*H x chunks: O, U, E; the fused
kernel's chunk step from a zero state) in parallel; then `_state_kernel` (grid value blocks x B*H) walks
the chunks: three [C, K]-by-[K, BV]-sized products per chunk and no loop over the extra writes.
Backward: `_state_grad_kernel` walks the chunks in reverse,
dS_c = exp(G_C) dS_{c+1} - W^T ((k * exp(G_C - G)) dS_{c+1}) + Q_c^T do_c; then `_chunk_grads_kernel`
(grid value blocks x B*H x chunks) takes every input gradient of a chunk from S_c and dS_{c+1} (the
fused kernel's chunk step).
"""

import dataclasses

import torch
import triton
import triton.language as tl

from .triton_chunk import (
    _chunk_backward,
    _chunk_forward,
    _chunk_inverse,
    _chunk_tokens,
    _given_or_zeros,
    _grad_buffers,
    _masked_decay,
    _on_input_device,
    _partial_sum_slots,
    _state_block,
    _summed_over_value_blocks,
    _value_block,
)


@triton.jit
def _key_rows(ptr, token_row, t, T, K, BK: tl.constexpr):
    """Rows token_row [BT] of a [B, T, H, K] tensor as an fp32 tile [BT, BK], zero past T and K."""
    cols_k = tl.arange(0, BK)
    return tl.load(ptr + token_row[:, None] * K + cols_k[None, :], mask=(t[:, None] < T) & (cols_k[None, :] < K),
                   other=0.0).to(tl.float32)


@triton.jit
def _wy_kernel(q_ptr, k_ptr, g_ptr, beta_ptr, inverse_ptr, w_ptr, q_state_ptr, scale, T, H, K, NT,
               HAS_BETA: tl.constexpr, PRECISION: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    """Per chunk: Q_c and, with beta, (I + A)^{-1} [BT, BT] and W (both [BT, K] in fp32, laid out like q)."""
    chunk = tl.cast(tl.program_id(0), tl.int64)
    bh = tl.cast(tl.program_id(1), tl.int64)
    tokens = tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    t, token_row = _chunk_tokens(bh // H, bh % H, chunk, T, H, BT)
    mask_k = (t[:, None] < T) & (cols_k[None, :] < K)
    q = _key_rows(q_ptr, token_row, t, T, K, BK)
    G = tl.cumsum(tl.load(g_ptr + token_row, mask=t < T, other=0.0).to(tl.float32), 0)
    gamma = tl.exp(G)
    q_state = gamma[:, None] * q  # [BT, BK]
    if HAS_BETA:
        k = _key_rows(k_ptr, token_row, t, T, K, BK)
        beta = tl.load(beta_ptr + token_row, mask=t < T, other=0.0).to(tl.float32)
        inverse = _chunk_inverse(k, G, beta, PRECISION, BT)
        tl.store(inverse_ptr + ((bh * NT + chunk) * BT + tokens)[:, None] * BT + tokens[None, :], inverse)
        w = tl.dot(inverse, (beta * gamma)[:, None] * k, input_precision=PRECISION)  # [BT, BK]
        tl.store(w_ptr + token_row[:, None] * K + cols_k[None, :], w, mask=mask_k)
        scores = (_masked_decay(G, tokens[:, None] >= tokens[None, :])
                  * tl.dot(q, tl.trans(k), input_precision=PRECISION))
        q_state -= tl.dot(scores, w, input_precision=PRECISION)
    tl.store(q_state_ptr + token_row[:, None] * K + cols_k[None, :], scale * q_state, mask=mask_k)


@triton.jit
def _intra_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, o_intra_ptr, u_ptr,
                  extra_state_ptr,
                  scale, T, H, K, V, L, NT, HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, PRECISION: tl.constexpr,
                  BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Per chunk and value block: O_c and, with beta, U (both fp32, laid out like o), with extra writes E_c [K, BV]."""
    v0 = tl.program_id(0) * BV
    bh = tl.cast(tl.program_id(1), tl.int64)
    chunk = tl.cast(tl.program_id(2), tl.int64)
    extra_state = _chunk_forward(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, o_intra_ptr, u_ptr,
                                 tl.zeros([BK, BV], dtype=tl.float32), bh // H, bh % H, bh, chunk, v0, scale,
                                 T, H, K, V, L, NT, HAS_BETA, HAS_EXTRA, False, True, PRECISION, BT, BK, BV)
    if HAS_EXTRA:
        state_offsets, state_mask = _state_block(v0, K, V, BK, BV)
        tl.store(extra_state_ptr + (bh * NT + chunk) * K * V + state_offsets, extra_state, mask=state_mask)


@triton.jit
def _chunk_decays(g_ptr, token_row, t, T):
    """exp(G_C - G_t) [BT] and exp(G_C) of one chunk (G: the cumulative log-decay inside it)."""
    g = tl.load(g_ptr + token_row, mask=t < T, other=0.0).to(tl.float32)
    G_last = tl.sum(g, 0)
    return tl.exp(G_last - tl.cumsum(g, 0)), tl.exp(G_last)


@triton.jit
def _state_kernel(k_ptr, g_ptr, w_ptr, u_ptr, q_state_ptr, o_intra_ptr, extra_state_ptr, s0_ptr,
                  o_ptr, final_ptr, chunk_states_ptr, T, H, K, V, NT,
                  HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr, HAS_INITIAL: tl.constexpr,
                  STORE_CHUNK_STATES: tl.constexpr, PRECISION: tl.constexpr,
                  BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """The sequential pass: o_c and S_{c+1} from S_c; the final state and, for the backward, every S_c
    [K, BV]. u_ptr holds U ([B, T, H, V]; v itself without beta)."""
    v0 = tl.program_id(0) * BV
    bh = tl.cast(tl.program_id(1), tl.int64)
    cols_v = v0 + tl.arange(0, BV)
    state_offsets, state_mask = _state_block(v0, K, V, BK, BV)  # [BK, BV]
    state = _given_or_zeros(s0_ptr + bh * K * V, state_offsets, state_mask, HAS_INITIAL, BK, BV)
    for n in range(NT):
        chunk = tl.cast(n, tl.int64)
        chunk_offset = (bh * NT + chunk) * K * V
        if STORE_CHUNK_STATES:
            tl.store(chunk_states_ptr + chunk_offset + state_offsets, state.to(chunk_states_ptr.dtype.element_ty),
                     mask=state_mask)
        t, token_row = _chunk_tokens(bh // H, bh % H, chunk, T, H, BT)
        mask_v = (t[:, None] < T) & (cols_v[None, :] < V)
        value_offsets = token_row[:, None] * V + cols_v[None, :]
        o = tl.load(o_intra_ptr + value_offsets, mask=mask_v, other=0.0)
        o += tl.dot(_key_rows(q_state_ptr, token_row, t, T, K, BK), state, input_precision=PRECISION)
        tl.store(o_ptr + value_offsets, o.to(o_ptr.dtype.element_ty), mask=mask_v)
        u = tl.load(u_ptr + value_offsets, mask=mask_v, other=0.0).to(tl.float32)  # [BT, BV]
        if HAS_BETA:
            u -= tl.dot(_key_rows(w_ptr, token_row, t, T, K, BK), state, input_precision=PRECISION)
        to_end, chunk_decay = _chunk_decays(g_ptr, token_row, t, T)
        k_end = _key_rows(k_ptr, token_row, t, T, K, BK) * to_end[:, None]
        state = chunk_decay * state + tl.dot(tl.trans(k_end), u, input_precision=PRECISION)
        if HAS_EXTRA:
            state += tl.load(extra_state_ptr + chunk_offset + state_offsets, mask=state_mask, other=0.0)
    tl.store(final_ptr + bh * K * V + state_offsets, state, mask=state_mask)


@triton.jit
def _state_grad_kernel(k_ptr, g_ptr, w_ptr, q_state_ptr, do_ptr, dfinal_ptr, d_chunk_states_ptr, ds0_ptr,
                       T, H, K, V, NT, HAS_BETA: tl.constexpr, HAS_DFINAL: tl.constexpr, PRECISION: tl.constexpr,
                       BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """The sequential backward pass, dS_c from dS_{c+1} and do_c; stores dS_{c+1} [K, BV] of every chunk c
    and dS_0."""
    v0 = tl.program_id(0) * BV
    bh = tl.cast(tl.program_id(1), tl.int64)
    cols_v = v0 + tl.arange(0, BV)
    state_offsets, state_mask = _state_block(v0, K, V, BK, BV)
    d_state = _given_or_zeros(dfinal_ptr + bh * K * V, state_offsets, state_mask, HAS_DFINAL, BK, BV)
    for i in range(NT):
        chunk = tl.cast(NT - 1 - i, tl.int64)
        tl.store(d_chunk_states_ptr + (bh * NT + chunk) * K * V + state_offsets,
                 d_state.to(d_chunk_states_ptr.dtype.element_ty), mask=state_mask)
        t, token_row = _chunk_tokens(bh // H, bh % H, chunk, T, H, BT)
        d_o = tl.load(do_ptr + token_row[:, None] * V + cols_v[None, :], mask=(t[:, None] < T) & (cols_v[None, :] < V),
                      other=0.0).to(tl.float32)
        to_end, chunk_decay = _chunk_decays(g_ptr, token_row, t, T)
        d_prev = chunk_decay * d_state + tl.dot(tl.trans(_key_rows(q_state_ptr, token_row, t, T, K, BK)), d_o,
                                                input_precision=PRECISION)
        if HAS_BETA:
            k_end_ds = tl.dot(_key_rows(k_ptr, token_row, t, T, K, BK) * to_end[:, None], d_state,
                              input_precision=PRECISION)  # [BT, BV]
            d_prev -= tl.dot(tl.trans(_key_rows(w_ptr, token_row, t, T, K, BK)), k_end_ds, input_precision=PRECISION)
        d_state = d_prev
    tl.store(ds0_ptr + bh * K * V + state_offsets, d_state, mask=state_mask)


@triton.jit
def _chunk_grads_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, chunk_states_ptr,
                        d_chunk_states_ptr, do_ptr, dq_ptr, dk_ptr, dv_ptr, dg_ptr, dbeta_ptr, dek_ptr, dev_ptr,
                        scale, T, H, K, V, L, NT, HAS_BETA: tl.constexpr, HAS_EXTRA: tl.constexpr,
                        PRECISION: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    """Per chunk and value block: every input gradient of the chunk from S_c and dS_{c+1}."""
    v_block = tl.program_id(0)
    bh = tl.cast(tl.program_id(1), tl.int64)
    chunk = tl.cast(tl.program_id(2), tl.int64)
    v0 = v_block * BV
    dq_ptr, dk_ptr, dg_ptr, dbeta_ptr, dek_ptr = _partial_sum_slots(dq_ptr, dk_ptr, dg_ptr, dbeta_ptr, dek_ptr, v_block,
                                                                    tl.num_programs(1) // H, T, H, K, L)
    state_offsets, state_mask = _state_block(v0, K, V, BK, BV)
    state = tl.load(chunk_states_ptr + (bh * NT + chunk) * K * V + state_offsets, mask=state_mask,
                    other=0.0).to(tl.float32)
    d_state = tl.load(d_chunk_states_ptr + (bh * NT + chunk) * K * V + state_offsets, mask=state_mask,
                      other=0.0).to(tl.float32)
    _chunk_backward(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, ek_ptr, ev_ptr, inverse_ptr, do_ptr,
                    dq_ptr, dk_ptr, dv_ptr, dg_ptr, dbeta_ptr, dek_ptr, dev_ptr, state, d_state,
                    bh // H, bh % H, bh, chunk, v0, scale, T, H, K, V, L, NT, HAS_BETA, HAS_EXTRA, PRECISION,
                    BT, BK, BV)


@dataclasses.dataclass(frozen=True)
class Blocks:
    """Launch sizes of the chunk-parallel scan: chunk length, key width, value blocks of the sequential
    passes and of the chunk-parallel kernels, warps of the forward's parallel kernels (`_wy_kernel`,
    `_intra_kernel`), of the gradient kernel and of the sequential passes, and the software-pipelining
    stages of the sequential passes' chunk loop (loads of the next chunks issued while this one's products
    run); state_bits: 32 or 16, the chunk states S_c and dS_c kept for the gradient kernel in fp32 or bf16
    (half the memory traffic; the recurrences themselves stay fp32)."""

    chunk: int
    key: int
    sequential_value: int
    parallel_value: int
    forward_warps: int
    gradient_warps: int
    sequential_warps: int
    sequential_stages: int
    state_bits: int

    @classmethod
    def parse(cls, text, names=()):
        """'name=value,...' -> overrides for parallel_block_sizes; a clear error for a value that is not a
        positive integer or a name outside ``names`` (default: the overridable fields; None: any name)."""
        names = tuple(OVERRIDE_RULES) if names == () else names
        overrides = {}
        for item in filter(None, text.split(",")):
            name, _, value = item.partition("=")
            if (names is not None and name not in names) or not value.isdigit() or int(value) < 1:
                raise ValueError(f"block override {item!r}: expected name=positive integer"
                                 + (f", name one of {', '.join(names)}" if names is not None else ""))
            overrides[name] = int(value)
        return overrides


def _power_of_two_from_16(n):
    return n >= 16 and n & (n - 1) == 0


# what each overridable field accepts (the key width follows from K and is not a choice)
OVERRIDE_RULES = {
    "chunk": (lambda n: n in (16, 32, 64), "16, 32 or 64"),
    "sequential_value": (_power_of_two_from_16, "a power of two >= 16"),
    "parallel_value": (_power_of_two_from_16, "a power of two >= 16"),
    "forward_warps": (lambda n: n in (1, 2, 4, 8, 16), "1, 2, 4, 8 or 16"),
    "gradient_warps": (lambda n: n in (1, 2, 4, 8, 16), "1, 2, 4, 8 or 16"),
    "sequential_warps": (lambda n: n in (1, 2, 4, 8, 16), "1, 2, 4, 8 or 16"),
    "sequential_stages": (lambda n: 1 <= n <= 4, "1 to 4"),
    "state_bits": (lambda n: n in (16, 32), "16 or 32"),
}


def check_overrides(overrides):
    """A ValueError naming the first override that is unknown or out of range (before any launch)."""
    for name, value in overrides.items():
        if name not in OVERRIDE_RULES:
            raise ValueError(f"unknown block override {name!r}: expected one of {', '.join(OVERRIDE_RULES)}")
        accepts, described = OVERRIDE_RULES[name]
        if not accepts(value):
            raise ValueError(f"block override {name}={value}: expected {described}")


def parallel_block_sizes(B, T, H, K, V, L=0, **overrides):
    """Blocks for a [B, T, H, K] scan with value width V and L extra writes; ``overrides`` replace fields
    (OVERRIDE_RULES says which values each takes). Chosen from ptxas -v for sm_90a (results/kernels.md):
    chunks of 16 (at 32 the gradient kernel spills 0.3-6 KB per thread at every head width; at 16 at most
    0.4 KB up to width 64, 3.5 KB at 128 with extra writes), value blocks of at most 64 in the parallel
    kernels (32 with longer chunks, where 64 spills up to 12 KB), 8 warps from key width 64 (fewer spills than
    4 everywhere). Timed on the H200 at (8, 8192, 8, 128), L = 0 (results/kernels.md, override sweep): the
    sequential passes split the value dimension only until about one program per SM (64 wide there: 1.8 +
    2.5 ms against 2.9 + 4.2 at 32) with two pipelining stages (alike to three at 32); without extra writes
    the forward's parallel kernels run 4 warps at key width 128 (0.73 + 0.41 ms against 1.61 + 0.60 with 8;
    the gradient kernel was slower with 4, 8.4 against 7.0 ms; key width 64 and L > 0 not timed, kept at 8)."""
    check_overrides(overrides)
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    chunk = overrides.get("chunk", 16)
    warps = 4 if BK <= 32 else 8
    forward_warps = 4 if BK <= 32 or (BK >= 128 and L == 0) else 8
    defaults = dict(chunk=chunk, key=BK, sequential_value=_value_block(B * H, BV, busy=128),
                    parallel_value=min(BV, 64 if chunk <= 16 else 32), forward_warps=forward_warps,
                    gradient_warps=warps, sequential_warps=warps, sequential_stages=2, state_bits=32)
    return Blocks(**{**defaults, **overrides})


def _pointer_or(x, placeholder):
    """x, or any tensor where a kernel takes a pointer it does not read (its flag is off)."""
    return placeholder if x is None else x


class _ChunkParallelScan(torch.autograd.Function):
    @staticmethod
    @_on_input_device
    def forward(ctx, q, k, v, g, beta, extra_k, extra_v, initial_state, scale, overrides):
        B, T, H, K = q.shape
        V = v.shape[-1]
        L = 0 if extra_k is None else extra_k.shape[3]
        blocks = parallel_block_sizes(B, T, H, K, V, L, **overrides)
        BT, BK = blocks.chunk, blocks.key
        NT = triton.cdiv(T, BT)
        q, k, v, g = (x.contiguous() for x in (q, k, v, g))
        beta, extra_k, extra_v, initial_state = (None if x is None else x.contiguous()
                                                 for x in (beta, extra_k, extra_v, initial_state))
        needs_grad = any(ctx.needs_input_grad[:8])
        precision = "ieee" if q.dtype == torch.float32 else "tf32"
        fp32 = dict(device=q.device, dtype=torch.float32)
        q_state = torch.empty(B, T, H, K, **fp32)  # Q_c of every chunk
        inverses = torch.empty(B, H, NT, BT, BT, **fp32) if beta is not None else q_state
        w = torch.empty(B, T, H, K, **fp32) if beta is not None else q_state  # W of every chunk
        o_intra = torch.empty(B, T, H, V, **fp32)  # O_c
        u = torch.empty(B, T, H, V, **fp32) if beta is not None else v  # U
        extra_states = torch.empty(B, H, NT, K, V, **fp32) if extra_k is not None else o_intra  # E_c
        o = torch.empty(B, T, H, V, device=q.device, dtype=v.dtype)
        final_state = torch.empty(B, H, K, V, **fp32)
        state_dtype = torch.bfloat16 if blocks.state_bits == 16 else torch.float32
        chunk_states = (torch.empty(B, H, NT, K, V, device=q.device, dtype=state_dtype) if needs_grad
                        else final_state)  # S_c
        flags = dict(HAS_BETA=beta is not None, PRECISION=precision, BT=BT, BK=BK)
        _wy_kernel[(NT, B * H)](q, k, g, _pointer_or(beta, g), inverses, w, q_state, scale, T, H, K, NT, **flags,
                                num_warps=blocks.forward_warps)
        _intra_kernel[(triton.cdiv(V, blocks.parallel_value), B * H, NT)](
            q, k, v, g, _pointer_or(beta, g), _pointer_or(extra_k, q), _pointer_or(extra_v, v), inverses, o_intra, u,
            extra_states, scale, T, H, K, V, L, NT, HAS_EXTRA=extra_k is not None, **flags, BV=blocks.parallel_value,
            num_warps=blocks.forward_warps)
        _state_kernel[(triton.cdiv(V, blocks.sequential_value), B * H)](
            k, g, w, u, q_state, o_intra, extra_states, _pointer_or(initial_state, final_state), o, final_state,
            chunk_states,
            T, H, K, V, NT, HAS_EXTRA=extra_k is not None, HAS_INITIAL=initial_state is not None,
            STORE_CHUNK_STATES=needs_grad, **flags, BV=blocks.sequential_value, num_warps=blocks.sequential_warps,
            num_stages=blocks.sequential_stages)
        if needs_grad:
            ctx.save_for_backward(q, k, v, g, beta, extra_k, extra_v, inverses, w, q_state, chunk_states)
            ctx.config = (scale, blocks, NT, precision, initial_state is not None)
        return o, final_state

    @staticmethod
    @_on_input_device
    def backward(ctx, d_o, d_final_state):
        q, k, v, g, beta, extra_k, extra_v, inverses, w, q_state, chunk_states = ctx.saved_tensors
        scale, blocks, NT, precision, has_initial = ctx.config
        B, T, H, K = q.shape
        V = v.shape[-1]
        L = 0 if extra_k is None else extra_k.shape[3]
        d_o = d_o.contiguous()
        flags = dict(HAS_BETA=beta is not None, PRECISION=precision, BT=blocks.chunk, BK=blocks.key)
        d_chunk_states = torch.empty_like(chunk_states)  # dS_{c+1} of every chunk c
        d_initial = torch.empty(B, H, K, V, device=q.device, dtype=torch.float32)
        _state_grad_kernel[(triton.cdiv(V, blocks.sequential_value), B * H)](
            k, g, w, q_state, d_o, _pointer_or(d_final_state, d_initial).contiguous(), d_chunk_states, d_initial,
            T, H, K, V, NT, HAS_DFINAL=d_final_state is not None, **flags, BV=blocks.sequential_value,
            num_warps=blocks.sequential_warps, num_stages=blocks.sequential_stages)
        value_blocks = triton.cdiv(V, blocks.parallel_value)
        inputs = (q, k, v, g, beta, extra_k, extra_v)
        dq, dk, dv, dg, dbeta, dek, dev = grads = _grad_buffers(inputs, value_blocks)
        _chunk_grads_kernel[(value_blocks, B * H, NT)](
            q, k, v, g, _pointer_or(beta, g), _pointer_or(extra_k, q), _pointer_or(extra_v, v), inverses, chunk_states,
            d_chunk_states, d_o, dq, dk, dv, dg, _pointer_or(dbeta, dg), _pointer_or(dek, dq), _pointer_or(dev, dv),
            scale, T, H, K, V, L, NT, HAS_EXTRA=extra_k is not None, **flags, BV=blocks.parallel_value,
            num_warps=blocks.gradient_warps)
        return (*_summed_over_value_blocks(grads, inputs), d_initial if has_initial else None, None, None)


def chunk_parallel_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state, **overrides):
    """Chunk-parallel Triton scan; returns (o [B, T, H, V] in v's dtype, S_T [B, H, K, V] fp32).

    ``overrides`` replace fields of the automatic ``Blocks`` (chunk 16, 32 or 64; value blocks powers of two
    >= 16), as benchmarks/kernel_profile.py --blocks does; a bad one fails in parallel_block_sizes, before
    anything is allocated or launched."""
    return _ChunkParallelScan.apply(q, k, v, g, beta, extra_k, extra_v, initial_state, scale, overrides)
