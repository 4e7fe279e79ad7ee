"""MLflow plumbing: the project's tracking store, experiments and run provenance tags."""

from __future__ import annotations

import os
import platform
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


def experiment_id(name: str) -> str:
    """Id of experiment ``name``, created with an artifact folder beside the store if missing."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    experiment = mlflow.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return mlflow.create_experiment(name, artifact_location=(artifact_root() / name).resolve().as_uri())


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
        "triton_version": triton_version,
    }
