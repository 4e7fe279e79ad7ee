"""The training step (prism_rec/training/step.py) against the step computed directly: one AdamW step on
the mean full-softmax cross-entropy of the real positions of a batch of left-padded windows."""

import copy

import torch
import torch.nn.functional as F

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.training.config import TrainConfig
from prism_rec.training.step import TrainingStep, trained_positions


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
