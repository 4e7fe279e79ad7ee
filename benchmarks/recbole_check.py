"""The cross-implementation check: RecBole's own SASRec (through prism_rec/recbole_bridge) and this suite's
sasrec on the same split with the same sizes and budget, both evaluated by this suite's evaluator; writes
results/recbole_check.md (the command that made it at its top): per model the test metrics (mean over
seeds, 95% bootstrap interval over test users of the AUC), epochs and wall time, then the paired difference
of the per-user AUCs (ours minus RecBole's; bootstrap interval, Wilcoxon p, Welch p over seeds).

Both train with their own loss and loop: ours full-softmax cross-entropy over windows with AdamW and early
stopping on validation AUC; RecBole's cross-entropy over its augmented prefixes with Adam, its dropout
(0.5), and early stopping on its validation MRR@10. Sizes (d_model, layers, heads, max_len) and budget
(epochs, patience, batch size, learning rate) are shared.

    python benchmarks/recbole_check.py --datasets ml-100k --seeds 3 --epochs 50 --device cuda --budget 480

Each finished (dataset, model, seed) is kept in ``--runs-dir``, so a check larger than one command's time is
the same command run again (``--budget`` stops starting new trainings); the report covers the seeds both
models have finished.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from prism_rec.data.batching import training_windows
from prism_rec.data.sources import load_dataset
from prism_rec.experiments.bench import cpu_threads
from prism_rec.files import write_atomically
from prism_rec.options import parse_seeds
from prism_rec.paths import RESULTS_DIR
from prism_rec.recbole_bridge.run import fit_recbole
from prism_rec.recbole_bridge.split import training_cases
from prism_rec.tracking.bootstrap import bootstrap_mean_ci, paired_difference, verdict
from prism_rec.tracking.case_ranks import CaseRanks, decode, encode
from prism_rec.training.config import TrainConfig
from prism_rec.training.devices import resolve_device
from prism_rec.training.trainer import fit

MODELS = {"sasrec": fit, "recbole:SASRec": fit_recbole}
SHOWN = ("auc", "mrr", "hit_10", "ndcg_10")


def per_user_auc(ranks: CaseRanks, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-user mean test AUC [U] and case counts [U] of a run's case ranks (users without a case dropped)."""
    counts = np.bincount(ranks.users, minlength=n_users)
    sums = np.bincount(ranks.users, weights=ranks.auc(), minlength=n_users)
    kept = counts > 0
    return sums[kept] / counts[kept], counts[kept]


def train_runs(name: str, dataset, seeds: list[int], base: TrainConfig, runs_dir: Path, deadline: float) -> dict:
    """Every (model, seed) of ``name``: read from ``runs_dir/<name>/<model>-s<seed>.json`` when a command
    before trained it, else trained now and written there, until ``deadline`` (time.time()) has passed;
    returns {model: {seed: run}}, a run being {test, best_epoch, epochs_run, wall_seconds, case_ranks}."""
    runs = {model: {} for model in MODELS}
    for seed in seeds:
        for model, train in MODELS.items():
            path = runs_dir / name / f"{model.replace(':', '_')}-s{seed}.json"
            if path.exists():
                runs[model][seed] = json.loads(path.read_text())
                continue
            if time.time() > deadline:
                print(f"{name} {model} seed {seed}: not started (--budget spent); run the command again", flush=True)
                continue
            started = time.perf_counter()
            result = train(dataset, model, replace(base, seed=seed))
            cases = result.test_case_ranks
            run = {"test": result.test, "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
                   "wall_seconds": time.perf_counter() - started,
                   "case_ranks": encode(cases["users"], cases["twice_rank"], cases["n_items"])}
            write_atomically(path, json.dumps(run))
            runs[model][seed] = run
            print(f"{name} {model} seed {seed}: test AUC {result.test['auc']:.4f} best epoch "
                  f"{result.best_epoch}/{result.epochs_run} {run['wall_seconds']:.0f} s", flush=True)
    return runs


def steps_per_epoch(dataset, config: TrainConfig) -> dict[str, int]:
    """Optimizer steps per epoch of each model: ours over training windows of max_len + 1 items, RecBole's
    over one sequence per training target (split.training_cases)."""
    return {"sasrec": math.ceil(len(training_windows(dataset, config.max_len)) / config.batch_size),
            "recbole:SASRec": math.ceil(len(training_cases(dataset)) / config.batch_size)}


