"""``prism-rec bench --protocol authors``: the authors' protocol's runs logged to MLflow, with their table.

One MLflow experiment per dataset, ``<dataset>-authors`` (tagged with the protocol, so ``prism-rec tables`` builds
its table here and not the next-item one), one parent run per bench and a child run ``<model>-s<seed>`` per
training: its settings as params, train loss and validation AP and ROC-AUC per epoch, the test and validation
figures of train.run's record (``@`` becomes ``_`` in metric names: test_hit_200, as the next-item runs name
theirs) and the whole record as the artifact record.json, per-case ranks included. The table (report.group_table:
every model's figures with a cluster bootstrap interval over test users, paired differences against null and
sasrec and PRISM against Gated DeltaNet) is built from the store's finished runs of the newest run's settings,
written to results/local/<dataset>-authors/auc.md and logged on the parent run.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ...errors import OptionError
from ...files import write_atomically
from ...registry import runs_scan
from ...tracking import runs
from ...tracking.store import (
    COMPARISON_TABLE,
    PROTOCOL_TAG,
    end_runs_of_dead_processes,
    experiment_id,
    load_artifact,
    process_tags,
    provenance_tags,
)
from ...tracking.tables import LOCAL_RESULTS_DIR
from .data import load_task
from .model import POP, check_scan_backend
from .report import device_note, group_table, scan_note
from .train import RunConfig, describe, run

PROTOCOL = "authors"
RECORD_ARTIFACT = "record.json"
TABLE = "auc.md"


def experiment_name(dataset: str) -> str:
    """The MLflow experiment of ``dataset``'s runs under this protocol."""
    return f"{dataset}-{PROTOCOL}"


def metric_name(key: str) -> str:
    """A record key as an MLflow metric name (MLflow refuses "@")."""
    return key.replace("@", "_")


def final_metrics(record: dict) -> dict[str, float]:
    """The record's scalar figures: every test_ and valid_ metric, the best epoch, epochs, width, parameters
    and wall seconds."""
    keys = [key for key in record if key.startswith(("test_", "valid_"))]
    keys += ["best_epoch", "epochs", "width", "n_parameters", "wall_seconds"]
    return {metric_name(key): float(record[key]) for key in keys if isinstance(record.get(key), (int, float))}


def settings_key(record: dict) -> str:
    """What a table's runs share: every setting but the model and seed, and the edge task."""
    config = {key: value for key, value in record["config"].items() if key not in ("model", "seed")}
    return json.dumps({"config": config, "task": record["task"]}, sort_keys=True)


def check_scan_option(scan_backend: str, models: list[str], device: torch.device) -> None:
    """OptionError naming --scan-backend unless some of ``models`` runs the delta scan (or it is "auto") and
    the backend can run on ``device``."""
    check_scan_backend(scan_backend, device=device)
    if scan_backend != "auto" and not any(runs_scan(model) for model in models):
        raise OptionError(f"option --scan-backend: none of the models ({', '.join(models)}) runs the delta scan")


def bench(dataset: str, models: list[str], seeds: list[int], base: RunConfig, device: torch.device,
          min_user_edges: int | None = None, raw_dir: str | None = None, scan_backend: str = "auto",
          graphs: bool | None = None, results_dir: Path = LOCAL_RESULTS_DIR, command: str = "") -> list[dict]:
    """Train every (model, seed) of ``models`` x ``seeds`` (pop: the first seed only) under the authors'
    protocol on ``dataset``, each a child run of one new parent run; returns their records. Every option is
    checked, and the data read, before anything is logged or trains."""
    configs = [replace(base, model=model, seed=seed).check() for model in models
               for seed in (seeds[:1] if model == POP else seeds)]
    check_scan_option(scan_backend, models, device)
    task = load_task(dataset, min_user_edges, raw_dir)
    experiment = experiment_id(experiment_name(dataset))
    runs.set_experiment_tag(experiment, PROTOCOL_TAG, PROTOCOL)
    end_runs_of_dead_processes(experiment)  # runs a killed bench left RUNNING
    tags = {**provenance_tags(device), **process_tags(), "dataset": dataset, "command": command,
            PROTOCOL_TAG: PROTOCOL}
    print(f"{dataset} (the authors' edge task, time {task.time_kind}): {task.stats['users']} users with >= "
          f"{task.stats['min_user_edges']} edges, {task.stats['items']} items, {task.stats['train_edges']} train, "
          f"{task.stats['valid_edges']} validation, {task.stats['test_edges']} test edges")
    records = []
    with runs.active_run(experiment_id=experiment, run_name=f"bench-{PROTOCOL}-{time.strftime('%Y%m%d-%H%M%S')}",
                         tags={**tags, "prism_rec_role": "parent"}) as parent:
        runs.log_params({"dataset": dataset, "models": ",".join(models), "seed_values": ",".join(map(str, seeds)),
                         "device": str(device), "min_user_edges": task.stats["min_user_edges"],
                         **{f"config.{key}": value for key, value in base.to_dict().items()
                            if key not in ("model", "seed")}})
        for config in configs:
            backend = scan_backend if runs_scan(config.model) else "auto"
            child_tags = {**tags, "prism_rec_role": "child", "mlflow.parentRunId": parent, "model": config.model,
                          "seed": str(config.seed)}
            with runs.active_run(experiment_id=experiment, run_name=f"{config.model}-s{config.seed}", nested=True,
                                 tags=child_tags):
                runs.log_params({**config.to_dict(), "scan_backend": backend, "device": str(device)})
                record = run(task, config, device, graphs=graphs, scan_backend=backend)
                log_record(record)
            print(describe(record))
            records.append(record)
        stored = store_records(experiment)
        table = write_table(dataset, stored, results_dir)
        runs.log_text(table.read_text(), TABLE)
        runs.log_table(comparison_columns(stored), COMPARISON_TABLE.removesuffix(".json"), table.read_text())
    print(f"\nThis bench's runs:\n\n{bench_table(records, dataset)}\n")
    print(f"Your table (every finished run of these settings in the store): {table}")
    print(f"This bench: MLflow parent run {parent} of experiment {experiment_name(dataset)!r} (`make ui`)")
    return records


