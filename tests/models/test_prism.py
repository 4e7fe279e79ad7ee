"""PRISM: exact reduction at L = 0, per-token reference (../shared/PAPER.md section 3), the rank-L write reaches
the output through the state, ablation switches, the paper-eq18 variant, presets."""

import pytest
import torch
import torch.nn.functional as F
from prism_rec.baselines.gated_deltanet import GatedDeltaNetLayer
from test_gated_deltanet import (
    BACKENDS,
    assert_matches_reference,
    conv_silu_at,
    inputs,
    make_layer,
    token_inputs,
    token_readout,
    unit,
)

from prism_rec.models.prism import Prism, PrismLayer
from prism_rec.registry import backbone_entry, build_backbone


def prism_token_writes(layer, x, t, v):
    """Anchor and refinement at token t, from PAPER.md section 3 steps 2-4.

    Returns kappa [B, H, L, K], w [B, H, L, V], step beta [B, H, L]."""
    B, H, L = x.shape[0], layer.n_heads, layer.L
    K, V = layer.head_k_dim, layer.head_v_dim
    z = x @ layer.u_proj.weight.T
    u_flat = conv_silu_at(z, layer.u_conv, t) if layer.anchor_conv else F.silu(z[:, t])  # [B, H*V]
    u = u_flat.view(B, H, V)
    r = v - u
    kappas, writes, betas = [], [], []
    for l in range(L):
        W_k = layer.kappa_proj.weight[l * H * K:(l + 1) * H * K]
        W_beta = layer.step_beta_proj.weight[l * H:(l + 1) * H]
        kappa = unit((u_flat @ W_k.T).view(B, H, K))
        if layer.gain:
            p = (u_flat @ layer.gain_proj.weight[l * H * V:(l + 1) * H * V].T).view(B, H, V)
        else:
            p = torch.ones_like(r)
        delta = F.gelu(p * r) if layer.nonlinearity == "gelu" else p * r
        r = r - delta
        beta_l = torch.sigmoid(u_flat @ W_beta.T)  # [B, H]
        kappas.append(kappa)
        writes.append(beta_l[..., None] * delta)
        betas.append(beta_l)
    return torch.stack(kappas, 2), torch.stack(writes, 2), torch.stack(betas, 2)


def reference_prism(layer, x):
    """S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T + sum_l kappa_t(l) w_t(l)^T, per token."""
    B, T, _ = x.shape
    S = x.new_zeros(B, layer.n_heads, layer.head_k_dim, layer.head_v_dim)
    outputs = []
    for t in range(T):
        q, k, v, alpha, beta = token_inputs(layer, x, t)
        kappa, w, _ = prism_token_writes(layer, x, t, v)
        a, b = alpha[..., None, None], beta[..., None, None]
        kTS = torch.einsum("bhk,bhkv->bhv", k, S)
        S = a * (S - b * k[..., :, None] * kTS[..., None, :]) + b * k[..., :, None] * v[..., None, :]
        S = S + torch.einsum("bhlk,bhlv->bhkv", kappa, w)
        outputs.append(token_readout(layer, x, t, S, q))
    return torch.stack(outputs, dim=1)


def reference_prism_eq18(layer, x):
    """S_t = alpha_t (I - beta_t(1) kappa_t(1) kappa_t(1)^T) S_{t-1} + sum_l kappa_t(l) w_t(l)^T, per token."""
    B, T, _ = x.shape
    S = x.new_zeros(B, layer.n_heads, layer.head_k_dim, layer.head_v_dim)
    outputs = []
    for t in range(T):
        q, _, v, alpha, _ = token_inputs(layer, x, t)
        kappa, w, step_beta = prism_token_writes(layer, x, t, v)
        k1, b1 = kappa[:, :, 0], step_beta[:, :, 0, None, None]
        kTS = torch.einsum("bhk,bhkv->bhv", k1, S)
        S = alpha[..., None, None] * (S - b1 * k1[..., :, None] * kTS[..., None, :])
        S = S + torch.einsum("bhlk,bhlv->bhkv", kappa, w)
        outputs.append(token_readout(layer, x, t, S, q))
    return torch.stack(outputs, dim=1)


