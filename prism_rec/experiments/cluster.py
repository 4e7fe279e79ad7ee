"""The ``dask`` executor of a campaign: its jobs on the workers of a Dask cluster (docs/cluster.md).

The cluster is a running scheduler (``--scheduler tcp://HOST:PORT``, workers started by hand) or one this
process starts with batch jobs through dask-jobqueue (``--cluster slurm``: one GPU per job, k worker
processes in it). With ``--runs-per-gpu k`` every run asks for 1/k of the resource ``GPU``, which a GPU
worker advertises (``dask worker ... --resources GPU=<its share>``, started with CUDA_VISIBLE_DEVICES
naming its GPU, and as a client of the host's CUDA MPS server where one runs); without it runs take no
resource, one per worker thread (CPU workers).

Like the local pool, jobs are handed out in order as workers free up, each only if it is wanted and
expected to end by the deadline, and follow-up jobs join the queue's end. A run whose worker dies is run
again on another worker by the scheduler (up to its ``distributed.scheduler.allowed-failures``; then it
fails); a headline run resumes there from its last per-epoch checkpoint, which is why checkpoints must be
on storage every worker reads. At the deadline plus ``abandon_after`` the runs still in flight are
cancelled and reported abandoned (a Dask worker cannot stop a running task: it finishes it, unrecorded).
Each run's PyTorch gets the cores of its host divided by the runs the host takes at once, the local pool's
rule.
"""

from __future__ import annotations

import os
import re
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from ..errors import OptionError
from .jobs import POLL_SECONDS, Status, call, next_job

INSTALL = "pip install -e '.[cluster]'"
CONNECT_SECONDS = 10.0
WORKERS_SECONDS = 600.0  # how long a batch cluster's first worker may take to come up
WAIT_STEP_SECONDS = 0.05
ADDRESS = re.compile(r"^[a-z]+://[^/\s]+:\d+$")


def _distributed():
    try:
        import distributed
    except ImportError:
        raise OptionError(f"option --executor dask: Dask is not installed here; {INSTALL}") from None
    return distributed


