"""``delta_scan`` as a torch.library custom op, so that torch.compile (fullgraph, CUDA graphs) can call it.

Eager calls go straight to ``delta_scan``; while torch.compile traces, the scan is the opaque op
``prism_rec::delta_scan``, whose backward op recomputes the scan under autograd and differentiates it
(one extra forward scan per backward, through the public ``delta_scan`` only, so the op does not depend
on the internals of any backend). Only the layers' use is covered: no initial state, no final state.
"""

from __future__ import annotations

import contextlib

import torch

from .delta_scan import delta_scan as eager_delta_scan


@torch.library.custom_op("prism_rec::delta_scan", mutates_args=())
def _scan_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor | None,
             extra_k: torch.Tensor | None, extra_v: torch.Tensor | None, scale: float, backend: str) -> torch.Tensor:
    with torch.no_grad():
        o, _ = eager_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale=scale, backend=backend)
    return o.contiguous()  # the layout of the fake output below


@_scan_op.register_fake
def _(q, k, v, g, beta, extra_k, extra_v, scale, backend):
    return v.new_empty(v.shape)  # [B, T, H, V]


@torch.library.custom_op("prism_rec::delta_scan_backward", mutates_args=())
def _scan_backward_op(d_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                      beta: torch.Tensor | None, extra_k: torch.Tensor | None, extra_v: torch.Tensor | None,
                      scale: float, backend: str) -> list[torch.Tensor]:
    """Gradients of the scan's output with respect to q, k, v, g and each given one of beta, extra_k, extra_v."""
    inputs = [x.detach().requires_grad_() for x in (q, k, v, g, beta, extra_k, extra_v) if x is not None]
    with _autograd_inside_op():
        o, _ = eager_delta_scan(*_with_absent(inputs, beta, extra_k), scale=scale, backend=backend)
        grads = torch.autograd.grad(o, inputs, d_o)
    return [grad.contiguous() for grad in grads]


@_scan_backward_op.register_fake
def _(d_o, q, k, v, g, beta, extra_k, extra_v, scale, backend):
    return [x.new_empty(x.shape)
            for x in (q, k, v, g, beta, extra_k, extra_v) if x is not None]


@contextlib.contextmanager
def _autograd_inside_op():
    """Gradients recorded inside a custom op's implementation, which the dispatcher runs with the autograd
    keys excluded (and grad mode off in a compiled backward)."""
    with (torch.enable_grad(),
          torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.AutogradFunctionality, False),
          torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.ADInplaceOrView, False)):
        yield


def _with_absent(present: list, beta, extra_k) -> list:
    """The seven scan inputs (q, k, v, g, beta, extra_k, extra_v) from the given ones, None where absent."""
    present = iter(present)
    q, k, v, g = (next(present) for _ in range(4))
    beta = None if beta is None else next(present)
    extra_k, extra_v = (None, None) if extra_k is None else (next(present), next(present))
    return [q, k, v, g, beta, extra_k, extra_v]


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:7])
    ctx.scale, ctx.backend = inputs[7], inputs[8]


def _backward(ctx, d_o):
    q, k, v, g, beta, extra_k, extra_v = ctx.saved_tensors
    grads = _scan_backward_op(d_o, q, k, v, g, beta, extra_k, extra_v, ctx.scale, ctx.backend)
    return (*_with_absent(grads, beta, extra_k), None, None)


_scan_op.register_autograd(_backward, setup_context=_setup_context)


def delta_scan(q, k, v, g, beta=None, extra_k=None, extra_v=None, scale=None, backend="auto") -> torch.Tensor:
    """``kernels.delta_scan``'s output o [B, T, H, V] (no initial or final state); the custom op while
    torch.compile traces, the eager scan otherwise."""
    if not torch.compiler.is_compiling():
        return eager_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale=scale, backend=backend)[0]
    return _scan_op(q, k, v, g, beta, extra_k, extra_v, q.shape[-1] ** -0.5 if scale is None else float(scale), backend)
