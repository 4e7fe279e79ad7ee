"""The MLflow server over a store written by a tiny bench (the mlflow_server fixture in conftest.py): its
REST API lists every child run with its test AUC and artifacts."""

import json
import urllib.request


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
    assert sorted(runs) == ["sasrec-s0", "sasrec-s1"]
    for run in runs.values():
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert 0 < metrics["test_auc"] < 1 and run["info"]["status"] == "FINISHED"
        artifacts = request(f"{mlflow_server}/api/2.0/mlflow/artifacts/list?run_id={run['info']['run_id']}")
        assert {f["path"] for f in artifacts["files"]} == {"config.json", "learning_curve.png", "case_ranks.json"}
