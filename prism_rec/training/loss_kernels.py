"""The Triton kernels of the fused full-softmax loss (prism_rec/training/losses.py launches them).

A module of its own, imported on the first fused call only: Triton reads TRITON_INTERPRET when it is
imported and when a kernel is defined, so importing it with prism_rec.training.trainer would fix the mode before a
test (or a CPU user) sets the interpreter.

Each walk handles its full item tiles without an item mask and the partial last tile (when ``I`` is not a
multiple of ``BLOCK_I``) in one masked step after them, in the same order.

With ``LIMITED`` each kernel reads the number of rows that count from ``limit_ptr`` (a device scalar, so
that a CUDA graph's static grid serves every batch): a row block that starts at or past it walks no item
tile (it writes a zero gradient and an lse the caller discards), and d(table) walks only the row tiles
before it, spread over the parts in turn. Every kernel reads the rows past the limit as it reads those
past N (hidden 0, lse 0, weight 0), so they add exactly 0 to either gradient whatever they hold.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_rows(ptr, start, count, d, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, DOT_DTYPE: tl.constexpr,
               UPCAST: tl.constexpr):
    """Rows start .. start + BLOCK of a [count, d] matrix as a [BLOCK, BLOCK_D] tile, zero outside."""
    rows = start + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < count) & (cols[None, :] < d)
    tile = tl.load(ptr + rows[:, None] * d + cols[None, :], mask=mask, other=0.0).to(DOT_DTYPE)
    return _operand(tile, UPCAST)

@triton.jit
def _row_limit(limit_ptr, N, LIMITED: tl.constexpr):
    """The number of rows that count: N, or (LIMITED) the count at limit_ptr, at most N."""
    limit = N
    if LIMITED:
        limit = tl.minimum(tl.load(limit_ptr).to(tl.int32), N)
    return limit

@triton.jit
def _walk_end(first, last, row_start, limit):
    """Where a row block's walk over item tiles first .. last stops: at first (no tile) when the block
    starts at or past the rows that count."""
    return tl.where(row_start < limit, last, first)

@triton.jit
def _operand(tile, UPCAST: tl.constexpr):
    """A product operand: the tile, or (UPCAST, Triton's interpreter, whose products of 16-bit tiles are
    wrong in 3.7) its values in fp32."""
    if UPCAST:
        tile = tile.to(tl.float32)
    return tile

@triton.jit
def _forward_tile(h, t_ptr, tile, I, D, running_max, running_sum, BLOCK_I: tl.constexpr,
                  BLOCK_D: tl.constexpr, DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr,
                  UPCAST: tl.constexpr, MASKED: tl.constexpr):
    """One item tile of the online logsumexp: the running max and sum [BLOCK_N] of base-2 logits updated
    (MASKED: items past I count as -inf). The max is taken before the log2 e scaling (which keeps the
    order), so each logit costs one fused multiply-add before its exp2."""
    t = _load_rows(t_ptr, tile * BLOCK_I, I, D, BLOCK_I, BLOCK_D, DOT_DTYPE, UPCAST)
    logits = tl.dot(h, tl.trans(t), input_precision=PRECISION)  # [BLOCK_N, BLOCK_I], natural base
    if MASKED:
        items = tile * BLOCK_I + tl.arange(0, BLOCK_I)
        logits = tl.where(items[None, :] < I, logits, float("-inf"))
    new_max = tl.maximum(running_max, tl.max(logits, 1) * 1.4426950408889634)
    scaled = logits * 1.4426950408889634 - new_max[:, None]
    running_sum = running_sum * tl.exp2(running_max - new_max) + tl.sum(tl.exp2(scaled), 1)
    return new_max, running_sum

@triton.jit
def _lse_forward(h_ptr, t_ptr, max_ptr, sum_ptr, limit_ptr, N, I, D, item_tiles, full_tiles, per_part,
                 BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr,
                 DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, LIMITED: tl.constexpr):
    """Per row of a row block, over the item tiles of one part: running max m and sum s of
    2^(logit * log2 e - m) (base-2 online logsumexp), written to max_ptr/sum_ptr [parts, N] (-inf and 0
    in a block past the limit)."""
    row_start = tl.program_id(0) * BLOCK_N
    part = tl.program_id(1)
    limit = _row_limit(limit_ptr, N, LIMITED)
    h = _load_rows(h_ptr, row_start, limit, D, BLOCK_N, BLOCK_D, DOT_DTYPE, UPCAST)
    running_max = tl.full([BLOCK_N], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_N], tl.float32)
    first = part * per_part
    last = _walk_end(first, tl.minimum(first + per_part, item_tiles), row_start, limit)
    for tile in range(first, tl.minimum(last, full_tiles)):
        running_max, running_sum = _forward_tile(h, t_ptr, tile, I, D, running_max, running_sum, BLOCK_I, BLOCK_D,
                                                 DOT_DTYPE, PRECISION, UPCAST, False)
    if last > full_tiles:  # this part ends with the partial last tile
        running_max, running_sum = _forward_tile(h, t_ptr, full_tiles, I, D, running_max, running_sum, BLOCK_I,
                                                 BLOCK_D, DOT_DTYPE, PRECISION, UPCAST, True)
    rows = row_start + tl.arange(0, BLOCK_N)
    tl.store(max_ptr + part * N + rows, running_max, mask=rows < N)
    tl.store(sum_ptr + part * N + rows, running_sum, mask=rows < N)

@triton.jit
def _hidden_tile(h, t_ptr, tile, I, D, lse2, accumulator, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr,
                 DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                 MASKED: tl.constexpr):
    """One item tile of d(hidden) / g: accumulator [BLOCK_N, BLOCK_D] + softmax @ table tile (MASKED:
    items past I give 0)."""
    t = _load_rows(t_ptr, tile * BLOCK_I, I, D, BLOCK_I, BLOCK_D, DOT_DTYPE, UPCAST)
    logits = tl.dot(h, tl.trans(t), input_precision=PRECISION)
    p = tl.exp2(logits * 1.4426950408889634 - lse2[:, None])
    if MASKED:
        items = tile * BLOCK_I + tl.arange(0, BLOCK_I)
        p = tl.where(items[None, :] < I, p, 0.0)
    return tl.dot(_operand(p.to(DOT_DTYPE), UPCAST), t, accumulator, input_precision=PRECISION)

@triton.jit
def _lse_backward_hidden(h_ptr, t_ptr, lse2_ptr, g_ptr, out_ptr, limit_ptr, N, I, D, item_tiles, full_tiles,
                         per_part, BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr,
                         DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                         LIMITED: tl.constexpr):
    """d(hidden) of a row block over the item tiles of one part: g * (softmax @ table) (fp32; the row's
    weight g applied once, after the walk), written to out_ptr [parts, N, D] (0 in a block past the
    limit)."""
    row_start = tl.program_id(0) * BLOCK_N
    part = tl.program_id(1)
    rows = row_start + tl.arange(0, BLOCK_N)
    limit = _row_limit(limit_ptr, N, LIMITED)
    h = _load_rows(h_ptr, row_start, limit, D, BLOCK_N, BLOCK_D, DOT_DTYPE, UPCAST)
    lse2 = tl.load(lse2_ptr + rows, mask=rows < limit, other=0.0)
    g = tl.load(g_ptr + rows, mask=rows < limit, other=0.0)
    accumulator = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # softmax @ table, before g
    first = part * per_part
    last = _walk_end(first, tl.minimum(first + per_part, item_tiles), row_start, limit)
    for tile in range(first, tl.minimum(last, full_tiles)):
        accumulator = _hidden_tile(h, t_ptr, tile, I, D, lse2, accumulator, BLOCK_I, BLOCK_D, DOT_DTYPE,
                                   PRECISION, UPCAST, False)
    if last > full_tiles:  # this part ends with the partial last tile
        accumulator = _hidden_tile(h, t_ptr, full_tiles, I, D, lse2, accumulator, BLOCK_I, BLOCK_D, DOT_DTYPE,
                                   PRECISION, UPCAST, True)
    cols = tl.arange(0, BLOCK_D)
    offsets = part * N * D + rows[:, None] * D + cols[None, :]
    tl.store(out_ptr + offsets, accumulator * g[:, None], mask=(rows[:, None] < N) & (cols[None, :] < D))

@triton.jit
def _lse_backward_table(h_ptr, t_ptr, lse2_ptr, g_ptr, out_ptr, limit_ptr, N, I, D, row_tiles, per_part,
                        BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_D: tl.constexpr,
                        DOT_DTYPE: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                        LIMITED: tl.constexpr):
    """d(table) of an item block over the row tiles of one part: sum of (g * softmax)^T @ hidden
    (fp32), written to out_ptr [parts, I, D]. Rows past the limit need no mask: their g is 0. Part p
    walks row tiles p * per_part onwards, or (LIMITED) tiles p, p + parts, ... before the limit."""
    item_start = tl.program_id(0) * BLOCK_I
    part = tl.program_id(1)
    items = item_start + tl.arange(0, BLOCK_I)
    t = _load_rows(t_ptr, item_start, I, D, BLOCK_I, BLOCK_D, DOT_DTYPE, UPCAST)
    accumulator = tl.zeros([BLOCK_I, BLOCK_D], tl.float32)
    limit = _row_limit(limit_ptr, N, LIMITED)
    first, stop, step = part * per_part, tl.minimum(part * per_part + per_part, row_tiles), 1
    if LIMITED:  # interleaved, so that the tiles that count keep every part busy
        first, stop, step = part, tl.cdiv(limit, BLOCK_N), tl.num_programs(1)
    for tile in range(first, stop, step):
        rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        h = _load_rows(h_ptr, tile * BLOCK_N, limit, D, BLOCK_N, BLOCK_D, DOT_DTYPE, UPCAST)
        lse2 = tl.load(lse2_ptr + rows, mask=rows < limit, other=0.0)
        g = tl.load(g_ptr + rows, mask=rows < limit, other=0.0)  # 0 outside: those columns add nothing
        logits = tl.dot(t, tl.trans(h), input_precision=PRECISION) * 1.4426950408889634  # [BLOCK_I, BLOCK_N]
        p = tl.exp2(logits - lse2[None, :]) * g[None, :]
        accumulator = tl.dot(_operand(p.to(DOT_DTYPE), UPCAST), h, accumulator, input_precision=PRECISION)
    cols = tl.arange(0, BLOCK_D)
    offsets = part * I * D + items[:, None] * D + cols[None, :]
    tl.store(out_ptr + offsets, accumulator, mask=(items[:, None] < I) & (cols[None, :] < D))
