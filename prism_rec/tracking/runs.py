"""The benchmark's runs in the MLflow store: every MLflow call of ``prism-rec bench`` goes through here.

A bench is one parent run per invocation with a child run ``<model>-s<seed>`` per training. A child run is
written from the parts of its record (records.child_run: tags, params, config.json; records.final_metrics),
so a run logged here and a record imported later (:func:`import_records`) hold the same things. The parent
carries the comparison of its finished children (:func:`log_comparison`). :func:`import_records` logs every
record not yet in the store as a child run ``<model>-s<seed>`` under one parent run per dataset and import,
so ``prism-rec tables`` and ``make ui`` treat them like local runs; the tag ``record_id`` makes a second
import of the same record a no-op.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

from ..training.metrics import METRIC_NAMES
from ..training.trainer import FitResult
from .cells import Cell
from .plots import auc_chart, learning_curve, learning_curves
from .records import CASE_RANKS_ARTIFACT, FINISHED, RECORDS_SUFFIX, case_ranks_entry, final_metrics, read_records
from .store import COMPARISON_TABLE
from .tables import markdown_table, spread_note, store_cells, summarise, with_test_user_ranks

RECORD_ID_TAG = "record_id"
ERROR_TAG = "error"
MLFLOW_TAG_LIMIT = 4000  # characters of a tag value kept


@contextlib.contextmanager
def active_run(**kwargs):
    """``mlflow.start_run(**kwargs)`` that ends KILLED on an interruption and FAILED (with an ``error``
    tag) on an exception, FINISHED otherwise; yields the run's id."""
    import mlflow

    run = mlflow.start_run(**kwargs)
    try:
        yield run.info.run_id
    except KeyboardInterrupt:
        mlflow.end_run(status="KILLED")
        raise
    except BaseException as error:
        mlflow.set_tag(ERROR_TAG, f"{type(error).__name__}: {error}"[:MLFLOW_TAG_LIMIT])
        mlflow.end_run(status="FAILED")
        raise
    mlflow.end_run()


def log_params(params: dict) -> None:
    """``params`` on the active run."""
    import mlflow

    mlflow.log_params(params)


def log_metrics(metrics: dict[str, float]) -> None:
    """``metrics`` on the active run (at step 0)."""
    import mlflow

    mlflow.log_metrics(metrics)


def set_tags(tags: dict[str, str]) -> None:
    """``tags`` on the active run."""
    import mlflow

    mlflow.set_tags(tags)


def log_dict(value: dict, artifact: str) -> None:
    """``value`` as the JSON artifact ``artifact`` of the active run."""
    import mlflow

    mlflow.log_dict(value, artifact)


def log_text(text: str, artifact: str) -> None:
    """``text`` as the artifact ``artifact`` of the active run."""
    import mlflow

    mlflow.log_text(text, artifact)


def set_experiment_tag(experiment: str, key: str, value: str) -> None:
    """The tag ``key`` of experiment id ``experiment``."""
    import mlflow

    mlflow.MlflowClient().set_experiment_tag(experiment, key, value)


def experiments_tagged(key: str, value: str) -> list[str]:
    """The ids of the store's experiments whose tag ``key`` is ``value``, by name."""
    import mlflow

    return [experiment.experiment_id for experiment in mlflow.search_experiments(order_by=["name"])
            if experiment.tags.get(key) == value]


def run_name(run_id: str) -> str:
    """The name of run ``run_id``."""
    import mlflow

    return mlflow.MlflowClient().get_run(run_id).info.run_name


def note_failures(failures: list[str]) -> None:
    """The tag ``failures`` of the active run: a line per run that failed."""
    import mlflow

    mlflow.set_tag("failures", "; ".join(failures)[:MLFLOW_TAG_LIMIT])


def log_epoch(metrics: dict, epoch: int) -> None:
    """One epoch's metrics on the active run at step ``epoch`` (1-based, like best_epoch)."""
    import mlflow

    mlflow.log_metrics(metrics, step=epoch)


def prepare_child(run_id: str, run: dict, new: bool, history: list[dict]) -> None:
    """Before training in the active child run ``run_id``: the params of ``run`` (records.child_run) on a new
    run, or for a resumed one the loss of the error tag of its crash; the epochs of ``history`` (a resumed
    checkpoint's) that the run lacks; config.json."""
    import mlflow

    client = mlflow.MlflowClient()
    if new:
        mlflow.log_params(run["params"])
    elif ERROR_TAG in client.get_run(run_id).data.tags:  # a crashed run resumed: its error is history
        client.delete_tag(run_id, ERROR_TAG)
    logged = {metric.step for metric in client.get_metric_history(run_id, "valid_auc")}
    for epoch, row in enumerate(history, start=1):
        if epoch not in logged:
            log_epoch(row, epoch)
    mlflow.log_dict(run["config"], "config.json")


