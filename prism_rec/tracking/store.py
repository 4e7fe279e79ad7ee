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
# A view the UI loads from the experiment tag ``VIEW_TAG_PREFIX + key`` named by the link's ``viewStateShareKey``
# (MLflow's "share view"): the JSON of the UI state the experiment page keeps (MLflow 3.17's persisted keys:
# search facets, selectedColumns, groupBy, runsHiddenMode, compareRunCharts, compareRunSections, ...).
VIEW_KEY = "prism-rec-ranked"  # every bench's child runs
BENCH_VIEW_KEY = "prism-rec-bench-{parent_id}"  # one bench's child runs
BENCH_TAG = "bench"  # a child run's bench: its parent run's name
# An experiment of another protocol than next-item names it here (protocols/authors/bench.py: "authors");
# `prism-rec tables` leaves such experiments to that protocol's table writer.
PROTOCOL_TAG = "prism_rec_protocol"
COMPARISON_TABLE = "comparison.json"  # a bench's parent run's comparison, one row per model (tracking/runs.py)
PAIRED_TABLE = "paired_differences"  # its paired differences against the best model (<name>.json and .md; bench.py)
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_TAG = VIEW_TAG_PREFIX + VIEW_KEY
RANKING_METRIC = "test_auc"
CHILD_FILTER = "tags.prism_rec_role = 'child'"
VIEW_COLUMNS = [*(f"metrics.`{name}`" for name in (RANKING_METRIC, "test_auc_ci_low", "test_auc_ci_high",
                                                   "test_hit_10", "test_ndcg_10", "best_epoch", "epochs_run",
                                                   "wall_seconds", "train_tokens_per_s")),
                *(f"params.`{name}`" for name in ("device", "precision", "epochs", "patience")),
                f"tags.`{BENCH_TAG}`", "tags.`seed`"]
_LEAD_COLUMNS = ["attributes.`Run Name`", "runDateAndNestInfo", "duration"]  # the UI's own first columns
# One row (and one bar or point per chart) per model: the mean of its runs' metrics, its runs beneath.
GROUP_BY_MODEL = {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "model"}]}
CHART_SECTION = "prism-rec-comparison"
_SECTIONS = [  # the comparison open; the UI's one chart per metric in its usual sections, closed
    {"uuid": CHART_SECTION, "name": "prism-rec: the models compared", "display": True},
    {"uuid": "prism-rec-model-metrics", "name": "Model metrics", "display": False},
    {"uuid": "prism-rec-system-metrics", "name": "System metrics", "display": False}]
_CHART_BASE = {"metricSectionId": CHART_SECTION, "isGenerated": False, "deleted": False, "runsCountToCompare": 1000}
VALID_AUC_CHART = {
    **_CHART_BASE, "uuid": "prism-rec-valid-auc", "type": "LINE",
    "displayName": "validation AUC per epoch (mean of each model's runs; band: their min to max)",
    "metricKey": "valid_auc", "selectedMetricKeys": ["valid_auc"], "xAxisKey": "step", "scaleType": "linear",
    "xAxisScaleType": "linear", "range": {}, "displayPoints": True, "lineSmoothness": 0,
    "useGlobalXaxisKey": False, "useGlobalLineSmoothing": False, "ignoreOutliers": False}
CHARTS = [
    {**_CHART_BASE, "uuid": "prism-rec-test-auc", "type": "BAR",
     "displayName": "test AUC per model (mean of its runs) between the means of its runs' 95% bootstrap bounds "
                    "over test users",
     "metricKey": RANKING_METRIC, "selectedMetricKeys": ["test_auc_ci_low", RANKING_METRIC, "test_auc_ci_high"]},
    {**_CHART_BASE, "uuid": "prism-rec-auc-speed", "type": "SCATTER",
     "displayName": "test AUC against training tokens/s (mean of each model's runs)",
     "xaxis": {"key": "train_tokens_per_s", "type": "METRIC"}, "yaxis": {"key": RANKING_METRIC, "type": "METRIC"}},
    VALID_AUC_CHART,
]
RANKED_VIEW = {"searchFilter": CHILD_FILTER, "orderByKey": f"metrics.`{RANKING_METRIC}`", "orderByAsc": False,
               "selectedColumns": VIEW_COLUMNS, "columnOrder": _LEAD_COLUMNS + VIEW_COLUMNS,
               "columnWidths": dict.fromkeys(VIEW_COLUMNS[:3], 130), "groupBy": GROUP_BY_MODEL,
               "runsHiddenMode": "SHOW_ALL",
               "useGroupedValuesInCharts": True, "hideEmptyCharts": True, "isAccordionReordered": True,
               "compareRunCharts": CHARTS,
               "compareRunSections": [{**section, "isReordered": False, "deleted": False, "isGenerated": False}
                                      for section in _SECTIONS]}


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


def load_artifact(run_id: str, artifact: str) -> dict | None:
    """The JSON artifact ``artifact`` of run ``run_id``, or None when the run has none or it cannot be read."""
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per run read is noise
    try:
        return mlflow.artifacts.load_dict(f"runs:/{run_id}/{artifact}")
    except (OSError, ValueError, mlflow.exceptions.MlflowException):
        return None


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


EXPERIMENT_NOTE = ("prism-rec benchmark runs: one parent run `bench-<time>` per `prism-rec bench` (its tables "
                   "comparison.json (mean, std, 95% interval over test users and n per model) and "
                   "paired_differences.json, artifacts auc.png and learning_curves.png compare the models) and one "
                   "child run `<model>-s<seed>` per training (tag `bench`: its parent's name). The links `make ui` "
                   "prints open the child runs grouped by model (the mean of each model's runs), best test AUC "
                   "first, with charts comparing the models: every bench's runs, or one bench's.")


