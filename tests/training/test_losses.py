"""The full-softmax loss (prism_rec/training/losses.py): the chunked reference path against F.cross_entropy on
explicit logits, the fused Triton path through Triton's interpreter (in a subprocess, since Triton
reads TRITON_INTERPRET when the kernels are defined), and the sampled-softmax objective of trainer.py."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.training import losses
from prism_rec.training.config import TrainConfig
from prism_rec.training.losses import LOGIT_CHUNK_ROWS, full_softmax_loss_sum, resolve_path
from prism_rec.training.step import NextItemObjective, trained_positions


def _case(n, items, d, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=generator).to(dtype).requires_grad_()
    table = (torch.randn(items, d, generator=generator) * 0.5).to(dtype).requires_grad_()
    targets = torch.randint(0, items, (n,), generator=generator)
    return hidden, table, targets


def _loss_and_grads(function, hidden, table, targets):
    hidden.grad = table.grad = None
    loss = function(hidden, table, targets)
    loss.backward()
    return loss.detach().float(), hidden.grad.float(), table.grad.float()


def _explicit(hidden, table, targets):
    """F.cross_entropy on explicit fp32 logits of the same (possibly bf16-rounded) inputs."""
    return F.cross_entropy(hidden.float() @ table.float().t(), targets, reduction="sum")


@pytest.mark.parametrize("n", [37, LOGIT_CHUNK_ROWS + 5])
def test_chunked_path_matches_cross_entropy_fp32(n):
    hidden, table, targets = _case(n, 300, 24, torch.float32)
    loss, d_hidden, d_table = _loss_and_grads(
        lambda h, t, y: full_softmax_loss_sum(h, t, y, path="chunked"), hidden, table, targets)
    reference, r_hidden, r_table = _loss_and_grads(_explicit, hidden, table, targets)
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(d_hidden, r_hidden, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(d_table, r_table, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("count", [0, 1, 25, 40, 55])
def test_valid_rows_count_only_the_first_rows(count):
    """The chunked path with valid_rows: the plain cross-entropy of the first rows alone; the later rows
    take exactly zero gradient (55: past the 40 rows, all count)."""
    hidden, table, targets = _case(40, 300, 24, torch.float32)
    loss, d_hidden, d_table = _loss_and_grads(
        lambda h, t, y: full_softmax_loss_sum(h, t, y, path="chunked", valid_rows=torch.tensor(count)),
        hidden, table, targets)
    first = hidden.detach()[:count].clone().requires_grad_()
    reference, r_hidden, r_table = _loss_and_grads(_explicit, first, table, targets[:count])
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(d_hidden[:count], r_hidden, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(d_table, r_table, rtol=1e-4, atol=1e-6)
    assert not d_hidden[count:].any()


def test_valid_rows_must_be_one_integer_on_the_device_of_hidden():
    hidden, table, targets = _case(4, 10, 8, torch.float32)
    for wrong in (torch.tensor(2.0), torch.tensor([1, 2]), torch.tensor(True)):
        with pytest.raises(ValueError, match="valid_rows must be one integer"):
            full_softmax_loss_sum(hidden, table, targets, path="chunked", valid_rows=wrong)
    with pytest.raises(ValueError, match="valid_rows is on meta"):
        full_softmax_loss_sum(hidden, table, targets, path="chunked", valid_rows=torch.tensor(2, device="meta"))


def test_chunked_path_matches_cross_entropy_bf16():
    hidden, table, targets = _case(64, 200, 32, torch.bfloat16)
    loss, d_hidden, d_table = _loss_and_grads(
        lambda h, t, y: full_softmax_loss_sum(h, t, y, path="chunked"), hidden, table, targets)
    assert d_hidden.shape == hidden.shape and hidden.grad.dtype == torch.bfloat16
    reference, r_hidden, r_table = _loss_and_grads(_explicit, hidden, table, targets)
    # the logits are bf16 products in the chunked path and fp32 products in the reference
    torch.testing.assert_close(loss, reference, rtol=2e-3, atol=0.5)
    torch.testing.assert_close(d_hidden, r_hidden, rtol=0.05, atol=0.05)
    torch.testing.assert_close(d_table, r_table, rtol=0.05, atol=0.05)


def test_paths_resolve_by_device(monkeypatch):
    assert resolve_path("auto", torch.device("cpu")) == "chunked"
    assert resolve_path("chunked", torch.device("cpu")) == "chunked"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="fused loss path needs"):
        resolve_path("fused", torch.device("cpu"))
    with pytest.raises(ValueError, match="loss path must be one of"):
        resolve_path("dense", torch.device("cpu"))
    monkeypatch.setattr(losses, "fused_available", lambda device: True)  # as on a CUDA machine
    cuda = torch.device("cuda")
    assert resolve_path("auto", cuda, 64) == "fused" and resolve_path("auto", cuda) == "fused"
    assert resolve_path("auto", cuda, 768) == "chunked"  # the language-model width: beyond the fused kernels
    with pytest.raises(ValueError, match="fused loss path takes d <= 256, got 768; use the chunked or auto"):
        resolve_path("fused", cuda, 768)
    hidden, table, targets = _case(4, 10, 8, torch.float32)
    with pytest.raises(ValueError, match="targets must have shape"):
        full_softmax_loss_sum(hidden, table, targets[:3])


FUSED_CHECK = r"""
import json, os
import torch, torch.nn.functional as F
from prism_rec.training.losses import LaunchConfig, full_softmax_loss_sum, fused_logsumexp

