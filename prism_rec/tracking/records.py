"""Finished training runs as JSON records, the canonical shape of a run: made where MLflow is absent (the
GPU machine), and the parts of every MLflow run (``tracking.runs`` logs them and imports records).

A record holds what ``prism-rec bench`` logs for one child run (:func:`child_run`, the one shape of a run's
settings): the params (:func:`run_settings`, the model and the ``data.*`` options), the tags (provenance,
dataset, command, ``prism_rec_role=child``, model, seed, config_hash), the per-epoch metrics, the final
``test_*`` (with the run's 95% bootstrap interval of its test AUC over test users), ``best_valid_*`` and
cost metrics (:func:`final_metrics`), the status and the start/end times,
and the per-test-case ranks (case_ranks.py; logged as the artifact ``case_ranks.json``, as ``prism-rec
bench`` logs it)."""

from __future__ import annotations

import inspect
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import torch

from ..data.core import ProcessedDataset
from ..files import jsonl_text, read_jsonl, write_atomically
from ..names import path_name
from ..recbole_bridge import is_recbole
from ..registry import backbone_entry, backbone_parameters
from ..training.compile import resolve_compile
from ..training.config import TrainConfig, config_hash
from ..training.devices import resolve_device
from ..training.trainer import FitResult
from .bootstrap import bootstrap_mean_ci
from .case_ranks import CaseRanks
from .case_ranks import encode as encode_case_ranks

RECORD_FORMAT = "prism-rec-run-1"
RECORDS_SUFFIX = ".records.jsonl"
CASE_RANKS_ARTIFACT = "case_ranks.json"
FINISHED = "FINISHED"
SHARED_BACKBONE_SETTINGS = ("d_model", "n_layers", "n_heads", "dropout")  # TrainConfig's, passed to every backbone


def run_hash(dataset: str, data_options: dict, model: str, config: TrainConfig) -> str:
    """The settings hash of a child run (tag ``config_hash``): dataset, data options, model and every
    result-defining training value, seed included."""
    return config_hash({"dataset": dataset, "data": data_options, "model": model, "train": config.identity()})


def dataset_stats_tag(dataset: ProcessedDataset) -> str:
    """The ``dataset_stats`` tag text of a run."""
    return ", ".join(f"{k} {v:,.2f}" if isinstance(v, float) else f"{k} {v:,}" for k, v in dataset.stats().items())


def backbone_options(model: str, config: TrainConfig) -> dict:
    """Every option of ``model``'s backbone as it is built: the factory's defaults, then the registered
    preset's, then ``config.backbone_options`` (the settings TrainConfig shares with every backbone left out);
    for a RecBole model, the settings the bridge passes to it (recbole_bridge/config.py)."""
    if is_recbole(model):
        from ..recbole_bridge.config import model_settings

        return model_settings(model, config)
    entry = backbone_entry(model)
    defaults = {name: parameter.default for name, parameter in backbone_parameters(model).items()
                if parameter.default is not inspect.Parameter.empty and name not in SHARED_BACKBONE_SETTINGS}
    return {**defaults, **entry.defaults, **config.backbone_options}


def run_settings(model: str, config: TrainConfig, device, distributed: bool = False) -> dict:
    """``config.params()`` as the run trains on ``device``: the device itself (not "auto"), the precision it
    computes in (bf16 autocast only on CUDA, fp32 on the CPU and for RecBole's models), the compile mode that
    ``config.compile`` resolves to, and every backbone option (:func:`backbone_options`) as ``backbone.<name>``."""
    params = {key: value for key, value in config.params().items() if not key.startswith("backbone.")}
    params.update(device=str(device),
                  precision=config.precision if device.type == "cuda" and not is_recbole(model) else "fp32",
                  compile=resolve_compile(config.compile, device, distributed, model, config.loss))
    params.update({f"backbone.{key}": value for key, value in sorted(backbone_options(model, config).items())})
    return params


def child_run(dataset: ProcessedDataset, model: str, config: TrainConfig, device: torch.device, world_size: int = 1,
              distributed: bool = False) -> dict:
    """The tags, params and config.json of the child run that trains ``model`` on ``dataset`` with
    ``config`` on ``device``: the one shape of a run's settings, for ``prism-rec bench``'s runs and the
    records alike. The params are :func:`run_settings`; config.json's "train" part is every TrainConfig
    field with the same resolved device, precision, compile mode and backbone options."""
    data_options = dict(dataset.options)
    settings = run_settings(model, config, device, distributed)
    train = {**asdict(config), **{key: settings[key] for key in ("device", "precision", "compile", "cutoffs")},
             "backbone_options": backbone_options(model, config)}
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
    """The record of one finished ``fit`` of ``model`` on ``dataset`` (one process, on ``config.device``);
    ``tags`` are the provenance tags (store.provenance_tags) plus ``command``; ``started_at`` is the
    ``time.time()`` of the start."""
    run = child_run(dataset, model, config, resolve_device(config.device))
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
    """The metrics a finished child run logs once, from a ``fit`` result: test metrics with the 95% bootstrap
    interval of the test AUC over the run's test cases (``test_auc_ci_low|high``: what the UI's chart of test
    AUC per model draws), best-validation metrics, epochs and cost figures."""
    cases = result.test_case_ranks
    low, high = bootstrap_mean_ci(CaseRanks(cases["users"], cases["twice_rank"], cases["n_items"]).auc())
    return {
        **{f"test_{k}": v for k, v in result.test.items()}, "test_auc_ci_low": low, "test_auc_ci_high": high,
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
