"""GRU4Rec against a per-step GRU written from its equations, and its initialisation against RecBole's rule
(recbole/model/sequential_recommender/gru4rec.py ``_init_weights``)."""

import math

import torch
from prism_rec.baselines.gru4rec import GRU4Rec
from test_init import assert_default_uniform, assert_std

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.registry import build_backbone


def gru_by_steps(x, gru: torch.nn.GRU, start: int):
    """The stacked GRU over x[start:] of one sequence x [T, d], from h = 0 at ``start``, one step at a time:
    r = sigmoid(W_r x + U_r h), z = sigmoid(W_z x + U_z h), n = tanh(W_n x + r * (U_n h)),
    h = (1 - z) n + z h. Returns [T - start, hidden]."""
    inputs = list(x[start:])
    for layer in range(gru.num_layers):
        W_r, W_z, W_n = getattr(gru, f"weight_ih_l{layer}").chunk(3)
        U_r, U_z, U_n = getattr(gru, f"weight_hh_l{layer}").chunk(3)
        h = torch.zeros(gru.hidden_size, dtype=torch.float64)
        outputs = []
        for x_t in inputs:
            r = torch.sigmoid(W_r @ x_t + U_r @ h)
            z = torch.sigmoid(W_z @ x_t + U_z @ h)
            n = torch.tanh(W_n @ x_t + r * (U_n @ h))
            h = (1 - z) * n + z * h
            outputs.append(h)
        inputs = outputs
    return torch.stack(inputs)


def test_equals_the_per_step_gru_from_each_sequences_first_item():
    torch.manual_seed(0)
    model = GRU4Rec(d_model=8, n_layers=2, hidden_size=6).double().eval()
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, :3] = False
    mask[2, :6] = False
    x = x * mask.unsqueeze(-1)
    with torch.no_grad():
        y = model(x, mask)
        for row in range(3):
            start = int((~mask[row]).sum())
            expected = gru_by_steps(x[row], model.gru, start) @ model.dense.weight.T + model.dense.bias
            torch.testing.assert_close(y[row, start:], expected, rtol=1e-10, atol=1e-12)
            assert not y[row, :start].any(), "padded positions are zero"


def test_recbole_defaults_and_layers():
    model = build_backbone("gru4rec", d_model=64)
    assert (model.gru.input_size, model.gru.hidden_size, model.gru.num_layers) == (64, 128, 1)  # GRU4Rec.yaml
    assert not model.gru.bias and model.gru.batch_first
    assert (model.dense.in_features, model.dense.out_features) == (128, 64) and model.dense.bias is not None
    assert build_backbone("gru4rec", d_model=16, n_layers=3, hidden_size=12).gru.num_layers == 3


def test_initialisation_follows_recbole():
    torch.manual_seed(0)
    d, hidden, n_items = 64, 128, 3000
    recommender = SequentialRecommender(n_items, "gru4rec", d_model=d, n_layers=2)
    gru, dense = recommender.backbone.gru, recommender.backbone.dense
    for name, fan_in in (("weight_ih_l0", d), ("weight_hh_l0", hidden)):  # xavier-uniform over [3 hidden, fan_in]
        weight = getattr(gru, name)
        bound = math.sqrt(6 / (fan_in + 3 * hidden))
        assert weight.abs().max() <= bound, name
        assert_std(weight, bound / math.sqrt(3), name, uniform=True)
    for name in ("weight_ih_l1", "weight_hh_l1"):  # RecBole's rule leaves deeper layers at PyTorch's default
        assert_default_uniform(getattr(gru, name), hidden, name)
    assert_default_uniform(dense.weight, hidden, "dense")
    assert_default_uniform(dense.bias, hidden, "dense bias")
    table = recommender.item_embedding.weight
    assert not table[0].any()
    assert_std(table[1:], math.sqrt(2 / (n_items + 1 + d)), "item table (xavier-normal)")
    assert recommender.position_embedding is None
