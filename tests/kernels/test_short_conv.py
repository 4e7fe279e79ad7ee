"""The fused short convolution (kernels/short_conv.py) against the tap-by-tap reference (kernels/naive.py), and
the reference against the equation and nn.Conv1d, on CUDA or under TRITON_INTERPRET=1 on CPU: outputs and the
gradients of x, weight and bias."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from prism_rec.kernels.naive import naive_short_conv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


def _inputs(B, T, C, K, with_bias, seed, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, C, generator=generator).to(DEVICE, dtype).requires_grad_()
    weight = torch.randn(C, K, generator=generator).to(DEVICE).requires_grad_()
    bias = torch.randn(C, generator=generator).to(DEVICE).requires_grad_() if with_bias else None
    return x, weight, bias


def _with_grads(function, x, weight, bias, silu, seed=0, d_y_dtype=torch.float32):
    """[y, dx, dweight(, dbias)] in fp32 for a random d_y drawn in fp32 and rounded to ``d_y_dtype``."""
    y = function(x, weight, bias, silu)
    d_y = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed + 1)).to(y.device, d_y_dtype).float()
    tensors = [t for t in (x, weight, bias) if t is not None]
    return [y.float(), *(grad.float() for grad in torch.autograd.grad(y, tensors, d_y.to(y.dtype)))]


def test_reference_is_the_equation():
    """y[b, t, c] = SiLU(bias[c] + sum_j w[c, j] x[b, t - K + 1 + j, c]), written out per output element."""
    x, weight, bias = (t.detach() for t in _inputs(2, 6, 3, 4, True, seed=0))
    y = naive_short_conv(x, weight, bias, silu=True)
    for b in range(2):
        for t in range(6):
            for c in range(3):
                pre = bias[c] + sum(weight[c, j] * x[b, t - 3 + j, c] for j in range(4) if t - 3 + j >= 0)
                assert torch.allclose(y[b, t, c], pre * torch.sigmoid(pre), atol=1e-6)


def test_reference_matches_causal_conv1d():
    """The PyTorch path of ShortConv: a depthwise Conv1d padded K - 1 on the left."""
    x, weight, bias = (t.detach() for t in _inputs(2, 9, 5, 4, True, seed=1))
    padded = F.pad(x.transpose(1, 2), (3, 0))
    expected = F.silu(F.conv1d(padded, weight.unsqueeze(1), bias, groups=5)).transpose(1, 2)
    torch.testing.assert_close(naive_short_conv(x, weight, bias, silu=True), expected, rtol=1e-5, atol=1e-6)


@needs_triton
@pytest.mark.parametrize("B, T, C, K, with_bias, silu", [
    (2, 70, 80, 4, True, True),    # time and channels off the block multiples (32, 64), mamba2's conv
    (1, 33, 64, 4, False, True),   # Gated DeltaNet's and PRISM's convs (no bias)
    (1, 3, 16, 4, True, False),    # shorter than the kernel, no activation (the authors' anchor conv)
    (2, 40, 24, 5, True, False),   # kernel 5 (the authors' PRISM)
])
def test_triton_short_conv_matches_reference(B, T, C, K, with_bias, silu):
    from prism_rec.kernels.short_conv import triton_short_conv

    x, weight, bias = _inputs(B, T, C, K, with_bias, seed=T + C)
    got = _with_grads(triton_short_conv, x, weight, bias, silu)
    expected = _with_grads(naive_short_conv, x, weight, bias, silu)
    for name, a, b in zip(("y", "dx", "dweight", "dbias"), got, expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@needs_triton
def test_triton_short_conv_bf16_accumulates_in_fp32():
    """bf16 x with fp32 weight and bias (as under autocast): a bf16 output and dx within bf16 rounding of the fp32
    reference on the same (bf16-valued) input, and dweight, dbias summed in fp32 over all B * T positions."""
    from prism_rec.kernels.short_conv import triton_short_conv

    x, weight, bias = _inputs(2, 50, 72, 4, True, seed=3, dtype=torch.bfloat16)
    assert triton_short_conv(x, weight, bias).dtype == torch.bfloat16
    reference = _with_grads(naive_short_conv, x.detach().float().requires_grad_(), weight, bias, True,
                            d_y_dtype=torch.bfloat16)
    y, dx, dweight, dbias = _with_grads(triton_short_conv, x, weight, bias, True, d_y_dtype=torch.bfloat16)
    for a, b in ((y, reference[0]), (dx, reference[1])):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)
    for a, b in ((dweight, reference[2]), (dbias, reference[3])):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@needs_triton
def test_triton_short_conv_refuses_mismatched_shapes():
    from prism_rec.kernels.short_conv import triton_short_conv

    x, weight, bias = _inputs(1, 5, 8, 4, True, seed=4)
    with pytest.raises(ValueError, match=r"weight \[C, K\]"):
        triton_short_conv(x, weight[:4], bias)
    with pytest.raises(ValueError, match="bias must be"):
        triton_short_conv(x, weight, bias[:3])


@needs_triton
def test_short_conv_module_backends_agree():
    """ShortConv's triton backend computes what its torch backend (nn.Conv1d) does, with the same parameters."""
    from prism_rec.models.nn import ShortConv

    conv = ShortConv(40, 4, activation=True, bias=True).to(DEVICE)
    x = torch.randn(2, 37, 40, generator=torch.Generator().manual_seed(6)).to(DEVICE)
    outputs = []
    for backend in ("torch", "triton"):
        conv.conv_backend = backend
        inp = x.clone().requires_grad_()
        y = conv(inp)
        y.square().sum().backward()
        outputs.append([y.detach(), inp.grad, conv.conv.weight.grad.clone(), conv.conv.bias.grad.clone()])
        conv.zero_grad(set_to_none=True)
    for a, b in zip(*outputs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_short_conv_refuses_an_unknown_backend():
    from prism_rec.models.nn import ShortConv

    with pytest.raises(ValueError, match="ShortConv conv_backend must be one of"):
        ShortConv(8, conv_backend="cudnn")


@needs_triton
@pytest.mark.parametrize("with_bias", [True, False])
def test_triton_short_conv_traced_by_torch_compile(with_bias):
    """The custom op under torch.compile ("aot_eager", fullgraph: its fake output and its backward op traced)
    gives the eager kernel's output and gradients."""
    from prism_rec.kernels.short_conv import triton_short_conv

    x, weight, bias = _inputs(1, 21, 16, 4, with_bias, seed=7)
    compiled = torch.compile(triton_short_conv, backend="aot_eager", fullgraph=True)
    eager = _with_grads(triton_short_conv, x, weight, bias, True)
    for a, b in zip(_with_grads(compiled, x, weight, bias, True), eager):
        torch.testing.assert_close(a, b)


def test_short_conv_auto_takes_triton_only_where_it_measured_faster(monkeypatch):
    """auto: the PyTorch path on the CPU whatever the shape; on CUDA (faked here) the fused kernel only from
    TRITON_MIN_CHANNELS channels and TRITON_MIN_TOKENS tokens on."""
    from prism_rec.models import nn as blocks

    conv = blocks.ShortConv(256)
    wide_long = torch.empty(256, 200, 256)
    assert conv.auto_conv_backend(wide_long) == "torch"
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(blocks, "TRITON_INSTALLED", True)
    assert conv.auto_conv_backend(wide_long) == "triton"
    assert conv.auto_conv_backend(torch.empty(3, 16384, 256)) == "triton"
    assert conv.auto_conv_backend(torch.empty(256, 50, 256)) == "torch"
    assert conv.auto_conv_backend(torch.empty(256, 200, 128)) == "torch"
    monkeypatch.setattr(blocks, "TRITON_INSTALLED", False)
    assert conv.auto_conv_backend(wide_long) == "torch"
