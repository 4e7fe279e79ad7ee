"""The authors' protocol's training step, eager against CUDA graphs (prism_rec/protocols/authors/train.py,
TrainingLoss): one training epoch per model on a dataset's edge task, both ways in this process, timed
synchronised; the epochs' mean losses are compared (the graphs must train the eager run). Writes
results/authors_step.md:

    python benchmarks/authors_step.py --dataset ml-100k --models sasrec,prism-authors --out results/authors_step.md

Other processes on the same GPU (a grid beside it) slow both ways alike; the file says how many there were.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from prism_rec.files import write_atomically
from prism_rec.markdown import pipe_table
from prism_rec.protocols.authors.data import load_task
from prism_rec.protocols.authors.model import check_model
from prism_rec.protocols.authors.train import RunConfig, Scorer, TrainingLoss, train_epoch


def epoch(task, config: RunConfig, device: torch.device, graphs: bool) -> tuple[float, float, int]:
    """(seconds, mean loss, steps) of the first training epoch of ``config`` (its capture included)."""
    scorer = Scorer(task, config, device)
    optimizer = torch.optim.Adam(scorer.model.parameters(), lr=config.lr, weight_decay=0.0)
    batch_loss = TrainingLoss(scorer, config.batch_size, graphs)
    scorer.tokens(), scorer.edge_index(0)          # built once per run in both ways: not timed
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    loss = train_epoch(scorer, optimizer, np.random.default_rng(config.seed), config.batch_size, batch_loss)
    torch.cuda.synchronize(device)
    steps = -(-len(scorer.edge_index(0)) // config.batch_size)
    return time.perf_counter() - start, loss, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--models", default="sasrec,prism-authors,gdn-authors,prism,gated_deltanet,mamba2,null")
    parser.add_argument("--out", type=Path, default=Path("results/authors_step.md"))
    parser.add_argument("--neighbours-processes", type=int, default=0,
                        help="how many other processes used the GPU meanwhile (stated in the file)")
    args = parser.parse_args()
    models = [check_model(name, "--models") for name in args.models.split(",")]
    if not torch.cuda.is_available():
        parser.error("CUDA graphs need a GPU: no CUDA device")
    device = torch.device("cuda")
    task = load_task(args.dataset)
    rows = []
    for model in models:
        config = RunConfig(model=model)
        eager_s, eager_loss, steps = epoch(task, config, device, graphs=False)
        graph_s, graph_loss, _ = epoch(task, config, device, graphs=True)
        rows.append([model, str(steps), f"{1e3 * eager_s / steps:.2f}", f"{1e3 * graph_s / steps:.2f}",
                     f"{eager_s / graph_s:.1f}x", f"{abs(graph_loss - eager_loss):.1e}"])
        print(*rows[-1], flush=True)
    commit = os.environ.get("PRISM_REC_GIT_COMMIT", "unknown")
    text = "\n".join([
        "# The authors' protocol: training step, eager against CUDA graphs", "",
        f"Written by `python benchmarks/authors_step.py --dataset {args.dataset} --models {args.models}` at commit "
        f"{commit} on {torch.cuda.get_device_name(device)} (torch {torch.__version__}, Python "
        f"{platform.python_version()}), float32, the authors' defaults (batch 256, 20 neighbours, channel 64, "
        f"2 layers, 2 heads, dropout 0.1, Adam 1e-4), one training epoch of {args.dataset}'s edge task per model "
        f"and way, in one process, synchronised; {args.neighbours_processes} other processes used the GPU "
        "meanwhile. ms/step is the epoch's wall time over its steps, the graphs' capture (and its three warm-up "
        "steps) included; the loss difference is between the two epochs' mean training losses (the same "
        "seed, so the same batches, negatives and dropout draws).", "",
        pipe_table(["model", "steps", "eager ms/step", "graphs ms/step", "speed-up", "|loss difference|"], rows,
              align="lrrrrr"), ""])
    write_atomically(args.out, text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
