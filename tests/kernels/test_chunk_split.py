"""The chunk-split Triton scan (backend "chunk_split", kernels/chunk_split.py) against the per-token reference
(kernels/naive.py): outputs, final state and the gradient of every input, on CUDA or under TRITON_INTERPRET=1
on CPU."""

import functools
import importlib.util

import pytest
import torch
from scan_cases import assert_close_to, make_inputs, run_with_grads

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _ungated(inputs):
    """The same inputs with g = 0 (no decay): alpha_t = 1."""
    g = torch.zeros_like(inputs["g"]).requires_grad_()
    return {**inputs, "g": g}


@pytest.mark.parametrize("T, H, L, with_beta, gated, with_initial_state", [
    (70, 2, 0, True, True, True),     # Gated DeltaNet over two chunks of 64, the second ending at token 6
    (70, 1, 3, True, True, False),    # PRISM's rank-3 write
    (70, 2, 0, False, True, True),    # SSD / gated linear attention
    (20, 1, 3, False, False, True),   # extra writes without beta or decay
    (70, 1, 0, True, False, False),   # DeltaNet without decay
    (1, 1, 3, True, True, True),      # one token
])
def test_chunk_split_matches_naive(T, H, L, with_beta, gated, with_initial_state):
    inputs = make_inputs(B=1, T=T, H=H, K=16, V=16, L=L, with_beta=with_beta, with_initial_state=with_initial_state,
                         seed=T + L, device=DEVICE)
    if not gated:
        inputs = _ungated(inputs)
    assert_close_to(run_with_grads(inputs, "chunk_split"), run_with_grads(inputs, "naive"), rtol=1e-4)


def test_chunk_split_blocks_agree_with_naive(monkeypatch):
    """Chunks of 16 and the key and value widths split into blocks of 16 (two key blocks' shares of dG,
    two value blocks in every loop and in the sequential passes), V != K."""
    from prism_rec.kernels import chunk_split

    monkeypatch.setattr(chunk_split, "chunk_split_delta_scan",
                        functools.partial(chunk_split.chunk_split_delta_scan, chunk=16, key_block=16, value_block=16,
                                          sequential_value=16))
    inputs = make_inputs(B=1, T=20, H=1, K=32, V=24, L=1, with_beta=True, with_initial_state=True, seed=5,
                         device=DEVICE)
    assert_close_to(run_with_grads(inputs, "chunk_split"), run_with_grads(inputs, "naive"), rtol=1e-4)


def test_chunk_split_bf16_inputs_close_to_fp32_reference():
    """bf16 q, k, v and extra writes (fp32 g, beta, initial state): products in bf16 with fp32 accumulation,
    outputs and gradients within bf16 rounding of the fp32 reference, each gradient in its input's dtype (the
    kernels store the bf16 ones themselves)."""
    inputs = make_inputs(B=1, T=40, H=1, K=16, V=16, L=1, with_beta=True, with_initial_state=True, seed=11,
                         device=DEVICE)
    reference = run_with_grads(inputs, "naive")
    low_precision = ("q", "k", "v", "extra_k", "extra_v")
    bf16 = {n: None if x is None else (x.detach().to(torch.bfloat16) if n in low_precision else x.detach())
            .requires_grad_() for n, x in inputs.items()}
    result = run_with_grads(bf16, "chunk_split")
    assert {n: result["d_" + n].dtype for n, x in bf16.items() if x is not None} == {
        n: x.dtype for n, x in bf16.items() if x is not None}
    assert_close_to(result, reference, rtol=2e-2)


@pytest.mark.parametrize("option, value, message", [("chunk", 48, "chunk must be one of"),
                                                    ("key_block", 24, "key_block must be a power of two"),
                                                    ("sequential_value", 8, "sequential_value must be a power of two")])
def test_chunk_split_rejects_bad_blocks(option, value, message):
    from prism_rec.kernels.chunk_split import chunk_split_delta_scan

    inputs = make_inputs(B=1, T=4, H=1, K=16, V=16, L=0, with_beta=True, with_initial_state=False, device=DEVICE)
    with pytest.raises(ValueError, match=message):
        chunk_split_delta_scan(**inputs, scale=0.25, **{option: value})


class _FencedTorch:
    """torch for kernels/chunk_split.py, whose empty / empty_like hand out the middle third of a NaN-filled
    buffer: the thirds on either side are canaries."""

    def __init__(self):
        self.buffers = []  # (buffer, numel of the tensor in its middle)

    def __getattr__(self, name):
        return getattr(torch, name)

    def fenced(self, shape, dtype, device):
        n = torch.Size(shape).numel()
        buffer = torch.full((3 * n,), float("nan"), dtype=dtype, device=device)
        self.buffers.append((buffer, n))
        return buffer[n:2 * n].view(shape)

    def empty(self, *shape, dtype=torch.float32, device=None):
        return self.fenced(shape, dtype, device)

    def empty_like(self, x, dtype=None):
        return self.fenced(x.shape, dtype or x.dtype, x.device)

    def fenced_leaf(self, x):
        """A copy of x inside canaries, a leaf that takes gradients."""
        copy = self.fenced(x.shape, x.dtype, x.device)
        copy.copy_(x.detach())
        return copy.requires_grad_()

    def canaries_intact(self):
        return all(torch.cat([buffer[:n], buffer[2 * n:]]).isnan().all() for buffer, n in self.buffers)