def tag_model_training(experiment: str) -> None:
    """Mark experiment id ``experiment`` as a model-training (not GenAI) experiment, with a description."""
    import mlflow

    client = mlflow.MlflowClient()
    client.set_experiment_tag(experiment, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
    client.set_experiment_tag(experiment, EXPERIMENT_NOTE_TAG, EXPERIMENT_NOTE)


def zoomed_range(values: list[float], margin: float = 0.05) -> dict[str, float]:
    """A chart's y range around ``values``: their span widened by ``margin`` of it on each side (0.01 when
    they are all equal); empty (the UI's own range) without values."""
    if not values:
        return {}
    low, high = min(values), max(values)
    pad = (high - low) * margin or 0.01
    return {"yMin": low - pad, "yMax": high + pad}


def tag_view(experiment: str, key: str, search_filter: str) -> None:
    """Store in experiment id ``experiment`` the view ``key``: :data:`RANKED_VIEW` over the runs that
    ``search_filter`` finds, its validation-AUC chart zoomed to their values (:func:`zoomed_range`; MLflow's
    own range of a grouped line chart starts at 0)."""
    import mlflow

    client = mlflow.MlflowClient()
    runs = mlflow.search_runs([experiment], filter_string=search_filter)
    values = [point.value for run_id in runs.get("run_id", []) for point in
              client.get_metric_history(run_id, VALID_AUC_CHART["metricKey"])]
    charts = [{**chart, "range": zoomed_range(values)} if chart is VALID_AUC_CHART else chart
              for chart in RANKED_VIEW["compareRunCharts"]]
    view = {**RANKED_VIEW, "searchFilter": search_filter, "compareRunCharts": charts}
    client.set_experiment_tag(experiment, VIEW_TAG_PREFIX + key, json.dumps(view))


def runs_view_url(base_url: str, experiment: str, mode: str = "TABLE", key: str = VIEW_KEY) -> str:
    """The UI's runs view of experiment id ``experiment`` in model-training mode as the stored view ``key``
    shows it (:data:`RANKED_VIEW`: child runs grouped by model, best test AUC first); ``mode`` TABLE (the
    grouped runs) or CHART (the comparison's charts beside them)."""
    if mode not in ("TABLE", "CHART"):
        raise ValueError(f"runs view mode {mode!r}: expected TABLE or CHART")
    # no sort or filter of its own: with one of them in the URL the UI ignores the stored view
    query = {"workflowType": "machine_learning", "viewStateShareKey": key, "compareRunsMode": mode}
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return f"{base_url.rstrip('/')}/#/experiments/{experiment}/runs?{encoded}"


def bench_filter(parent_id: str) -> str:
    """The MLflow search filter of the child runs of the bench whose parent run is ``parent_id``."""
    return f"{CHILD_FILTER} and tags.mlflow.parentRunId = '{parent_id}'"


def run_artifact_url(base_url: str, experiment: str, run_id: str, artifact: str) -> str:
    """The UI page of run ``run_id``'s artifacts with ``artifact`` open."""
    return (f"{base_url.rstrip('/')}/#/experiments/{experiment}/runs/{run_id}/artifacts/{urllib.parse.quote(artifact)}"
            "?workflowType=machine_learning")


def ui_links(base_url: str) -> list[tuple[str, dict[str, str]]]:
    """(experiment name, {view: URL}) for every experiment of the store that holds benchmark runs, each
    first tagged as model training (:func:`tag_model_training`): every bench's runs grouped by model (table
    and charts), the newest bench's comparison (its parent run's table artifact :data:`COMPARISON_TABLE`, its
    figure auc.png and, where it has them, its paired differences :data:`PAIRED_TABLE`), and per bench, newest
    first, its runs grouped by model (``bench <parent run name>``, each a view stored by :func:`tag_view`)."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    links = []
    for experiment in mlflow.search_experiments(order_by=["name"]):
        parents = mlflow.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"],
                                     filter_string="tags.prism_rec_role = 'parent'")
        if parents.empty:
            continue
        experiment_id = experiment.experiment_id
        tag_model_training(experiment_id)
        tag_view(experiment_id, VIEW_KEY, CHILD_FILTER)
        newest = parents["run_id"].iloc[0]
        views = {"ranked runs": runs_view_url(base_url, experiment_id, "TABLE"),
                 "charts": runs_view_url(base_url, experiment_id, "CHART"),
                 "newest bench": run_artifact_url(base_url, experiment_id, newest, COMPARISON_TABLE)}
        logged = {artifact.path for artifact in mlflow.MlflowClient().list_artifacts(newest)}
        if "auc.png" in logged:  # the authors' protocol's benches draw none
            views["newest figure"] = run_artifact_url(base_url, experiment_id, newest, "auc.png")
        if f"{PAIRED_TABLE}.json" in logged:  # a bench of two or more models with per-user results
            views["newest paired differences"] = run_artifact_url(base_url, experiment_id, newest,
                                                                  f"{PAIRED_TABLE}.json")
        for _, parent in parents.iterrows():
            key = BENCH_VIEW_KEY.format(parent_id=parent["run_id"])
            tag_view(experiment_id, key, bench_filter(parent["run_id"]))
            views[f"bench {parent['tags.mlflow.runName']}"] = runs_view_url(base_url, experiment_id, "TABLE", key)
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


def is_cpu_machine(description: str) -> bool:
    """Whether a record's ``machine_description`` names a CPU."""
    return " CPU, " in description


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
