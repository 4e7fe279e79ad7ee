"""The training step (prism_rec/training/step.py) against the step computed directly: one AdamW step on
the mean full-softmax cross-entropy of the real positions of a batch of left-padded windows; the step of
static shapes that the whole-step modes capture as a CUDA graph, run on CPU without the graph, against it."""

import copy
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.training.config import TrainConfig
from prism_rec.training.optim import parameter_groups
from prism_rec.training.step import TrainingStep, step_gaps, trained_positions


def test_one_step_is_the_direct_computation():
    torch.manual_seed(0)
    model = SequentialRecommender(40, "gated_deltanet", d_model=16, max_len=12, dropout=0.0, n_layers=1, n_heads=2)
    reference = copy.deepcopy(model)
    windows = torch.randint(1, 41, (5, 13), generator=torch.Generator().manual_seed(1))
    windows[0, :4] = 0  # left padding: 4 and 12 positions of rows 0 and 1 have no input or no target
    windows[1, :12] = 0
    assert trained_positions(windows).tolist() == [8, 0, 12, 12, 12]
    config = TrainConfig(d_model=16, n_layers=1, n_heads=2, dropout=0.0, max_len=12, lr=0.01, device="cpu")
    step = TrainingStep(model, config, torch.device("cpu"), "gated_deltanet")
    assert step.compile == "off" and not step.autocast._enabled
    loss_sum = step.on_batch(windows)

    inputs, targets = windows[:, :-1], windows[:, 1:]
    trained = (inputs > 0) & (targets > 0)
    logits = reference.encode(inputs)[trained] @ reference.item_embedding.weight[1:].t()  # [44, 40]
    expected = F.cross_entropy(logits, targets[trained] - 1, reduction="sum")
    optimizer = torch.optim.AdamW(reference.parameters(), lr=0.01, weight_decay=0.0)
    (expected / 44).backward()
    optimizer.step()
    torch.testing.assert_close(loss_sum, expected, rtol=1e-6, atol=1e-5)
    for (name, parameter), moved in zip(reference.named_parameters(), model.parameters()):
        torch.testing.assert_close(moved.grad, parameter.grad, rtol=1e-4, atol=1e-7, msg=name)
        # Adam's first step is lr * sign(gradient) where the gradient is well above its eps
        clear = parameter.grad.abs() > 1e-4
        torch.testing.assert_close(moved[clear], parameter[clear], rtol=1e-6, atol=1e-6, msg=name)


