"""The MLflow server over a store written by a tiny bench (the mlflow_server fixture in conftest.py): its
REST API lists every child run with its test AUC, its interval and artifacts, the parent's comparison, and the
tags that make the links `prism-rec ui` prints open the model-training view grouped by model with its charts
(tests/ui/ opens them in chromium)."""

import json
import urllib.parse
import urllib.request

import mlflow
import numpy as np
import pytest

from prism_rec.cli import main
from prism_rec.tracking.case_ranks import decode
from prism_rec.tracking.store import (
    BENCH_VIEW_KEY,
    CHILD_FILTER,
    RANKED_VIEW,
    VALID_AUC_CHART,
    VIEW_TAG,
    VIEW_TAG_PREFIX,
    bench_filter,
    runs_view_url,
    ui_links,
    zoomed_range,
)


def request(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}),
                                timeout=10) as response:
        return json.loads(response.read() or b"{}")


def test_rest_api_lists_every_child_run_with_test_auc(mlflow_server):
    experiment = request(f"{mlflow_server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=ml-100k")
    experiment_id = experiment["experiment"]["experiment_id"]
    found = request(f"{mlflow_server}/api/2.0/mlflow/runs/search",
                    {"experiment_ids": [experiment_id], "filter": "tags.prism_rec_role = 'child'"})
    runs = {next(t["value"] for t in run["data"]["tags"] if t["key"] == "mlflow.runName"): run
            for run in found["runs"]}
    assert sorted(runs) == ["pop-s0", "sasrec-s0", "sasrec-s1"]  # pop is deterministic: one run
    for name, run in runs.items():
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert 0 < metrics["test_auc"] < 1 and run["info"]["status"] == "FINISHED"
        artifacts = request(f"{mlflow_server}/api/2.0/mlflow/artifacts/list?run_id={run['info']['run_id']}")
        curve = set() if name == "pop-s0" else {"learning_curve.png"}  # no epochs, no curve
        assert {f["path"] for f in artifacts["files"]} == {"config.json", "case_ranks.json", *curve}
    parent = request(f"{mlflow_server}/api/2.0/mlflow/runs/search",
                     {"experiment_ids": [experiment_id], "filter": "tags.prism_rec_role = 'parent'"})["runs"][0]
    artifacts = request(f"{mlflow_server}/api/2.0/mlflow/artifacts/list?run_id={parent['info']['run_id']}")
    assert {f["path"] for f in artifacts["files"]} == {"auc.md", "auc.csv", "auc.png", "auc.svg", "learning_curves.png",
                                                       "comparison.json", "paired_differences.json",
                                                       "paired_differences.md"}
    parent_tags = {t["key"]: t["value"] for t in parent["data"]["tags"]}
    assert json.loads(parent_tags["mlflow.loggedArtifacts"]) == [
        {"path": "comparison.json", "type": "table"}, {"path": "paired_differences.json", "type": "table"}]
    for run in runs.values():  # each child names its bench
        assert {t["key"]: t["value"] for t in run["data"]["tags"]}["bench"] == parent["info"]["run_name"]
    with urllib.request.urlopen(f"{mlflow_server}/get-artifact?path=comparison.json&run_uuid="
                                f"{parent['info']['run_id']}", timeout=10) as response:
        table = json.loads(response.read())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    aucs = {name.split("-s")[0]: [] for name in runs}
    for name, run in runs.items():
        aucs[name.split("-s")[0]].append(next(m["value"] for m in run["data"]["metrics"] if m["key"] == "test_auc"))
    assert [row["model"] for row in rows] == sorted(aucs, key=lambda m: -sum(aucs[m]) / len(aucs[m]))
    for row in rows:
        assert row["n_seeds"] == len(aucs[row["model"]]) and row["n_test_users"] == 943
        assert row["test_auc_mean"] == pytest.approx(sum(aucs[row["model"]]) / len(aucs[row["model"]]), abs=1e-9)
        assert row["test_auc_ci_low"] < row["test_auc_mean"] < row["test_auc_ci_high"]
    tags = {t["key"]: t["value"] for t in experiment["experiment"]["tags"]}
    assert tags["mlflow.experimentKind"] == "custom_model_development"  # not a GenAI experiment


def assert_bootstrap_intervals() -> None:
    """Each child run's test_auc_ci_low|high: a 95% percentile bootstrap over its test users, drawn here."""
    rng = np.random.default_rng(1)
    for _, child in mlflow.search_runs(experiment_names=["ml-100k"], filter_string=CHILD_FILTER).iterrows():
        auc = decode(mlflow.artifacts.load_dict(f"runs:/{child['run_id']}/case_ranks.json")).auc()  # [U]
        assert child["metrics.test_auc"] == pytest.approx(auc.mean(), abs=1e-6)
        means = auc[rng.integers(0, len(auc), size=(4000, len(auc)))].mean(axis=1)  # users resampled
        low, high = np.percentile(means, [2.5, 97.5])
        assert child["metrics.test_auc_ci_low"] == pytest.approx(low, abs=1.5e-3)
        assert child["metrics.test_auc_ci_high"] == pytest.approx(high, abs=1.5e-3)


