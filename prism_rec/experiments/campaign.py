"""One campaign runner for the experiment grids (headline, split study, probes): their runs through an
executor, within a budget, with follow-up runs queued from results and the manifest as the only resume
state.

A grid driver says which jobs to run (each with a ``label``), the module-level ``work(job) -> result``
that trains one, and what to do with each result; ``Campaign.run`` hands the jobs to an executor, counts
every outcome by its :class:`Status`, prints failures, queues the follow-up jobs a result makes ready
(the headline's seeds once a rate is chosen) and says how many never started. Executors:

- ``local`` (``jobs.run_jobs``): spawned worker processes on this host sharing its devices (the default);
- ``dask`` (``cluster.DaskExecutor``): the workers of a Dask cluster, reached at ``--scheduler`` or started
  as batch jobs (``--cluster slurm``), k runs packed on each GPU through Dask resources.

A finished run is kept only in the driver's manifest (:class:`Manifest`, JSON lines); a later call over
the same manifest skips it, and :func:`merge_manifests` joins the manifests of calls made side by side.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import OptionError
from ..files import read_jsonl
from ..tracking.records import append_jsonl
from ..training.devices import ONE_DEVICE_HELP
from .jobs import Status, WorkerDevices, gpu_sharing, run_jobs

NOT_STARTED = "not started"


def deadline_after(budget: float | None, option: str = "--budget") -> float:
    """The ``time.time()`` at which ``budget`` seconds from now end (infinity without one); a budget of
    0 s or less is refused, naming ``option``."""
    if budget is None:
        return float("inf")
    if budget <= 0:
        raise OptionError(f"option {option}: must be > 0 seconds, got {budget}")
    return time.time() + budget


class Executor(Protocol):
    """Runs jobs on workers: ``run`` as ``jobs.run_jobs`` does (it returns the jobs never started)."""

    job_device: str  # the --device name each job trains on

    def describe(self) -> str: ...

    def jobs_per_device(self, jobs: int) -> float: ...

    def run(self, jobs: list, work: Callable[[Any], dict], deadline: float, on_result: Callable[[Any, dict], list],
            abandon_after: float | None, expected_seconds: Callable[[Any], float | None] | None,
            wanted: Callable[[Any], bool] | None) -> list: ...

    def close(self) -> None: ...


class LocalExecutor:
    """``workers`` spawned processes on this host sharing ``device`` (one device, or a CUDA list: worker i
    on the i-th); with one worker the jobs run in this process."""

    def __init__(self, workers: int, device: str):
        from ..training.devices import check_devices

        if workers < 1:
            raise OptionError(f"option --workers: must be >= 1, got {workers}")
        self.workers, self.devices = workers, WorkerDevices(check_devices(device))
        self.job_device = self.devices.job_device

    def describe(self) -> str:
        return (f"{self.devices.describe()} with {self.workers} worker(s) (GPU sharing: "
                f"{gpu_sharing(self.job_device)})")

    def jobs_per_device(self, jobs: int) -> float:
        """How many runs share each device when ``jobs`` are to run."""
        return max(1, min(self.workers, jobs)) / len(self.devices.names)

    def run(self, jobs, work, deadline, on_result, abandon_after, expected_seconds, wanted) -> list:
        return run_jobs(jobs, work, self.workers, deadline, on_result, abandon_after=abandon_after,
                        expected_seconds=expected_seconds, cuda_devices=self.devices.cuda_devices, wanted=wanted)

    def close(self) -> None:
        pass


@dataclass
class Campaign:
    """A grid's jobs through ``executor`` until ``deadline``; ``counts`` are the outcomes so far (the
    driver's own entries first, then the value of each status it expects, then "not started")."""

    executor: Executor
    deadline: float
    counts: dict[str, int] = field(default_factory=dict)
    statuses: tuple[Status, ...] = (Status.FINISHED, Status.FAILED, Status.ABANDONED)

    def __post_init__(self):
        for status in self.statuses:
            self.counts.setdefault(status.value, 0)

    def run(self, jobs: list, work: Callable[[Any], dict], on_result: Callable[[Any, Status, dict], list | None],
            abandon_after: float | None = 0.0, expected_seconds: Callable[[Any], float | None] | None = None,
            wanted: Callable[[Any], bool] | None = None) -> list:
        """Run ``work(job)`` for ``jobs`` in order; ``on_result(job, status, result)`` is called here as each
        one ends (a failure is printed first, with its traceback) and may return follow-up jobs, which join
        the queue's end. Jobs in flight ``abandon_after`` seconds past the deadline are abandoned (None:
        waited for); ``expected_seconds`` and ``wanted`` choose the next job as in ``jobs.run_jobs``.
        Returns the jobs never started (counted as such)."""
        def ended(job: Any, result: dict) -> list:
            status = Status(result["status"])
            self.counts[status.value] = self.counts.get(status.value, 0) + 1
            if status is Status.FAILED:
                print(f"{job.label}: FAILED {result['error']}\n{result['traceback']}", flush=True)
            return on_result(job, status, result) or []

        not_started = self.executor.run(jobs, work, self.deadline, ended, abandon_after, expected_seconds, wanted)
        self.counts[NOT_STARTED] = len(not_started)
        return not_started

    def summary(self) -> str:
        """The counts as one line: "finished: 3, failed: 0, ..."."""
        return ", ".join(f"{name}: {count}" for name, count in self.counts.items())