def log_record(record: dict) -> None:
    """A finished run's record on the active child run: its epochs, final figures, step and scan, record.json."""
    for row in record["curve"]:
        runs.log_epoch({metric_name(key): value for key, value in row.items() if key != "epoch"}, row["epoch"])
    runs.log_metrics(final_metrics(record))
    runs.set_tags({"step": record["step"], "scan": str(record["scan"])})
    runs.log_dict(record, RECORD_ARTIFACT)


def store_records(experiment: str) -> list[dict]:
    """The records of ``experiment``'s finished child runs: the newest of every (model, seed) among the runs of
    the newest run's settings (``settings_key``)."""
    found = runs.finished_children(experiment)
    records, seen, key = [], set(), None
    for run_id in ([] if found.empty else found["run_id"]):
        record = load_artifact(run_id, RECORD_ARTIFACT)
        if record is None:
            continue
        key = key or settings_key(record)
        cell = (record["config"]["model"], record["config"]["seed"])
        if settings_key(record) == key and cell not in seen:
            seen.add(cell)
            records.append(record)
    return records


def comparison_columns(records: list[dict]) -> dict[str, list]:
    """The UI's comparison of ``records``, a row per model, best mean full-ranking test AUC first: seeds, head
    width, the mean and spread of the full-ranking AUC over seeds, their AUC and Hit@200 means."""
    by_model: dict[str, list[dict]] = {}
    for record in records:
        by_model.setdefault(record["config"]["model"], []).append(record)

    def mean(group: list[dict], key: str) -> float:
        return float(np.mean([record[key] for record in group]))

    order = sorted(by_model, key=lambda model: -mean(by_model[model], "test_full_auc"))
    return {"model": order, "n_seeds": [len(by_model[m]) for m in order],
            "head_width": [by_model[m][0]["width"] for m in order],
            "test_full_auc_mean": [mean(by_model[m], "test_full_auc") for m in order],
            "test_full_auc_std": [float(np.std([r["test_full_auc"] for r in by_model[m]], ddof=1))
                                  if len(by_model[m]) > 1 else float("nan") for m in order],
            "test_auc_mean": [mean(by_model[m], "test_auc") for m in order],
            "test_hit_200_mean": [mean(by_model[m], "test_hit@200") for m in order]}


def bench_table(records: list[dict], dataset: str) -> str:
    """The Markdown table of ``records`` (one dataset and settings) with their paired differences."""
    rates = {record["config"]["model"]: f"{record['config']['lr']:g}" if record["config"]["model"] != POP else "—"
             for record in records}
    table, paired = group_table(records, dataset, rates)
    return f"{table}\n\n{paired}"


def write_table(dataset: str, records: list[dict], results_dir: Path = LOCAL_RESULTS_DIR) -> Path:
    """results_dir/<dataset>-authors/auc.md from ``records`` (``store_records``); returns its path."""
    if not records:
        raise OptionError(f"no finished runs of the authors' protocol for {dataset!r} in the tracking store")
    stats = records[0]["task"]
    config = {key: value for key, value in records[0]["config"].items() if key not in ("model", "seed")}
    text = (f"# {dataset}: the authors' protocol (destination retrieval), test figures\n\n"
            f"Time: {records[0]['time_kind']}. Kept: {stats['users']} users with >= {stats['min_user_edges']} "
            f"edges, {stats['items']} items ({stats['train_edges']} train, {stats['valid_edges']} validation, "
            f"{stats['test_edges']} test cases). Settings: "
            f"{', '.join(f'{key} {value}' for key, value in sorted(config.items()))}.{scan_note(records)}"
            f"{device_note(records)} Columns as in results/authors_protocol.md (prism_rec/protocols/authors/report.py)."
            f"\n\n{bench_table(records, dataset)}\n\nWritten {time.strftime('%Y-%m-%d')} by `prism-rec bench "
            f"--protocol authors` from the MLflow store (`prism-rec tables` rebuilds it).\n")
    path = Path(results_dir) / experiment_name(dataset) / TABLE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
    return path


def write_all_tables(results_dir: Path = LOCAL_RESULTS_DIR) -> list[Path]:
    """The table of every experiment of the store tagged with this protocol that holds finished runs."""
    written = []
    for experiment in runs.experiments_tagged(PROTOCOL_TAG, PROTOCOL):
        records = store_records(experiment)
        if records:
            written.append(write_table(records[0]["dataset"], records, results_dir))
    return written