def case(n, items, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(dtype).requires_grad_()
    t = (torch.randn(items, d, generator=g) * 0.5).to(dtype).requires_grad_()
    return h, t, torch.randint(0, items, (n,), generator=g)

def run(fn, h, t, y):
    h.grad = t.grad = None
    loss = fn(h, t, y)
    loss.backward()
    return loss.detach().float(), h.grad.clone(), t.grad.clone()

def gap(a, b):
    return [float((x.float() - y.float()).abs().max() / y.float().abs().max().clamp_min(1e-6)) for x, y in zip(a, b)]

out = {}
fused = lambda h, t, y: full_softmax_loss_sum(h, t, y, path="fused")
chunked = lambda h, t, y: full_softmax_loss_sum(h, t, y, path="chunked")
explicit = lambda h, t, y: F.cross_entropy(h.float() @ t.float().t(), y, reduction="sum")
# fp32: odd sizes (partial row and item tiles, d not a power of two), against explicit logits
for name, (n, items, d) in {"small": (70, 300, 24), "tall": (130, 129, 64)}.items():
    h, t, y = case(n, items, d, torch.float32)
    got, want = run(fused, h, t, y), run(explicit, h, t, y)
    out[f"fp32_{name}"] = gap(got, want)
    out[f"fp32_{name}_dtypes"] = [str(got[1].dtype), str(got[2].dtype)]
# the walk split in parts (partial results combined in PyTorch)
h, t, y = case(70, 300, 24, torch.float32)
def split_loss(h, t, y):
    return (fused_logsumexp(h, t, splits=3) - (h * t[y]).sum(-1)).sum()
out["fp32_split"] = gap(run(split_loss, h, t, y), run(explicit, h, t, y))
# bf16 inputs: against explicit fp32 logits of the same bf16 values and against the chunked path
h, t, y = case(70, 300, 32, torch.bfloat16)
got = run(fused, h, t, y)
out["bf16_explicit"] = gap(got, run(explicit, h, t, y))
out["bf16_chunked"] = gap(got, run(chunked, h, t, y))
out["bf16_dtypes"] = [str(got[1].dtype), str(got[2].dtype)]
# fp32 parameters under autocast (the training step): bf16 products, fp32 gradients
h, t, y = case(70, 300, 32, torch.float32)
with torch.autocast("cpu", dtype=torch.bfloat16):
    got = run(fused, h, t, y)
    want = run(chunked, h, t, y)
out["autocast_chunked"] = gap(got, want)
out["autocast_dtypes"] = [str(got[1].dtype), str(got[2].dtype)]
# deterministic: the same inputs give bitwise the same loss and gradients
again = run(fused, h, t, y)
h2, t2, y2 = case(70, 300, 32, torch.float32)
first, second = run(fused, h2, t2, y2), run(fused, h2, t2, y2)
out["deterministic"] = all(torch.equal(a, b) for a, b in zip(first, second))
# no rows: zero loss, zero gradients
h, t, y = case(0, 50, 16, torch.float32)
empty = run(fused, h, t, y)
out["empty"] = [float(empty[0]), float(empty[2].abs().sum())]
# valid_rows: the loss over the first rows alone (0, one, a block boundary, mid-block, all, past N), the
# later rows' gradients exactly 0; fp32 against explicit logits, under autocast against the chunked path
def limited(count, fn, dtype=torch.float32):
    h, t, y = case(130, 300, 32, dtype)
    got = run(lambda h, t, y: full_softmax_loss_sum(h, t, y, path="fused", valid_rows=torch.tensor(count)), h, t, y)
    k = min(count, 130)
    first = h.detach()[:k].clone().requires_grad_()
    want = run(fn, first, t, y[:k])
    gaps = gap(got[::2], want[::2]) + (gap(got[1][:k], want[1]) if k else [0.0])
    return gaps + [bool((got[1][k:] == 0).all())]
for count in (0, 1, 64, 100, 130, 200):
    out[f"limited_{count}"] = limited(count, explicit)
with torch.autocast("cpu", dtype=torch.bfloat16):
    out["limited_autocast"] = limited(70, chunked)
# tile sizes that differ per kernel (d(table)'s row tiles wider than the others') and walks in parts
mixed = {"forward": LaunchConfig(16, 32, 4, 3), "backward_hidden": LaunchConfig(32, 64, 4, 3),
         "backward_table": LaunchConfig(64, 32, 4, 3)}
def limited_lse(h, t, y):
    lse = fused_logsumexp(h, t, splits=3, configs=mixed, valid_rows=torch.tensor(70))
    out["limited_lse_past"] = float(lse[70:].abs().max())
    return (lse[:70] - (h[:70] * t[y[:70]]).sum(-1)).sum() + (lse[70:] * torch.linspace(1, 2, 60)).sum()
h, t, y = case(130, 300, 24, torch.float32)
got = run(limited_lse, h, t, y)
first = h.detach()[:70].clone().requires_grad_()
want = run(explicit, first, t, y[:70])
out["limited_mixed"] = gap(got[::2], want[::2]) + gap(got[1][:70], want[1]) + [bool((got[1][70:] == 0).all())]
print(json.dumps(out))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_fused_path_through_the_triton_interpreter():
    """The fused kernels on CPU tensors under TRITON_INTERPRET=1 (the device run of
    benchmarks/step_bench.py checks them on CUDA)."""
    environment = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", FUSED_CHECK], capture_output=True, text=True, env=environment,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("fp32_small", "fp32_tall", "fp32_split"):
        loss_gap, hidden_gap, table_gap = out[name]
        assert loss_gap < 1e-6 and hidden_gap < 1e-5 and table_gap < 1e-5, (name, out[name])
    assert out["fp32_small_dtypes"] == ["torch.float32", "torch.float32"]
    # bf16 inputs: the positive term is a bf16 product (as in the chunked path), the logsumexp fp32
    assert out["bf16_explicit"][0] < 1e-3 and max(out["bf16_explicit"][1:]) < 0.02, out["bf16_explicit"]
    assert out["bf16_chunked"][0] < 1e-3 and max(out["bf16_chunked"][1:]) < 0.02, out["bf16_chunked"]
    assert out["bf16_dtypes"] == ["torch.bfloat16", "torch.bfloat16"]
    assert out["autocast_chunked"][0] < 1e-3 and max(out["autocast_chunked"][1:]) < 0.02, out["autocast_chunked"]
    assert out["autocast_dtypes"] == ["torch.float32", "torch.float32"]
    assert out["deterministic"]
    assert out["empty"] == [0.0, 0.0]
    for count in (0, 1, 64, 100, 130, 200):
        *gaps, rest_zero = out[f"limited_{count}"]
        assert max(gaps) < 1e-5 and rest_zero, (count, out[f"limited_{count}"])
    *gaps, rest_zero = out["limited_autocast"]
    assert max(gaps) < 0.02 and gaps[0] < 1e-3 and rest_zero, out["limited_autocast"]
    *gaps, rest_zero = out["limited_mixed"]
    assert max(gaps) < 1e-5 and rest_zero and out["limited_lse_past"] == 0.0, out


def _objective(loss: str, n_items=40, seed=0):
    torch.manual_seed(seed)
    model = SequentialRecommender(n_items, "sasrec", d_model=16, max_len=12, dropout=0.0, n_layers=1, n_heads=2)
    config = TrainConfig(d_model=16, n_layers=1, n_heads=2, dropout=0.0, max_len=12, loss=loss, n_negatives=16,
                         device="cpu", progress=False)
    return model, NextItemObjective(model, config, torch.Generator().manual_seed(seed))


def _windows(n_items=40):
    windows = torch.randint(1, n_items + 1, (6, 13), generator=torch.Generator().manual_seed(3))
    windows[0, :5] = 0  # left padding
    windows[1, :11] = 0
    return windows


def test_full_objective_equals_the_loss_function():
    model, objective = _objective("full")
    windows = _windows()
    count = int(trained_positions(windows).sum())
    loss_sum = objective(windows, count)
    inputs, targets = windows[:, :-1], windows[:, 1:]
    trained = (inputs > 0) & (targets > 0)
    hidden = model.encode(inputs)[trained]
    expected = full_softmax_loss_sum(hidden, model.item_table(), targets[trained] - 1, path="chunked")
    assert count == int(trained.sum()) == 6 * 12 - 5 - 11
    assert torch.equal(loss_sum, expected)  # the same rows in the same order as the boolean mask picks


def test_sampled_objective_is_unchanged():
    """loss="sampled": cross-entropy of the target against shared uniform negatives (a negative equal to
    the target masked out), recomputed here by hand from the same generator."""
    model, objective = _objective("sampled")
    windows = _windows()
    count = int(trained_positions(windows).sum())
    loss_sum = objective(windows, count)
    inputs, targets = windows[:, :-1], windows[:, 1:]
    trained = (inputs > 0) & (targets > 0)
    hidden, targets = model.encode(inputs)[trained], targets[trained]
    table = model.item_table()
    negatives = torch.randint(1, 41, (16,), generator=torch.Generator().manual_seed(0))
    positive = (hidden * table[targets - 1]).sum(-1)
    negative = hidden @ table[negatives - 1].t()
    negative = negative.masked_fill(negatives[None, :] == targets[:, None], float("-inf"))
    expected = (torch.logsumexp(torch.cat([positive[:, None], negative], 1), 1) - positive).sum()
    assert count == int(trained.sum())
    torch.testing.assert_close(loss_sum, expected, rtol=1e-6, atol=1e-5)
    loss_sum.backward()
    assert model.item_embedding.weight.grad is not None
