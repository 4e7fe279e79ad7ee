"""Public entry point: one scan for linear attention, SSD, Gated DeltaNet and PRISM's rank-L write."""

import importlib.util
import os

from .chunk import chunk_delta_scan
from .naive import naive_delta_scan

BACKENDS = ("auto", "naive", "torch", "triton", "chunk_parallel", "chunk_split")
TRITON_BACKENDS = ("triton", "chunk_parallel", "chunk_split")
# From this length on, "auto" takes chunk_parallel on CUDA: on the H200 (bf16, forward+backward, L = 0) it is
# the faster kernel at T >= 1024 and the fused kernel stays ahead at T <= 200 (results/kernels.md has the times).
CHUNK_PARALLEL_MIN_T = 1024


def auto_backend(on_cuda: bool, length: int) -> str:
    """The backend "auto" resolves to for a [B, ``length``, H, K] input: the Triton kernels on CUDA when
    Triton is installed (the fused one below ``CHUNK_PARALLEL_MIN_T`` tokens, chunk_parallel from it on),
    the chunked PyTorch path elsewhere."""
    if not on_cuda or importlib.util.find_spec("triton") is None:
        return "torch"
    return "chunk_parallel" if length >= CHUNK_PARALLEL_MIN_T else "triton"


def _check_shape(name, tensor, expected, described):
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {described} = {tuple(expected)}, got {tuple(tensor.shape)}")


def _validate(q, k, v, g, beta, extra_k, extra_v, initial_state, backend):
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if q.dim() != 4:
        raise ValueError(f"q must have shape [B, T, H, K], got {tuple(q.shape)}")
    B, T, H, K = q.shape
    if T < 1:
        raise ValueError(f"q must hold at least one token (T >= 1), got shape {tuple(q.shape)}")
    _check_shape("k", k, (B, T, H, K), "[B, T, H, K] like q")
    if v.dim() != 4:
        raise ValueError(f"v must have shape [B, T, H, V], got {tuple(v.shape)}")
    V = v.shape[-1]
    _check_shape("v", v, (B, T, H, V), "[B, T, H, V]")
    _check_shape("g", g, (B, T, H), "[B, T, H]")
    if beta is not None:
        _check_shape("beta", beta, (B, T, H), "[B, T, H]")
    _validate_extra(extra_k, extra_v, (B, T, H, K, V))
    if initial_state is not None:
        _check_shape("initial_state", initial_state, (B, H, K, V), "[B, H, K, V]")
    if backend in TRITON_BACKENDS and not q.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"backend {backend!r} needs CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors)")
    for name, tensor in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("extra_k", extra_k),
                         ("extra_v", extra_v), ("initial_state", initial_state)):
        if tensor is not None and not tensor.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {tensor.dtype}")
        if tensor is not None and tensor.device != q.device:
            raise ValueError(f"{name} is on {tensor.device} but q is on {q.device}")


def _validate_extra(extra_k, extra_v, sizes: tuple[int, int, int, int, int]) -> None:
    """The rank-L extra writes: both or neither, extra_k [B, T, H, L, K] and extra_v [B, T, H, L, V]."""
    B, T, H, K, V = sizes
    if (extra_k is None) != (extra_v is None):
        raise ValueError("extra_k and extra_v must be given together")
    if extra_k is not None:
        if extra_k.dim() != 5 or extra_k.shape[3] < 1:
            raise ValueError(f"extra_k must have shape [B, T, H, L, K] with L >= 1, got {tuple(extra_k.shape)}")
        L = extra_k.shape[3]
        _check_shape("extra_k", extra_k, (B, T, H, L, K), "[B, T, H, L, K]")
        _check_shape("extra_v", extra_v, (B, T, H, L, V), "[B, T, H, L, V]")


def delta_scan(q, k, v, g, beta=None, extra_k=None, extra_v=None, scale=None, initial_state=None,
               output_final_state=False, backend="auto"):
    """Gated delta-rule scan with an optional rank-L extra write per token.

    Per batch element and head, with state S [K, V] and alpha_t = exp(g_t):
        beta given: S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T + sum_l ek_{t,l} ev_{t,l}^T
        beta None:  S_t = alpha_t S_{t-1} + k_t v_t^T + sum_l ek_{t,l} ev_{t,l}^T
        o_t = scale * S_t^T q_t

    q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H] (log-decay, <= 0); beta: [B, T, H] or None;
    extra_k: [B, T, H, L, K] and extra_v: [B, T, H, L, V] or None; initial_state: [B, H, K, V] or None.
    scale defaults to K ** -0.5. Returns (o [B, T, H, V] in v's dtype, final state [B, H, K, V] fp32
    or None). backend: "naive" (per-token loop), "torch" (chunked PyTorch), "triton" (fused kernels, one
    program per (batch, head) walking all chunks), "chunk_parallel" (Triton, intra-chunk work parallel over
    chunks, only the state recurrence sequential; kernels/chunk_parallel.py), "chunk_split" (Triton, chunks of 64,
    forward and backward split into WY, state-passing, output and separate gradient kernels;
    kernels/chunk_split.py), "auto" (``auto_backend``: on CUDA
    triton below ``CHUNK_PARALLEL_MIN_T`` tokens and chunk_parallel from it on, torch elsewhere).
    """
    _validate(q, k, v, g, beta, extra_k, extra_v, initial_state, backend)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    if backend == "auto":
        backend = auto_backend(q.is_cuda, q.shape[1])
    if backend == "naive":
        o, final_state = naive_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state)
    elif backend == "torch":
        o, final_state = chunk_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state)
    elif backend == "chunk_parallel":
        from .chunk_parallel import chunk_parallel_delta_scan

        o, final_state = chunk_parallel_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state)
    elif backend == "chunk_split":
        from .chunk_split import chunk_split_delta_scan

        o, final_state = chunk_split_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state)
    else:
        from .triton_chunk import triton_delta_scan

        o, final_state = triton_delta_scan(q, k, v, g, beta, extra_k, extra_v, scale, initial_state)
    return o.to(v.dtype), (final_state if output_final_state else None)
