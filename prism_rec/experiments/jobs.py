"""Run many independent jobs in worker processes sharing one or more devices, within a wall-clock deadline.

Each worker is a spawned process that runs one job at a time and is fed the next as soon as it is free,
so jobs start in the order given (skipping, when estimates are given, those expected to outlast the
deadline). No job starts after the deadline. In-flight jobs run on past it until ``abandon_after`` seconds
later (the probes pause themselves at the deadline; the grid cells get 0 s), when they are terminated and
reported as abandoned; with ``abandon_after=None`` they run to their end. A job that raises, or whose
worker dies, is reported as failed; the other workers carry on. With one worker, jobs run in this process, one after
another, and the one in hand always finishes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

POLL_SECONDS = 1.0
STOP_SECONDS = 5.0


class Status(StrEnum):
    """The outcome of one job, as its result's "status" says."""

    FINISHED = "finished"
    DIVERGED = "diverged"  # the scores were not finite before the first validation (a rate too high)
    PAUSED = "paused"  # stopped at the deadline with a checkpoint, to continue in a later call
    FAILED = "failed"  # raised, or its worker died for good
    ABANDONED = "abandoned"  # still running when the executor stopped waiting for it



@dataclass(frozen=True)
class WorkerDevices:
    """The devices of a pool's ``--device`` (checked by training.devices.check_devices): one that every job names, or
    several CUDA devices, worker i on the i-th (``run_jobs(cuda_devices=...)``) and jobs asking for plain
    "cuda", the worker's current device."""

    names: list[str]

    @property
    def job_device(self) -> str:
        return "cuda" if len(self.names) > 1 else self.names[0]

    @property
    def cuda_devices(self) -> list[str] | None:
        return self.names if len(self.names) > 1 else None

    def describe(self) -> str:
        """The machines and the device names, for a log line."""
        from ..tracking.store import machine_description
        from ..training.devices import resolve_device

        machines = ", ".join(sorted({machine_description(resolve_device(name)) for name in self.names}))
        return f"{machines} ({', '.join(self.names)})"


def gpu_sharing(device: str) -> str:
    """How runs on ``device`` (a --device name; "auto" is resolved) share a GPU: "mps" when
    CUDA_MPS_PIPE_DIRECTORY names a folder holding an MPS server's control pipe (gpu_setup.sh sets it
    once a client got through), "time-slicing" on CUDA otherwise, "none" off CUDA."""
    if device == "auto":
        from ..training.devices import resolve_device

        device = resolve_device(device).type
    if not device.startswith("cuda"):
        return "none"
    pipes = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    return "mps" if pipes and (Path(pipes) / "control").exists() else "time-slicing"


def failure(error: BaseException) -> dict:
    """The result of a job that raised: status "failed", the error in one line and its traceback."""
    return {"status": Status.FAILED.value, "error": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc()}


def call(work: Callable[[Any], dict], job: Any) -> dict:
    try:
        return work(job)
    except Exception as error:  # one crashing job must not stop the pool
        return failure(error)


def _serve(connection: Connection, work: Callable[[Any], dict], threads: int, cuda_device: str | None) -> None:
    """Worker process: set the thread count (and the current CUDA device), then run the jobs received
    until None arrives."""
    import torch

    torch.set_num_threads(threads)
    if cuda_device is not None:
        torch.cuda.set_device(cuda_device)
    while (job := connection.recv()) is not None:
        connection.send(call(work, job))


@dataclass
class _Worker:
    process: multiprocessing.Process
    connection: Connection
    job: Any = None


def next_job(queue: list, deadline: float, expected_seconds: Callable[[Any], float] | None,
              wanted: Callable[[Any], bool] | None = None) -> Any:
    """Pop the first job of ``queue`` that ``wanted`` accepts (when given) and that is expected to end before
    ``deadline`` (a job whose estimate is None always qualifies); None when none does."""
    left = deadline - time.time()
    if left <= 0:
        return None
    for index, job in enumerate(queue):
        if wanted is not None and not wanted(job):
            continue
        seconds = None if expected_seconds is None else expected_seconds(job)
        if seconds is None or seconds <= left:
            return queue.pop(index)
    return None