def log_result(result: FitResult, title: str, curve: bool = True) -> None:
    """A finished ``fit`` on the active child run: its final metrics (those the run lacks: a run stopped after
    logging them and resumed has them already), per-test-case ranks and (with ``curve``) its learning curve."""
    import mlflow
    from matplotlib import pyplot

    logged = mlflow.MlflowClient().get_run(mlflow.active_run().info.run_id).data.metrics
    mlflow.log_metrics({name: value for name, value in final_metrics(result).items() if name not in logged})
    mlflow.log_dict(case_ranks_entry(result), CASE_RANKS_ARTIFACT)
    if curve:
        figure = learning_curve(result.history, title, result.best_epoch)
        mlflow.log_figure(figure, "learning_curve.png")
        pyplot.close(figure)


def running_children(experiment: str, host: str) -> list[dict]:
    """The child runs of ``experiment`` that processes of ``host`` hold RUNNING: their run_id, config_hash
    and pid."""
    import mlflow

    runs = mlflow.search_runs([experiment], filter_string="attributes.status = 'RUNNING' and "
                              f"tags.prism_rec_role = 'child' and tags.prism_rec_host = '{host}'")
    return [{"run_id": run["run_id"], "config_hash": run["tags.config_hash"], "pid": run["tags.prism_rec_pid"]}
            for _, run in runs.iterrows()]


def mark_superseded(experiment: str) -> list[str]:
    """Tag ``superseded_by`` on every KILLED child run of ``experiment`` whose settings (config_hash) a FINISHED
    child has since trained to the end (a twin left by a bench killed before its run resumed in place); returns
    the names of the runs it tagged."""
    import mlflow

    children = mlflow.search_runs([experiment], filter_string="tags.prism_rec_role = 'child'")
    if children.empty or "tags.config_hash" not in children:
        return []
    finished = children[children["status"] == "FINISHED"].groupby("tags.config_hash")["run_id"].first()
    killed = children[(children["status"] == "KILLED") & children["tags.config_hash"].isin(finished.index)]
    if "tags.superseded_by" in killed:
        killed = killed[killed["tags.superseded_by"].isna()]
    client = mlflow.MlflowClient()
    for _, run in killed.iterrows():
        client.set_tag(run["run_id"], "superseded_by", finished[run["tags.config_hash"]])
    return list(killed["tags.mlflow.runName"])


def newest_killed_parent(experiment: str, bench_hash: str) -> str | None:
    """The id of the newest KILLED parent run of ``experiment`` with settings hash ``bench_hash``, else None."""
    import mlflow

    parents = mlflow.search_runs(
        experiment_ids=[experiment], max_results=1, order_by=["attributes.start_time DESC"],
        filter_string=f"tags.prism_rec_role = 'parent' and tags.config_hash = '{bench_hash}' "
                      "and attributes.status = 'KILLED'")
    return None if parents.empty else parents["run_id"].iloc[0]


def children_of(experiment: str, parent_id: str) -> list[tuple[str, str, str]]:
    """(config_hash, status, run_id) of every child run of ``parent_id``, newest first."""
    import mlflow

    found = mlflow.search_runs(
        experiment_ids=[experiment], order_by=["attributes.start_time DESC"],
        filter_string=f"tags.prism_rec_role = 'child' and tags.mlflow.parentRunId = '{parent_id}'")
    return [(child["tags.config_hash"], child["status"], child["run_id"]) for _, child in found.iterrows()]


def search(experiment: str, filter_string: str = "", order_by: list[str] | None = None):
    """The runs of experiment id ``experiment`` that match ``filter_string``, as MLflow's DataFrame (columns
    run_id, status, params.*, metrics.*, tags.*)."""
    import mlflow

    return mlflow.search_runs([experiment], filter_string=filter_string, order_by=order_by)


def finished_children(experiment: str):
    """Every finished child run (a training) of experiment id ``experiment``, newest first."""
    return search(experiment, "tags.prism_rec_role = 'child' and attributes.status = 'FINISHED'",
                  ["attributes.start_time DESC"])


def log_finished_run(experiment: str, run_name: str, tags: dict, params: dict, metrics: dict | None = None,
                     series: dict[str, list[tuple[int, float]]] | None = None) -> None:
    """One finished run of experiment id ``experiment``: ``params``, ``metrics`` (at step 0) and each metric
    of ``series`` ({name: [(step, value)]}) at its steps."""
    import mlflow

    with mlflow.start_run(experiment_id=experiment, run_name=run_name, tags=tags):
        mlflow.log_params(params)
        for name, points in (series or {}).items():
            for step, value in points:
                mlflow.log_metric(name, value, step=step)
        if metrics:
            mlflow.log_metrics(metrics)


