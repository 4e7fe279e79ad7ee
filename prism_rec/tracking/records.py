"""Finished training runs as JSON records, made where MLflow is absent (the GPU machine), and their import.

A record holds what ``prism-rec bench`` logs for one child run: the params (``TrainConfig.params()``, the
model and the ``data.*`` options), the tags (provenance, dataset, command, ``prism_rec_role=child``,
model, seed, config_hash), the per-epoch metrics, the final ``test_*``, ``best_valid_*`` and cost metrics
under bench.py's names, the status and the start/end times, and the per-test-case ranks (case_ranks.py;
logged as the artifact ``case_ranks.json``, as ``prism-rec bench`` logs it). :func:`import_records` logs every record
not yet in the store as a child run ``<model>-s<seed>`` under one parent run per dataset and import, so
``prism-rec tables`` and ``make ui`` treat them like local runs; the tag ``record_id`` makes a second
import of the same record a no-op.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict
from pathlib import Path

from .case_ranks import encode as encode_case_ranks
from ..training.config import config_hash
from ..data.core import ProcessedDataset
from ..names import path_name
from ..files import jsonl_text, read_jsonl, write_atomically
from ..training.config import TrainConfig
from ..training.trainer import FitResult

RECORD_FORMAT = "prism-rec-run-1"
RECORDS_SUFFIX = ".records.jsonl"
RECORD_ID_TAG = "record_id"
CASE_RANKS_ARTIFACT = "case_ranks.json"
FINISHED = "FINISHED"


def run_hash(dataset: str, data_options: dict, model: str, config: TrainConfig) -> str:
    """The settings hash of a child run (tag ``config_hash``): dataset, data options, model and every
    result-defining training value, seed included."""
    return config_hash({"dataset": dataset, "data": data_options, "model": model, "train": config.identity()})


def dataset_stats_tag(dataset: ProcessedDataset) -> str:
    """The ``dataset_stats`` tag text of a run."""
    return ", ".join(f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v:,}" for k, v in dataset.stats().items())


def child_run(dataset: ProcessedDataset, model: str, config: TrainConfig, world_size: int, settings: dict,
              train: dict) -> dict:
    """The tags, params and config.json of the child run that trains ``model`` on ``dataset`` with
    ``config``: the one format of ``prism-rec bench``'s runs and of the records. ``settings`` are its
    training params, ``train`` the "train" part of config.json."""
    data_options = dict(dataset.options)
    return {
        "tags": {"dataset": dataset.name, "world_size": str(world_size), "dataset_stats": dataset_stats_tag(dataset),
                 "prism_rec_role": "child", "model": model, "seed": str(config.seed),
                 "config_hash": run_hash(dataset.name, data_options, model, config)},
        "params": {"model": model, **{f"data.{k}": v for k, v in data_options.items()}, **settings},
        "config": {"model": model, "dataset": dataset.name, "data": data_options, "train": train,
                   "world_size": world_size},
    }


def make_record(dataset: ProcessedDataset, model: str, config: TrainConfig, result: FitResult, tags: dict,
                started_at: float) -> dict:
    """The record of one finished ``fit`` of ``model`` on ``dataset``; ``tags`` are the provenance tags
    (store.provenance_tags) plus ``command``; ``started_at`` is the ``time.time()`` of the start."""
    run = child_run(dataset, model, config, 1, config.params(), asdict(config))
    return {
        "format": RECORD_FORMAT,
        "record_id": uuid.uuid4().hex,
        "experiment": dataset.name,
        "run_name": f"{model}-s{config.seed}",
        "status": FINISHED,
        "start_time_ms": int(started_at * 1000),
        "end_time_ms": int(time.time() * 1000),
        "params": run["params"],
        "tags": {**{k: str(v) for k, v in tags.items()}, **run["tags"]},
        "config": run["config"],
        "history": result.history,
        "metrics": final_metrics(result),
        "case_ranks": case_ranks_entry(result),
    }


def case_ranks_entry(result: FitResult) -> dict:
    """The compact per-test-case results of a ``fit`` result (case_ranks.encode)."""
    cases = result.test_case_ranks
    return encode_case_ranks(cases["users"], cases["twice_rank"], cases["n_items"])


def final_metrics(result: FitResult) -> dict[str, float]:
    """The metrics a finished child run logs once, from a ``fit`` result: test and best-validation
    metrics, epochs and cost figures."""
    return {
        **{f"test_{k}": v for k, v in result.test.items()},
        **{f"best_valid_{k}": v for k, v in result.valid.items()},
        "best_epoch": result.best_epoch, "epochs_run": result.epochs_run,
        "diverged_epoch": result.diverged_epoch,
        "train_tokens_per_s": result.train_tokens_per_s, "peak_memory_mb": result.peak_memory_mb,
        "wall_seconds": result.wall_seconds, "n_parameters": result.n_parameters,
    }


def append_jsonl(path: Path, row: dict) -> None:
    """Add ``row`` as the last line of ``path``, rewriting the file atomically."""
    path = Path(path)
    previous = path.read_text() if path.exists() else ""
    write_atomically(path, previous + jsonl_text([row]))


def read_records(source: Path) -> list[dict]:
    """The run records in the file ``source`` or in every ``*.records.jsonl`` file under folder ``source``."""
    source = Path(source)
    if source.is_dir():
        files = sorted(source.rglob(f"*{RECORDS_SUFFIX}"))
    elif source.is_file():
        files = [source]
    else:
        raise FileNotFoundError(f"{source}: no such folder or records file")
    records = []
    for path in files:
        for number, record in enumerate(read_jsonl(path), start=1):
            if record.get("format") != RECORD_FORMAT:
                raise ValueError(f"{path}:{number}: not a {RECORD_FORMAT} record (format {record.get('format')!r})")
            for key in ("experiment", "run_name"):  # the experiment names a folder of the store and of the tables
                path_name(record.get(key), f"{path}:{number}: {key}")
            records.append(record)
    return records


def _create_run(client, experiment: str, run_name: str, tags: dict, start_time_ms: int) -> str:
    return client.create_run(experiment, start_time=start_time_ms, run_name=run_name, tags=tags).info.run_id


def log_record(record: dict, experiment: str, parent_run_id: str | None = None) -> str:
    """Log ``record`` as a terminated child run of experiment id ``experiment`` (under ``parent_run_id``,
    if given); returns the new run's id."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    from matplotlib import pyplot

    from .plots import learning_curve

    client = MlflowClient()
    tags = {**record["tags"], RECORD_ID_TAG: record["record_id"]}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run_id = _create_run(client, experiment, record["run_name"], tags, record["start_time_ms"])
    end = record["end_time_ms"]
    metrics = [Metric(name, float(value), end, epoch) for epoch, row in enumerate(record["history"], start=1)
               for name, value in row.items()]
    metrics += [Metric(name, float(value), end, 0) for name, value in record["metrics"].items()]
    params = [Param(name, str(value)) for name, value in record["params"].items()]
    for start in range(0, len(params), 100):  # MLflow's per-call limits: 100 params, 1000 metrics
        client.log_batch(run_id, params=params[start : start + 100])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000])
    client.log_dict(run_id, record["config"], "config.json")
    if "case_ranks" in record:  # records made before per-case results were kept have none
        client.log_dict(run_id, record["case_ranks"], CASE_RANKS_ARTIFACT)
    if record["history"]:
        figure = learning_curve(record["history"], f"{record['experiment']} {record['tags']['model']} "
                                                   f"seed {record['tags']['seed']}")
        client.log_figure(run_id, figure, "learning_curve.png")
        pyplot.close(figure)
    client.set_terminated(run_id, status=record["status"], end_time=end)
    return run_id


