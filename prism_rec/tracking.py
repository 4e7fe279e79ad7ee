"""MLflow plumbing: the project's tracking store, experiments, run provenance tags, and the runs that
processes killed outright (SIGKILL, the OOM killer) left RUNNING."""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import socket
import subprocess
from pathlib import Path

import torch

PROJECT_ROOT = Path(__file__).resolve().parents[1]
STORE_DIR = PROJECT_ROOT / ".mlflow"


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else a sqlite file in the git-ignored .mlflow/ folder of the project."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    STORE_DIR.mkdir(exist_ok=True)
    return f"sqlite:///{STORE_DIR / 'mlflow.db'}"


def artifact_root() -> Path:
    """Where new experiments keep artifacts: beside a sqlite store, else .mlflow/artifacts."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).parent / "artifacts"
    return STORE_DIR / "artifacts"


@contextlib.contextmanager
def store_lock():
    """An exclusive lock (flock) on a file beside a sqlite store (else in .mlflow/), held in the block:
    the first use of a new store creates its tables, and two processes doing that at once break one."""
    uri = tracking_uri()
    folder = Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///") else STORE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".prism-rec-store.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def experiment_id(name: str) -> str:
    """Id of experiment ``name``, created with an artifact folder beside the store if missing; the store
    is opened (and created) under :func:`store_lock`."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    with store_lock():
        experiment = mlflow.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        return mlflow.create_experiment(name, artifact_location=(artifact_root() / name).resolve().as_uri())


def _process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot (/proc/<pid>/stat field 22), which
    tells a reused process id from the original; "" where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_tags() -> dict[str, str]:
    """Tags naming this process, so that a later invocation can tell whether it still runs."""
    return {"prism_rec_host": socket.gethostname(), "prism_rec_pid": str(os.getpid()),
            "prism_rec_process_start": _process_start(os.getpid())}


def _process_alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not start or _process_start(pid) in (start, "")


def end_runs_of_dead_processes(experiment: str) -> list[str]:
    """Mark KILLED the RUNNING runs of experiment id ``experiment`` whose process (named by
    :func:`process_tags`, on this host) no longer runs; returns their run names. Runs of other hosts
    and runs without those tags are left as they are: nothing here can tell whether they still run."""
    import mlflow

    runs = mlflow.search_runs([experiment], filter_string="attributes.status = 'RUNNING' and "
                              f"tags.prism_rec_host = '{socket.gethostname()}'")
    ended = []
    client = mlflow.MlflowClient()
    for _, run in runs.iterrows():
        pid = run.get("tags.prism_rec_pid")
        if pid and not _process_alive(int(pid), run.get("tags.prism_rec_process_start") or ""):
            client.set_terminated(run["run_id"], status="KILLED")
            ended.append(run["tags.mlflow.runName"])
    return ended


def _head_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


_COMMIT_AT_IMPORT = _head_commit()  # the code this process loaded, even if HEAD moves on while it runs


def git_commit() -> str:
    """HEAD's short hash when this module was imported; PRISM_REC_GIT_COMMIT where the tree travelled
    without .git (the GPU machine)."""
    return os.environ.get("PRISM_REC_GIT_COMMIT") or _COMMIT_AT_IMPORT


def machine_description(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    return f"{platform.machine()} CPU, {os.cpu_count()} cores"


def provenance_tags(device: torch.device) -> dict[str, str]:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return {
        "git_commit": git_commit(),
        "device": str(device),
        "machine": machine_description(device),
        "torch_version": torch.__version__,
        "torch_threads": str(torch.get_num_threads()),
        "triton_version": triton_version,
    }