def test_chunk_split_stays_inside_its_tensors(monkeypatch):
    """Every input a view into a NaN-filled buffer, and every tensor chunk_split allocates too: a read past
    a tensor's ends turns a result NaN, a write past them overwrites a canary (the interpreter faults on
    neither, the GPU does). Two batches, three heads, the last chunk partial, L = 3, an initial state, V != K."""
    from prism_rec.kernels import chunk_split

    fenced_torch = _FencedTorch()
    monkeypatch.setattr(chunk_split, "torch", fenced_torch)
    inputs = make_inputs(B=2, T=70, H=3, K=32, V=24, L=3, with_beta=True, with_initial_state=True, seed=3,
                         device=DEVICE)
    result = run_with_grads({n: None if x is None else fenced_torch.fenced_leaf(x) for n, x in inputs.items()},
                            "chunk_split")
    assert fenced_torch.canaries_intact()
    assert all(x.isfinite().all() for x in result.values())
    assert_close_to(result, run_with_grads(inputs, "naive"), rtol=1e-4)


@pytest.mark.parametrize("chunk, T", [(32, 70), (32, 150), (64, 150)])
def test_chunk_split_chunk_lengths_agree_with_naive(monkeypatch, chunk, T):
    """Chunks of 32 and 64 (two and four 16 x 16 blocks of the inverse), the last one partial: at T = 150 its
    second block ends at token 6 and, for chunks of 64, two blocks lie wholly past T."""
    from prism_rec.kernels import chunk_split

    monkeypatch.setattr(chunk_split, "chunk_split_delta_scan",
                        functools.partial(chunk_split.chunk_split_delta_scan, chunk=chunk))
    inputs = make_inputs(B=1, T=T, H=1, K=16, V=16, L=3, with_beta=True, with_initial_state=True, seed=T + chunk,
                         device=DEVICE)
    assert_close_to(run_with_grads(inputs, "chunk_split"), run_with_grads(inputs, "naive"), rtol=1e-4)


def _inverse_reference(k, g, beta, chunk):
    """(I + A)^{-1} [B, H, NT, chunk, chunk] in float64, A[t, s] = beta_t exp(G_t - G_s) (k_t . k_s) for s < t
    inside each chunk (G the chunk-local cumulative sum of g), tokens past T zero."""
    B, T, H, _ = k.shape
    NT = -(-T // chunk)
    pad = NT * chunk - T

    def chunked(x):  # [B, T, H, ...] -> [B, H, NT, chunk, ...], zero past T
        x = torch.nn.functional.pad(x.double(), (0, 0) * (x.dim() - 3) + (0, 0, 0, pad))
        return x.reshape(B, NT, chunk, H, *x.shape[3:]).transpose(2, 3).transpose(1, 2)

    k, g, beta = chunked(k), chunked(g), chunked(beta)
    G = g.cumsum(-1)
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=k.device).tril(-1)
    decay = torch.where(strict, (G[..., :, None] - G[..., None, :]).masked_fill(~strict, 0.0).exp(), 0.0)
    A = beta[..., :, None] * decay * (k @ k.transpose(-1, -2))
    return torch.linalg.inv(torch.eye(chunk, dtype=torch.float64, device=k.device) + A)


@pytest.mark.parametrize("chunk", [16, 32, 64])
def test_chunk_split_stored_inverse(monkeypatch, chunk):
    """The T = (I + A)^{-1} that the forward stores for the backward (ctx's saved `inverses`, in a NaN-filled
    buffer: every entry written) against torch.linalg.inv in float64; its upper triangle exactly zero.
    T = 150: the last chunk partial (for chunks of 64, two of its blocks wholly past T); two heads."""
    from prism_rec.kernels import chunk_split

    fenced_torch = _FencedTorch()
    monkeypatch.setattr(chunk_split, "torch", fenced_torch)
    inputs = make_inputs(B=1, T=150, H=2, K=32, V=16, L=0, with_beta=True, with_initial_state=False, seed=chunk,
                         device=DEVICE)
    o, _ = chunk_split.chunk_split_delta_scan(**inputs, scale=0.25, chunk=chunk)
    inverses = o.grad_fn.saved_tensors[7]  # _ChunkSplitScan.forward's save_for_backward
    expected = _inverse_reference(inputs["k"].detach(), inputs["g"].detach(), inputs["beta"].detach(), chunk)
    assert inverses.shape == expected.shape
    assert fenced_torch.canaries_intact()
    assert (inverses.triu(1) == 0).all()
    torch.testing.assert_close(inverses.double(), expected, rtol=1e-5, atol=1e-5)