def prism_layer(seed=0, **options):
    options.setdefault("backend", "torch")
    return make_layer(PrismLayer, seed=seed, **options)


def full_mask(x):
    return torch.ones(x.shape[:2], dtype=torch.bool)


# -- L = 0 is Gated DeltaNet ---------------------------------------------------------------------------

def test_L0_layer_is_exactly_gated_deltanet():
    gdn = make_layer(backend="torch", seed=3)
    prism = prism_layer(seed=4, L=0)
    prism.load_state_dict(gdn.state_dict(), strict=True)  # same parameters, nothing more
    x = inputs(T=70)
    torch.testing.assert_close(prism(x, full_mask(x)), gdn(x, full_mask(x)), rtol=1e-6, atol=1e-6)


def test_L0_backbone_is_exactly_gated_deltanet():
    gdn = build_backbone("gated_deltanet", d_model=32, dropout=0.0, backend="torch").eval()
    prism = build_backbone("prism-L0", d_model=32, dropout=0.0, backend="torch").eval()
    assert isinstance(prism, Prism) and all(m.L == 0 for m in prism.stack.mixers)
    prism.load_state_dict(gdn.state_dict(), strict=True)
    torch.manual_seed(5)
    x = torch.randn(3, 50, 32)
    mask = full_mask(x)
    mask[1, :13] = False
    x = x * mask.unsqueeze(-1)
    torch.testing.assert_close(prism(x, mask), gdn(x, mask), rtol=1e-6, atol=1e-6)


def test_prism_reuses_the_gated_deltanet_layer():
    assert issubclass(PrismLayer, GatedDeltaNetLayer)
    # only the scan inputs are PRISM's own; projections, gate and readout are inherited
    for name in ("query", "key", "value", "gate", "erase_strength", "readout", "forward"):
        assert getattr(PrismLayer, name) is getattr(GatedDeltaNetLayer, name)


# -- per-token references -------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_matches_per_token_reference(backend):
    """T = 70 spans two chunks of the torch backend: writes must cross the chunk boundary too."""
    assert_matches_reference(prism_layer(backend=backend, L=3), inputs(T=70), reference_prism)


@pytest.mark.parametrize("options", [
    dict(L=1), dict(L=4), dict(nonlinearity="identity"), dict(anchor_conv="off"), dict(gain="off"),
    dict(d_model=12, n_heads=3, head_k_dim=5, head_v_dim=6, L=2),
])
def test_ablations_match_per_token_reference(options):
    d = options.get("d_model", 16)
    assert_matches_reference(prism_layer(**options), inputs(T=30, d=d), reference_prism)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("L", [1, 3])
def test_eq18_matches_its_per_token_reference(backend, L):
    layer = prism_layer(backend=backend, L=L, variant="paper-eq18")
    assert_matches_reference(layer, inputs(T=70 if backend == "torch" else 30), reference_prism_eq18)


# -- the rank-L write goes through the state ---------------------------------------------------------------

def zero_write(layer, l, t0=None):
    """Patch layer.refine so that w(l) is zero (at token t0 only, or everywhere)."""
    original = layer.refine

    def refine(u, v):
        steps = dict(original(u, v))
        w = steps["w"].clone()
        if t0 is None:
            w[:, :, :, l] = 0
        else:
            w[:, t0, :, l] = 0
        steps["w"] = w
        return steps

    layer.refine = refine


