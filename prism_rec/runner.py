"""``prism-rec bench``: train every (model, seed) on one dataset, log to MLflow, write the AUC table.

One MLflow experiment per dataset, one parent run per invocation, one child run ``<model>-s<seed>``
per training with every config value as a param, per-epoch metrics, final test metrics, cost figures,
the resolved config (config.json) and a learning-curve PNG; the parent keeps the AUC table (Markdown,
CSV) and a bar chart of test AUC per model. An interrupted run (Ctrl-C, SIGTERM) saves a checkpoint
and ends KILLED, a crashed one FAILED; the other models still run after a crash and the command then
exits non-zero. ``resume=True`` reopens the newest KILLED benchmark with the same settings: finished
children are kept, the interrupted one continues from its checkpoint in its own MLflow run.
Under torchrun every process trains, and only rank 0 talks to MLflow and writes files.
"""

from __future__ import annotations

import shlex
import signal
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

from . import distributed
from .checkpoint import CHECKPOINT_DIR, checkpoint_file, config_hash
from .data.sources import load_dataset
from .plots import learning_curve
from .records import CASE_RANKS_ARTIFACT, case_ranks_entry, dataset_stats_tag, final_metrics, run_hash
from .tables import RESULTS_DIR, write_tables
from .tracking import experiment_id, provenance_tags
from .train import TrainConfig, fit, resolve_device

FINISHED, RESUME, RESTART = "finished", "resume", "restart"


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def bench(dataset_name: str, models: list[str], seeds: list[int], config: TrainConfig,
          data_options: dict | None = None, results_dir=RESULTS_DIR, command: str | None = None,
          resume: bool = False, checkpoint_dir: Path = CHECKPOINT_DIR) -> dict:
    """Run the benchmark; returns {(model, seed): result} of the runs trained (and finished) now."""
    world = distributed.start(resolve_device(config.device))
    previous_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return _bench(world, dataset_name, models, seeds, config, data_options or {}, Path(results_dir),
                      command or "prism-rec " + " ".join(shlex.quote(a) for a in sys.argv[1:]), resume,
                      Path(checkpoint_dir))
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        distributed.stop(world)


def _bench(world: distributed.World, dataset_name: str, models: list[str], seeds: list[int], config: TrainConfig,
           data_options: dict, results_dir: Path, command: str, resume: bool, checkpoint_dir: Path) -> dict:
    if not world.is_main:  # rank 0 prepares (and caches) the dataset first
        world.barrier()
    dataset = load_dataset(dataset_name, **data_options)
    if world.is_main:
        world.barrier()

    def run_hash_for(model: str, seed: int) -> str:
        return run_hash(dataset_name, dataset.options, model, replace(config, seed=seed))

    def checkpoint_for(model: str, seed: int) -> Path:
        return checkpoint_file(dataset_name, model, seed, run_hash_for(model, seed), checkpoint_dir)

    if not world.is_main:
        return _train_silently(world, dataset, models, seeds, config, world.broadcast_object(None), checkpoint_for)
    import mlflow

    stats = dataset.stats()
    print(f"{dataset_name}: {stats['users']:,} users, {stats['items']:,} items, "
          f"{stats['interactions']:,} interactions, split {dataset.options['split']}"
          + (f"; {world.size} data-parallel processes" if world.distributed else ""))
    device = world.device(resolve_device(config.device))
    tags = {**provenance_tags(device), "dataset": dataset_name, "command": command, "world_size": str(world.size),
            "dataset_stats": dataset_stats_tag(dataset)}
    experiment = experiment_id(dataset_name)
    bench_hash = config_hash({"dataset": dataset_name, "data": dataset.options, "models": models, "seeds": seeds,
                              "train": replace(config, seed=0).identity()})
    parent_id, plan = _interrupted_bench(experiment, bench_hash, run_hash_for, checkpoint_for) if resume else (None, {})
    if resume and parent_id is None:
        print(f"--resume: no interrupted benchmark with these settings in experiment {dataset_name!r}; starting anew")
    actions = world.broadcast_object({key: action for key, (action, _) in plan.items()})
    results, failures = {}, []
    with mlflow.start_run(run_id=parent_id, experiment_id=None if parent_id else experiment,
                          run_name=None if parent_id else f"bench-{time.strftime('%Y%m%d-%H%M%S')}",
                          tags={**tags, "prism_rec_role": "parent", "config_hash": bench_hash}) as parent:
        if parent_id is None:
            mlflow.log_params({"dataset": dataset_name, "models": ",".join(models), "seeds": ",".join(map(str, seeds)),
                               **{f"data.{k}": v for k, v in dataset.options.items()}})
        total = len(models) * len(seeds)
        for index, (model, seed) in enumerate(((m, s) for m in models for s in seeds), start=1):
            run_config = replace(config, seed=seed)
            path = checkpoint_for(model, seed)
            action, child_id = plan.get((model, seed), (None, None))
            if action == FINISHED:
                print(f"[{index}/{total}] {model} seed {seed}: finished before the interruption, kept")
                continue
            print(f"[{index}/{total}] {model} seed {seed}"
                  + (f": resuming from {path}" if action == RESUME else ""))
            with mlflow.start_run(run_id=child_id, experiment_id=None if child_id else experiment,
                                  run_name=f"{model}-s{seed}", nested=True,
                                  tags={**tags, "prism_rec_role": "child", "model": model, "seed": str(seed),
                                        "config_hash": run_hash_for(model, seed),
                                        "mlflow.parentRunId": parent.info.run_id}):
                if child_id is None:
                    mlflow.log_params({"model": model, **{f"data.{k}": v for k, v in dataset.options.items()},
                                       **run_config.params()})
                mlflow.log_dict({"model": model, "dataset": dataset_name, "data": dataset.options,
                                 "train": asdict(run_config), "world_size": world.size}, "config.json")
                try:
                    result = fit(dataset, model, run_config,
                                 on_epoch=lambda epoch, metrics: mlflow.log_metrics(metrics, step=epoch),
                                 checkpoint_path=path, resume=action == RESUME, world=world)
                except KeyboardInterrupt:
                    if path.exists():
                        print(f"\ninterrupted: checkpoint {path}; continue with --resume (make bench ... RESUME=1)",
                              file=sys.stderr)
                    mlflow.end_run(status="KILLED")
                    mlflow.end_run(status="KILLED")
                    raise
                except Exception as error:  # a crashing backbone must not take the others down
                    traceback.print_exc()
                    failures.append(f"{model} seed {seed}: {type(error).__name__}: {error}")
                    mlflow.set_tag("error", f"{type(error).__name__}: {error}"[:4000])
                    mlflow.end_run(status="FAILED")
                    continue
                _log_result(result, f"{dataset_name} {model} seed {seed}")
                path.unlink(missing_ok=True)
                results[(model, seed)] = result
        if results or FINISHED in actions.values():
            markdown, csv, chart = write_tables(dataset_name, results_dir)
            for artifact in (markdown, csv, chart):
                mlflow.log_artifact(str(artifact))
            print()
            print(markdown.read_text())
            print(f"AUC table written to {markdown} and {csv}, chart to {chart}")
        if failures:
            mlflow.set_tag("failures", "; ".join(failures)[:4000])
    if failures:
        raise RuntimeError("some runs failed:\n  " + "\n  ".join(failures))
    return results