class Manifest:
    """A grid's finished runs, one JSON line each in ``path``; ``key(entry)`` identifies a run (its
    settings), so that a later call over the same file skips what is in it."""

    def __init__(self, path: Path, key: Callable[[dict], Any]):
        self.path, self.key = Path(path), key
        self.entries = read_jsonl(self.path)

    def keys(self) -> set:
        return {self.key(entry) for entry in self.entries}

    def add(self, entry: dict) -> None:
        """Append ``entry`` to the file (rewritten atomically) and to ``entries``."""
        append_jsonl(self.path, entry)
        self.entries.append(entry)


def merge_manifests(paths: Iterable[Path], key: Callable[[dict], Any] = lambda entry: entry["record_id"]) -> list[dict]:
    """The entries of ``paths`` in order, each ``key`` once (calls started from one base manifest repeat
    it, and the first copy stays)."""
    entries, seen = [], set()
    for path in paths:
        if not Path(path).is_file():
            raise FileNotFoundError(f"manifest {path} does not exist")
        for entry in read_jsonl(path):
            if key(entry) not in seen:
                seen.add(key(entry))
                entries.append(entry)
    return entries


# --device of a campaign command (headline run, split-study run, probe, authors grid): its workers' devices
DEVICE_HELP = (f"{ONE_DEVICE_HELP}, or a comma list (cuda:0,cuda:1): worker i trains on the i-th, cyclically; dask: "
               "what every worker trains on (auto: its own GPU if it has one)")


def add_executor_options(parser) -> None:
    """--executor, --scheduler, --cluster, --cluster-jobs, --cluster-option, --runs-per-gpu."""
    group = parser.add_argument_group("executor (docs/cluster.md)")
    group.add_argument("--executor", choices=("local", "dask"), default="local",
                       help="local: worker processes on this host (default); dask: the workers of a Dask cluster "
                            "(pip install -e .[cluster])")
    group.add_argument("--scheduler", help="dask: the address of a running Dask scheduler, tcp://HOST:PORT")
    group.add_argument("--cluster", choices=("slurm",),
                       help="dask: start the workers as batch jobs of this scheduler (dask-jobqueue), one GPU each")
    group.add_argument("--cluster-jobs", type=int, default=1, help="--cluster: how many batch jobs (GPUs)")
    group.add_argument("--cluster-option", action="append", default=[], metavar="KEY=VALUE",
                       help="--cluster: a dask-jobqueue setting (queue, account, walltime, memory, interface, "
                            "job_script_prologue, ...); a VALUE that reads as JSON is taken as such")
    group.add_argument("--runs-per-gpu", type=int,
                       help="dask: each run asks its worker for 1/K of a GPU (the resource GPU, which GPU workers "
                            "advertise); without it, runs take no resource (CPU workers)")


def add_grid_run_options(parser, out_help: str) -> None:
    """The options every grid driver's ``run`` takes (headline run, split-study run): --out, --workers,
    --budget, --device, the executor's and --checkpoints."""
    parser.add_argument("--out", required=True, type=Path, help=out_help)
    parser.add_argument("--workers", type=int, default=1, help="local: worker processes")
    parser.add_argument("--budget", type=float, help="wall-clock seconds; no run starts after them")
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument("--checkpoints", type=Path,
                        help="folder of per-epoch checkpoints, so that a run whose worker died resumes elsewhere "
                             "(default with --executor dask: OUT/checkpoints; it must be on storage the workers "
                             "share)")
    add_executor_options(parser)


def parse_cluster_options(pairs: list[str]) -> dict:
    """``--cluster-option KEY=VALUE`` pairs as keyword arguments (a VALUE that parses as JSON as that)."""
    bad = [pair for pair in pairs if not pair.partition("=")[0] or "=" not in pair]
    if bad:
        raise OptionError(f"option --cluster-option {bad[0]!r}: expected KEY=VALUE")
    return {key: _json_or_text(text) for key, _, text in (pair.partition("=") for pair in pairs)}


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def executor_from_args(args, budget: float | None, budget_option: str = "--budget") -> Executor:
    """The executor the options (add_executor_options, --workers, --device) ask for, ``budget`` checked
    first; a Dask cluster is connected to here, so a scheduler that does not answer is refused before any
    work."""
    deadline_after(budget, budget_option)
    if args.executor == "local":
        for name in ("scheduler", "cluster", "runs_per_gpu"):
            if getattr(args, name) is not None:
                raise OptionError(f"option --{name.replace('_', '-')}: only with --executor dask")
        return LocalExecutor(args.workers, args.device)
    if args.workers != 1:
        raise OptionError("option --workers: the Dask cluster's workers run the jobs (--executor dask); drop it")
    from .cluster import DaskExecutor

    return DaskExecutor.from_options(args.scheduler, args.cluster, args.cluster_jobs,
                                     parse_cluster_options(args.cluster_option), args.runs_per_gpu, args.device)


def checkpoint_dir(args, executor: Executor) -> Path | None:
    """--checkpoints, or OUT/checkpoints under a Dask executor (where a worker can die mid-run), else none."""
    if args.checkpoints is not None:
        return args.checkpoints
    return None if isinstance(executor, LocalExecutor) else Path(args.out) / "checkpoints"
