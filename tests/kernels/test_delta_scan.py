"""delta_scan: the chunked PyTorch path against the per-token reference, and input handling."""

import importlib
import importlib.util
import itertools

import pytest
import torch
from prism_rec.kernels import delta_scan
from scan_cases import assert_close_to, make_inputs, run_with_grads

HAS_TRITON = importlib.util.find_spec("triton") is not None
TRITON_BACKENDS = ["triton", "chunk_parallel", "chunk_split"]
SCAN_BACKENDS = ["naive", "torch"] + (TRITON_BACKENDS if HAS_TRITON else [])


def device_for(backend):
    """Triton runs on CUDA when present, else on CPU tensors through its interpreter (see conftest)."""
    return "cuda" if backend in TRITON_BACKENDS and torch.cuda.is_available() else "cpu"

SHAPE = dict(B=2, H=3, K=8, V=12)


@pytest.mark.parametrize("T, L, with_beta, with_initial_state", [
    (T, L, with_beta, with_init)
    for T, L, (with_beta, with_init) in itertools.product((1, 17, 63, 130), (0, 1, 2, 3),
                                                          itertools.product((True, False), repeat=2))
])
def test_torch_matches_naive(T, L, with_beta, with_initial_state):
    inputs = make_inputs(T=T, L=L, with_beta=with_beta, with_initial_state=with_initial_state, **SHAPE, seed=T + 7 * L)
    assert_close_to(run_with_grads(inputs, "torch"), run_with_grads(inputs, "naive"), rtol=1e-4)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("T, L, with_beta", list(itertools.product((1, 17, 63, 130), (0, 1, 2, 3), (True, False))))
def test_triton_matches_naive(T, L, with_beta):
    with_initial_state = (T + L) % 2 == 1  # half the cases, covering both for every T and L
    inputs = make_inputs(T=T, L=L, with_beta=with_beta, with_initial_state=with_initial_state, **SHAPE, seed=T + 7 * L,
                         device=device_for("triton"))
    assert_close_to(run_with_grads(inputs, "triton"), run_with_grads(inputs, "naive"), rtol=1e-4)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("chunk_size, value_block", [(16, 16), (32, 16), (64, 32)])
def test_triton_block_sizes_agree_with_naive(chunk_size, value_block, monkeypatch):
    """Several chunks per program and the value dimension split over programs (partial key-side sums)."""
    import functools

    from prism_rec.kernels import triton_chunk

    monkeypatch.setattr(triton_chunk, "triton_delta_scan",
                        functools.partial(triton_chunk.triton_delta_scan, chunk_size=chunk_size,
                                          value_block=value_block))
    inputs = make_inputs(B=1, T=70, H=2, K=16, V=32, L=2, with_beta=True, with_initial_state=True,
                         device=device_for("triton"))
    assert_close_to(run_with_grads(inputs, "triton"), run_with_grads(inputs, "naive"), rtol=1e-4)


class RefusingWideValueBlocks:
    """A kernel whose launches Triton refuses for want of shared memory when the value block exceeds ``limit``
    (as the GPU does for the L > 0 backward at width 128); narrower ones run the real kernel."""

    def __init__(self, kernel, limit):
        self.kernel, self.limit, self.tried = kernel, limit, []

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.tried.append(options["BV"])
            if options["BV"] > self.limit:
                from triton.runtime.errors import OutOfResources
                raise OutOfResources(262144, 232448, "shared memory")
            return self.kernel[grid](*args, **options)
        return launch


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_triton_halves_a_value_block_the_gpu_refuses(monkeypatch):
    """A refused launch (forward or backward) is retried with half the value block, down to what fits, and
    the result is still the recurrence's; the fitting block is remembered, so later calls try it first."""
    from prism_rec.kernels import triton_chunk

    monkeypatch.setattr(triton_chunk, "_FITTING_VALUE_BLOCKS", {})
    forward = RefusingWideValueBlocks(triton_chunk._forward_kernel, 32)
    backward = RefusingWideValueBlocks(triton_chunk._backward_kernel, 16)
    monkeypatch.setattr(triton_chunk, "_forward_kernel", forward)
    monkeypatch.setattr(triton_chunk, "_backward_kernel", backward)
    inputs = make_inputs(B=1, T=20, H=1, K=16, V=64, L=2, with_beta=True, with_initial_state=True, seed=5,
                         device=device_for("triton"))
    assert_close_to(run_with_grads(inputs, "triton"), run_with_grads(inputs, "naive"), rtol=1e-4)
    # the automatic block is 32 here (one program: _value_block halves 64); the backward starts at the forward's
    assert forward.tried == [32] and backward.tried == [32, 16]
    forward.limit = 16
    run_with_grads(inputs, "triton")
    assert forward.tried[1:] == [32, 16] and backward.tried[2:] == [16]


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_triton_matches_naive_at_head_width_64():
    """The default tiles at the width of the throughput shapes: chunks of 16, keys and values 64 wide."""
    inputs = make_inputs(B=1, T=40, H=1, K=64, V=64, L=2, with_beta=True, with_initial_state=True, seed=3,
                         device=device_for("triton"))
    assert_close_to(run_with_grads(inputs, "triton"), run_with_grads(inputs, "naive"), rtol=1e-4)