def _log_result(result: dict, title: str) -> None:
    import mlflow

    mlflow.log_metrics(final_metrics(result))
    mlflow.log_dict(case_ranks_entry(result), CASE_RANKS_ARTIFACT)
    mlflow.log_figure(learning_curve(result["history"], title), "learning_curve.png")
    print(f"    test AUC {result['test']['auc']:.4f}  Hit@10 {result['test']['hit_10']:.4f}  "
          f"best epoch {result['best_epoch']}/{result['epochs_run']}  "
          f"{result['train_tokens_per_s']:,.0f} tokens/s  {result['wall_seconds']:.1f} s")


def _train_silently(world: distributed.World, dataset, models: list[str], seeds: list[int], config: TrainConfig,
                    actions: dict, checkpoint_for: Callable[[str, int], Path]) -> dict:
    """What a rank other than 0 does: the same trainings in step with rank 0, without MLflow or files."""
    for model in models:
        for seed in seeds:
            action = actions.get((model, seed))
            if action == FINISHED:
                continue
            try:
                fit(dataset, model, replace(config, seed=seed), checkpoint_path=checkpoint_for(model, seed),
                    resume=action == RESUME, world=world)
            except Exception:  # rank 0 reports the failure and carries on with the next run, and so do we
                continue
    return {}


def _interrupted_bench(experiment: str, bench_hash: str, run_hash_for: Callable[[str, int], str],
                       checkpoint_for: Callable[[str, int], Path]) -> tuple[str | None, dict]:
    """The newest KILLED parent run with ``bench_hash`` and what to do with each of its children:
    {(model, seed): (FINISHED | RESUME | RESTART, child run id)}; a KILLED child without a checkpoint
    restarts from scratch in its own run."""
    import mlflow

    parents = mlflow.search_runs(
        experiment_ids=[experiment], max_results=1, order_by=["attributes.start_time DESC"],
        filter_string=f"tags.prism_rec_role = 'parent' and tags.config_hash = '{bench_hash}' "
                      "and attributes.status = 'KILLED'")
    if parents.empty:
        return None, {}
    parent_id = parents["run_id"].iloc[0]
    children = mlflow.search_runs(
        experiment_ids=[experiment], order_by=["attributes.start_time DESC"],
        filter_string=f"tags.prism_rec_role = 'child' and tags.mlflow.parentRunId = '{parent_id}'")
    plan = {}
    for _, child in children.iterrows():
        key = (child["tags.model"], int(child["tags.seed"]))
        if key in plan or child["status"] not in ("FINISHED", "KILLED") or child["tags.config_hash"] != run_hash_for(*key):
            continue
        if child["status"] == "FINISHED":
            plan[key] = (FINISHED, child["run_id"])
        else:
            plan[key] = (RESUME if checkpoint_for(*key).exists() else RESTART, child["run_id"])
    return parent_id, plan


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '1,5,7' -> [1, 5, 7]."""
    if "," in text:
        return [int(s) for s in text.split(",") if s]
    count = int(text)
    if count < 1:
        raise ValueError(f"option --seeds: need at least one seed, got {text!r}")
    return list(range(count))