def imported_record_ids(experiment: str) -> set[str]:
    """The ``record_id`` tags of the runs already imported whole into experiment id ``experiment`` (a run
    left RUNNING by an import that stopped halfway does not count, so the next import logs it again)."""
    import mlflow

    runs = mlflow.search_runs([experiment],
                              filter_string=f"tags.{RECORD_ID_TAG} != '' and attributes.status != 'RUNNING'")
    return set() if runs.empty else set(runs[f"tags.{RECORD_ID_TAG}"].dropna())


def import_records(source: Path, command: str) -> dict[str, int]:
    """Log every record of ``source`` (a records file or a folder of them) not yet in the store; one parent run
    per dataset per import carries ``command``. Returns {"imported": n, "already there": m}."""
    from mlflow import MlflowClient

    from .store import experiment_id

    records = read_records(source)
    if not records:
        raise FileNotFoundError(f"{source}: no run records (*{RECORDS_SUFFIX})")
    counts = {"imported": 0, "already there": 0}
    by_experiment: dict[str, list[dict]] = {}
    for record in records:
        by_experiment.setdefault(record["experiment"], []).append(record)
    for name, group in sorted(by_experiment.items()):
        experiment = experiment_id(name)
        known = imported_record_ids(experiment)
        new = [record for record in group if record["record_id"] not in known]
        counts["already there"] += len(group) - len(new)
        if not new:
            continue
        client = MlflowClient()
        first = min(record["start_time_ms"] for record in new)
        parent = _create_run(client, experiment, f"import-{time.strftime('%Y%m%d-%H%M%S')}",
                             {"prism_rec_role": "parent", "dataset": name, "command": command,
                              "imported_from": str(source)}, first)
        client.log_param(parent, "dataset", name)
        for record in sorted(new, key=lambda r: r["start_time_ms"]):
            log_record(record, experiment, parent)
            counts["imported"] += 1
        client.set_terminated(parent, status=FINISHED, end_time=max(record["end_time_ms"] for record in new))
    return counts