def dataset_section(name: str, dataset, runs: dict, config: TrainConfig) -> str:
    """The Markdown section of ``name`` over the seeds both models have finished."""
    seeds = sorted(set.intersection(*(set(by_seed) for by_seed in runs.values())))
    header = f"## {name}: {dataset.n_users:,} users, {dataset.n_items:,} items, split {dataset.options['split']}"
    if not seeds:
        return f"{header}\n\nNo seed finished by both models yet.\n"
    lines = [header, "", "| model | " + " | ".join(SHOWN) + " | AUC 95% interval (test users) | best epoch / run "
             "| wall s per seed |", "|---" * (len(SHOWN) + 4) + "|"]
    per_user, cases = {}, None
    for model, by_seed in runs.items():
        chosen = [by_seed[seed] for seed in seeds]
        rows = [per_user_auc(decode(run["case_ranks"]), dataset.n_users) for run in chosen]
        per_user[model], cases = np.stack([values for values, _ in rows]), rows[0][1]
        weights = None if (cases == 1).all() else cases
        low, high = bootstrap_mean_ci(per_user[model], cases=weights)
        means = [np.mean([run["test"][key] for run in chosen]) for key in SHOWN]
        epochs = ", ".join(f"{run['best_epoch']}/{run['epochs_run']}" for run in chosen)
        wall = np.mean([run["wall_seconds"] for run in chosen])
        lines.append(f"| {model} | " + " | ".join(f"{value:.4f}" for value in means)
                     + f" | [{low:.4f}, {high:.4f}] | {epochs} | {wall:.0f} |")
    difference = paired_difference(per_user["sasrec"], per_user["recbole:SASRec"], cases=weights)
    steps = steps_per_epoch(dataset, config)
    lines += ["", f"Optimizer steps per epoch at batch {config.batch_size}: ours {steps['sasrec']:,} (every training "
              f"target once, in windows of {config.max_len + 1}), RecBole's {steps['recbole:SASRec']:,} (one "
              "sequence per target): at equal epochs RecBole takes "
              f"{steps['recbole:SASRec'] / steps['sasrec']:.0f}x the steps, so only converged runs (early "
              "stopping, not the epoch cap) say whether the two are equally good.",
              "", f"Ours minus RecBole's, per-user test AUC over {difference.n_users:,} users and seed(s) "
              f"{', '.join(map(str, seeds))}: {difference.mean:+.4f}, 95% interval [{difference.low:+.4f}, "
              f"{difference.high:+.4f}], Wilcoxon p {difference.wilcoxon_p:.3g}, Welch p over seeds "
              f"{difference.seed_p:.3g}: {verdict(difference)}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="ml-100k", help="comma list")
    parser.add_argument("--seeds", default="3", help="a count N (seeds 0..N-1) or a comma list")
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
    parser.add_argument("--runs-dir", type=Path, default=Path("build/recbole_check"),
                        help="each finished (dataset, model, seed) is kept here; a later command reuses it")
    parser.add_argument("--budget", type=float, default=math.inf,
                        help="seconds after which no new training starts (the report covers what finished)")
    args = parser.parse_args(argv)
    torch.set_num_threads(cpu_threads("auto"))
    base = TrainConfig(d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads, max_len=args.max_len,
                       batch_size=args.batch_size, lr=args.lr, epochs=args.epochs, patience=args.patience,
                       device=args.device, progress=False)
    command = "python benchmarks/recbole_check.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    deadline, sections = time.time() + args.budget, []
    for name in args.datasets.split(","):
        dataset = load_dataset(name)
        runs = train_runs(name, dataset, parse_seeds(args.seeds), base, args.runs_dir, deadline)
        sections.append(dataset_section(name, dataset, runs, base))
    text = ("# RecBole's SASRec and ours on the same split\n\n"
            f"Made by `{command}` (benchmarks/recbole_check.py says what each side trains with). Test metrics of "
            "this suite's evaluator: full ranking over all items, history kept. Trained on "
            f"{resolve_device(args.device)} (wall times are that machine's as it ran, other work included).\n\n"
            + "\n".join(sections))
    write_atomically(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
