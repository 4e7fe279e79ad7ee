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
    outputs and gradients within bf16 rounding of the fp32 reference."""
    inputs = make_inputs(B=1, T=40, H=1, K=16, V=16, L=1, with_beta=True, with_initial_state=True, seed=11,
                         device=DEVICE)
    reference = run_with_grads(inputs, "naive")
    low_precision = ("q", "k", "v", "extra_k", "extra_v")
    bf16 = {n: None if x is None else (x.detach().to(torch.bfloat16) if n in low_precision else x.detach())
            .requires_grad_() for n, x in inputs.items()}
    assert_close_to(run_with_grads(bf16, "chunk_split"), reference, rtol=2e-2)


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
