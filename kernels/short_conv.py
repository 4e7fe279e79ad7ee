"""Fused causal depthwise short convolution with optional bias and SiLU, in Triton.

    y[b, t, c] = act(bias[c] + sum_j w[c, j] x[b, t - K + 1 + j, c])        x, y [B, T, C]; w [C, K]

(x = 0 before the sequence), the operation of ``prism_rec.models.nn.ShortConv`` in its [B, T, C] layout, so
no transposes are needed around it. Forward: one launch over (time blocks, channel blocks, B). Backward:
one launch recomputes the pre-activation and writes dy * act'(pre) in fp32; a second computes dx (the same
convolution run backwards in time) and per-time-block partial sums of dw and dbias, added up by one
reduction. Accumulation is fp32. ``naive_short_conv`` (kernels/naive.py) is the executable specification.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_T = 32
BLOCK_C = 64


@triton.jit
def _pre_activation(x_ptr, w_ptr, bias_ptr, b, t, c, T, C, HAS_BIAS: tl.constexpr, KERNEL: tl.constexpr):
    """bias + sum_j w[c, j] x[b, t - KERNEL + 1 + j, c] in fp32, [BT, BC] for times t [BT], channels c [BC]."""
    in_c = c < C
    acc = tl.zeros([t.shape[0], c.shape[0]], dtype=tl.float32)
    for j in tl.static_range(KERNEL):
        source = t - (KERNEL - 1) + j  # [BT]
        mask = ((source >= 0) & (source < T))[:, None] & in_c[None, :]
        x = tl.load(x_ptr + (b * T + source)[:, None] * C + c[None, :], mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c * KERNEL + j, mask=in_c, other=0.0).to(tl.float32)  # [BC]
        acc += x * w[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + c, mask=in_c, other=0.0).to(tl.float32)[None, :]
    return acc


@triton.jit
def _forward_kernel(x_ptr, w_ptr, bias_ptr, y_ptr, T, C, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                    KERNEL: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    b = tl.program_id(2).to(tl.int64)
    y = _pre_activation(x_ptr, w_ptr, bias_ptr, b, t, c, T, C, HAS_BIAS, KERNEL)
    if SILU:
        y = y * tl.sigmoid(y)
    mask = (t < T)[:, None] & (c < C)[None, :]
    tl.store(y_ptr + (b * T + t)[:, None] * C + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _pre_grad_kernel(x_ptr, w_ptr, bias_ptr, dy_ptr, dpre_ptr, T, C, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                     KERNEL: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """d(pre-activation) = dy * SiLU'(pre) (dy itself without SiLU), fp32 [B, T, C]."""
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    b = tl.program_id(2).to(tl.int64)
    mask = (t < T)[:, None] & (c < C)[None, :]
    offsets = (b * T + t)[:, None] * C + c[None, :]
    dpre = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    if SILU:
        pre = _pre_activation(x_ptr, w_ptr, bias_ptr, b, t, c, T, C, HAS_BIAS, KERNEL)
        sigmoid = tl.sigmoid(pre)
        dpre = dpre * sigmoid * (1.0 + pre * (1.0 - sigmoid))
    tl.store(dpre_ptr + offsets, dpre, mask=mask)