def left_padded_batches(rows_per_batch, length=12, items=40, seed=1):
    """Windows [rows, length + 1] per batch, row r of a batch with its first 3 r positions padding."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for rows in rows_per_batch:
        windows = torch.randint(1, items + 1, (rows, length + 1), generator=generator)
        windows[torch.arange(length + 1)[None, :] < 3 * torch.arange(rows)[:, None]] = 0
        batches.append(windows)
    return batches


def seeded_step(backbone="sasrec", batch_size=6, static_shapes=None, loss_path="auto", **options):
    config = TrainConfig(**{"d_model": 16, "n_layers": 1, "n_heads": 2, "dropout": 0.0, "max_len": 12, "lr": 0.01,
                            "device": "cpu", "batch_size": batch_size, **options})
    torch.manual_seed(0)
    model = SequentialRecommender(40, backbone, d_model=16, max_len=12, dropout=0.0, n_layers=1, n_heads=2)
    return TrainingStep(model, config, torch.device("cpu"), backbone, static_shapes=static_shapes,
                        loss_path=loss_path)


def test_the_static_step_trains_as_the_eager_step_and_its_loss_adds_up_on_the_device():
    """The step of a whole-step mode, run on CPU without the graph: every position in the loss with the
    untrained ones weighted 0, the last batch padded with empty windows; the loss sums accumulated on the
    device as fit does."""
    eager, static = seeded_step(), seeded_step(static_shapes=True)
    assert static.static_shapes and not eager.static_shapes
    accumulated = torch.zeros((), dtype=torch.float64)
    eager_losses = []
    for windows in left_padded_batches([6, 6, 4]):  # the last batch short: padded to 6 rows
        eager_losses.append(float(eager.on_batch(windows).detach()))
        accumulated += static.on_batch(windows).double()
        assert static.static_windows.shape == (6, 13)
    assert not static.static_windows[4:].any()  # the padding rows of the last batch
    assert float(accumulated) == pytest.approx(sum(eager_losses), rel=1e-6)
    for (name, parameter), same in zip(eager.model.named_parameters(), static.model.parameters()):
        torch.testing.assert_close(same.grad, parameter.grad, rtol=1e-4, atol=1e-7, msg=name)
        torch.testing.assert_close(same, parameter, rtol=1e-5, atol=1e-6, msg=name)


def test_a_padded_batch_gives_the_gradients_of_the_unpadded_one():
    windows = left_padded_batches([4])[0]
    padded, exact = seeded_step(batch_size=7, static_shapes=True), seeded_step(batch_size=4, static_shapes=True)
    loss_padded, loss_exact = padded.on_batch(windows), exact.on_batch(windows)
    assert padded.static_windows.shape == (7, 13) and exact.static_windows.shape == (4, 13)
    torch.testing.assert_close(loss_padded, loss_exact, rtol=1e-6, atol=1e-6)
    for (name, parameter), same in zip(exact.model.named_parameters(), padded.model.parameters()):
        torch.testing.assert_close(same.grad, parameter.grad, rtol=1e-5, atol=1e-8, msg=name)


STATIC_FUSED_CHECK = r"""
import json
from tests.training.test_step import left_padded_batches, seeded_step
from prism_rec.training.step import step_gaps
static = seeded_step(static_shapes=True, loss_path="fused")
batches = left_padded_batches([6, 6, 4])
print(json.dumps(step_gaps(seeded_step(loss_path="fused"), static, batches)))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_static_step_on_the_fused_kernels_trains_as_the_eager_step():
    """Both steps on the fused loss through Triton's interpreter (a subprocess: Triton reads TRITON_INTERPRET
    when its kernels are defined): the static step's loss reads only the rows before the device count of
    trained positions (30 of 72 rows in each batch, so its second row block is skipped)."""
    assert int(trained_positions(left_padded_batches([6])[0]).sum()) < 64  # FIXED_CONFIG's 64-row blocks
    environment = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", STATIC_FUSED_CHECK], capture_output=True, text=True,
                            env=environment, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    gaps = json.loads(result.stdout.strip().splitlines()[-1])
    assert max(gaps["loss"], gaps["gradients"], gaps["parameters"]) < 1e-4, gaps


def test_the_static_step_refuses_what_it_cannot_train():
    static = seeded_step(static_shapes=True)
    static.on_batch(left_padded_batches([6])[0])
    with pytest.raises(ValueError, match="static shape"):
        static.on_batch(left_padded_batches([7])[0])  # more rows than the batch size
    with pytest.raises(ValueError, match="static shape"):
        static.on_batch(left_padded_batches([6], length=10)[0])  # another window length
    with pytest.raises(ValueError, match="full-softmax loss in one process"):
        seeded_step(static_shapes=True, loss="sampled")


def test_step_gaps_are_zero_between_alike_steps_and_catch_a_wrong_update():
    batches = left_padded_batches([6, 6, 5])
    same = step_gaps(seeded_step(), seeded_step(static_shapes=True), batches)
    assert max(same["loss"], same["gradients"], same["parameters"]) < 1e-4
    wrong = step_gaps(seeded_step(), seeded_step(static_shapes=True, lr=0.012), batches)  # 20% larger updates
    assert wrong["parameters"] > 0.1 and wrong["worst_parameter"] in dict(seeded_step().model.named_parameters())


def test_a_loaded_optimizer_state_keeps_the_options_of_the_step():
    """load_state_dict alone would take the fused flag of the run that wrote the checkpoint."""
    writer = seeded_step()
    writer.optimizer = torch.optim.AdamW(parameter_groups(writer.model, 0.0), lr=0.01, fused=True)
    writer(left_padded_batches([6])[0], 50, 0.02)
    reader = seeded_step()
    reader.load_optimizer_state(writer.optimizer.state_dict())
    group = reader.optimizer.param_groups[0]
    assert group["fused"] is None and group["capturable"] is False
    states = [reader.optimizer.state[p] for p in reader.model.parameters() if p in reader.optimizer.state]
    assert states and all(state["step"].device.type == "cpu" and float(state["step"]) == 1 for state in states)
