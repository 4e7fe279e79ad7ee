"""The budgeted, resumable grid of the authors' protocol: the runs of a ``design.Design`` as a campaign
(``prism_rec.experiments.campaign``: worker processes on this host, or the workers of a Dask cluster).

Writes into ``out``: ``manifest.jsonl``, one row per finished run (key, dataset, the run's figures and
settings, and the design it was made by, ``Design.record``, which the report reads), and
``cases/<key>.json``, the per-case counts of each finished run's test (user, above, ties), all written
atomically. A run whose settings are already in the manifest is not trained again, so the same command
continues an interrupted or budgeted grid. After every finished run the design is asked again which runs
can start (a finished rate grid releases its other seeds); the campaign holds every run that can, and a
free worker takes the first of them in the design's priority order that is expected to end in time
(``_Priority``), by the mean time of the manifest's runs of its model with the same step (eager or CUDA
graphs; ``expected_seconds``); a run without such an estimate starts unestimated. A run still training when
the budget ends stops at the end of its epoch and is dropped (abandoned), to be trained again by the next call;
a run that fails is reported and left for the next call. Each worker process reads the edge tasks once
(``_task``; on a Dask cluster the raw files must be at ``raw_dir``, or the default folder, on every worker).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...errors import OptionError
from ...experiments.campaign import Campaign, Executor, LocalExecutor, Manifest, Status, deadline_after
from ...files import write_atomically
from ...registry import runs_scan
from ...training.devices import resolve_device
from .data import EdgeTask, load_task
from .design import Design, identity, run_key
from .model import check_scan_backend, scan_backend_used
from .train import RunConfig, describe, run, step_kind

MANIFEST = "manifest.jsonl"


def run_kind(record: dict) -> tuple[str, str | None]:
    """How a finished run trained: its record's "step" ("eager" or "cuda graphs"; records before it were eager)
    and "scan" (the delta scan's backend; None for a model without the scan and for records before it)."""
    return record.get("step", "eager"), record.get("scan")


def expected_seconds(rows: list[dict], dataset: str, model: str, kind: tuple[str, str | None]) -> float | None:
    """The mean wall time of ``model``'s runs on ``dataset`` in ``rows`` that trained as ``kind`` (``run_kind``);
    None when the model has runs there only of another kind (their times do not tell: graphs speed the step up
    2-8x, results/authors_step.md, and the scan's backends differ too); for a model without runs there, that
    of the slowest model with runs of the same step; None without any."""
    times: dict[str, list[float]] = {}
    for row in rows:
        if row["dataset"] == dataset and run_kind(row)[0] == kind[0]:
            times.setdefault(row["config"]["model"], []).append(row["wall_seconds"])
    own = [row["wall_seconds"] for row in rows
           if row["dataset"] == dataset and row["config"]["model"] == model and run_kind(row) == kind]
    if own:
        return float(np.mean(own))
    if any(row["dataset"] == dataset and row["config"]["model"] == model for row in rows):
        return None
    return max((float(np.mean(values)) for values in times.values()), default=None)


@dataclass(frozen=True)
class GridJob:
    """One run of the grid as a campaign job; ``deadline`` is a ``time.time()`` (infinity: no budget);
    ``threads``: the CPU threads it trains with wherever it runs (the count splits reductions, so the same
    run gives the same figures on every executor)."""

    dataset: str
    config: dict
    min_user_edges: int | None
    raw_dir: str | None
    device: str
    deadline: float
    threads: int
    log_epochs: bool
    graphs: bool | None = None
    scan_backend: str = "auto"

    @property
    def identity(self) -> str:
        return identity(self.dataset, self.config)

    @property
    def label(self) -> str:
        return run_key(self.dataset, RunConfig(**self.config))


_TASKS: dict[tuple, EdgeTask] = {}  # this process's edge tasks by (dataset, min_user_edges, raw_dir)


def _task(dataset: str, min_user_edges: int | None, raw_dir: str | None) -> EdgeTask:
    key = (dataset, min_user_edges, raw_dir)
    if key not in _TASKS:
        _TASKS[key] = load_task(dataset, min_user_edges, raw_dir)
    return _TASKS[key]


def train_job(job: GridJob) -> dict:
    """The campaign's work: train one run; status finished with its record, or abandoned when the deadline
    passed before it finished."""
    torch.set_num_threads(job.threads)  # over the executor's own choice
    deadline = None if math.isinf(job.deadline) else time.monotonic() + (job.deadline - time.time())
    record = run(_task(job.dataset, job.min_user_edges, job.raw_dir), RunConfig(**job.config),
                 resolve_device(job.device), deadline, log=print if job.log_epochs else lambda line: None,
                 graphs=job.graphs, scan_backend=job.scan_backend)
    if record is None:
        return {"status": Status.ABANDONED.value}
    return {"status": Status.FINISHED.value, "record": record}


class _Priority:
    """The design's order for the campaign: ``wanted`` accepts only the first pending run (``refresh``) not
    yet started that is expected to end by the deadline, and counts it as started (the campaign gets no
    ``expected_seconds``, so the run it accepts is the run that starts)."""

    def __init__(self, design: Design, manifest: Manifest, deadline: float,
                 kind: Callable[[str], tuple[str, str | None]]):
        self.design, self.manifest, self.deadline, self.kind = design, manifest, deadline, kind
        self.started: set[str] = set()
        self.pending: list[tuple[str, str, RunConfig]] = []
        self.expected: dict[tuple[str, str], float | None] = {}
        self.refresh()

    def refresh(self) -> None:
        """Ask the design again which runs can start, and how long each model takes, given the manifest's."""
        rows = self.manifest.entries
        self.pending = [(identity(dataset, config.to_dict()), dataset, config)
                        for dataset, config in self.design.pending(rows)]
        self.expected = {(dataset, config.model): expected_seconds(rows, dataset, config.model, self.kind(config.model))
                         for _, dataset, config in self.pending}

    def _fits(self, dataset: str, config: RunConfig) -> bool:
        expected = self.expected[(dataset, config.model)]
        return expected is None or time.time() + expected <= self.deadline

    def wanted(self, job: GridJob) -> bool:
        first = next((key for key, dataset, config in self.pending
                      if key not in self.started and self._fits(dataset, config)), None)
        if job.identity != first:
            return False
        self.started.add(first)
        return True


def check_scan_option(scan_backend: str, design: Design, executor: Executor) -> None:
    """OptionError naming --scan-backend unless the grid can give ``scan_backend`` to the design's models that run
    the delta scan: a known backend, a model that runs it (unless "auto"), Triton and CUDA for a Triton backend
    (a local pool's device; a Dask worker's device is its own)."""
    check_scan_backend(scan_backend, device=resolve_device(executor.job_device)
                       if isinstance(executor, LocalExecutor) else None)
    if scan_backend != "auto" and not any(runs_scan(model) for model in design.models):
        raise OptionError(f"option --scan-backend: none of the models ({', '.join(design.models)}) runs the delta "
                          f"scan")


def run_grid(out: Path, design: Design, budget: float | None, device: str = "auto", min_user_edges: int | None = None,
             raw_dir: str | None = None, workers: int = 1, executor: Executor | None = None,
             log=print, graphs: bool | None = None, scan_backend: str = "auto") -> dict[str, int]:
    """Train ``design``'s pending runs into ``out`` within ``budget`` seconds on ``executor`` (default: a local
    pool of ``workers`` processes on ``device``), each with this process's CPU thread count (prism-rec authors
    grid --threads) and ``graphs`` (train.run's); ``scan_backend`` goes to the models that run the delta scan
    (the others take "auto"); counts: finished, dropped (at the budget), failed, pending (runs that could start
    now, left for the next call)."""
    out = Path(out)
    deadline = deadline_after(budget)
    executor = executor or LocalExecutor(workers, device)
    check_scan_option(scan_backend, design, executor)
    _TASKS.clear()
    for dataset in design.datasets:  # refusals before any run; the runs of this process read these
        _task(dataset, min_user_edges, raw_dir)
    manifest = Manifest(out / MANIFEST, key=lambda row: identity(row["dataset"], row["config"]))
    tokens, job_device = 1 + design.base.n_neighbours, resolve_device(executor.job_device)

    def scan_of(model: str) -> str:  # the grid's scan backend goes to the models that run the scan
        return scan_backend if runs_scan(model) else "auto"

    def kind(model: str) -> tuple[str, str | None]:
        return (step_kind(model, executor.job_device, graphs),
                scan_backend_used(model, scan_of(model), job_device, tokens))

    priority = _Priority(design, manifest, deadline, kind)
    in_process = isinstance(executor, LocalExecutor) and executor.workers == 1
    threads = torch.get_num_threads()

    def job(dataset: str, config: RunConfig) -> GridJob:
        return GridJob(dataset, config.to_dict(), min_user_edges, raw_dir, executor.job_device, deadline, threads,
                       in_process, graphs, scan_of(config.model))

    queued = {key for key, _, _ in priority.pending}

    def on_result(done: GridJob, status: Status, result: dict) -> list[GridJob]:
        if status is not Status.FINISHED:
            return []
        record = result["record"]
        key = done.label
        write_atomically(out / "cases" / f"{key}.json", json.dumps(record.pop("cases")))
        manifest.add({"key": key, **record, "design": design.record()})
        log(describe(record))
        priority.refresh()
        follow_ups = [job(dataset, config) for identity_key, dataset, config in priority.pending
                      if identity_key not in queued]
        queued.update(follow.identity for follow in follow_ups)
        return follow_ups

    campaign = Campaign(executor, deadline, statuses=(Status.FINISHED, Status.ABANDONED, Status.FAILED))
    campaign.run([job(dataset, config) for _, dataset, config in priority.pending], train_job, on_result,
                 abandon_after=None, wanted=priority.wanted)
    counts = campaign.counts
    return {"finished": counts[Status.FINISHED.value], "dropped": counts[Status.ABANDONED.value],
            "failed": counts[Status.FAILED.value], "pending": len(design.pending(manifest.entries))}
