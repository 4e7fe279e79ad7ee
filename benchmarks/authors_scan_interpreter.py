"""The authors' protocol's real model and batches through the fused Triton scan under Triton's interpreter (CPU).

The faithful backbones (gated_deltanet, prism) died on the H200 with "an illegal memory access" in the authors'
grid (results/authors_step.md). This builds a run's Scorer on a dataset's edge task and, for the first and the
last (short) batch of training and of validation, runs the model once with its scans on the PyTorch backend and
once on the Triton kernels (interpreted), recording every load and store of every launch that leaves its tensor
arguments (tests/kernels/interpreter_bounds.py). The scans get the model's own tensors: their strides, the
requires-grad state of a training step or the no-grad state of validation, and the weights as they are then
(the initial ones, moved by one Adam step per training batch checked, not a run's epoch of steps). Prints, per
batch, the scan calls, the accesses out of bounds and the largest difference of the loss (training: and of the
parameters' gradients, relative) from the PyTorch backend's; the exit status is 1 only for an access out of
bounds, not for a difference:

    python benchmarks/authors_scan_interpreter.py --models gated_deltanet,prism --lr 0.001   # ~6 minutes
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kernels"))
from interpreter_bounds import recording_accesses  # noqa: E402
from prism_rec.kernels import triton_chunk  # noqa: E402

from prism_rec.protocols.authors.data import load_task  # noqa: E402
from prism_rec.protocols.authors.model import check_model  # noqa: E402
from prism_rec.protocols.authors.train import VALID_NEGATIVE_SEED, RunConfig, Scorer, TrainingLoss, batch_negatives  # noqa: E402


def counting_scans(counter: list[int]):
    """triton_delta_scan, counting its calls in counter[0]."""
    original = triton_chunk.triton_delta_scan

    def scan(*args, **kwargs):
        counter[0] += 1
        return original(*args, **kwargs)

    return scan


def batch_forward(scorer, loss, layers, parameters, edges, negatives, backend: str):
    """The batch's loss and the parameters' gradients (training mode) or its scores (evaluation mode) with the
    scans on ``backend``."""
    for layer in layers:
        layer.backend = backend
    torch.manual_seed(1)  # the same dropout draws on both backends
    training = scorer.model.training
    with torch.set_grad_enabled(training):
        value = loss(edges, negatives) if training else torch.stack(scorer.pairs(edges, negatives))
        grads = torch.autograd.grad(value, parameters, allow_unused=True) if training else ()
    return value.detach(), grads


def check_model_batches(task, model: str, lr: float) -> bool:
    """Prints one line per batch; True when no access left its tensors."""
    scorer = Scorer(task, RunConfig(model=model, lr=lr), torch.device("cpu"))
    layers = [module for module in scorer.model.modules() if hasattr(module, "backend")]
    optimizer = torch.optim.Adam(scorer.model.parameters(), lr=lr)
    loss = TrainingLoss(scorer, scorer.config.batch_size, graphs=False)
    parameters = [p for p in scorer.model.parameters() if p.requires_grad]
    size, clean = scorer.config.batch_size, True
    parts = {0: batch_negatives(np.random.default_rng(scorer.config.seed), np.unique(task.dst[task.part == 0]),
                                len(scorer.edge_index(0)), size, scorer.device),
             1: batch_negatives(np.random.default_rng(VALID_NEGATIVE_SEED), task.items, len(scorer.edge_index(1)),
                                size, scorer.device)}
    for part, negatives in parts.items():
        edges = scorer.edge_index(part)
        for start in (0, (len(edges) - 1) // size * size):
            batch, batch_negs = edges[start:start + size], negatives[start:start + size]
            training = part == 0
            scorer.model.train(training)

            reference, reference_grads = batch_forward(scorer, loss, layers, parameters, batch, batch_negs, "torch")
            calls = [0]
            original, triton_chunk.triton_delta_scan = triton_chunk.triton_delta_scan, counting_scans(calls)
            try:
                with recording_accesses() as violations:
                    value, grads = batch_forward(scorer, loss, layers, parameters, batch, batch_negs, "triton")
            finally:
                triton_chunk.triton_delta_scan = original
            grad_error = max((float((a - b).abs().max() / (b.abs().max() + 1e-12))
                              for a, b in zip(grads, reference_grads) if a is not None), default=0.0)
            gradients = f"{grad_error:.1e}" if training else "— (validation)"
            print(f"{model} {'train' if training else 'valid'} batch at {start} ({len(batch)} edges): {calls[0]} "
                  f"scans, {len(violations)} accesses out of bounds {violations[:3]}, |difference| "
                  f"{float((value - reference).abs().max()):.1e}, gradients {gradients}", flush=True)
            clean &= not violations
            if training:  # a real step, so that the next batches see trained weights as in a run
                for layer in layers:
                    layer.backend = "torch"
                optimizer.zero_grad()
                loss(batch, batch_negs).backward()
                optimizer.step()
    return clean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="ml-100k", help="a dataset of the authors' protocol")
    parser.add_argument("--models", default="gated_deltanet,prism", help="comma-separated backbones on the scan")
    parser.add_argument("--lr", type=float, default=1e-4, help="the rate of the Adam steps between the batches")
    args = parser.parse_args()
    models = [check_model(name, "--models") for name in args.models.split(",")]
    task = load_task(args.dataset)
    clean = [check_model_batches(task, model, args.lr) for model in models]
    sys.exit(0 if all(clean) else 1)


if __name__ == "__main__":
    main()