def run_jobs(jobs: list, work: Callable[[Any], dict], workers: int, deadline: float,
             on_result: Callable[[Any, dict], None], abandon_after: float | None = None,
             expected_seconds: Callable[[Any], float | None] | None = None,
             cuda_devices: list[str] | None = None, wanted: Callable[[Any], bool] | None = None) -> list:
    """Run ``work(job)`` for ``jobs`` in order on ``workers`` processes; ``on_result(job, result)`` is
    called in this process as each one ends (result["status"] is the job's own, "failed" or "abandoned")
    and may return further jobs, which join the end of the queue (jobs that depend on earlier results).

    ``work`` must be a module-level function and jobs picklable. ``deadline`` is a ``time.time()``
    value. With ``expected_seconds``, a free worker skips jobs expected to outlast the deadline and takes
    the first that fits, so fewer are abandoned; with ``wanted``, it passes over the jobs that ``wanted``
    refuses at that moment (jobs queued on a guess that later results disproved). With ``cuda_devices``, worker i makes
    ``cuda_devices[i % len]`` its current device for good (one CUDA context per worker), so jobs that
    ask for plain "cuda" spread over the devices. Returns the jobs never started.
    """
    if workers < 1:
        raise ValueError(f"option --workers: must be >= 1, got {workers}")
    queue = list(jobs)
    if workers == 1:
        return _run_here(queue, work, deadline, on_result, expected_seconds, cuda_devices, wanted)
    pool = _start_pool(min(workers, len(queue)), work, max(1, (os.cpu_count() or 1) // workers), cuda_devices)
    try:
        while True:
            _feed(pool, queue, deadline, expected_seconds, wanted)
            busy = [worker for worker in pool if worker.job is not None]
            if not busy:
                return queue
            if abandon_after is not None and time.time() >= deadline + abandon_after:
                _abandon(busy, on_result)  # follow-up jobs are not started after the deadline
                return queue
            for job, result in _ended(busy):
                queue.extend(on_result(job, result) or [])
    finally:
        _stop_pool(pool)


def _run_here(queue: list, work: Callable[[Any], dict], deadline: float, on_result: Callable[[Any, dict], None],
              expected_seconds: Callable[[Any], float | None] | None, cuda_devices: list[str] | None,
              wanted: Callable[[Any], bool] | None) -> list:
    """``run_jobs`` with one worker: the jobs one after another in this process; returns those never started."""
    if cuda_devices:
        import torch

        torch.cuda.set_device(cuda_devices[0])
    while (job := next_job(queue, deadline, expected_seconds, wanted)) is not None:
        queue.extend(on_result(job, call(work, job)) or [])
    return queue


def _start_pool(size: int, work: Callable[[Any], dict], threads: int, cuda_devices: list[str] | None) -> list[_Worker]:
    """``size`` spawned worker processes of ``threads`` threads each, worker i on ``cuda_devices[i % len]``."""
    context = multiprocessing.get_context("spawn")
    pool = []
    for index in range(size):
        ours, theirs = context.Pipe()
        cuda_device = cuda_devices[index % len(cuda_devices)] if cuda_devices else None
        process = context.Process(target=_serve, args=(theirs, work, threads, cuda_device), daemon=True)
        process.start()
        theirs.close()
        pool.append(_Worker(process, ours))
    return pool


def _feed(pool: list[_Worker], queue: list, deadline: float,
          expected_seconds: Callable[[Any], float | None] | None, wanted: Callable[[Any], bool] | None) -> None:
    """Send every free, living worker the next wanted job that fits before the deadline (if any)."""
    for worker in pool:
        if worker.job is None and worker.process.is_alive():
            worker.job = next_job(queue, deadline, expected_seconds, wanted)
            if worker.job is not None:
                worker.connection.send(worker.job)


def _abandon(busy: list[_Worker], on_result: Callable[[Any, dict], None]) -> None:
    """At the deadline (plus ``abandon_after``): report each busy worker's job, with its result if already
    sent, else abandoned (the worker killed)."""
    for worker in busy:
        finished = worker.connection.poll()  # a result already sent is kept, not thrown away
        if not finished:
            worker.process.kill()
        on_result(worker.job, worker.connection.recv() if finished else {"status": Status.ABANDONED.value})
        worker.job = None


def _ended(busy: list[_Worker]) -> list[tuple[Any, dict]]:
    """Wait up to POLL_SECONDS for busy workers to answer or die; the (job, result) of those that did,
    their workers freed."""
    ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy], timeout=POLL_SECONDS)
    ended = []
    for worker in busy:
        if worker.connection in ready:
            try:
                result = worker.connection.recv()
            except EOFError:  # the worker died while sending
                result = {"status": Status.FAILED.value, "error": "worker process died", "traceback": ""}
        elif worker.process.sentinel in ready:
            result = {"status": Status.FAILED.value, "traceback": "",
                      "error": f"worker process died (exit code {worker.process.exitcode})"}
        else:
            continue
        ended.append((worker.job, result))
        worker.job = None
    return ended


def _stop_pool(pool: list[_Worker]) -> None:
    """Tell every idle worker to stop, then give them all STOP_SECONDS together to end (a CUDA worker's
    exit takes seconds, so they end side by side, not one after another) and kill those still alive."""
    for worker in pool:
        if worker.process.is_alive() and worker.job is None:
            with contextlib.suppress(OSError):
                worker.connection.send(None)
    stop_by = time.time() + STOP_SECONDS
    for worker in pool:
        worker.process.join(timeout=max(0.0, stop_by - time.time()))
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.connection.close()
