"""The delta scan's custom op (kernels/compiled_scan.py) traced by torch.compile ("aot_eager": the traced
forward and backward graphs run eagerly) against the eager scan, output and input gradients, with the
chunked PyTorch backend and the Triton one (under TRITON_INTERPRET=1 on CPU); and torch.library's checks
of the op's schema, fake implementation and autograd registration."""

import importlib.util

import pytest
import torch
from prism_rec.kernels.compiled_scan import delta_scan

from tests.kernels.scan_cases import make_inputs

TRITON = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")


@pytest.mark.parametrize("backend", ["torch", *(pytest.param(b, marks=TRITON)
                                              for b in ("triton", "chunk_parallel", "chunk_split"))])
@pytest.mark.parametrize("with_beta, L", [(True, 2), (False, 0)])
def test_scan_op_under_compile_matches_eager(backend, with_beta, L):
    device = "cuda" if backend != "torch" and torch.cuda.is_available() else "cpu"  # else Triton's interpreter
    inputs = make_inputs(1, 20, 2, 16, 16, L, with_beta, with_initial_state=False, device=device)
    del inputs["initial_state"]
    names = [name for name, x in inputs.items() if x is not None]

    def output_and_grads(scan):
        o = scan(**inputs, backend=backend)
        weights = torch.linspace(-1, 1, o.numel(), device=o.device).view(o.shape)
        return o, torch.autograd.grad((o * weights).sum(), [inputs[n] for n in names])

    o_eager, grads_eager = output_and_grads(delta_scan)
    o_compiled, grads_compiled = output_and_grads(torch.compile(delta_scan, backend="aot_eager", fullgraph=True))
    torch.testing.assert_close(o_compiled, o_eager)
    for name, compiled, eager in zip(names, grads_compiled, grads_eager):
        torch.testing.assert_close(compiled, eager, msg=f"d_{name}")


def test_scan_op_passes_opcheck():
    inputs = make_inputs(1, 5, 2, 4, 4, 1, True, with_initial_state=False)
    args = (*(inputs[n] for n in ("q", "k", "v", "g", "beta", "extra_k", "extra_v")), 0.5, "torch")
    torch.library.opcheck(torch.ops.prism_rec.delta_scan.default, args,
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
