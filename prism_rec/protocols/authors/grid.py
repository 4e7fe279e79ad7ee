"""The grid of the authors' protocol: datasets x models x head widths x seeds, budgeted and resumable.

Writes into ``out``: ``manifest.jsonl``, one row per finished run (key, dataset, model, head width, seed,
the run's figures and settings), and ``cases/<key>.json``, the per-case counts of each finished run's test
(user, above, ties), all written atomically. A run whose key is already in the manifest is skipped, so the
same command continues an interrupted or budgeted grid; no run starts after ``budget`` seconds, and one
still training when they pass is dropped, to be trained again by the next call.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from ...files import read_jsonl, write_atomically, write_jsonl
from .data import check_dataset, load_task
from .model import check_model, head_width
from .train import RunConfig, describe, run

MANIFEST = "manifest.jsonl"


def run_key(dataset: str, config: RunConfig) -> str:
    return f"{dataset}__{config.model}__h{config.head_width}__s{config.seed}"


def grid_configs(datasets: list[str], base: RunConfig, models: list[str], head_widths: list[str],
                 seeds: list[int]) -> list[tuple[str, RunConfig]]:
    """Every (dataset, config) of the grid, checked before anything is read or trained."""
    for dataset in datasets:
        check_dataset(dataset, "--datasets")
    for model in models:
        check_model(model, "--models")
    for head in head_widths:
        head_width(models[0], head, 1, option="--head-widths")
    jobs = []
    for dataset, model, head, seed in itertools.product(datasets, models, head_widths, seeds):
        if model == "pop" and head != head_widths[0]:
            continue  # the popularity floor has no scorer: one width is enough
        jobs.append((dataset, replace(base, model=model, head_width=head, seed=seed).check()))
    return jobs


def run_grid(out: Path, jobs: list[tuple[str, RunConfig]], budget: float | None, device: torch.device,
             min_user_edges: int | None = None, raw_dir: str | None = None, log=print) -> dict[str, int]:
    """Train the jobs not yet in ``out``'s manifest, in order, within ``budget`` seconds; counts per outcome."""
    out = Path(out)
    deadline = None if budget is None else time.monotonic() + budget
    rows = read_jsonl(out / MANIFEST)
    done = {row["key"] for row in rows}
    counts = {"finished": 0, "skipped": 0, "unstarted": 0}
    tasks = {}
    for dataset, config in jobs:
        key = run_key(dataset, config)
        if key in done:
            counts["skipped"] += 1
            continue
        if deadline is not None and time.monotonic() > deadline:
            counts["unstarted"] += 1
            continue
        if dataset not in tasks:
            tasks[dataset] = load_task(dataset, min_user_edges, raw_dir)
        record = run(tasks[dataset], config, device, deadline, log)
        if record is None:
            counts["unstarted"] += 1
            continue
        cases = record.pop("cases")
        write_atomically(out / "cases" / f"{key}.json", json.dumps(cases))
        rows.append({"key": key, **record})
        write_jsonl(out / MANIFEST, rows)
        counts["finished"] += 1
        log(describe(record))
    return counts
