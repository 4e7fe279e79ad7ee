"""Data-parallel training under torchrun (gloo, 2 CPU processes) matches one process with the same global batch.

Tolerance: with dropout 0 the two runs see the same global batches and the same gradients up to float
summation order, so test AUC must agree within 1e-4 and the per-epoch train loss within a relative 1e-5
(measured: 1e-16 and 6e-9). With dropout > 0 the ranks draw other dropout masks than one process does,
and the runs then differ like two seeds.
"""

import os
import subprocess
import sys

import mlflow
import pytest

from prism_rec.data.sources import load_dataset
from prism_rec.training.config import TrainConfig
from prism_rec.training.trainer import fit

AUC_TOLERANCE = 1e-4
LOSS_RELATIVE_TOLERANCE = 1e-5


def test_two_gloo_processes_match_one_process(store, tiny, one_torch_thread):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    command = [*torchrun, "-m", "prism_rec.cli", "bench", "--models", "sasrec", "--seeds", "1", "--device", "cpu",
               "--dropout", "0", "--results-dir", str(store / "results"), *tiny]
    launched = subprocess.run(command, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert "2 data-parallel processes" in launched.stdout

    runs = mlflow.search_runs(experiment_names=["ml-100k"])
    assert sorted(runs["tags.prism_rec_role"]) == ["child", "parent"]  # rank 1 logged nothing
    child = runs[runs["tags.prism_rec_role"] == "child"].iloc[0]
    assert child["tags.world_size"] == "2"
    written = sorted(p.name for p in (store / "results" / "ml-100k").iterdir())
    assert written == ["auc.csv", "auc.md", "auc.png", "auc.svg"]

    single = fit(load_dataset("ml-100k"), "sasrec",
                 TrainConfig(epochs=2, d_model=16, max_len=8, batch_size=256, eval_batch_size=1024, dropout=0.0,
                             progress=False, device="cpu"))
    assert child["metrics.test_auc"] == pytest.approx(single.test["auc"], abs=AUC_TOLERANCE)
    losses = mlflow.MlflowClient().get_metric_history(child["run_id"], "train_loss")
    assert [m.value for m in losses] == pytest.approx([row["train_loss"] for row in single.history],
                                                      rel=LOSS_RELATIVE_TOLERANCE)


@pytest.mark.parametrize("finished, calls", [(True, ["barrier", "destroy"]), (False, ["destroy"])])
def test_a_finished_rank_waits_for_the_others_before_leaving_the_group(monkeypatch, finished, calls):
    """A rank done early (rank 1 logs nothing) waits at a barrier before tearing down its connections, while
    rank 0 writes the results; after an error no rank waits (torchrun ends the others)."""
    from prism_rec.training import distributed

    seen = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: seen.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: seen.append("destroy"))
    distributed.stop(distributed.World(rank=1, size=2, local_rank=1), finished)
    assert seen == calls
    seen.clear()
    distributed.stop(distributed.World(rank=0, size=1, local_rank=0), finished)  # one process: no group
    assert seen == []
