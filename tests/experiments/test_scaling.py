"""The data-parallel scaling report: newest run per (model, process count), efficiency, AUC gap."""

from __future__ import annotations

import mlflow
import pytest

from prism_rec.experiments import scaling
from prism_rec.tracking.store import experiment_id


def log_child(model: str, world_size: int, tokens_per_s: float, auc: float, settings: str = "h1",
              commit: str = "abc1234") -> None:
    with mlflow.start_run(experiment_id=experiment_id("toy")):
        mlflow.set_tags({"prism_rec_role": "child", "model": model, "world_size": str(world_size),
                         "machine": "toy GPU", "command": "prism-rec bench --dataset toy", "git_commit": commit,
                         "config_hash": settings})
        mlflow.log_metrics({"train_tokens_per_s": tokens_per_s, "test_auc": auc, "epochs_run": 3,
                            "best_epoch": 2, "wall_seconds": 10.0})


def test_report_compares_each_process_count_with_one(store):
    log_child("prism", 1, 555.0, 0.7, commit="0ld0ld0")  # other code: never the repeat of the runs below
    log_child("prism", 1, 999.0, 0.79990)  # older single-process run: the repeat of the newer one below
    log_child("prism", 1, 1000.0, 0.80000)
    log_child("prism", 2, 1500.0, 0.80005)
    log_child("sasrec", 2, 3000.0, 0.7)
    log_child("prism", 1, 5000.0, 0.9, settings="other")  # other settings: not the base of the rows above
    table = scaling.scaling_table(scaling.newest_runs_by_world_size("toy"))
    assert len(table) == 5
    repeat = table[table["run"] == "repeat"].iloc[0]
    assert (repeat["model"], repeat["train tokens/s"],
            repeat["AUC gap to 1 process"]) == ("prism", 999.0, pytest.approx(1e-4))
    assert set(table["precision"]) == {"bf16"}  # no precision param: a run from before the option
    table = table[(table["train tokens/s"] != 5000.0) & (table["run"] == "newest")].set_index(["model", "processes"])
    assert table.loc[("prism", 2), "scaling efficiency"] == pytest.approx(0.75)
    assert table.loc[("prism", 2), "AUC gap to 1 process"] == pytest.approx(5e-5)
    assert table.loc[("prism", 1), "train tokens/s"] == 1000.0
    assert table.loc[("sasrec", 2), "scaling efficiency"] != table.loc[("sasrec", 2), "scaling efficiency"]  # no base
    text = scaling.write_report("toy", store / "scaling.md").read_text()
    assert "prism (bf16), 2 processes: |ΔAUC| = 5.00e-05 (within" in text
    assert "| sasrec | bf16 | abc1234 | 2 | newest | 3,000 | missing |" in text
    assert "prism (bf16), 1 process run again: |ΔAUC| = 1.00e-04" in text
    assert "sasrec (bf16), 2 processes: no 1-process run with the same settings" in text


def test_report_without_runs_names_the_dataset(store):
    with pytest.raises(ValueError, match="--dataset: no finished runs of 'nothing'"):
        scaling.newest_runs_by_world_size("nothing")