@pytest.mark.parametrize("l", [0, 1, 2])
def test_zeroing_one_write_changes_later_outputs(l):
    x = inputs(T=90)
    layer = prism_layer(L=3)
    with torch.no_grad():
        before = layer(x, full_mask(x))
        t0 = 10
        zero_write(layer, l, t0)
        after = layer(x, full_mask(x))
    torch.testing.assert_close(before[:, :t0], after[:, :t0], rtol=0, atol=0)
    change = (before - after).abs().amax(dim=(0, 2))  # per position
    assert (change[t0:] > 1e-6).all(), change[t0:]  # including positions in the next chunk (>= 64)
    layer = prism_layer(L=3)
    zero_write(layer, l)
    with torch.no_grad():
        assert (layer(x, full_mask(x)) - before).abs().amax() > 1e-4


def test_every_step_projection_gets_gradient():
    torch.manual_seed(0)
    model = build_backbone("prism", d_model=32, dropout=0.0, backend="torch")
    x = torch.randn(2, 80, 32)
    model(x, full_mask(x)).pow(2).sum().backward()
    for layer in model.stack.mixers:
        assert layer.L == 3
        for l in range(layer.L):
            for name in ("kappa", "gain", "step_beta"):
                weight = getattr(layer, f"{name}_proj").weight
                rows = weight.grad.view(layer.L, -1, weight.shape[-1])[l]
                assert rows.abs().sum() > 0, f"W_{name}({l + 1}) has no gradient"
                assert layer.step_weights(name, l).shape == rows.shape
        assert layer.u_proj.weight.grad.abs().sum() > 0 and layer.u_conv.conv.weight.grad.abs().sum() > 0


# -- ablation switches change exactly what they name -------------------------------------------------------

def steps_of(layer, x):
    with torch.no_grad():
        u = layer.anchor(x)
        return u, layer.refine(u, layer.value(x))


def recompute_deltas(p, r, phi):
    deltas = []
    for l in range(p.shape[3]):
        delta = phi(p[:, :, :, l] * r)
        r = r - delta
        deltas.append(delta)
    return torch.stack(deltas, 3)


def test_refine_follows_the_paper():
    layer, x = prism_layer(L=3), inputs(T=12)
    u, steps = steps_of(layer, x)
    v = layer.value(x).detach()
    torch.testing.assert_close(steps["delta"], recompute_deltas(steps["p"], v - u, F.gelu))
    torch.testing.assert_close(steps["w"], steps["step_beta"].unsqueeze(-1) * steps["delta"])
    torch.testing.assert_close(steps["kappa"].norm(dim=-1), torch.ones_like(steps["step_beta"]), atol=1e-3,
                               rtol=0)  # up to the norm eps


def test_identity_nonlinearity():
    full, x = prism_layer(L=3), inputs(T=12)
    ident = prism_layer(L=3, nonlinearity="identity")
    ident.load_state_dict(full.state_dict(), strict=True)  # the switch adds or removes no parameter
    u_full, a = steps_of(full, x)
    u_id, b = steps_of(ident, x)
    torch.testing.assert_close(u_full, u_id, rtol=0, atol=0)
    for name in ("kappa", "p", "step_beta"):
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
    r = ident.value(x).detach() - u_id
    torch.testing.assert_close(b["delta"], recompute_deltas(b["p"], r, lambda z: z))
    # identity: delta(l) = p(l) * r(l), i.e. r(l+1) = (1 - p(l)) r(l)
    torch.testing.assert_close(b["delta"][:, :, :, 1], b["p"][:, :, :, 1] * (1 - b["p"][:, :, :, 0]) * r)
    assert not torch.allclose(a["delta"], b["delta"])


def test_gain_off():
    full, x = prism_layer(L=3), inputs(T=12)
    nogain = prism_layer(L=3, gain="off")
    assert nogain.gain_proj is None
    state = {k: v for k, v in full.state_dict().items() if not k.startswith("gain_proj.")}
    nogain.load_state_dict(state, strict=True)  # only W_p is gone
    u_full, a = steps_of(full, x)
    u_ng, b = steps_of(nogain, x)
    torch.testing.assert_close(u_full, u_ng, rtol=0, atol=0)
    assert (b["p"] == 1).all()
    for name in ("kappa", "step_beta"):
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
    torch.testing.assert_close(b["delta"], recompute_deltas(b["p"], nogain.value(x).detach() - u_ng, F.gelu))