@triton.jit
def _input_grad_kernel(x_ptr, w_ptr, dpre_ptr, dx_ptr, dw_partial_ptr, dbias_partial_ptr, T, C, NTB,
                       HAS_BIAS: tl.constexpr, KERNEL: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr):
    """dx[t] = sum_j w[c, j] dpre[t + KERNEL - 1 - j]; this block's sums of
    dw[c, j] = sum_t dpre[t] x[t - KERNEL + 1 + j] and dbias[c] = sum_t dpre[t], stored at slot (b, time block)."""
    t_block = tl.program_id(0)
    t = t_block * BT + tl.arange(0, BT)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    b = tl.program_id(2).to(tl.int64)
    in_c = c < C
    in_t = t < T
    mask = in_t[:, None] & in_c[None, :]
    dpre = tl.load(dpre_ptr + (b * T + t)[:, None] * C + c[None, :], mask=mask, other=0.0)  # [BT, BC] fp32
    dx = tl.zeros([BT, BC], dtype=tl.float32)
    slot = b * NTB + t_block
    for j in tl.static_range(KERNEL):
        w = tl.load(w_ptr + c * KERNEL + j, mask=in_c, other=0.0).to(tl.float32)  # [BC]
        later = t + (KERNEL - 1 - j)  # the outputs that read x[t] through tap j
        later_mask = (later < T)[:, None] & in_c[None, :]
        dpre_later = tl.load(dpre_ptr + (b * T + later)[:, None] * C + c[None, :], mask=later_mask, other=0.0)
        dx += dpre_later * w[None, :]
        source = t - (KERNEL - 1) + j
        source_mask = ((source >= 0) & in_t)[:, None] & in_c[None, :]
        x = tl.load(x_ptr + (b * T + source)[:, None] * C + c[None, :], mask=source_mask, other=0.0).to(tl.float32)
        tl.store(dw_partial_ptr + (slot * C + c) * KERNEL + j, tl.sum(dpre * x, 0), mask=in_c)
    if HAS_BIAS:
        tl.store(dbias_partial_ptr + slot * C + c, tl.sum(dpre, 0), mask=in_c)
    tl.store(dx_ptr + (b * T + t)[:, None] * C + c[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _grid(B, T, C):
    return triton.cdiv(T, BLOCK_T), triton.cdiv(C, BLOCK_C), B


def short_conv_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool) -> torch.Tensor:
    """y [B, T, C] in x's dtype for x [B, T, C], weight [C, K], bias [C] or None."""
    B, T, C = x.shape
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty_like(x)
    _forward_kernel[_grid(B, T, C)](x, weight, x if bias is None else bias, y, T, C, HAS_BIAS=bias is not None,
                                    SILU=silu, KERNEL=weight.shape[1], BT=BLOCK_T, BC=BLOCK_C)
    return y


def short_conv_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                        silu: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(dx in x's dtype, dweight [C, K] and dbias [C] or None in the weight's dtype)."""
    B, T, C = x.shape
    K = weight.shape[1]
    x, weight, dy = x.contiguous(), weight.contiguous(), dy.contiguous()
    grid = _grid(B, T, C)
    n_time_blocks = grid[0]
    dpre = torch.empty(B, T, C, device=x.device, dtype=torch.float32)
    _pre_grad_kernel[grid](x, weight, x if bias is None else bias, dy, dpre, T, C, HAS_BIAS=bias is not None,
                           SILU=silu, KERNEL=K, BT=BLOCK_T, BC=BLOCK_C)
    dx = torch.empty_like(x)
    dw_partial = torch.empty(B * n_time_blocks, C, K, device=x.device, dtype=torch.float32)
    dbias_partial = (torch.empty(B * n_time_blocks, C, device=x.device, dtype=torch.float32)
                     if bias is not None else dpre)
    _input_grad_kernel[grid](x, weight, dpre, dx, dw_partial, dbias_partial, T, C, n_time_blocks,
                             HAS_BIAS=bias is not None, KERNEL=K, BT=BLOCK_T, BC=BLOCK_C)
    dbias = dbias_partial.sum(0).to(bias.dtype) if bias is not None else None
    return dx, dw_partial.sum(0).to(weight.dtype), dbias


@torch.library.custom_op("prism_rec::short_conv", mutates_args=())
def _short_conv_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool) -> torch.Tensor:
    return short_conv_forward(x, weight, bias, silu)


@_short_conv_op.register_fake
def _(x, weight, bias, silu):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("prism_rec::short_conv_backward", mutates_args=())
def _short_conv_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                            silu: bool) -> list[torch.Tensor]:
    return [grad for grad in short_conv_backward(dy, x, weight, bias, silu) if grad is not None]


@_short_conv_backward_op.register_fake
def _(dy, x, weight, bias, silu):
    shapes = [torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(weight)]
    return shapes + ([torch.empty_like(bias)] if bias is not None else [])


def _setup_context(ctx, inputs, output):
    x, weight, bias, ctx.silu = inputs
    ctx.save_for_backward(x, weight, bias)


def _backward(ctx, dy):
    x, weight, bias = ctx.saved_tensors
    grads = _short_conv_backward_op(dy, x, weight, bias, ctx.silu)
    return grads[0], grads[1], grads[2] if bias is not None else None, None


_short_conv_op.register_autograd(_backward, setup_context=_setup_context)


def triton_short_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                      silu: bool = True) -> torch.Tensor:
    """Causal depthwise convolution of x [B, T, C] with weight [C, K] (and bias [C]), then SiLU when ``silu``;
    differentiable in x, weight and bias, and traceable by torch.compile (a custom op)."""
    if x.dim() != 3 or weight.dim() != 2 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"short conv: x must be [B, T, C] and weight [C, K], got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (x.shape[-1],):
        raise ValueError(f"short conv: bias must be [C] = ({x.shape[-1]},), got {tuple(bias.shape)}")
    return _short_conv_op(x, weight, bias, silu)
