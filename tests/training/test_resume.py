"""Interrupted runs: checkpoints are complete files, and resuming reproduces the uninterrupted run exactly."""

import os
import signal

import mlflow
import pytest

from prism_rec.data.sources import load_dataset
from prism_rec.training.checkpoint import INTERRUPT_AFTER_BATCHES_ENV, load
from prism_rec.training.config import TrainConfig
from prism_rec.training.trainer import fit

CONFIG = dict(epochs=2, d_model=16, max_len=8, batch_size=256, eval_batch_size=1024, progress=False, device="cpu")


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("ml-100k")


@pytest.fixture(scope="module")
def uninterrupted(dataset, one_torch_thread):
    return fit(dataset, "sasrec", TrainConfig(**CONFIG))


def leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".pt"))


def test_interrupt_mid_epoch_then_resume_is_exact(dataset, uninterrupted, tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    monkeypatch.setenv(INTERRUPT_AFTER_BATCHES_ENV, "30")  # epoch 1 has 49 batches
    with pytest.raises(KeyboardInterrupt, match="epoch 1, batch 30"):
        fit(dataset, "sasrec", TrainConfig(**CONFIG), checkpoint_path=path)
    monkeypatch.delenv(INTERRUPT_AFTER_BATCHES_ENV)
    saved = load(path)  # weights_only=True
    assert saved["progress"]["epoch"] == 0 and saved["progress"]["next_batch"] == 30
    assert leftovers(tmp_path) == []
    resumed = fit(dataset, "sasrec", TrainConfig(**CONFIG), checkpoint_path=path, resume=True)
    assert resumed.history == uninterrupted.history and resumed.test == uninterrupted.test


def test_sigterm_between_epochs_then_resume_is_exact(dataset, uninterrupted, tmp_path):
    path = tmp_path / "run.pt"

    def terminate_after_first_epoch(epoch, metrics):
        if epoch == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt, match="stopped after epoch 1"):
        fit(dataset, "sasrec", TrainConfig(**CONFIG), on_epoch=terminate_after_first_epoch, checkpoint_path=path)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # fit puts the handlers back
    assert load(path)["progress"]["epoch"] == 1 and leftovers(tmp_path) == []
    resumed = fit(dataset, "sasrec", TrainConfig(**CONFIG), checkpoint_path=path, resume=True)
    assert resumed.test == uninterrupted.test and resumed.history == uninterrupted.history


def test_resume_refuses_other_settings_and_foreign_files(dataset, tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    monkeypatch.setenv(INTERRUPT_AFTER_BATCHES_ENV, "1")
    with pytest.raises(KeyboardInterrupt):
        fit(dataset, "sasrec", TrainConfig(**CONFIG), checkpoint_path=path)
    with pytest.raises(ValueError, match="other settings \\(lr\\)"):
        fit(dataset, "sasrec", TrainConfig(**{**CONFIG, "lr": 0.01}), checkpoint_path=path, resume=True)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a prism-rec training checkpoint"):
        fit(dataset, "sasrec", TrainConfig(**CONFIG), checkpoint_path=path, resume=True)
    monkeypatch.setenv(INTERRUPT_AFTER_BATCHES_ENV, "soon")
    with pytest.raises(ValueError, match=INTERRUPT_AFTER_BATCHES_ENV):
        fit(dataset, "sasrec", TrainConfig(**CONFIG))


def test_bench_killed_then_resumed_in_the_same_mlflow_run(store, tiny, run_cli, uninterrupted):
    args = ["bench", "--models", "sasrec", "--seeds", "1", "--device", "cpu", "--results-dir", store / "results", *tiny]
    killed = run_cli(*args, check=False, env={INTERRUPT_AFTER_BATCHES_ENV: "60"})  # epoch 2, batch 11
    assert killed.returncode != 0 and "--resume" in killed.stderr
    runs = mlflow.search_runs(experiment_names=["ml-100k"])
    assert set(runs["status"]) == {"KILLED"} and len(runs) == 2
    checkpoints = store / "checkpoints"
    child_hash = runs.loc[runs["tags.prism_rec_role"] == "child", "tags.config_hash"].iloc[0]
    assert [p.name for p in checkpoints.rglob("*.pt")] == [f"sasrec-s0-{child_hash}.pt"]
    assert leftovers(checkpoints) == []

    resumed = run_cli(*args, "--resume")
    assert "resuming from" in resumed.stdout
    after = mlflow.search_runs(experiment_names=["ml-100k"])
    assert sorted(after["run_id"]) == sorted(runs["run_id"]) and set(after["status"]) == {"FINISHED"}
    child = after[after["tags.prism_rec_role"] == "child"].iloc[0]
    assert child["metrics.test_auc"] == uninterrupted.test["auc"]
    history = mlflow.MlflowClient().get_metric_history(child["run_id"], "valid_auc")
    assert [(m.step, m.value) for m in history] == [(e, row["valid_auc"])  # step = epoch, 1-based
                                                    for e, row in enumerate(uninterrupted.history, start=1)]
    assert not list(checkpoints.rglob("*.pt"))  # a finished run removes its checkpoint