def test_anchor_conv_off_touches_only_the_anchor():
    full, x = prism_layer(L=3), inputs(T=12)
    noconv = prism_layer(L=3, anchor_conv=False)
    assert noconv.u_conv is None
    assert all(isinstance(c.conv, torch.nn.Conv1d) for c in (noconv.q_conv, noconv.k_conv, noconv.v_conv))
    state = {k: v for k, v in full.state_dict().items() if not k.startswith("u_conv.")}
    noconv.load_state_dict(state, strict=True)  # only the anchor's conv is gone
    with torch.no_grad():
        torch.testing.assert_close(noconv.anchor(x), F.silu(x @ noconv.u_proj.weight.T).view(2, 12, 2, -1))
        assert not torch.allclose(noconv.anchor(x), full.anchor(x))
        a, b = full.scan_inputs(x), noconv.scan_inputs(x)
    for name in ("q", "k", "v", "g", "beta"):
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)


def test_eq18_scan_inputs():
    layer, x = prism_layer(L=2, variant="paper-eq18"), inputs(T=12)
    assert layer.k_proj is None and layer.k_conv is None and layer.b_proj is None
    canonical = prism_layer(L=2)
    state = canonical.state_dict()
    layer.load_state_dict({k: v for k, v in state.items() if not k.startswith(("k_proj.", "k_conv.", "b_proj."))},
                          strict=True)
    with torch.no_grad():
        got = layer.scan_inputs(x)
        want = canonical.scan_inputs(x)
    assert (got["v"] == 0).all()  # no base write
    torch.testing.assert_close(got["k"], want["extra_k"][:, :, :, 0], rtol=0, atol=0)  # erase with kappa(1)
    torch.testing.assert_close(got["beta"] * 1, got["beta"])
    for name in ("q", "g", "extra_k", "extra_v"):
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)
    _, steps = steps_of(layer, x)
    torch.testing.assert_close(got["beta"], steps["step_beta"][:, :, :, 0], rtol=0, atol=0)  # and beta(1)


def test_switches_accept_on_off_and_reject_nonsense():
    assert prism_layer(anchor_conv="on", gain="off").gain is False
    with pytest.raises(ValueError):
        prism_layer(gain="maybe")
    with pytest.raises(ValueError):
        prism_layer(nonlinearity="relu")
    with pytest.raises(ValueError):
        prism_layer(variant="eq19")
    with pytest.raises(ValueError):
        prism_layer(L=0, variant="paper-eq18")


# -- presets and defaults ---------------------------------------------------------------------------------

PRESETS = {
    "prism": dict(L=3, nonlinearity="gelu", anchor_conv=True, gain=True, variant="canonical"),
    "prism-L0": dict(L=0),
    "prism-L1": dict(L=1),
    "prism-nogelu": dict(L=3, nonlinearity="identity"),
    "prism-noconv": dict(L=3, anchor_conv=False),
    "prism-nogain": dict(L=3, gain=False),
    "prism-eq18": dict(L=3, variant="paper-eq18"),
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets(name):
    model = build_backbone(name, d_model=64)
    assert backbone_entry(name).factory is Prism
    assert len(model.stack.mixers) == 2 and model.stack.dropout.p == 0.1
    for layer in model.stack.mixers:
        assert (layer.n_heads, layer.head_k_dim, layer.head_v_dim, layer.backend) == (2, 32, 32, "auto")
        for option, value in PRESETS[name].items():
            assert getattr(layer, option) == value, (name, option)


def test_backends_agree():
    x = inputs(T=40)
    mask = full_mask(x)
    mask[0, :7] = False
    x = x * mask.unsqueeze(-1)
    outs = []
    for backend in BACKENDS:
        torch.manual_seed(0)
        outs.append(Prism(16, dropout=0.0, backend=backend).eval()(x, mask))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
