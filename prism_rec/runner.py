"""``prism-rec bench``: train every (model, seed) on one dataset, log to MLflow, write the AUC table.

One MLflow experiment per dataset, one parent run per invocation, one child run ``<model>-s<seed>``
per training with every config value as a param, per-epoch metrics, final test metrics and cost
figures. An interrupted run (Ctrl-C, SIGTERM) ends KILLED, a crashed one FAILED; the other models
still run after a crash and the command then exits non-zero.
"""

from __future__ import annotations

import shlex
import signal
import sys
import time
import traceback
from dataclasses import replace

from .data.sources import load_dataset
from .tables import RESULTS_DIR, write_tables
from .tracking import experiment_id, provenance_tags
from .train import TrainConfig, fit, resolve_device


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def bench(dataset_name: str, models: list[str], seeds: list[int], config: TrainConfig,
          data_options: dict | None = None, results_dir=RESULTS_DIR, command: str | None = None) -> dict:
    """Run the benchmark; returns {(model, seed): result} of the runs that finished."""
    import mlflow

    command = command or "prism-rec " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    signal.signal(signal.SIGTERM, _raise_interrupt)
    dataset = load_dataset(dataset_name, **(data_options or {}))
    stats = dataset.stats()
    print(f"{dataset_name}: {stats['users']:,} users, {stats['items']:,} items, "
          f"{stats['interactions']:,} interactions, split {dataset.options['split']}")
    device = resolve_device(config.device)
    tags = {**provenance_tags(device), "dataset": dataset_name, "command": command,
            "dataset_stats": ", ".join(f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v:,}" for k, v in stats.items())}
    experiment = experiment_id(dataset_name)
    results, failures = {}, []
    with mlflow.start_run(experiment_id=experiment, run_name=f"bench-{time.strftime('%Y%m%d-%H%M%S')}",
                          tags={**tags, "prism_rec_role": "parent"}) as parent:
        mlflow.log_params({"dataset": dataset_name, "models": ",".join(models), "seeds": ",".join(map(str, seeds)),
                           **{f"data.{k}": v for k, v in dataset.options.items()}})
        total = len(models) * len(seeds)
        for index, (model, seed) in enumerate(((m, s) for m in models for s in seeds), start=1):
            run_config = replace(config, seed=seed)
            print(f"[{index}/{total}] {model} seed {seed}")
            with mlflow.start_run(experiment_id=experiment, run_name=f"{model}-s{seed}", nested=True,
                                  tags={**tags, "prism_rec_role": "child", "model": model, "seed": str(seed),
                                        "mlflow.parentRunId": parent.info.run_id}) as child:
                mlflow.log_params({"model": model, **{f"data.{k}": v for k, v in dataset.options.items()},
                                   **run_config.params()})
                try:
                    result = fit(dataset, model, run_config,
                                 on_epoch=lambda epoch, metrics: mlflow.log_metrics(metrics, step=epoch))
                except KeyboardInterrupt:
                    mlflow.end_run(status="KILLED")
                    mlflow.end_run(status="KILLED")
                    raise
                except Exception as error:  # a crashing backbone must not take the others down
                    traceback.print_exc()
                    failures.append(f"{model} seed {seed}: {type(error).__name__}: {error}")
                    mlflow.set_tag("error", f"{type(error).__name__}: {error}"[:4000])
                    mlflow.end_run(status="FAILED")
                    continue
                mlflow.log_metrics({
                    **{f"test_{k}": v for k, v in result["test"].items()},
                    **{f"best_valid_{k}": v for k, v in result["valid"].items()},
                    "best_epoch": result["best_epoch"], "epochs_run": result["epochs_run"],
                    "train_tokens_per_s": result["train_tokens_per_s"], "peak_memory_mb": result["peak_memory_mb"],
                    "wall_seconds": result["wall_seconds"], "n_parameters": result["n_parameters"],
                })
                print(f"    test AUC {result['test']['auc']:.4f}  Hit@10 {result['test']['hit_10']:.4f}  "
                      f"best epoch {result['best_epoch']}/{result['epochs_run']}  "
                      f"{result['train_tokens_per_s']:,.0f} tokens/s  {result['wall_seconds']:.1f} s")
                results[(model, seed)] = result
        if results:
            markdown, csv = write_tables(dataset_name, results_dir)
            mlflow.log_artifact(str(markdown))
            mlflow.log_artifact(str(csv))
            print()
            print(markdown.read_text())
            print(f"AUC table written to {markdown} and {csv}")
        if failures:
            mlflow.set_tag("failures", "; ".join(failures)[:4000])
    if failures:
        raise RuntimeError("some runs failed:\n  " + "\n  ".join(failures))
    return results


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '1,5,7' -> [1, 5, 7]."""
    if "," in text:
        return [int(s) for s in text.split(",") if s]
    count = int(text)
    if count < 1:
        raise ValueError(f"option --seeds: need at least one seed, got {text!r}")
    return list(range(count))

