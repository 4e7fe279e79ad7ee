"""TTT layers against a naive mini-batch gradient-descent loop written from the paper's equations.

The reference trains each head's inner model token by token with torch.autograd.grad for the inner
gradient (no dual form, no closed-form LayerNorm/GELU backward), reads position t with
W_{n-1} - sum_{s<=t} tau_t lr_s grad_s and steps the weights at each mini-batch boundary.
"""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from prism_rec.baselines.ttt import TTT, TTTLayer, ttt_linear_dual


def inner_model(weights, x, inner):
    if inner == "linear":
        weight, bias = weights
        return x @ weight + bias
    weight1, bias1, weight2, bias2 = weights
    return F.gelu(x @ weight1 + bias1, approximate="tanh") @ weight2 + bias2


def naive_ttt_layer(layer: TTTLayer, x, mask):
    """The TTT layer computed per row, head and token from the equations (module docstring of ttt.py)."""
    B, T, d = x.shape
    H, Dh, C = layer.n_heads, layer.head_dim, layer.mini_batch_size
    keep = mask[..., None].to(x.dtype)
    q, k, v = ((proj(x) * keep).view(B, T, H, Dh) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    lr = layer.base_lr * torch.sigmoid(layer.lr_proj(x)) / Dh * keep  # [B, T, H]
    tau = (1.0 / torch.arange(1, C + 1, dtype=x.dtype) + layer.position_scale_bias).clamp(min=0.0)
    initial = ([layer.weight, layer.bias] if layer.inner == "linear"
               else [layer.weight1, layer.bias1, layer.weight2, layer.bias2])

    def wrapped_norm(z, h):
        return F.layer_norm(z, (Dh,), eps=layer.eps) * layer.ln_weight[h] + layer.ln_bias[h]

    z = torch.zeros(B, T, H, Dh, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            weights = [p[h] for p in initial]
            for start in range(0, T, C):
                tokens = range(start, min(start + C, T))
                grads = []
                for s in tokens:
                    loss = 0.5 * (wrapped_norm(inner_model(weights, k[b, s, h], layer.inner), h)
                                  - (v[b, s, h] - k[b, s, h])).pow(2).sum()
                    grads.append(torch.autograd.grad(loss, weights, create_graph=True))
                for i, t in enumerate(tokens):
                    read = [w - sum(tau[i] * lr[b, s, h] * g[j] for s, g in zip(tokens[: i + 1], grads))
                            for j, w in enumerate(weights)]
                    z[b, t, h] = q[b, t, h] + wrapped_norm(inner_model(read, q[b, t, h], layer.inner), h)
                weights = [w - sum(tau[C - 1] * lr[b, s, h] * g[j] for s, g in zip(tokens, grads))
                           for j, w in enumerate(weights)]
    gate = F.gelu(layer.gate_proj(x), approximate="tanh")
    return layer.o_proj(layer.post_norm(z.reshape(B, T, d)) * gate)


@pytest.mark.parametrize("inner", ["linear", "mlp"])
def test_layer_matches_naive_gradient_descent(inner):
    torch.manual_seed(0)
    layer = TTTLayer(d_model=8, n_heads=2, inner=inner, base_lr=1.0 if inner == "linear" else 0.5).double()
    with torch.no_grad():  # move off the initialisation so every term of the inner loop matters
        for parameter in layer.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    B, T = 2, 21  # two mini-batches, the second one partial
    x = torch.randn(B, T, 8, dtype=torch.double)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, :5] = False
    x = x * mask[..., None]
    probe = torch.randn(B, T, 8, dtype=torch.double)

    fast = layer(x, mask)
    fast_grads = torch.autograd.grad((fast * probe)[mask].sum(), list(layer.parameters()))
    slow = naive_ttt_layer(layer, x, mask)
    slow_grads = torch.autograd.grad((slow * probe)[mask].sum(), list(layer.parameters()))

    torch.testing.assert_close(fast[mask], slow[mask], rtol=1e-9, atol=1e-9)
    for (name, _), fast_grad, slow_grad in zip(layer.named_parameters(), fast_grads, slow_grads):
        torch.testing.assert_close(fast_grad, slow_grad, rtol=1e-8, atol=1e-9, msg=lambda m, name=name: f"{name}: {m}")


def test_padding_does_not_train_the_inner_model():
    torch.manual_seed(0)
    layer = TTTLayer(d_model=8, n_heads=2).double()
    x = torch.randn(1, 32, 8, dtype=torch.double)
    mask = torch.ones(1, 32, dtype=torch.bool)
    mask[:, :16] = False  # a whole padded mini-batch, its inputs not zeroed
    garbage = x.clone()
    garbage[:, :16] = 100 * torch.randn(1, 16, 8, dtype=torch.double)
    torch.testing.assert_close(layer(x, mask)[:, 16:], layer(garbage, mask)[:, 16:])


def test_mini_batches_start_at_the_first_real_item():
    """A sequence gives the same outputs whatever the padding, so its mini-batches are its own."""
    torch.manual_seed(0)
    model = TTT(d_model=8, dropout=0.0).double().eval()
    items = torch.randn(1, 20, 8, dtype=torch.double)
    alone = model(items, torch.ones(1, 20, dtype=torch.bool))
    for pad in (1, 5, 16, 19):
        x = torch.cat([torch.zeros(1, pad, 8, dtype=torch.double), items], dim=1)
        mask = torch.arange(pad + 20)[None] >= pad
        torch.testing.assert_close(model(x, mask)[:, pad:], alone)


@pytest.mark.skipif(importlib.util.find_spec("fla") is None, reason="fla-core is not installed")
def test_linear_dual_form_matches_fla_reference():
    from fla.ops.ttt.naive import chunk_ttt_linear_ref

    torch.manual_seed(0)  # float32: fla's reference computes in float32
    B, T, H, Dh, C = 2, 48, 2, 8, 16
    q, k, v = (torch.randn(B, T, H, Dh, dtype=torch.float32) for _ in range(3))
    weight, bias = 0.3 * torch.randn(H, Dh, Dh, dtype=torch.float32), 0.1 * torch.randn(H, Dh, dtype=torch.float32)
    ln_weight, ln_bias = 1 + 0.1 * torch.randn(H, Dh,
                                               dtype=torch.float32), 0.1 * torch.randn(H, Dh, dtype=torch.float32)
    lr = 0.05  # fla's eta is per reading position: tau_t * lr with tau_t = 1 / (t + 1)
    tau = 1.0 / torch.arange(1, C + 1, dtype=torch.float32)
    fla_eta = (lr * tau).repeat(T // C)[None, :, None, None].expand(B, T, H, 1)
    fla_out, _, _ = chunk_ttt_linear_ref(
        q, k, v, ln_weight, ln_bias, fla_eta.clone(), scale=1.0, eps=1e-6, mini_batch_size=C,
        initial_state=weight.expand(B, H, Dh,
                                    Dh).clone(), initial_state_bias=bias[None, :, None].expand(B, H, 1, Dh).clone(),
    )

    def chunks(t):  # [B, T, H, Dh] -> [B, H, N, C, Dh]
        return t.view(B, T // C, C, H, Dh).permute(0, 3, 1, 2, 4)

    eta = (tau[:, None] * lr * torch.ones(C, C, dtype=torch.float32).tril()).expand(B, H, T // C, C, C)
    inner = ttt_linear_dual(chunks(q), chunks(k), chunks(v), eta, weight, bias, ln_weight, ln_bias)
    inner = inner.permute(0, 2, 3, 1, 4).reshape(B, T, H, Dh)
    # fla's naive reference adds the inner model's output itself (not q) to its LayerNorm read-out.
    expected = inner + F.layer_norm(inner, (Dh,), eps=1e-6) * ln_weight + ln_bias
    torch.testing.assert_close(fla_out, expected, rtol=1e-5, atol=1e-5)
