"""The MLflow server over a store written by a tiny bench (the mlflow_server fixture in conftest.py): its
REST API lists every child run with its test AUC and artifacts, the parent's comparison, and the tags that
make the links `prism-rec ui` prints open the ranked model-training view (tests/ui/ opens them in chromium)."""

import json
import urllib.parse
import urllib.request

import pytest

from prism_rec.cli import main
from prism_rec.tracking.store import RANKED_VIEW, VIEW_TAG, runs_view_url


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
    assert {f["path"] for f in artifacts["files"]} == {"auc.md", "auc.csv", "auc.png", "learning_curves.png"}
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