def test_child_intervals_and_the_stored_views_grouped_by_model_with_zoomed_curves(mlflow_server):
    assert_bootstrap_intervals()
    (_, views), = ui_links(mlflow_server)
    experiment = mlflow.get_experiment_by_name("ml-100k")
    client = mlflow.MlflowClient()
    parent = mlflow.search_runs([experiment.experiment_id], filter_string="tags.prism_rec_role = 'parent'").iloc[0]
    for key, search_filter in ((VIEW_TAG.removeprefix(VIEW_TAG_PREFIX), CHILD_FILTER),
                               (BENCH_VIEW_KEY.format(parent_id=parent["run_id"]), bench_filter(parent["run_id"]))):
        view = json.loads(experiment.tags[VIEW_TAG_PREFIX + key])
        assert view["searchFilter"] == search_filter
        assert view["groupBy"] == {"aggregateFunction": "average",
                                   "groupByKeys": [{"mode": "tag", "groupByData": "model"}]}
        assert view["runsHiddenMode"] == "SHOW_ALL"  # not the UI's first 10 runs
        charts = {chart["uuid"]: chart for chart in view["compareRunCharts"]}
        runs = mlflow.search_runs([experiment.experiment_id], filter_string=search_filter)
        values = [m.value for run_id in runs["run_id"] for m in client.get_metric_history(run_id, "valid_auc")]
        span = max(values) - min(values)
        assert charts[VALID_AUC_CHART["uuid"]]["range"] == pytest.approx(
            {"yMin": min(values) - 0.05 * span, "yMax": max(values) + 0.05 * span})
        assert [charts[uuid] for uuid in charts if uuid != VALID_AUC_CHART["uuid"]] == \
            [chart for chart in RANKED_VIEW["compareRunCharts"] if chart is not VALID_AUC_CHART]
        assert {key: value for key, value in view.items() if key not in ("searchFilter", "compareRunCharts")} == \
            {key: value for key, value in RANKED_VIEW.items() if key not in ("searchFilter", "compareRunCharts")}
        assert any(link.endswith(f"viewStateShareKey={key}&compareRunsMode=TABLE") for link in views.values())


def test_zoomed_range_widens_the_span_of_the_values():
    assert zoomed_range([0.8, 0.7, 0.9]) == pytest.approx({"yMin": 0.69, "yMax": 0.91})
    assert zoomed_range([0.75, 0.75]) == pytest.approx({"yMin": 0.74, "yMax": 0.76})
    assert zoomed_range([]) == {}


def test_links_name_the_shared_view_and_the_model_training_mode():
    url = runs_view_url("http://127.0.0.1:5000/", "7", "CHART")
    path, _, query = url.partition("#")[2].partition("?")
    assert url.startswith("http://127.0.0.1:5000/#/experiments/7/runs?") and path == "/experiments/7/runs"
    # the UI ignores a shared view when the URL carries a sort or a filter of its own
    assert urllib.parse.parse_qs(query) == {"workflowType": ["machine_learning"],
                                            "viewStateShareKey": ["prism-rec-ranked"],
                                            "compareRunsMode": ["CHART"]}
    assert RANKED_VIEW["orderByKey"] == "metrics.`test_auc`" and RANKED_VIEW["orderByAsc"] is False
    assert RANKED_VIEW["orderByKey"] in RANKED_VIEW["selectedColumns"]
    with pytest.raises(ValueError, match="runs view mode 'ARTIFACT'"):  # disabled by grouping
        runs_view_url("http://x", "1", "ARTIFACT")


def test_ui_prints_the_links_of_each_experiment_before_serving(store, tiny, monkeypatch, capsys):
    main(["bench", "--models", "sasrec", "--seeds", "1", "--epochs", "1", "--results-dir", str(store / "r"), *tiny])
    monkeypatch.setattr("os.execvp", lambda *args: None)  # print the links, start no server
    main(["ui", "--port", "5123"])
    printed = capsys.readouterr().out
    assert "ml-100k:" in printed and "ranked runs:" in printed and "charts:" in printed
    assert "http://127.0.0.1:5123/#/experiments/" in printed and "newest bench:" in printed


def test_each_bench_has_a_link_to_a_view_of_its_runs(mlflow_server):
    (name, views), = ui_links(mlflow_server)
    parent = mlflow_search(mlflow_server, "tags.prism_rec_role = 'parent'")[0]
    link = views[f"bench {parent['info']['run_name']}"]
    experiment = parent["info"]["experiment_id"]
    key = BENCH_VIEW_KEY.format(parent_id=parent["info"]["run_id"])
    assert link == runs_view_url(mlflow_server, experiment, "TABLE", key)
    view = json.loads(mlflow.get_experiment(experiment).tags[VIEW_TAG_PREFIX + key])
    shown = {run["info"]["run_name"] for run in mlflow_search(mlflow_server, view["searchFilter"])}
    assert shown == {"pop-s0", "sasrec-s0", "sasrec-s1"}  # the filter the view stores finds the bench's runs


def mlflow_search(server: str, filter_string: str) -> list[dict]:
    experiment = request(f"{server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=ml-100k")
    return request(f"{server}/api/2.0/mlflow/runs/search",
                   {"experiment_ids": [experiment["experiment"]["experiment_id"]], "filter": filter_string})["runs"]