def connect(address: str):
    """A client of the scheduler at ``address``; one that does not answer within CONNECT_SECONDS is
    refused in one line naming it."""
    if not ADDRESS.match(address or ""):
        raise OptionError(f"option --scheduler: {address!r} is not an address like tcp://HOST:PORT")
    distributed = _distributed()
    try:
        return distributed.Client(address, timeout=CONNECT_SECONDS, set_as_default=False)
    except (OSError, TimeoutError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise OptionError(f"option --scheduler: no Dask scheduler answers at {address} ({reason})") from None


def slurm_settings(runs_per_gpu: int | None, options: dict) -> dict:
    """dask-jobqueue SLURMCluster settings: each batch job one GPU (``--gres=gpu:1``; none without
    ``runs_per_gpu``: CPU jobs) with ``runs_per_gpu`` single-threaded worker processes, each advertising
    1/k of it; ``options`` add further settings (queue, account, walltime, memory, ...), lists extending
    ours."""
    k = runs_per_gpu or 1
    gpu = {"job_extra_directives": ["--gres=gpu:1"], "worker_extra_args": ["--resources", f"GPU={1 / k!r}"]}
    settings = {"cores": k, "processes": k, **(gpu if runs_per_gpu else {})}
    for key, value in options.items():
        settings[key] = settings.get(key, []) + value if isinstance(value, list) else value
    return settings


def slurm_cluster(jobs: int, runs_per_gpu: int | None, options: dict):
    """A SLURMCluster of :func:`slurm_settings`, scaled to ``jobs`` batch jobs."""
    _distributed()
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise OptionError(f"option --cluster slurm: dask-jobqueue is not installed here; {INSTALL}") from None
    if jobs < 1:
        raise OptionError(f"option --cluster-jobs: must be >= 1, got {jobs}")
    try:
        cluster = SLURMCluster(**slurm_settings(runs_per_gpu, options))
    except (TypeError, ValueError) as error:
        raise OptionError(f"option --cluster-option: {error}") from None
    cluster.scale(jobs=jobs)
    return cluster


def _run_task(work: Callable[[Any], dict], job: Any, host_runs: dict[str, int]) -> dict:
    """On a worker: PyTorch's thread count set to the host's cores over the runs it takes at once, then
    ``work(job)`` (an exception becomes a failed result)."""
    import torch
    from distributed import get_worker

    worker = get_worker()
    runs = host_runs.get(urlparse(worker.address).hostname, worker.state.nthreads)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, cores // max(runs, 1)))
    return call(work, job)


class DaskExecutor:
    """Jobs on a Dask cluster's workers through ``client`` (its ``cluster`` closed with it, if this
    process started one); with ``runs_per_gpu`` k, each job asks for the resource GPU = 1/k."""

    def __init__(self, client, runs_per_gpu: int | None, device: str, cluster=None):
        if runs_per_gpu is not None and runs_per_gpu < 1:
            raise OptionError(f"option --runs-per-gpu: must be >= 1, got {runs_per_gpu}")
        self.client, self.cluster, self.job_device = client, cluster, device
        self.runs_per_gpu = runs_per_gpu
        self.resources = None if runs_per_gpu is None else {"GPU": 1 / runs_per_gpu}

    @classmethod
    def from_options(cls, scheduler: str | None, cluster: str | None, jobs: int, options: dict,
                     runs_per_gpu: int | None, device: str) -> DaskExecutor:
        """Connect to ``scheduler``, or start ``cluster`` ("slurm") with ``jobs`` batch jobs and wait for
        its first worker."""
        if (scheduler is None) == (cluster is None):
            raise OptionError("option --executor dask: give --scheduler tcp://HOST:PORT or --cluster slurm, "
                              "one of the two")
        if scheduler is not None:
            return cls(connect(scheduler), runs_per_gpu, device)
        batch = slurm_cluster(jobs, runs_per_gpu, options)
        client = _distributed().Client(batch, set_as_default=False)
        print(f"submitted {jobs} SLURM job(s); waiting for the first worker ({batch.scheduler_address})", flush=True)
        client.wait_for_workers(1, timeout=WORKERS_SECONDS)
        return cls(client, runs_per_gpu, device, batch)

    def _capacity(self) -> tuple[int, dict[str, int]]:
        """How many of this executor's runs the cluster's workers take at once, in all and per host: a
        worker takes one per thread, and with a GPU share no more than its GPU resource holds."""
        total, per_host = 0, {}
        for info in self.client.scheduler_info(n_workers=-1)["workers"].values():
            runs = info["nthreads"]
            if self.resources is not None:
                runs = min(runs, int(info.get("resources", {}).get("GPU", 0) / self.resources["GPU"] + 1e-9))
            total += runs
            per_host[info["host"]] = per_host.get(info["host"], 0) + runs
        return total, per_host

    def describe(self) -> str:
        workers = len(self.client.scheduler_info(n_workers=-1)["workers"])
        share = f", {self.runs_per_gpu} run(s) per GPU" if self.runs_per_gpu else ""
        return (f"the Dask cluster at {self.client.scheduler.address} ({workers} worker(s), {self._capacity()[0]} "
                f"run(s) at once{share}; device {self.job_device})")

    def jobs_per_device(self, jobs: int) -> float:
        return float(self.runs_per_gpu or 1)

    def run(self, jobs: list, work: Callable[[Any], dict], deadline: float, on_result: Callable[[Any, dict], list],
            abandon_after: float | None, expected_seconds: Callable[[Any], float | None] | None,
            wanted: Callable[[Any], bool] | None) -> list:
        """``jobs.run_jobs`` on the cluster: returns the jobs never started."""
        queue, in_flight, waiting = list(jobs), {}, False
        while True:
            capacity, host_runs = self._capacity()
            if not capacity and queue and not waiting:
                print(f"no worker of {self.client.scheduler.address} can take a run yet; waiting", flush=True)
            waiting = not capacity
            while len(in_flight) < capacity:
                job = next_job(queue, deadline, expected_seconds, wanted)
                if job is None:
                    break
                future = self.client.submit(_run_task, work, job, host_runs, resources=self.resources, pure=False,
                                            key=f"{getattr(job, 'label', 'job')}-{uuid.uuid4().hex[:8]}")
                in_flight[future] = job
            if not in_flight and (capacity or not queue or time.time() >= deadline):
                return queue
            if abandon_after is not None and time.time() >= deadline + abandon_after:
                for future, job in in_flight.items():
                    result = _result(future) if future.done() else {"status": Status.ABANDONED.value}
                    future.cancel()
                    on_result(job, result)
                return queue
            _wait_for_any(list(in_flight))  # without any (no worker yet: batch jobs still queued), POLL_SECONDS
            for future in [future for future in in_flight if future.done()]:
                queue.extend(on_result(in_flight.pop(future), _result(future)) or [])

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _wait_for_any(futures: list) -> None:
    """Until one of ``futures`` is done, or POLL_SECONDS."""
    end = time.time() + POLL_SECONDS
    while time.time() < end and not any(future.done() for future in futures):
        time.sleep(WAIT_STEP_SECONDS)


def _result(future) -> dict:
    """A finished future's result; a failed one's error (its worker died too often: KilledWorker) as a
    failed result."""
    if future.status == "finished":
        return future.result()
    error = future.exception() if future.status == "error" else None
    if error is None:
        return {"status": Status.FAILED.value, "error": f"the run's task was {future.status}", "traceback": ""}
    return {"status": Status.FAILED.value, "error": f"{type(error).__name__}: {error}",
            "traceback": "".join(traceback.format_tb(future.traceback()))}