def read_store(uri: str, experiment_name: str, option: str) -> list[dict]:
    """The finished runs of experiment ``experiment_name`` in the MLflow store at ``uri`` (another than the
    current one), newest first: {run_id, run_name, tags, params, series: {metric: [(step, value)]}}. A store
    that cannot be read raises ValueError naming ``option``."""
    import mlflow

    source = mlflow.MlflowClient(tracking_uri=uri)
    try:
        experiment = source.get_experiment_by_name(experiment_name)
        found = source.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'",
                                   order_by=["attributes.start_time DESC"]) if experiment else []
        return [{"run_id": run.info.run_id, "run_name": run.info.run_name, "tags": run.data.tags,
                 "params": run.data.params,
                 "series": {key: [(p.step, p.value) for p in source.get_metric_history(run.info.run_id, key)]
                            for key in run.data.metrics}}
                for run in found]
    except mlflow.exceptions.MlflowException as error:
        raise ValueError(f"option {option}: cannot read {uri}: {error}") from None


def bench_children(experiment: str, parent_id: str):
    """The finished child runs of the bench parent run ``parent_id``, by model and seed."""
    import mlflow

    return mlflow.search_runs([experiment], order_by=["tags.model", "tags.seed"],
                              filter_string=f"tags.prism_rec_role = 'child' and tags.mlflow.parentRunId = "
                                            f"'{parent_id}' and attributes.status = 'FINISHED'")


def log_comparison(children, dataset_name: str) -> tuple[str, list[Cell]]:
    """Log onto the active parent run the comparison of its finished ``children`` (:func:`bench_children`):
    metrics ``test_<metric>_mean/<model>``, ``test_auc_ci_low|high/<model>``, ``n_seeds/<model>`` and
    ``n_test_users/<model>``; the table comparison.json (:func:`comparison_columns`, for the UI's table view);
    artifacts auc.md, auc.csv, auc.png (sorted, 95% intervals over test users, n)
    and learning_curves.png (every model on shared axes, best epochs starred; runs without per-epoch history,
    such as pop's, draw none). Returns the Markdown table and the cells (with per-user AUC where every run of
    a model has it)."""
    import mlflow
    from matplotlib import pyplot

    client = mlflow.MlflowClient()
    cells = with_test_user_ranks(store_cells(children, dataset_name))
    summary = summarise(cells, intervals=True)
    metrics = {}
    for _, row in summary.iterrows():
        model = row["model"]
        metrics.update({f"test_{name}_mean/{model}": row[f"{name}_mean"] for name in METRIC_NAMES})
        metrics.update({f"n_seeds/{model}": row["n_seeds"], f"n_test_users/{model}": row["n_users"],
                        f"test_auc_ci_low/{model}": row["auc_ci_low"], f"test_auc_ci_high/{model}": row["auc_ci_high"]})
    mlflow.log_metrics({key: float(value) for key, value in metrics.items() if value == value})  # NaN: unknown
    histories = {}
    for _, child in children.iterrows():
        rows = {name: client.get_metric_history(child["run_id"], name) for name in ("train_loss", "valid_auc")}
        history = [{"train_loss": loss.value, "valid_auc": auc.value} for loss, auc in
                   zip(sorted(rows["train_loss"], key=lambda m: m.step),
                       sorted(rows["valid_auc"], key=lambda m: m.step))]
        histories.setdefault(child["tags.model"], []).append((history, int(child["metrics.best_epoch"])))
    table = f"# {dataset_name}: this bench's test metrics\n\n{spread_note(summary)}\n\n{markdown_table(summary)}\n"
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "auc.md").write_text(table)
        summary.to_csv(Path(folder) / "auc.csv", index=False, float_format="%.6f")
        mlflow.log_table(data=comparison_columns(summary), artifact_file=COMPARISON_TABLE)
        auc_chart(summary, f"{dataset_name}: full-ranking test AUC", Path(folder) / "auc.png")
        mlflow.log_artifacts(folder)
    figure = learning_curves(histories, f"{dataset_name}: learning curves of this bench")
    mlflow.log_figure(figure, "learning_curves.png")
    pyplot.close(figure)
    return table, cells


