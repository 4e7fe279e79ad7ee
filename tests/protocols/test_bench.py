"""``prism-rec bench --protocol authors``: the authors' protocol's runs in the MLflow store with their table, and
options of the other protocol refused before any work, naming the option."""

import argparse
import json

import mlflow
import numpy as np
import pytest
import torch

from prism_rec.cli import main
from prism_rec.protocols.authors import bench, commands
from prism_rec.protocols.authors.data import build_task
from prism_rec.protocols.authors.train import RunConfig, run
from prism_rec.tracking.store import PROTOCOL_TAG

from .test_commands import refusal
from .test_train import write_inter

TINY = ["--dataset", "ml-100k", "--min-user-edges", "5", "--epochs", "2", "--batch-size", "16", "--n-neighbours", "3",
        "--channel", "4", "--n-heads", "1", "--device", "cpu"]


@pytest.mark.parametrize("argv, message", [
    (["--protocol", "authors", "--split", "time"], "option --split: belongs to --protocol next-item"),
    (["--protocol", "authors", "--option", "L=2"], "option --option: belongs to --protocol next-item"),
    (["--protocol", "authors", "--resume"], "option --resume: belongs to --protocol next-item"),
    (["--protocol", "authors", "--d-model", "32"], "option --d-model: belongs to --protocol next-item"),
    (["--protocol", "authors", "--no-progress"], "option --no-progress: belongs to --protocol next-item"),
    (["--protocol", "authors", "--precision", "fp32"], "option --precision: belongs to --protocol next-item"),
    (["--head-width", "64"], "option --head-width: belongs to --protocol authors, not to --protocol next-item"),
    (["--protocol", "next-item", "--min-user-edges", "3"], "option --min-user-edges: belongs to --protocol authors"),
    (["--eager"], "option --eager: belongs to --protocol authors"),
    (["--scan-backend", "torch"], "option --scan-backend: belongs to --protocol authors"),
    (["--protocol", "authors", "--models", "bogus"], "option --models: unknown model 'bogus'"),
    (["--protocol", "authors", "--dataset", "electronics-gerec"],
     "option --dataset: dataset 'electronics-gerec' has no time"),
    (["--protocol", "authors", "--head-width", "wide"], "option --head-width: expected per-backbone or a positive"),
    (["--protocol", "authors", "--min-user-edges", "0"], "option --min-user-edges: must be >= 1, got 0"),
    (["--protocol", "authors", "--lr", "0"], "option --lr: must be a positive finite number, got 0.0"),
    (["--protocol", "authors", "--models", "sasrec", "--scan-backend", "torch"],
     "option --scan-backend: none of the models (sasrec) runs the delta scan"),
])
def test_options_the_protocol_does_not_take_are_refused_before_work(argv, message, store, monkeypatch, capsys):
    def work(*args, **kwargs):
        raise AssertionError("a refused command started work")

    monkeypatch.setattr(bench, "load_task", work)
    monkeypatch.setattr(bench, "run", work)
    monkeypatch.setattr("prism_rec.experiments.bench.bench", work)
    error = refusal(["bench", "--device", "cpu", *argv], capsys)
    assert error.startswith(f"prism-rec bench: {message}"), error
    assert mlflow.search_experiments(filter_string="name LIKE '%authors'") == []


def test_an_unknown_protocol_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--protocol", "sequential"])
    assert exit_info.value.code == 2
    assert "argument --protocol: invalid choice: 'sequential'" in capsys.readouterr().err


def test_the_shared_options_take_the_authors_defaults_when_left_out(monkeypatch):
    taken = {}
    monkeypatch.setattr("prism_rec.protocols.authors.bench.bench",
                        lambda dataset, models, seeds, base, device, **options: taken.update(base=base, **options))
    main(["bench", "--protocol", "authors", "--models", "null", "--device", "cpu"])
    assert taken["base"] == RunConfig(model="sasrec")  # 10 epochs, patience 5, Adam 1e-4, batch 256, heads per backbone
    assert (taken["scan_backend"], taken["graphs"], taken["min_user_edges"]) == ("auto", None, None)
    main(["bench", "--protocol", "authors", "--models", "null", "--device", "cpu", "--epochs", "3", "--lr", "0.01",
          "--head-width", "32", "--eager"])
    assert (taken["base"].epochs, taken["base"].lr, taken["base"].head_width, taken["graphs"]) == (3, 0.01, "32", False)