INTERPRETED = HAS_TRITON and not torch.cuda.is_available()


@pytest.mark.skipif(not INTERPRETED, reason="checks the accesses of Triton's interpreter (CPU, no CUDA device)")
def test_interpreter_bounds_record_a_read_past_a_tensor():
    """The access recorder flags a load one element past its tensor and nothing for a masked one."""
    import triton
    import triton.language as tl
    from interpreter_bounds import recording_accesses

    @triton.jit
    def copy(x_ptr, y_ptr, n, past, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n + past, other=0.0), mask=i < n)

    x, y = torch.randn(10), torch.empty(10)
    with recording_accesses() as violations:
        copy[(1,)](x, y, 10, 0, BLOCK=16)
        assert violations == []
        copy[(1,)](x, y, 10, 1, BLOCK=16)
    assert len(violations) == 1 and "copy load" in violations[0] and "('x_ptr', 0, 40)" in violations[0]


@pytest.mark.skipif(not INTERPRETED, reason="checks the accesses of Triton's interpreter (CPU, no CUDA device)")
@pytest.mark.parametrize("B, T, L, with_grad, value_block", [
    (3, 21, 0, False, None),   # the authors' protocol's validation forward: one partial chunk of 32, 3 value blocks
    (3, 21, 0, True, 128),     # its training step with the whole value width in one block
    (1, 21, 0, True, 64),      # two value blocks: the key-side partial sums in two slots
    (3, 33, 2, True, None),    # a full chunk then one token, PRISM's extra writes
    (1, 64, 2, False, 128),    # two full chunks, no grad
])
def test_triton_stays_inside_its_tensors_at_head_width_128(B, T, L, with_grad, value_block, monkeypatch):
    """K = V = 128 (chunks of 32, key and value tiles 128 wide): every load and store of every launch,
    forward (with and without the chunk states kept for a backward) and backward, stays inside one tensor
    argument, and the results are the recurrence's."""
    import functools

    from interpreter_bounds import recording_accesses
    from prism_rec.kernels import triton_chunk

    monkeypatch.setattr(triton_chunk, "triton_delta_scan",
                        functools.partial(triton_chunk.triton_delta_scan, value_block=value_block))
    inputs = make_inputs(B=B, T=T, H=2, K=128, V=128, L=L, with_beta=True, with_initial_state=with_grad, seed=T)
    if not with_grad:
        inputs = {n: None if x is None else x.detach() for n, x in inputs.items()}
    with recording_accesses() as violations:
        if with_grad:
            result = run_with_grads(inputs, "triton")
        else:
            o, state = delta_scan(**inputs, output_final_state=True, backend="triton")
            result = {"o": o, "final_state": state}
    assert violations == []
    if with_grad:
        expected = run_with_grads(inputs, "naive")
    else:
        o, state = delta_scan(**inputs, output_final_state=True, backend="naive")
        expected = {"o": o, "final_state": state}
    assert_close_to(result, expected, rtol=1e-4)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_chunk_length_rule():
    """Chunks of 16 up to key width 64 (timed faster there), else 32 once T > 16."""
    from prism_rec.kernels.triton_chunk import _block_sizes

    assert [_block_sizes(T, K, 64)[0] for T,
            K in ((200, 32), (200, 16), (200, 64), (200, 128), (12, 128))] == [16, 16, 16, 32, 16]


