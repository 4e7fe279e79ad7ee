"""The chunk-parallel Triton scan (backend "chunk_parallel", kernels/chunk_parallel.py) against the per-token
reference: outputs, final state and every input gradient, on CUDA or under TRITON_INTERPRET=1 on CPU."""

import functools
import importlib.util
import itertools

import pytest
import torch
from scan_cases import assert_close_to, make_inputs, run_with_grads

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SHAPE = dict(B=2, H=3, K=8, V=12)


@pytest.mark.parametrize("T, L, with_beta", list(itertools.product((1, 17, 70), (0, 1, 3), (True, False))))
def test_chunk_parallel_matches_naive(T, L, with_beta):
    """L = 0 with beta is Gated DeltaNet, L >= 1 PRISM, beta None SSD / gated linear attention; T = 17 and
    70 end inside a chunk (of 16 by default) and span two and five."""
    with_initial_state = (T + L) % 2 == 0  # both for every T and L
    inputs = make_inputs(T=T, L=L, with_beta=with_beta, with_initial_state=with_initial_state, **SHAPE, seed=T + 7 * L,
                         device=DEVICE)
    assert_close_to(run_with_grads(inputs, "chunk_parallel"), run_with_grads(inputs, "naive"), rtol=1e-4)


@pytest.mark.parametrize("chunk_size, value_block", [(16, 16), (64, 16), (32, 32)])
def test_chunk_parallel_block_sizes_agree_with_naive(chunk_size, value_block, monkeypatch):
    """Chunks of 16, 32 and 64, and the value dimension split over programs (partial key-side sums)."""
    from prism_rec.kernels import chunk_parallel

    monkeypatch.setattr(chunk_parallel, "chunk_parallel_delta_scan",
                        functools.partial(chunk_parallel.chunk_parallel_delta_scan, chunk=chunk_size,
                                          sequential_value=value_block, parallel_value=value_block,
                                          sequential_stages=2))
    inputs = make_inputs(B=1, T=70, H=2, K=16, V=32, L=2, with_beta=True, with_initial_state=True, seed=5,
                         device=DEVICE)
    assert_close_to(run_with_grads(inputs, "chunk_parallel"), run_with_grads(inputs, "naive"), rtol=1e-4)


def test_chunk_parallel_matches_naive_at_head_width_64():
    inputs = make_inputs(B=1, T=40, H=1, K=64, V=64, L=3, with_beta=True, with_initial_state=True, seed=3,
                         device=DEVICE)
    assert_close_to(run_with_grads(inputs, "chunk_parallel"), run_with_grads(inputs, "naive"), rtol=1e-4)


def test_chunk_parallel_bf16_inputs_close_to_fp32_reference():
    """bf16 q, k, v and extra writes (fp32 g, beta, initial state): outputs and gradients within bf16 rounding."""
    inputs = make_inputs(T=40, L=2, with_beta=True, with_initial_state=True, **SHAPE, seed=11, device=DEVICE)
    reference = run_with_grads(inputs, "naive")
    low_precision = ("q", "k", "v", "extra_k", "extra_v")
    bf16 = {n: None if x is None else (x.detach().to(torch.bfloat16) if n in low_precision else x.detach())
            .requires_grad_() for n, x in inputs.items()}
    assert_close_to(run_with_grads(bf16, "chunk_parallel"), reference, rtol=2e-2)


def test_chunk_parallel_block_size_rule():
    """Chunks of 16; parallel value blocks of at most 64 (32 with longer chunks); the sequential passes split
    the value dimension until about 128 programs; 4 warps up to key width 32, else 8, but 4 in the forward's
    parallel kernels at key width 128; two stages; fp32 chunk states."""
    from prism_rec.kernels.chunk_parallel import Blocks, parallel_block_sizes

    assert parallel_block_sizes(256, 200, 4, 32, 32) == Blocks(16, 32, 32, 32, 4, 4, 4, 2, 32)
    assert parallel_block_sizes(8, 8192, 8, 128, 128) == Blocks(16, 128, 64, 64, 4, 8, 8, 2, 32)
    assert parallel_block_sizes(8, 8192, 8, 128, 128, chunk=32) == Blocks(32, 128, 64, 32, 4, 8, 8, 2, 32)
    blocks = parallel_block_sizes(64, 1024, 4, 64, 64, sequential_value=16, sequential_stages=3)
    assert (blocks.sequential_value, blocks.parallel_value, blocks.sequential_stages) == (16, 64, 3)
    assert parallel_block_sizes(8, 8192, 8, 128, 128, 3).forward_warps == 8  # 4 timed at L = 0 only


def test_chunk_parallel_block_overrides_are_checked():
    from prism_rec.kernels.chunk_parallel import Blocks, parallel_block_sizes

    assert Blocks.parse("chunk=32,sequential_stages=2") == {"chunk": 32, "sequential_stages": 2}
    with pytest.raises(ValueError, match="'stages=2'.*sequential_stages"):
        Blocks.parse("stages=2")
    with pytest.raises(ValueError, match="'chunk=0'"):
        Blocks.parse("chunk=0")
    with pytest.raises(ValueError, match="unknown block override"):
        parallel_block_sizes(1, 16, 1, 16, 16, stages=2)
    with pytest.raises(ValueError, match="state_bits=8: expected 16 or 32"):
        parallel_block_sizes(1, 16, 1, 16, 16, state_bits=8)
    with pytest.raises(ValueError, match="unknown block override 'key'"):
        parallel_block_sizes(1, 16, 1, 32, 16, key=16)  # the key width follows from K
    for bad, expected in (({"chunk": 24}, "16, 32 or 64"), ({"sequential_value": 24}, "power of two"),
                          ({"parallel_value": 8}, "power of two"), ({"gradient_warps": 3}, "1, 2, 4, 8 or 16"),
                          ({"sequential_stages": 9}, "1 to 4")):
        with pytest.raises(ValueError, match=expected):
            parallel_block_sizes(1, 16, 1, 16, 16, **bad)


def test_chunk_parallel_bf16_chunk_states_stay_within_bf16_rounding(monkeypatch):
    """S_c and dS_c stored in bf16 for the gradient kernel (state_bits=16): outputs exact, gradients within
    the bf16 bound of the other bf16 test."""
    from prism_rec.kernels import chunk_parallel

    monkeypatch.setattr(chunk_parallel, "chunk_parallel_delta_scan",
                        functools.partial(chunk_parallel.chunk_parallel_delta_scan, state_bits=16))
    inputs = make_inputs(T=40, L=2, with_beta=True, with_initial_state=True, **SHAPE, seed=11, device=DEVICE)
    assert_close_to(run_with_grads(inputs, "chunk_parallel"), run_with_grads(inputs, "naive"), rtol=2e-2)
