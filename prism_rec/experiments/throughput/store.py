"""Throughput runs in MLflow: logging a measurement, copying the runs of another store."""

from __future__ import annotations

from pathlib import Path

import torch

from ...names import path_name
from ...tracking import runs
from ...tracking.store import experiment_id, provenance_tags
from .measure import BackboneResults, CaseResult, format_case
from .report import plot
from .shapes import CONFIGURATIONS, Configuration

EXPERIMENT = "throughput"


def log_to_mlflow(results: list[BackboneResults], configuration: Configuration, device: torch.device,
                  command: str) -> None:
    """One run per (backbone, shape): tokens/s and peak memory with step = length, status tags per case."""
    experiment = experiment_id(EXPERIMENT)
    for entry in results:
        tags = {**provenance_tags(device), "backbone": entry.backbone, "shape": entry.shape.name,
                "configuration": configuration.name, "report": configuration.file_stem, "command": command}
        tags.update({f"status_{case.length}x{case.batch}": format_case(case, configuration) for case in entry.cases})
        done = [case for case in entry.cases if case.status == "ok"]
        series = {"tokens_per_s": [(case.length, case.tokens_per_s) for case in done],
                  "step_ms": [(case.length, case.step_s * 1000) for case in done],
                  "peak_memory_mib": [(case.length, case.peak_memory_mib) for case in done
                                      if case.peak_memory_mib is not None]}
        params = {"d_model": entry.shape.d_model, "n_layers": entry.shape.n_layers,
                  "vocabulary": entry.shape.vocabulary, "dropout": entry.shape.dropout,
                  "parameters": entry.parameters, "warmup": configuration.warmup,
                  "steps": configuration.steps, "case_budget_s": configuration.case_budget_s,
                  **{f"backbone.{key}": value for key, value in entry.options.items()}}
        runs.log_finished_run(experiment, f"{entry.backbone} {entry.shape.name}", tags, params, series=series)


def import_store(source_uri: str, results_dir: Path) -> int:
    """Copy the "throughput" runs of the MLflow store at ``source_uri`` (one written on a GPU machine)
    into the current store, once each (tag ``source_run_id``), and redraw ``<results-dir>/<report>.png``
    of the newest run's report (tag ``report``: its file name, as ``--report-name`` set it) from the newest
    run per (backbone, shape) of that report; returns the number of runs copied. The report (.md) is the
    one the measuring machine wrote."""
    database = source_uri.removeprefix("sqlite:///")
    if database != source_uri and not Path(database).is_file():
        raise ValueError(f"option --import-store: no such file {database}")
    found = runs.read_store(source_uri, EXPERIMENT, "--import-store")
    if not found:
        raise ValueError(f"option --import-store: no finished runs of experiment {EXPERIMENT!r} in {source_uri}")
    destination = experiment_id(EXPERIMENT)
    present = runs.search(destination, "attributes.status = 'FINISHED'")  # a failed copy is redone
    done = set(present.get("run_id", [])) | set(present.get("tags.source_run_id", []))  # also: a store into itself
    count = 0
    for run in reversed(found):
        if run["run_id"] in done:
            continue
        count += 1
        tags = {key: value for key, value in run["tags"].items() if not key.startswith("mlflow.")}
        runs.log_finished_run(destination, run["run_name"], {**tags, "source_run_id": run["run_id"]}, run["params"],
                              series=run["series"])
    configuration = CONFIGURATIONS[found[0]["tags"]["configuration"]]
    report = path_name(found[0]["tags"].get("report", configuration.file_stem), f"{source_uri}: tag report")
    newest = {}
    for run in found:  # newest first
        tags = run["tags"]
        if tags.get("configuration") == configuration.name and tags.get("report", configuration.file_stem) == report:
            newest.setdefault((tags["backbone"], tags["shape"]), run)
    results = []
    for shape in configuration.shapes:
        for (backbone, shape_name), run in sorted(newest.items()):
            if shape_name == shape.name:
                rates = dict(run["series"].get("tokens_per_s", []))
                memory = dict(run["series"].get("peak_memory_mib", []))
                cases = [CaseResult(backbone, shape.name, length, batch, "ok" if length in rates else "not ok",
                                    step_s=batch * length / rates[length] if length in rates else None,
                                    peak_memory_mib=memory.get(length))
                         for length, batch in shape.cases]
                results.append(BackboneResults(backbone, shape, {}, None, cases))
    machine = found[0]["tags"].get("machine", "unknown machine")
    plot(results, configuration, results_dir / f"{report}.png", f"Training throughput, {machine}")
    return count