def test_a_bench_logs_its_runs_and_writes_the_table_from_the_store(frame, tmp_path, store, capsys):
    write_inter(frame, tmp_path / "raw")
    results = tmp_path / "results"
    argv = ["bench", "--protocol", "authors", "--models", "sasrec,null,pop", "--seeds", "2", "--raw-dir",
            str(tmp_path / "raw"), "--results-dir", str(results), *TINY]
    main(argv)
    out = capsys.readouterr().out
    experiment = mlflow.get_experiment_by_name("ml-100k-authors")
    assert experiment.tags[PROTOCOL_TAG] == "authors"
    children = mlflow.search_runs([experiment.experiment_id], filter_string="tags.prism_rec_role = 'child'")
    assert sorted(zip(children["tags.model"], children["tags.seed"])) == [
        ("null", "0"), ("null", "1"), ("pop", "0"), ("sasrec", "0"), ("sasrec", "1")]  # pop trains nothing: one seed
    task = build_task(frame, "ml-100k", "unix seconds", 5)
    config = RunConfig(model="sasrec", seed=1, epochs=2, batch_size=16, n_neighbours=3, channel=4, n_heads=1)
    direct = run(task, config, torch.device("cpu"), log=lambda line: None)
    logged = children[(children["tags.model"] == "sasrec") & (children["tags.seed"] == "1")].iloc[0]
    # the same run as `authors train` makes, its figures as metrics (hit@200 named hit_200) and its whole record
    assert logged["metrics.test_full_auc"] == pytest.approx(direct["test_full_auc"], abs=1e-12)
    assert logged["metrics.test_hit_200"] == pytest.approx(direct["test_hit@200"], abs=1e-12)
    assert logged["params.lr"] == "0.0001" and logged["params.scan_backend"] == "auto"
    record = mlflow.artifacts.load_dict(f"runs:/{logged['run_id']}/{bench.RECORD_ARTIFACT}")
    assert record["cases"] == direct["cases"]
    history = mlflow.MlflowClient().get_metric_history(logged["run_id"], "valid_roc_auc")
    assert [point.step for point in history] == [row["epoch"] for row in direct["curve"]]
    table = (results / "ml-100k-authors" / "auc.md").read_text()
    assert "| sasrec | 768 | 0.0001 | 2 |" in table and "| pop | — | — | 1 |" in table
    assert "sasrec - null" in table and f"Your table (every finished run of these settings in the store): " \
                                         f"{results / 'ml-100k-authors' / 'auc.md'}" in out
    parent = mlflow.search_runs([experiment.experiment_id], filter_string="tags.prism_rec_role = 'parent'").iloc[0]
    comparison = json.loads(mlflow.artifacts.load_text(f"runs:/{parent['run_id']}/comparison.json"))
    assert comparison["columns"][0] == "model" and len(comparison["data"]) == 3

    # a second bench of other settings: the table keeps the newest settings' runs only; tables rebuilds it
    main([*argv[:4], "null", "--seeds", "1", *argv[7:], "--lr", "0.001"])
    table = (results / "ml-100k-authors" / "auc.md").read_text()
    assert "| null | 4 | 0.001 | 1 |" in table and "sasrec" not in table
    (results / "ml-100k-authors" / "auc.md").unlink()
    main(["tables", "--results-dir", str(results)])
    assert (results / "ml-100k-authors" / "auc.md").read_text().split("Written")[0] == table.split("Written")[0]
    assert not (results / "ml-100k-authors" / "auc.csv").exists()  # the next-item writer left it alone


def test_comparison_columns_rank_by_the_mean_full_ranking_auc():
    def record(model, auc):
        return {"config": {"model": model}, "width": 4, "test_full_auc": auc, "test_auc": auc, "test_hit@200": 0.5}

    columns = bench.comparison_columns([record("a", 0.6), record("b", 0.7), record("a", 0.8)])
    assert columns["model"] == ["a", "b"] and columns["n_seeds"] == [2, 1]
    assert columns["test_full_auc_std"][0] == pytest.approx(np.std([0.6, 0.8], ddof=1))
    assert np.isnan(columns["test_full_auc_std"][1])


def test_the_authors_commands_module_names_the_bench_options():
    assert [action.dest for action in commands.add_bench_options(argparse.ArgumentParser())] == [
        "head_width", "n_neighbours", "channel", "feature_seed", "min_user_edges", "scan_backend", "eager"]


def test_the_authors_bench_refuses_torchrun(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    error = refusal(["bench", "--protocol", "authors", "--device", "cpu"], capsys)
    assert error.startswith("prism-rec bench: option --protocol authors: its runs train in one process each"), error
