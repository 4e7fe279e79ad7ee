"""The budgeted, resumable grid of the authors' protocol: the runs of a ``design.Design``, on ``workers`` processes.

Writes into ``out``: ``manifest.jsonl``, one row per finished run (key, dataset, the run's figures and
settings), and ``cases/<key>.json``, the per-case counts of each finished run's test (user, above, ties),
all written atomically. A run whose settings are already in the manifest is not trained again, so the same
command continues an interrupted or budgeted grid. After every finished run the design is asked again which
runs can start (a finished rate grid releases its other seeds). Budget: a run starts only when it is
expected to end in time, by the mean time of the manifest's runs of its model (else of the slowest model
with runs; a first run ever starts unestimated), and one still training when the budget ends is dropped,
to be trained again by the next call. Several workers share the device (one process each, spawned).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

import numpy as np
import torch

from ...files import read_jsonl, write_atomically, write_jsonl
from .data import EdgeTask, load_task
from .design import Design, identity, run_key
from .train import RunConfig, describe, run

MANIFEST = "manifest.jsonl"


def expected_seconds(rows: list[dict], dataset: str, model: str) -> float | None:
    """The mean wall time of ``model``'s runs on ``dataset`` in ``rows``, else that of the slowest model
    with runs there; None without any."""
    times: dict[str, list[float]] = {}
    for row in rows:
        if row["dataset"] == dataset:
            times.setdefault(row["config"]["model"], []).append(row["wall_seconds"])
    if model in times:
        return float(np.mean(times[model]))
    return max((float(np.mean(values)) for values in times.values()), default=None)


class _InProcess:
    """An executor of one worker that runs each job when it is submitted (no spawned process)."""

    def __init__(self, tasks: dict[str, EdgeTask], device: torch.device, log):
        self.tasks, self.device, self.log = tasks, device, log

    def submit(self, dataset: str, config: RunConfig, deadline: float | None) -> Future:
        future = Future()
        future.set_result(run(self.tasks[dataset], config, self.device, deadline, self.log))
        return future

    def shutdown(self) -> None:
        pass


_WORKER: dict = {}


def _start_worker(datasets, min_user_edges, raw_dir, device: str, threads: int) -> None:
    torch.set_num_threads(threads)
    _WORKER.update(tasks={d: load_task(d, min_user_edges, raw_dir) for d in datasets}, device=torch.device(device))


def _train_in_worker(dataset: str, config: dict, wall_deadline: float | None) -> dict | None:
    deadline = None if wall_deadline is None else time.monotonic() + (wall_deadline - time.time())
    return run(_WORKER["tasks"][dataset], RunConfig(**config), _WORKER["device"], deadline, log=lambda line: None)


class _Pool:
    """``workers`` spawned processes, each holding the edge tasks; jobs run with the deadline in wall time."""

    def __init__(self, workers: int, datasets, min_user_edges, raw_dir, device: torch.device):
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_start_worker,
                                        initargs=(datasets, min_user_edges, raw_dir, str(device),
                                                  torch.get_num_threads()))

    def submit(self, dataset: str, config: RunConfig, deadline: float | None) -> Future:
        wall = None if deadline is None else time.time() + (deadline - time.monotonic())
        return self.pool.submit(_train_in_worker, dataset, config.to_dict(), wall)

    def shutdown(self) -> None:
        self.pool.shutdown(cancel_futures=True)


def _next_job(design: Design, rows: list[dict], busy: set[str], deadline: float | None):
    """The first pending run not in flight that is expected to end by ``deadline``; None if there is none."""
    if deadline is not None and time.monotonic() >= deadline:
        return None
    for dataset, config in design.pending(rows):
        if identity(dataset, config.to_dict()) in busy:
            continue
        expected = expected_seconds(rows, dataset, config.model)
        if deadline is None or expected is None or time.monotonic() + expected <= deadline:
            return dataset, config
    return None


def run_grid(out: Path, design: Design, budget: float | None, device: torch.device, min_user_edges: int | None = None,
             raw_dir: str | None = None, workers: int = 1, log=print) -> dict[str, int]:
    """Train ``design``'s pending runs into ``out`` within ``budget`` seconds; counts: finished, dropped (at
    the budget), pending (runs that could start now, left for the next call)."""
    out = Path(out)
    deadline = None if budget is None else time.monotonic() + budget
    tasks = {dataset: load_task(dataset, min_user_edges, raw_dir) for dataset in design.datasets}  # refusals first
    rows = read_jsonl(out / MANIFEST)
    executor = (_InProcess(tasks, device, log) if workers == 1
                else _Pool(workers, design.datasets, min_user_edges, raw_dir, device))
    counts = {"finished": 0, "dropped": 0}
    flying: dict[Future, tuple[str, RunConfig]] = {}
    try:
        while True:
            while len(flying) < workers:
                busy = {identity(dataset, config.to_dict()) for dataset, config in flying.values()}
                job = _next_job(design, rows, busy, deadline)
                if job is None:
                    break
                flying[executor.submit(*job, deadline)] = job
            if not flying:
                break
            finished, _ = wait(list(flying), return_when=FIRST_COMPLETED)
            for future in finished:
                dataset, config = flying.pop(future)
                record = future.result()
                if record is None:
                    counts["dropped"] += 1
                    continue
                key = run_key(dataset, config)
                write_atomically(out / "cases" / f"{key}.json", json.dumps(record.pop("cases")))
                rows.append({"key": key, **record})
                write_jsonl(out / MANIFEST, rows)
                counts["finished"] += 1
                log(describe(record))
    finally:
        executor.shutdown()
    counts["pending"] = len(design.pending(rows))
    return counts