@pytest.mark.parametrize("backend", SCAN_BACKENDS)
@pytest.mark.parametrize("with_beta", [True, False])
def test_left_padding_leaves_state_unchanged(backend, with_beta):
    inputs = make_inputs(T=40, L=2, with_beta=with_beta, with_initial_state=True, **SHAPE, device=device_for(backend))
    inputs = {n: None if x is None else x.detach() for n, x in inputs.items()}
    padded = dict(inputs)
    pad = 9
    for name in ("q", "k", "v", "g", "beta", "extra_k", "extra_v"):
        if inputs[name] is not None:
            x = inputs[name].clone()
            x[:, :pad] = torch.randn_like(x[:, :pad]) if name in ("q", "beta") else 0.0
            padded[name] = x
    _, state_padded = delta_scan(**padded, output_final_state=True, backend=backend)
    unpadded = {n: x if x is None or n == "initial_state" else x[:, pad:] for n, x in padded.items()}
    o_tail, state_tail = delta_scan(**unpadded, output_final_state=True, backend=backend)
    o_full, _ = delta_scan(**padded, output_final_state=True, backend=backend)
    torch.testing.assert_close(state_padded, state_tail, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o_full[:, pad:], o_tail, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", SCAN_BACKENDS)
@pytest.mark.parametrize("with_beta", [True, False])
def test_extra_write_reaches_every_output(backend, with_beta):
    inputs = make_inputs(B=1, T=70, H=2, K=8, V=12, L=3, with_beta=with_beta, with_initial_state=False,
                         device=device_for(backend))
    inputs = {n: None if x is None else x.detach() for n, x in inputs.items()}
    o_with, _ = delta_scan(**inputs, backend=backend)
    o_without, _ = delta_scan(**{**inputs, "extra_k": None, "extra_v": None}, backend=backend)
    change_per_token = (o_with - o_without).abs().amax(dim=(0, 2, 3))  # [T]
    assert (change_per_token > 1e-3).all()


def test_final_state_only_when_asked_and_output_dtype():
    inputs = {n: None if x is None else x.detach().to(torch.bfloat16) for n,
              x in make_inputs(T=5, L=1, with_beta=True, with_initial_state=False, **SHAPE).items()}
    o, state = delta_scan(**inputs, backend="torch")
    assert state is None and o.dtype == torch.bfloat16
    _, state = delta_scan(**inputs, output_final_state=True, backend="torch")
    assert state.dtype == torch.float32 and state.shape == (2, 3, 8, 12)


def test_default_scale_is_inverse_sqrt_key_dim():
    inputs = {n: None if x is None else x.detach() for n,
              x in make_inputs(T=6, L=0, with_beta=True, with_initial_state=False, **SHAPE).items()}
    o_default, _ = delta_scan(**inputs, backend="naive")
    o_explicit, _ = delta_scan(**inputs, scale=8 ** -0.5, backend="naive")
    torch.testing.assert_close(o_default, o_explicit)


@pytest.mark.parametrize("name, bad_shape, message", [
    ("k", (2, 5, 3, 9), "k must have shape"),
    ("v", (2, 5, 4, 12), "v must have shape"),
    ("g", (2, 5, 3, 1), "g must have shape"),
    ("beta", (2, 5), "beta must have shape"),
    ("extra_v", (2, 5, 3, 2, 12), "extra_v must have shape"),
    ("initial_state", (2, 3, 12, 8), "initial_state must have shape"),
])
def test_shape_errors_name_the_argument(name, bad_shape, message):
    inputs = {n: None if x is None else x.detach() for n,
              x in make_inputs(T=5, L=1, with_beta=True, with_initial_state=True, **SHAPE).items()}
    inputs[name] = torch.zeros(bad_shape)
    with pytest.raises(ValueError, match=message):
        delta_scan(**inputs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs CPU tensors with no CUDA device")
def test_triton_on_cpu_without_interpreter_is_rejected(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    inputs = {n: None if x is None else x.detach() for n,
              x in make_inputs(T=5, L=0, with_beta=True, with_initial_state=False, **SHAPE).items()}
    with pytest.raises(ValueError, match="CUDA"):
        delta_scan(**inputs, backend="triton")


def test_unknown_backend_and_lonely_extra_are_rejected():
    inputs = {n: None if x is None else x.detach() for n,
              x in make_inputs(T=5, L=1, with_beta=True, with_initial_state=False, **SHAPE).items()}
    with pytest.raises(ValueError, match="backend"):
        delta_scan(**inputs, backend="cuda")
    with pytest.raises(ValueError, match="together"):
        delta_scan(**{**inputs, "extra_v": None})


@pytest.mark.skipif(not HAS_TRITON or torch.cuda.device_count() < 2, reason="needs triton and two CUDA devices")
def test_triton_runs_on_a_device_other_than_the_current_one():
    """Tensors on cuda:1 while cuda:0 is current: the kernels must launch on the tensors' device."""
    torch.cuda.set_device(0)
    inputs = make_inputs(T=70, L=2, with_beta=True, with_initial_state=True, **SHAPE, device="cuda:1")
    assert_close_to(run_with_grads(inputs, "triton"), run_with_grads(inputs, "naive"), rtol=1e-4)


def test_auto_backend_takes_chunk_parallel_from_the_measured_length_on():
    """The fused kernel below CHUNK_PARALLEL_MIN_T on CUDA, chunk_parallel from it on (results/kernels.md),
    the PyTorch path off CUDA whatever the length."""
    module = importlib.import_module("prism_rec.kernels.delta_scan")  # the package exports the function
    threshold = module.CHUNK_PARALLEL_MIN_T
    if importlib.util.find_spec("triton") is not None:
        assert module.auto_backend(True, 200) == "triton"
        assert module.auto_backend(True, threshold - 1) == "triton"
        assert module.auto_backend(True, threshold) == "chunk_parallel"
    assert module.auto_backend(False, 8192) == "torch"
