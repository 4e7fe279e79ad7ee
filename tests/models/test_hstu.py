"""HSTU against a per-position loop written from the paper's equations (Zhai et al. 2024)."""

import pytest
import torch
import torch.nn.functional as F
from prism_rec.baselines.hstu import HSTU, HSTULayer


def layer_norm(x, eps):
    """LayerNorm without affine over the last dimension."""
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)


def reference_layer(layer, x, mask):
    """One HSTU layer, position by position, for x [B, T, d] and mask [B, T] (outputs at real positions).

    U, V, Q, K = Split(SiLU(f1(LN(x)))); (A V)_i = sum_{j <= i, j real} SiLU(q_i . k_j + rab(i - j)) / n_i v_j;
    y = x + f2(LN(A V) * U), n_i = number of real items up to and including position i.
    """
    Bsz, T, d = x.shape
    H, dqk, dv = layer.n_heads, layer.attention_dim, layer.linear_dim
    projected = F.silu(layer_norm(x, layer.eps) @ layer.uvqk.weight.t())
    u, v, q, k = projected.split([H * dv, H * dv, H * dqk, H * dqk], -1)
    v, q, k = v.reshape(Bsz, T, H, dv), q.reshape(Bsz, T, H, dqk), k.reshape(Bsz, T, H, dqk)
    rab = layer.relative_bias.weight
    rows = []
    for b in range(Bsz):
        row = []
        for i in range(T):
            n = mask[b, : i + 1].sum().clamp(min=1)
            aggregated = torch.zeros(H, dv)
            for j in range(i + 1):
                if mask[b, j]:
                    distance = min(i - j, rab.shape[0] - 1)
                    weight = F.silu((q[b, i] * k[b, j]).sum(-1) + rab[distance]) / n  # [H]
                    aggregated = aggregated + weight[:, None] * v[b, j]
            row.append(aggregated.reshape(H * dv))
        rows.append(torch.stack(row))
    attended = torch.stack(rows)  # [B, T, H * dv]
    gated = layer_norm(attended, layer.eps) * u
    return x + gated @ layer.output.weight.t() + layer.output.bias


def make_layer(max_distance):
    torch.manual_seed(0)
    layer = HSTULayer(d_model=12, n_heads=2, attention_dim=4, linear_dim=6, dropout=0.0, max_distance=max_distance)
    with torch.no_grad():  # visible relative biases and sizeable scores
        layer.relative_bias.weight.normal_(0.0, 1.0)
        layer.uvqk.weight.normal_(0.0, 0.5)
    return layer


@pytest.mark.parametrize("max_distance", [200, 4])
def test_layer_matches_per_position_equations(max_distance):
    layer = make_layer(max_distance)
    torch.manual_seed(1)
    x = torch.randn(2, 9, 12, requires_grad=True)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :3] = False
    out = layer(x, mask)
    expected = reference_layer(layer, x, mask)
    torch.testing.assert_close(out[mask], expected[mask], rtol=1e-5, atol=1e-5)

    upstream = torch.randn_like(out) * mask.unsqueeze(-1)
    parameters = [x, *layer.parameters()]
    grads = torch.autograd.grad((out * upstream).sum(), parameters)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), parameters)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_aggregation_is_pointwise_not_softmax():
    """With a one-item history the weight is SiLU(q . k + rab(0)) / 1, where a softmax would give exactly 1."""
    layer = make_layer(200)
    torch.manual_seed(2)
    q, k = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4)
    weights = layer.attention_weights(q, k, torch.ones(1, 1, dtype=torch.bool))
    expected = F.silu((q * k).sum(-1) + layer.relative_bias.weight[0]).view(1, 2, 1, 1)
    torch.testing.assert_close(weights, expected)


def test_stack_has_no_absolute_positions_and_one_residual_unit_per_layer():
    model = HSTU(d_model=16, n_layers=3, dropout=0.0)
    assert not getattr(model, "wants_positions", False)
    assert len(model.layers) == 3
    assert not any("position_embedding" in name for name, _ in model.named_parameters())


@pytest.mark.parametrize("max_distance", [200, 3])
def test_blockwise_path_matches_dense_path(max_distance):
    """Blocks of 4 over 11 positions (the last block partial), left padding, far keys on rab's last weight."""
    dense = make_layer(max_distance).double()
    blockwise = make_layer(max_distance).double()
    blockwise.dense_max_length, blockwise.block_size = 0, 4
    torch.manual_seed(3)
    x = torch.randn(3, 11, 12, dtype=torch.double, requires_grad=True)
    mask = torch.ones(3, 11, dtype=torch.bool)
    mask[1, :3] = False
    mask[2, :6] = False  # a whole padded block and part of the next
    upstream = torch.randn(3, 11, 12, dtype=torch.double) * mask.unsqueeze(-1)
    results = []
    for layer in (dense, blockwise):
        out = layer(x, mask)
        results.append((out[mask], *torch.autograd.grad((out * upstream).sum(), [x, *layer.parameters()])))
    for (name, _), want, got in zip([("output", None), ("x", None), *dense.named_parameters()], *results):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("T, dense_max_length", [(128, 0), (300, 256)])  # forced; the default switch above 256
def test_blockwise_path_saves_no_length_squared_tensor(T, dense_max_length):
    """Autograd keeps block-sized tensors only: nothing of B * H * T * T elements is saved for the backward."""
    layer = make_layer(200)
    layer.dense_max_length, layer.block_size = dense_max_length, 8
    B = 2
    largest = []

    def pack(tensor):
        largest.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        layer(torch.randn(B, T, 12), torch.ones(B, T, dtype=torch.bool)).sum().backward()
    assert max(largest) < B * layer.n_heads * T * T // 4
