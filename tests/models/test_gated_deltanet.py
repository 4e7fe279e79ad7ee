"""Gated DeltaNet: a per-token reference written from the equations (no chunking, no delta_scan), init, options.

The helpers here (causal conv at one position, per-head norms) are reused by tests/models/test_prism.py.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from prism_rec.baselines.gated_deltanet import GatedDeltaNet, GatedDeltaNetLayer

from prism_rec.registry import backbone_entry, build_backbone

BACKENDS = ("torch", "naive")


def conv_silu_at(z, conv_module, t):
    """SiLU(causal depthwise conv)(z) at position t, summing the taps by hand. z [B, T, C] -> [B, C]."""
    weight = conv_module.conv.weight[:, 0]  # [C, kernel]; PyTorch conv is a cross-correlation
    kernel = weight.shape[1]
    acc = torch.zeros_like(z[:, 0])
    for j in range(kernel):  # tap j looks j steps back
        if t - j >= 0:
            acc = acc + weight[:, kernel - 1 - j] * z[:, t - j]
    if conv_module.conv.bias is not None:
        acc = acc + conv_module.conv.bias
    return F.silu(acc)


def unit(x, eps=1e-6):
    """L2-normalise the last dimension (same eps as prism_rec.models.nn.l2norm)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gated_rmsnorm(o, gate, norm):
    """RMSNorm(o) * weight * SiLU(gate) over the last dimension."""
    return o / torch.sqrt((o * o).mean(-1, keepdim=True) + norm.eps) * norm.weight * F.silu(gate)


def token_inputs(layer, x, t):
    """The Gated DeltaNet path at token t: q, k, v [B, H, K|V], alpha, beta [B, H]."""
    B = x.shape[0]
    H = layer.n_heads
    q = unit(conv_silu_at(x @ layer.q_proj.weight.T, layer.q_conv, t).view(B, H, -1))
    k = (unit(conv_silu_at(x @ layer.k_proj.weight.T, layer.k_conv, t).view(B, H, -1))
         if layer.k_proj is not None else None)
    v = conv_silu_at(x @ layer.v_proj.weight.T, layer.v_conv, t).view(B, H, -1)
    g = -torch.exp(layer.A_log) * F.softplus(x[:, t] @ layer.a_proj.weight.T + layer.dt_bias)
    beta = torch.sigmoid(x[:, t] @ layer.b_proj.weight.T) if layer.b_proj is not None else None
    return q, k, v, torch.exp(g), beta


def token_readout(layer, x, t, S, q):
    """o_t = K^-1/2 S_t^T q_t, gated RMSNorm per head, W_o. S [B, H, K, V] -> [B, d]."""
    B, H = x.shape[0], layer.n_heads
    o = torch.einsum("bhkv,bhk->bhv", S, q) / math.sqrt(layer.head_k_dim)
    gate = (x[:, t] @ layer.g_proj.weight.T).view(B, H, -1)
    return gated_rmsnorm(o, gate, layer.o_norm).reshape(B, -1) @ layer.o_proj.weight.T


def reference_gated_deltanet(layer, x):
    """S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, one token at a time."""
    B, T, _ = x.shape
    S = x.new_zeros(B, layer.n_heads, layer.head_k_dim, layer.head_v_dim)
    outputs = []
    for t in range(T):
        q, k, v, alpha, beta = token_inputs(layer, x, t)
        a, b = alpha[..., None, None], beta[..., None, None]
        kTS = torch.einsum("bhk,bhkv->bhv", k, S)
        S = a * (S - b * k[..., :, None] * kTS[..., None, :]) + b * k[..., :, None] * v[..., None, :]
        outputs.append(token_readout(layer, x, t, S, q))
    return torch.stack(outputs, dim=1)


def make_layer(cls=GatedDeltaNetLayer, seed=0, **options):
    torch.manual_seed(seed)
    options.setdefault("d_model", 16)
    return cls(**options)


