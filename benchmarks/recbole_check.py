"""The cross-implementation check: RecBole's own SASRec (through prism_rec/recbole_bridge) and this suite's
sasrec on the same split with the same sizes and budget, both evaluated by this suite's evaluator; writes
results/recbole_check.md (the command that made it at its top): per model the test metrics (mean over
seeds, 95% bootstrap interval over test users of the AUC), epochs and wall time, then the paired difference
of the per-user AUCs (ours minus RecBole's; bootstrap interval, Wilcoxon p, Welch p over seeds).

Both train with their own loss and loop: ours full-softmax cross-entropy over windows with AdamW and early
stopping on validation AUC; RecBole's cross-entropy over its augmented prefixes with Adam, its dropout
(0.5), and early stopping on its validation MRR@10. Sizes (d_model, layers, heads, max_len) and budget
(epochs, patience, batch size, learning rate) are shared.

    python benchmarks/recbole_check.py --datasets ml-100k --seeds 3 --epochs 50 --device cuda
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from prism_rec.data.sources import load_dataset
from prism_rec.experiments.bench import cpu_threads
from prism_rec.files import write_atomically
from prism_rec.paths import RESULTS_DIR
from prism_rec.recbole_bridge.run import fit_recbole
from prism_rec.tracking.bootstrap import bootstrap_mean_ci, paired_difference, verdict
from prism_rec.tracking.case_ranks import CaseRanks
from prism_rec.training.config import TrainConfig
from prism_rec.training.trainer import fit

MODELS = {"sasrec": fit, "recbole:SASRec": fit_recbole}
SHOWN = ("auc", "mrr", "hit_10", "ndcg_10")


def per_user_auc(case_ranks: dict, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-user mean test AUC [U] and case counts [U] of a run's case ranks (users without a case dropped)."""
    ranks = CaseRanks(case_ranks["users"], case_ranks["twice_rank"], case_ranks["n_items"])
    counts = np.bincount(ranks.users, minlength=n_users)
    sums = np.bincount(ranks.users, weights=ranks.auc(), minlength=n_users)
    kept = counts > 0
    return sums[kept] / counts[kept], counts[kept]


def check_dataset(name: str, seeds: list[int], base: TrainConfig) -> str:
    """Train both models on ``name`` for every seed; the Markdown section of the dataset."""
    dataset = load_dataset(name)
    runs = {model: [] for model in MODELS}
    for seed in seeds:
        for model, train in MODELS.items():
            config = replace(base, seed=seed)
            started = time.perf_counter()
            result = train(dataset, model, config)
            runs[model].append((result, time.perf_counter() - started))
            print(f"{name} {model} seed {seed}: test AUC {result.test['auc']:.4f} best epoch "
                  f"{result.best_epoch}/{result.epochs_run} {time.perf_counter() - started:.0f} s", flush=True)
    per_user, cases = {}, None
    lines = [f"## {name}: {dataset.n_users:,} users, {dataset.n_items:,} items, split {dataset.options['split']}",
             "", "| model | " + " | ".join(SHOWN) + " | AUC 95% interval (test users) | best epoch / run | "
             "wall s per seed |", "|---" * (len(SHOWN) + 4) + "|"]
    for model, results in runs.items():
        rows = [per_user_auc(result.test_case_ranks, dataset.n_users) for result, _ in results]
        per_user[model], cases = np.stack([values for values, _ in rows]), rows[0][1]
        low, high = bootstrap_mean_ci(per_user[model], cases=None if (cases == 1).all() else cases)
        means = [np.mean([result.test[key] for result, _ in results]) for key in SHOWN]
        epochs = ", ".join(f"{result.best_epoch}/{result.epochs_run}" for result, _ in results)
        wall = np.mean([seconds for _, seconds in results])
        lines.append(f"| {model} | " + " | ".join(f"{value:.4f}" for value in means)
                     + f" | [{low:.4f}, {high:.4f}] | {epochs} | {wall:.0f} |")
    difference = paired_difference(per_user["sasrec"], per_user["recbole:SASRec"],
                                   cases=None if (cases == 1).all() else cases)
    lines += ["", f"Ours minus RecBole's, per-user test AUC over {difference.n_users:,} users and {len(seeds)} "
              f"seed(s): {difference.mean:+.4f}, 95% interval [{difference.low:+.4f}, {difference.high:+.4f}], "
              f"Wilcoxon p {difference.wilcoxon_p:.3g}, Welch p over seeds {difference.seed_p:.3g}: "
              f"{verdict(difference)}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="ml-100k", help="comma list")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--n-heads", type=int, default=2)
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "recbole_check.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(cpu_threads("auto"))
    base = TrainConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, max_len=args.max_len,
                       batch_size=args.batch_size, lr=args.lr, epochs=args.epochs, patience=args.patience,
                       device=args.device, progress=False)
    command = "python benchmarks/recbole_check.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    sections = [check_dataset(name, list(range(args.seeds)), base) for name in args.datasets.split(",")]
    text = ("# RecBole's SASRec and ours on the same split\n\n"
            f"Made by `{command}` (benchmarks/recbole_check.py says what each side trains with). Test metrics of "
            "this suite's evaluator: full ranking over all items, history kept.\n\n" + "\n".join(sections))
    write_atomically(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
