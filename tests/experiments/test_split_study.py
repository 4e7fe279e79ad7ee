"""The split study (issue 18): time-split runs at the leave-one-out rates, resumed through its manifest,
and its table beside the headline runs."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from prism_rec.experiments import split_study
from prism_rec.experiments.headline.protocol import CASE_RANKS_NAME, MANIFEST_NAME, PROTOCOL
from prism_rec.files import read_jsonl
from prism_rec.tracking.case_ranks import encode
from prism_rec.tracking.records import append_jsonl, make_record
from prism_rec.training.metrics import METRIC_NAMES
from prism_rec.training.trainer import FitResult

MODELS = ("sasrec", "prism")
RATES = {"sasrec": 3e-3, "prism": 1e-3}


def time_split_dataset(name, split):
    options = {"min_user_interactions": 5, "min_item_interactions": 5, "split": split, "dedup": "none"}
    return SimpleNamespace(name=name, options=options, stats=lambda: {"users": 3, "items": 21})


def fake_result(auc: float) -> FitResult:
    metrics = {name: auc if name == "auc" else 0.1 for name in METRIC_NAMES}
    cases = {"users": np.array([0, 0, 1, 2, 2]), "twice_rank": np.array([0, 4, 10, 40, 2]), "n_items": 21}
    return FitResult(model=None, history=[{"train_loss": 3.0}], test=metrics, valid=metrics, best_epoch=1,
                     epochs_run=1, train_tokens_per_s=1.0, peak_memory_mb=1.0, wall_seconds=1.0, n_parameters=1,
                     test_case_ranks=cases, diverged_epoch=0)


@pytest.fixture
def study(tmp_path, monkeypatch):
    """The study over ml-100k with two models, a headline manifest holding their chosen rates, and an
    instant fake training that records the jobs it gets."""
    results = tmp_path / "results"
    for model in MODELS:
        for lr in (3e-4, 1e-3, 3e-3):
            append_jsonl(results / MANIFEST_NAME, {"dataset": "ml-100k", "model": model, "seed": 0, "lr": lr,
                                                   "protocol": PROTOCOL,
                                                   "best_valid_auc": 0.9 if lr == RATES[model] else 0.8,
                                                   "record_id": f"{model}{lr}", "test_auc": 0.8})
            append_jsonl(results / CASE_RANKS_NAME, {"record_id": f"{model}{lr}", "case_ranks": encode(
                np.arange(4), np.array([2, 4, 6, 8 if model == "prism" else 30]), 21)})
    monkeypatch.setattr(split_study, "RESULTS_DIR", results)
    monkeypatch.setattr(split_study, "DATASETS", ("ml-100k",))
    monkeypatch.setattr(split_study, "MODELS", MODELS)
    monkeypatch.setattr(split_study, "load_dataset", lambda name, split: time_split_dataset(name, split))
    jobs = []

    def train(job):
        jobs.append(job)
        dataset = time_split_dataset(job.dataset, job.split)
        record = make_record(dataset, job.model, job.config, fake_result(0.7 + 0.1 * (job.model == "prism")),
                             {"git_commit": "abc", "device": "cpu", "machine": "CPU",
                              "command": job.command}, time.time())
        return {"status": "finished", "record": record}

    monkeypatch.setattr(split_study, "train_cell", train)
    return SimpleNamespace(results=results, jobs=jobs)


def test_time_split_runs_take_the_leave_one_out_rate_and_resume(tmp_path, study):
    counts = split_study.run_study(tmp_path / "out", 1, None, "cpu", "prism-rec split-study run")
    assert counts["finished"] == 6
    assert ({(job.model, job.config.lr, job.split) for job in study.jobs}
            == {("sasrec", 3e-3, "time"), ("prism", 1e-3, "time")})
    assert sorted(job.config.seed for job in study.jobs) == [0, 0, 1, 1, 2, 2]
    manifest = read_jsonl(tmp_path / "out" / split_study.STUDY_MANIFEST)
    assert {e["split"] for e in manifest} == {"time"} and len(manifest) == 6
    study.jobs.clear()
    assert split_study.run_study(tmp_path / "out", 1, None, "cpu", "again")["already in manifest"] == 6
    assert not study.jobs


def test_a_cell_without_a_chosen_rate_is_refused_before_training(tmp_path, study, monkeypatch):
    monkeypatch.setattr(split_study, "MODELS", (*MODELS, "hstu"))
    with pytest.raises(ValueError, match="no chosen leave-one-out rate for ml-100k/hstu"):
        split_study.run_study(tmp_path / "out", 1, None, "cpu", "x")
    assert not study.jobs


def test_the_table_sets_both_splits_side_by_side(tmp_path, study):
    split_study.run_study(study.results, 1, None, "cpu", "prism-rec split-study run --out X")
    text = split_study.write_table(study.results).read_text()
    assert "| sasrec | 0.8000 (1 seed) |" in text and "0.7000 ± 0.0000 (3) |" in text
    assert "| prism − sasrec |" in text and "prism-rec split-study run --out X" in text
    users, auc, cases = split_study.per_user_auc(encode(np.array([2, 0, 2]), np.array([0, 20, 10]), 11))
    assert users.tolist() == [0, 2] and auc.tolist() == [0.0, 0.75] and cases.tolist() == [1, 2]