def inputs(B=2, T=70, d=16, seed=1):
    torch.manual_seed(seed)
    return torch.randn(B, T, d)


def assert_matches_reference(layer, x, reference, atol=2e-5):
    """Outputs and gradients (all parameters and x) of layer(x) and reference(layer, x) agree."""
    x = x.clone().requires_grad_(True)
    probe = torch.randn(x.shape[0], x.shape[1], layer.d_model, generator=torch.Generator().manual_seed(7))
    out = layer(x, torch.ones(x.shape[:2], dtype=torch.bool))
    expected = reference(layer, x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=atol)
    params = [p for p in layer.parameters()]
    grads = torch.autograd.grad((out * probe).sum(), params + [x])
    expected_grads = torch.autograd.grad((expected * probe).sum(), params + [x])
    names = [n for n, _ in layer.named_parameters()] + ["x"]
    for name, got, want in zip(names, grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=atol, msg=lambda m, name=name: f"gradient of {name}: {m}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_matches_per_token_reference(backend):
    layer = make_layer(backend=backend)
    assert_matches_reference(layer, inputs(), reference_gated_deltanet)


def test_reference_with_uneven_head_widths():
    layer = make_layer(d_model=12, n_heads=3, head_k_dim=5, head_v_dim=6, backend="torch")
    assert_matches_reference(layer, inputs(T=30, d=12), reference_gated_deltanet)


def test_fla_initialisation():
    torch.manual_seed(0)
    layer = GatedDeltaNetLayer(64, n_heads=512, head_k_dim=2, head_v_dim=2)
    A = layer.A_log.exp()
    # fla's GatedDeltaNet draws A from U[0, 16] (Mamba-2's range starts at 1): of 512 heads, some fall below 1
    assert A.min() >= 0.0 and A.min() < 1.0 and A.max() <= 16.0 and A.std() > 3.0
    dt = F.softplus(layer.dt_bias)
    assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 0.1 * (1 + 1e-5)
    # log-uniform: the median of log dt sits near the middle of [log 1e-3, log 0.1]
    assert abs(dt.log().median().item() - 0.5 * (math.log(1e-3) + math.log(0.1))) < 0.4
    assert not any(isinstance(m, torch.nn.Linear) and m.bias is not None for m in layer.modules())


def test_defaults_and_options():
    entry = backbone_entry("gated_deltanet")
    model = build_backbone("gated_deltanet", d_model=64)
    assert len(model.stack.mixers) == 2 and model.stack.dropout.p == 0.1
    layer = model.stack.mixers[0]
    assert (layer.n_heads, layer.head_k_dim, layer.head_v_dim, layer.backend) == (2, 32, 32, "auto")
    assert layer.q_conv.kernel_size == 4
    wide = build_backbone("gated_deltanet", d_model=64, n_heads=4, head_k_dim=8, head_v_dim=24, conv_kernel=2)
    layer = wide.stack.mixers[0]
    assert layer.q_proj.out_features == 32 and layer.v_proj.out_features == 96 and layer.q_conv.kernel_size == 2
    assert entry.factory is GatedDeltaNet


def test_backends_agree():
    x = inputs(T=40)
    mask = torch.ones(x.shape[:2], dtype=torch.bool)
    mask[1, :9] = False
    x = x * mask.unsqueeze(-1)
    outs = []
    for backend in BACKENDS:
        torch.manual_seed(0)
        model = GatedDeltaNet(16, dropout=0.0, backend=backend).eval()
        outs.append(model(x, mask))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)


def test_padded_tokens_are_inert_even_with_garbage_input():
    """The layer zeroes padded positions itself: garbage there changes nothing at real positions."""
    layer = make_layer(backend="torch")
    x = inputs(T=20)
    mask = torch.ones(x.shape[:2], dtype=torch.bool)
    mask[:, :6] = False
    clean = layer(x * mask.unsqueeze(-1), mask)
    dirty = layer(x, mask)
    torch.testing.assert_close(clean[mask], dirty[mask])
