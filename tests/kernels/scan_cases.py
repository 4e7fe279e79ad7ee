"""Random inputs and comparisons shared by the delta_scan tests."""

import torch
import torch.nn.functional as F
from prism_rec.kernels import delta_scan

INPUT_NAMES = ("q", "k", "v", "g", "beta", "extra_k", "extra_v", "initial_state")


def make_inputs(B, T, H, K, V, L, with_beta, with_initial_state, device="cpu", seed=0):
    """fp32 inputs with unit-norm keys, decays in (0, 1) and beta in (0, 1); None where absent."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    inputs = {
        "q": randn(B, T, H, K),
        "k": F.normalize(randn(B, T, H, K), dim=-1),
        "v": randn(B, T, H, V),
        "g": F.logsigmoid(randn(B, T, H) + 2.0),
        "beta": torch.sigmoid(randn(B, T, H)) if with_beta else None,
        "extra_k": 0.5 * randn(B, T, H, L, K) if L else None,
        "extra_v": 0.5 * randn(B, T, H, L, V) if L else None,
        "initial_state": randn(B, H, K, V) if with_initial_state else None,
    }
    return {name: None if x is None else x.to(device).requires_grad_() for name, x in inputs.items()}


def run_with_grads(inputs, backend, seed=1):
    """Output, final state and input gradients of a fixed random linear loss."""
    o, state = delta_scan(**inputs, output_final_state=True, backend=backend)
    gen = torch.Generator().manual_seed(seed)
    d_o = torch.randn(o.shape, generator=gen).to(o.device)
    d_state = torch.randn(state.shape, generator=gen).to(o.device)
    grads = torch.autograd.grad((o.float() * d_o).sum() + (state * d_state).sum(),
                                [inputs[n] for n in INPUT_NAMES if inputs[n] is not None])
    names = [n for n in INPUT_NAMES if inputs[n] is not None]
    return {"o": o.detach(), "final_state": state.detach(), **{"d_" + n: gr for n, gr in zip(names, grads)}}


def relative_error(actual, expected):
    # absolute when the reference norm is below 1 (e.g. d_g = 0 at T = 1)
    return ((actual.float() - expected.float()).norm() / expected.float().norm().clamp_min(1.0)).item()


def assert_close_to(actual, expected, rtol):
    assert actual.keys() == expected.keys()
    errors = {name: relative_error(actual[name], expected[name]) for name in expected}
    bad = {name: err for name, err in errors.items() if not err <= rtol}
    assert not bad, f"relative errors above {rtol}: {bad}"
