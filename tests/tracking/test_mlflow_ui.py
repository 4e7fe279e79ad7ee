"""The MLflow server over a store written by a tiny bench (the mlflow_server fixture in conftest.py): its
REST API lists every child run with its test AUC and artifacts, the parent's comparison, and the tags that
make the links `prism-rec ui` prints open the ranked model-training view (tests/ui/ opens them in chromium)."""

import json
import urllib.parse
import urllib.request

import pytest

from prism_rec.cli import main
from prism_rec.tracking.store import RANKED_VIEW, VIEW_TAG, bench_filter, bench_url, runs_view_url, ui_links


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
    assert json.loads(tags[VIEW_TAG]) == RANKED_VIEW


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
    with pytest.raises(ValueError, match="runs view mode 'GRID'"):
        runs_view_url("http://x", "1", "GRID")


def test_ui_prints_the_links_of_each_experiment_before_serving(store, tiny, monkeypatch, capsys):
    main(["bench", "--models", "sasrec", "--seeds", "1", "--epochs", "1", "--results-dir", str(store / "r"), *tiny])
    monkeypatch.setattr("os.execvp", lambda *args: None)  # print the links, start no server
    main(["ui", "--port", "5123"])
    printed = capsys.readouterr().out
    assert "ml-100k:" in printed and "ranked runs:" in printed and "charts:" in printed
    assert "http://127.0.0.1:5123/#/experiments/" in printed and "newest bench:" in printed


def test_each_bench_has_a_link_filtered_to_its_runs(mlflow_server):
    (name, views), = ui_links(mlflow_server)
    parent = mlflow_search(mlflow_server, "tags.prism_rec_role = 'parent'")[0]
    link = views[f"bench {parent['info']['run_name']}"]
    experiment = parent["info"]["experiment_id"]
    assert link == bench_url(mlflow_server, experiment, parent["info"]["run_id"])
    query = urllib.parse.parse_qs(link.partition("#")[2].partition("?")[2])
    assert query["searchFilter"] == [bench_filter(parent["info"]["run_id"])]
    assert query["orderByKey"] == [RANKED_VIEW["orderByKey"]] and query["orderByAsc"] == ["false"]
    shown = {run["info"]["run_name"] for run in mlflow_search(mlflow_server, query["searchFilter"][0])}
    assert shown == {"pop-s0", "sasrec-s0", "sasrec-s1"}  # the filter the link carries finds the bench's runs


def mlflow_search(server: str, filter_string: str) -> list[dict]:
    experiment = request(f"{server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=ml-100k")
    return request(f"{server}/api/2.0/mlflow/runs/search",
                   {"experiment_ids": [experiment["experiment"]["experiment_id"]], "filter": filter_string})["runs"]
