"""Mamba-2 against a per-token SSD recurrence written from the paper's equations (Dao & Gu 2024)."""

import math

import pytest
import torch
import torch.nn.functional as F
from prism_rec.baselines.mamba2 import Mamba2, Mamba2Mixer, Mamba2Stack

from prism_rec.models.nn import PreNormStack


def causal_depthwise_conv(x, weight, bias):
    """out[t, c] = bias[c] + sum_j weight[c, 0, j] * x[t - (K - 1) + j, c], zeros before the start."""
    T, K = x.shape[1], weight.shape[-1]
    out = bias.expand_as(x).clone()
    for j in range(K):
        shift = K - 1 - j
        out[:, shift:] = out[:, shift:] + weight[:, 0, j] * x[:, : T - shift]
    return out


def reference_mixer(mixer, u):
    """The Mamba-2 mixer for unpadded u [B, T, d], with the SSD recurrence token by token.

    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T (h [N, P] per head); y_t = C_t^T h_t + D x_t;
    out = out_proj(RMSNorm(y * SiLU(z))).
    """
    Bsz, T, _ = u.shape
    H, P, N, E = mixer.n_heads, mixer.head_dim, mixer.d_state, mixer.d_inner
    z, xBC, dt_raw = (u @ mixer.in_proj.weight.t()).split([E, E + 2 * N, H], -1)
    xBC = F.silu(causal_depthwise_conv(xBC, mixer.conv.conv.weight, mixer.conv.conv.bias))
    x, B, C = xBC.split([E, N, N], -1)
    x = x.reshape(Bsz, T, H, P)
    dt = F.softplus(dt_raw + mixer.dt_bias)  # [B, T, H]
    A = -torch.exp(mixer.A_log)  # [H]
    h = torch.zeros(Bsz, H, N, P)
    ys = []
    for t in range(T):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]  # [B, H, 1, 1]
        write = dt[:, t, :, None, None] * B[:, t, None, :, None] * x[:, t, :, None, :]  # dt B x^T [B, H, N, P]
        h = decay * h + write
        ys.append(torch.einsum("bn,bhnp->bhp", C[:, t], h) + mixer.D[:, None] * x[:, t])
    y = torch.stack(ys, 1).reshape(Bsz, T, E) * F.silu(z)
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + mixer.norm.eps) * mixer.norm.weight
    return y @ mixer.out_proj.weight.t()


def make_mixer(**options):
    torch.manual_seed(0)
    mixer = Mamba2Mixer(d_model=16, n_heads=2, d_state=8, **options)
    with torch.no_grad():  # larger steps than the initialisation, so the decays matter over a short sequence
        mixer.dt_bias.copy_(torch.tensor([0.3, -1.0]))
    return mixer


@pytest.mark.parametrize("backend", ["torch", "naive"])
def test_mixer_matches_per_token_recurrence(backend):
    mixer = make_mixer(backend=backend)
    torch.manual_seed(1)
    u = torch.randn(2, 19, 16, requires_grad=True)
    mask = torch.ones(2, 19, dtype=torch.bool)
    out = mixer(u, mask)
    expected = reference_mixer(mixer, u)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)

    upstream = torch.randn_like(out)
    parameters = [u, *mixer.parameters()]
    grads = torch.autograd.grad((out * upstream).sum(), parameters)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), parameters)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_left_padded_mixer_matches_recurrence_on_real_items():
    mixer = make_mixer()
    torch.manual_seed(2)
    u = torch.randn(1, 12, 16)
    padded = torch.cat([torch.randn(1, 5, 16), u], 1)  # garbage at padded positions must not leak
    mask = torch.cat([torch.zeros(1, 5, dtype=torch.bool), torch.ones(1, 12, dtype=torch.bool)], 1)
    with torch.no_grad():
        torch.testing.assert_close(mixer(padded, mask)[:, 5:], reference_mixer(mixer, u), rtol=1e-4, atol=1e-5)


def test_official_initialisation_and_head_layout():
    torch.manual_seed(0)
    mixer = Mamba2Mixer(d_model=64, n_heads=2)
    assert (mixer.d_inner, mixer.head_dim, mixer.d_state) == (128, 64, 64)
    torch.manual_seed(0)
    many = Mamba2Mixer(d_model=64, n_heads=64)  # many heads to see the initial ranges
    dt = F.softplus(many.dt_bias.detach())
    assert dt.min() >= 1e-3 - 1e-6 and dt.max() <= 0.1 + 1e-6
    assert math.log(dt.max() / dt.min()) > 2.5  # log-uniform over two decades, not clustered
    A = many.A_log.detach().exp()
    assert A.min() >= 1.0 and A.max() <= 16.0
    torch.testing.assert_close(many.D.detach(), torch.ones(64))
    assert many.in_proj.weight.shape == (2 * 128 + 2 * 64 + 64, 64)  # z, x, B, C, dt


def test_blocks_are_official_residual_mixers_without_mlp_unless_asked():
    assert isinstance(Mamba2().stack, Mamba2Stack)
    with_mlp = Mamba2(mlp=True).stack
    assert isinstance(with_mlp, PreNormStack) and isinstance(with_mlp.mixers[0], Mamba2Mixer)
    torch.manual_seed(0)
    model = Mamba2(d_model=16, n_layers=1, d_state=8, dropout=0.0)
    x = torch.randn(2, 7, 16)
    mask = torch.ones(2, 7, dtype=torch.bool)
    block = model.stack
    with torch.no_grad():
        torch.testing.assert_close(model(x, mask), x + block.mixers[0](block.norms[0](x), mask))


def test_scan_inputs_keep_the_autocast_dtype(monkeypatch):
    """Under bf16 autocast the SSD scan gets C, B dt and x in the projections' bf16, as the reference's
    kernels do: the fp32 padding mask must not promote them (which sent the scan down its fp32 path)."""
    from prism_rec.baselines import mamba2 as module

    seen, scan = [], module.delta_scan

    def spy(**inputs):
        seen.append({name: inputs[name].dtype for name in ("q", "k", "v", "g")})
        return scan(**inputs)

    monkeypatch.setattr(module, "delta_scan", spy)
    model = Mamba2(d_model=16, n_layers=2, n_heads=2, d_state=8)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, :3] = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(2, 9, 16), mask)
    assert seen == [{"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.float32}] * 2
