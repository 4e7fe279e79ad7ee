"""The contract every registered backbone keeps: shape, causality, left-padding invariance, gradients.

Backbones that work in chunks (TTT's mini-batches, Titans' chunks) start them at each sequence's first
real item, so they keep the same contract as the others.
"""

import pytest
import torch

from prism_rec.registry import build_backbone, list_backbones

D_MODEL = 32


def build(name):
    torch.manual_seed(0)
    return build_backbone(name, d_model=D_MODEL, dropout=0.0).eval()


def batch(T=20, B=2, padding=(0, 5)):
    torch.manual_seed(1)
    x = torch.randn(B, T, D_MODEL)
    mask = torch.ones(B, T, dtype=torch.bool)
    for row, pad in enumerate(padding):
        mask[row, :pad] = False
    return x * mask.unsqueeze(-1), mask


@pytest.mark.parametrize("name", list_backbones())
def test_shape_and_finite(name):
    x, mask = batch()
    y = build(name)(x, mask)
    assert y.shape == x.shape
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", list_backbones())
def test_causal(name):
    model = build(name)
    x, mask = batch()
    cut = 11
    changed = x.clone()
    changed[:, cut + 1 :] = torch.randn_like(changed[:, cut + 1 :])
    with torch.no_grad():
        before, after = model(x, mask), model(changed, mask)
    torch.testing.assert_close(before[:, : cut + 1], after[:, : cut + 1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before[:, cut + 1 :], after[:, cut + 1 :])


@pytest.mark.parametrize("name", list_backbones())
def test_prefix_alone_gives_the_same_outputs(name):
    """Removing the future (not only changing it): a prefix, left-padded to the full length, gives the full
    sequence's outputs at its positions, as in evaluation where the history ends at the target."""
    model = build(name)
    x, mask = batch()
    cut = 11
    shift = x.shape[1] - (cut + 1)
    prefix_x = torch.cat([torch.zeros(x.shape[0], shift, D_MODEL), x[:, : cut + 1]], dim=1)
    prefix_mask = torch.cat([torch.zeros(x.shape[0], shift, dtype=torch.bool), mask[:, : cut + 1]], dim=1)
    with torch.no_grad():
        full, prefix = model(x, mask)[:, : cut + 1], model(prefix_x, prefix_mask)[:, shift:]
    real = mask[:, : cut + 1]
    torch.testing.assert_close(full[real], prefix[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list_backbones())
def test_left_padding_invariant(name):
    model = build(name)
    extra = 7
    x, mask = batch()
    padded_x = torch.cat([torch.zeros(x.shape[0], extra, D_MODEL), x], dim=1)
    padded_mask = torch.cat([torch.zeros(x.shape[0], extra, dtype=torch.bool), mask], dim=1)
    with torch.no_grad():
        plain, padded = model(x, mask), model(padded_x, padded_mask)[:, extra:]
    torch.testing.assert_close(plain[mask], padded[mask], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list_backbones())
def test_every_parameter_gets_gradient(name):
    model = build(name).train()
    if not any(True for _ in model.parameters()):
        pytest.skip(f"{name} has no parameters of its own (pop, null)")
    x, mask = batch(T=40)
    model(x, mask).pow(2).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"{name}: no gradient for {missing}"


def test_null_mixes_nothing_so_the_last_position_sees_the_last_item_only():
    """The null backbone (issue 39's floor) is registered and trains; inside the recommender the scores at
    the last position do not change when every earlier item does."""
    from prism_rec.models.recommender import SequentialRecommender
    from prism_rec.registry import trains

    assert "null" in list_backbones() and trains("null")
    x, mask = batch()
    torch.testing.assert_close(build("null")(x, mask), x)
    torch.manual_seed(0)
    model = SequentialRecommender(30, "null", d_model=D_MODEL, max_len=20, dropout=0.0).eval()
    items = torch.randint(1, 31, (2, 20))
    changed = items.clone()
    changed[:, :-1] = torch.randint(1, 31, (2, 19))
    with torch.no_grad():
        last = [model.score_all(model.encode(sequence)[:, -1]) for sequence in (items, changed)]  # [B, n_items]
    torch.testing.assert_close(*last)
