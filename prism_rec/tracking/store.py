"""MLflow plumbing: the project's tracking store, experiments (tagged as model-training experiments), the UI
links that show them ranked, run provenance tags, and the runs that processes killed outright (SIGKILL,
the OOM killer) left RUNNING."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import socket
import subprocess
import urllib.parse
from pathlib import Path

import torch

from ..names import path_name
from ..paths import PROJECT_ROOT

STORE_DIR = PROJECT_ROOT / ".mlflow"
STORE_WAIT_SECONDS = 10.0  # how long check_store waits for another process's write to end
# MLflow 3's UI reads the kind of an experiment from this tag (its "experiment type" setting); which view a
# click lands on follows the UI's workflow type instead (the ``workflowType`` URL parameter, remembered in
# the browser), which is why ``prism-rec ui`` prints links that carry it.
EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND = "mlflow.experimentKind", "custom_model_development"
EXPERIMENT_NOTE_TAG = "mlflow.note.content"  # the description the UI shows above an experiment's runs
# A view the UI loads from an experiment tag named by the link's ``viewStateShareKey`` (MLflow's "share
# view"): the child runs ranked by test AUC with their metric columns, charts narrowed to the AUCs.
VIEW_KEY = "prism-rec-ranked"
BENCH_TAG = "bench"  # a child run's bench: its parent run's name
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
RANKING_METRIC = "test_auc"
VIEW_COLUMNS = [*(f"metrics.`{name}`" for name in (RANKING_METRIC, "test_hit_10", "test_ndcg_10", "best_epoch",
                                                   "epochs_run", "wall_seconds", "train_tokens_per_s")),
                *(f"params.`{name}`" for name in ("device", "precision", "epochs", "patience")),
                f"tags.`{BENCH_TAG}`"]
RANKED_VIEW = {"searchFilter": "tags.prism_rec_role = 'child'", "orderByKey": f"metrics.`{RANKING_METRIC}`",
               "orderByAsc": False, "selectedColumns": VIEW_COLUMNS, "chartsSearchFilter": "auc"}


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI, else a sqlite file in the git-ignored .mlflow/ folder of the project."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    STORE_DIR.mkdir(exist_ok=True)
    return f"sqlite:///{STORE_DIR / 'mlflow.db'}"


def check_store() -> None:
    """The store of :func:`tracking_uri` usable, checked before a command works: a sqlite store is a database
    that is not locked (waiting ``STORE_WAIT_SECONDS`` for a writer), or does not exist yet; a ValueError says
    which in one line."""
    import sqlite3

    uri = tracking_uri()
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///"))
    if not path.exists():
        return  # created on first use, under store_lock, in a folder tracking_uri or the user made
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=STORE_WAIT_SECONDS)) as connection:
            connection.execute("BEGIN IMMEDIATE")  # a write lock, as a run's logging takes
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            connection.rollback()
    except sqlite3.OperationalError as error:
        raise ValueError(f"MLflow store {path}: {error} (another process holds it, or it cannot be "
                         "written); wait for it or free it") from None
    except sqlite3.DatabaseError as error:
        raise ValueError(f"MLflow store {path}: not a usable sqlite database ({error}); move it away to "
                         "start a new store") from None


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
    """Id of experiment ``name``, created with an artifact folder beside the store and the model-training
    tags (:func:`tag_model_training`) if missing; the store is opened (and created) under :func:`store_lock`."""
    import mlflow

    path_name(name, "experiment")  # it names the experiment's artifact folder
    mlflow.set_tracking_uri(tracking_uri())
    with store_lock():
        experiment = mlflow.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        created = mlflow.create_experiment(name, artifact_location=(artifact_root() / name).resolve().as_uri())
        tag_model_training(created)
        return created


EXPERIMENT_NOTE = ("prism-rec benchmark runs: one parent run `bench-<time>` per `prism-rec bench` (its metrics "
                   "`test_auc_mean/<model>`, tables comparison.json and paired_differences.json and artifacts auc.png, "
                   "auc.md, learning_curves.png compare the models) and one child run `<model>-s<seed>` per training "
                   "(tag `bench`: its parent's name). Sort by test_auc (Columns: add "
                   "metrics test_auc) or open the links `make ui` prints.")


def tag_model_training(experiment: str) -> None:
    """Mark experiment id ``experiment`` as a model-training (not GenAI) experiment, with a description and
    the ranked view that :func:`runs_view_url` links to."""
    import mlflow

    client = mlflow.MlflowClient()
    client.set_experiment_tag(experiment, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
    client.set_experiment_tag(experiment, EXPERIMENT_NOTE_TAG, EXPERIMENT_NOTE)
    client.set_experiment_tag(experiment, VIEW_TAG, json.dumps(RANKED_VIEW))


def runs_view_url(base_url: str, experiment: str, mode: str = "TABLE") -> str:
    """The UI's runs view of experiment id ``experiment`` in model-training mode, child runs ranked by test
    AUC (best first) with their metrics as columns; ``mode`` TABLE (the ranked list), CHART (the AUC charts)
    or ARTIFACT (the runs' artifacts side by side)."""
    if mode not in ("TABLE", "CHART", "ARTIFACT"):
        raise ValueError(f"runs view mode {mode!r}: expected TABLE, CHART or ARTIFACT")
    # no sort or filter of its own: with one of them in the URL the UI ignores the shared view
    query = {"workflowType": "machine_learning", "viewStateShareKey": VIEW_KEY, "compareRunsMode": mode}
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return f"{base_url.rstrip('/')}/#/experiments/{experiment}/runs?{encoded}"


def bench_url(base_url: str, experiment: str, parent_id: str) -> str:
    """The UI's runs table of experiment id ``experiment`` filtered to the child runs of the bench whose parent
    run is ``parent_id``, best test AUC first (a filter in the URL replaces the shared view, so the URL sorts too)."""
    query = {"workflowType": "machine_learning", "searchFilter": bench_filter(parent_id),
             "orderByKey": RANKED_VIEW["orderByKey"], "orderByAsc": "false", "compareRunsMode": "TABLE"}
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return f"{base_url.rstrip('/')}/#/experiments/{experiment}/runs?{encoded}"


def bench_filter(parent_id: str) -> str:
    """The MLflow search filter of the child runs of the bench whose parent run is ``parent_id``."""
    return f"tags.prism_rec_role = 'child' and tags.mlflow.parentRunId = '{parent_id}'"


def run_artifact_url(base_url: str, experiment: str, run_id: str, artifact: str) -> str:
    """The UI page of run ``run_id``'s artifacts with ``artifact`` open."""
    return (f"{base_url.rstrip('/')}/#/experiments/{experiment}/runs/{run_id}/artifacts/{urllib.parse.quote(artifact)}"
            "?workflowType=machine_learning")


def ui_links(base_url: str) -> list[tuple[str, dict[str, str]]]:
    """(experiment name, {view: URL}) for every experiment of the store that holds benchmark runs, each
    first tagged as model training (:func:`tag_model_training`): the ranked runs, the charts, the
    artifacts side by side, the newest bench's comparison (its parent run's artifacts), and a ranked table of
    each bench's runs (``bench <parent run name>``, newest first: :func:`bench_url`)."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    links = []
    for experiment in mlflow.search_experiments(order_by=["name"]):
        parents = mlflow.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"],
                                     filter_string="tags.prism_rec_role = 'parent'")
        if parents.empty:
            continue
        tag_model_training(experiment.experiment_id)
        views = {name: runs_view_url(base_url, experiment.experiment_id, mode)
                 for name, mode in (("ranked runs", "TABLE"), ("charts", "CHART"), ("artifacts", "ARTIFACT"))}
        views["newest bench"] = run_artifact_url(base_url, experiment.experiment_id, parents["run_id"].iloc[0],
                                                 "auc.png")
        for _, parent in parents.iterrows():
            views[f"bench {parent['tags.mlflow.runName']}"] = bench_url(base_url, experiment.experiment_id,
                                                                        parent["run_id"])
        links.append((experiment.name, views))
    return links


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


def triton_version() -> str:
    try:
        import triton
    except ImportError:
        return "not installed"
    return triton.__version__


def provenance_tags(device: torch.device) -> dict[str, str]:
    return {
        "git_commit": git_commit(),
        "device": str(device),
        "machine": machine_description(device),
        "torch_version": torch.__version__,
        "torch_threads": str(torch.get_num_threads()),
        "triton_version": triton_version(),
    }