def comparison_columns(summary) -> dict[str, list]:
    """A bench's comparison as table columns, a row per model, best mean test AUC first: model, seeds (n),
    test users, mean and std of the test AUC over seeds, its 95% bootstrap interval over test users."""
    ordered = summary.sort_values("auc_mean", ascending=False)
    return {"model": ordered["model"].tolist(), "n_seeds": ordered["n_seeds"].astype(int).tolist(),
            "n_test_users": ordered["n_users"].tolist(), "test_auc_mean": ordered["auc_mean"].tolist(),
            "test_auc_std": ordered["auc_std"].tolist(), "test_auc_ci_low": ordered["auc_ci_low"].tolist(),
            "test_auc_ci_high": ordered["auc_ci_high"].tolist()}


def log_table(columns: dict[str, list], name: str, markdown: str) -> None:
    """``columns`` ({column: values, one per row}) on the active run as the table artifact ``<name>.json``
    (mlflow.log_table: the UI's table view renders it) with its Markdown form ``markdown`` as ``<name>.md``."""
    import mlflow

    mlflow.log_table(data=columns, artifact_file=f"{name}.json")
    mlflow.log_text(markdown, f"{name}.md")


def _create_run(client, experiment: str, run_name: str, tags: dict, start_time_ms: int) -> str:
    return client.create_run(experiment, start_time=start_time_ms, run_name=run_name, tags=tags).info.run_id


def log_record(record: dict, experiment: str, parent_run_id: str | None = None) -> str:
    """Log ``record`` as a terminated child run of experiment id ``experiment`` (under ``parent_run_id``,
    if given); returns the new run's id."""
    from matplotlib import pyplot
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient()
    tags = {**record["tags"], RECORD_ID_TAG: record["record_id"]}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run_id = _create_run(client, experiment, record["run_name"], tags, record["start_time_ms"])
    end = record["end_time_ms"]
    metrics = [Metric(name, float(value), end, epoch) for epoch, row in enumerate(record["history"], start=1)
               for name, value in row.items()]
    metrics += [Metric(name, float(value), end, 0) for name, value in record["metrics"].items()]
    params = [Param(name, str(value)) for name, value in record["params"].items()]
    for start in range(0, len(params), 100):  # MLflow's per-call limits: 100 params, 1000 metrics
        client.log_batch(run_id, params=params[start : start + 100])
    for start in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[start : start + 1000])
    client.log_dict(run_id, record["config"], "config.json")
    if "case_ranks" in record:  # records made before per-case results were kept have none
        client.log_dict(run_id, record["case_ranks"], CASE_RANKS_ARTIFACT)
    if record["history"]:
        figure = learning_curve(record["history"], f"{record['experiment']} {record['tags']['model']} "
                                                   f"seed {record['tags']['seed']}")
        client.log_figure(run_id, figure, "learning_curve.png")
        pyplot.close(figure)
    client.set_terminated(run_id, status=record["status"], end_time=end)
    return run_id


def imported_record_ids(experiment: str) -> set[str]:
    """The ``record_id`` tags of the runs already imported whole into experiment id ``experiment`` (a run
    left RUNNING by an import that stopped halfway does not count, so the next import logs it again)."""
    import mlflow

    runs = mlflow.search_runs([experiment],
                              filter_string=f"tags.{RECORD_ID_TAG} != '' and attributes.status != 'RUNNING'")
    return set() if runs.empty else set(runs[f"tags.{RECORD_ID_TAG}"].dropna())


def import_records(source: Path, command: str) -> dict[str, int]:
    """Log every record of ``source`` (a records file or a folder of them) not yet in the store; one parent run
    per dataset per import carries ``command``. Returns {"imported": n, "already there": m}."""
    from mlflow import MlflowClient

    from .store import experiment_id

    records = read_records(source)
    if not records:
        raise FileNotFoundError(f"{source}: no run records (*{RECORDS_SUFFIX})")
    counts = {"imported": 0, "already there": 0}
    by_experiment: dict[str, list[dict]] = {}
    for record in records:
        by_experiment.setdefault(record["experiment"], []).append(record)
    for name, group in sorted(by_experiment.items()):
        experiment = experiment_id(name)
        known = imported_record_ids(experiment)
        new = [record for record in group if record["record_id"] not in known]
        counts["already there"] += len(group) - len(new)
        if not new:
            continue
        client = MlflowClient()
        first = min(record["start_time_ms"] for record in new)
        parent = _create_run(client, experiment, f"import-{time.strftime('%Y%m%d-%H%M%S')}",
                             {"prism_rec_role": "parent", "dataset": name, "command": command,
                              "imported_from": str(source)}, first)
        client.log_param(parent, "dataset", name)
        for record in sorted(new, key=lambda r: r["start_time_ms"]):
            log_record(record, experiment, parent)
            counts["imported"] += 1
        client.set_terminated(parent, status=FINISHED, end_time=max(record["end_time_ms"] for record in new))
    return counts
