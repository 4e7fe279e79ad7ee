"""Throughput runs in MLflow: logging a measurement, copying the runs of another store."""

from __future__ import annotations

from pathlib import Path

import torch

from ...names import path_name
from ...tracking.store import provenance_tags
from .shapes import CONFIGURATIONS, Configuration
from .measure import BackboneResults, CaseResult, format_case
from .report import plot


EXPERIMENT = "throughput"


def log_to_mlflow(results: list[BackboneResults], configuration: Configuration, device: torch.device,
                  command: str) -> None:
    """One run per (backbone, shape): tokens/s and peak memory with step = length, status tags per case."""
    import mlflow

    from ...tracking.store import experiment_id

    experiment = experiment_id(EXPERIMENT)
    for entry in results:
        tags = {**provenance_tags(device), "backbone": entry.backbone, "shape": entry.shape.name,
                "configuration": configuration.name, "report": configuration.file_stem, "command": command}
        tags.update({f"status_{case.length}x{case.batch}": format_case(case, configuration) for case in entry.cases})
        with mlflow.start_run(experiment_id=experiment, run_name=f"{entry.backbone} {entry.shape.name}", tags=tags):
            mlflow.log_params({"d_model": entry.shape.d_model, "n_layers": entry.shape.n_layers,
                               "vocabulary": entry.shape.vocabulary, "dropout": entry.shape.dropout,
                               "parameters": entry.parameters, "warmup": configuration.warmup,
                               "steps": configuration.steps, "case_budget_s": configuration.case_budget_s,
                               **{f"backbone.{key}": value for key, value in entry.options.items()}})
            for case in entry.cases:
                if case.status == "ok":
                    mlflow.log_metric("tokens_per_s", case.tokens_per_s, step=case.length)
                    mlflow.log_metric("step_ms", case.step_s * 1000, step=case.length)
                    if case.peak_memory_mib is not None:
                        mlflow.log_metric("peak_memory_mib", case.peak_memory_mib, step=case.length)


def import_store(source_uri: str, results_dir: Path) -> int:
    """Copy the "throughput" runs of the MLflow store at ``source_uri`` (one written on a GPU machine)
    into the current store, once each (tag ``source_run_id``), and redraw ``<results-dir>/<report>.png``
    of the newest run's report (tag ``report``: its file name, as ``--report-name`` set it) from the newest
    run per (backbone, shape) of that report; returns the number of runs copied. The report (.md) is the
    one the measuring machine wrote."""
    import mlflow

    from ...tracking.store import experiment_id

    database = source_uri.removeprefix("sqlite:///")
    if database != source_uri and not Path(database).is_file():
        raise ValueError(f"option --import-store: no such file {database}")
    source = mlflow.MlflowClient(tracking_uri=source_uri)
    try:
        experiment = source.get_experiment_by_name(EXPERIMENT)
        runs = source.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'",
                                  order_by=["attributes.start_time DESC"]) if experiment else []
    except mlflow.exceptions.MlflowException as error:
        raise ValueError(f"option --import-store: cannot read {source_uri}: {error}") from None
    if not runs:
        raise ValueError(f"option --import-store: no finished runs of experiment {EXPERIMENT!r} in {source_uri}")
    destination = experiment_id(EXPERIMENT)
    present = mlflow.search_runs([destination], "attributes.status = 'FINISHED'")  # a failed copy is redone
    done = set(present.get("run_id", [])) | set(present.get("tags.source_run_id", []))  # also: a store into itself
    count = 0
    for run in reversed(runs):
        if run.info.run_id in done:
            continue
        count += 1
        tags = {key: value for key, value in run.data.tags.items() if not key.startswith("mlflow.")}
        with mlflow.start_run(experiment_id=destination, run_name=run.info.run_name,
                              tags={**tags, "source_run_id": run.info.run_id}):
            mlflow.log_params(run.data.params)
            for key in run.data.metrics:
                for point in source.get_metric_history(run.info.run_id, key):
                    mlflow.log_metric(key, point.value, step=point.step)
    configuration = CONFIGURATIONS[runs[0].data.tags["configuration"]]
    report = path_name(runs[0].data.tags.get("report", configuration.file_stem), f"{source_uri}: tag report")
    newest = {}
    for run in runs:  # newest first
        tags = run.data.tags
        if tags.get("configuration") == configuration.name and tags.get("report", configuration.file_stem) == report:
            newest.setdefault((tags["backbone"], tags["shape"]), run)
    results = []
    for shape in configuration.shapes:
        for (backbone, shape_name), run in sorted(newest.items()):
            if shape_name == shape.name:
                rates = {p.step: p.value for p in source.get_metric_history(run.info.run_id, "tokens_per_s")}
                cases = [CaseResult(backbone, shape.name, length, batch, "ok" if length in rates else "not ok",
                                    step_s=batch * length / rates[length] if length in rates else None)
                         for length, batch in shape.cases]
                results.append(BackboneResults(backbone, shape, {}, None, cases))
    machine = runs[0].data.tags.get("machine", "unknown machine")
    plot(results, configuration, results_dir / f"{report}.png", f"Training throughput, {machine}")
    return count
