"""What kills leave behind: temporary files removed on the next start, a run killed before its first checkpoint
trained again in its own MLflow run (no KILLED twin beside the finished one), final metrics logged once."""

import os
import signal
import subprocess
import sys
import time

import mlflow
import pytest

from prism_rec.cli import main
from prism_rec.experiments import bench

TINY = ["bench", "--models", "sasrec", "--seeds", "1", "--device", "cpu", "--epochs", "1", "--d-model", "16",
        "--max-len", "8", "--batch-size", "256", "--eval-batch-size", "1024", "--no-progress"]


def args(store):
    return [*TINY, "--checkpoint-dir", str(store / "checkpoints"), "--results-dir", str(store / "results")]


def children():
    return mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'child'")


def test_temporary_files_of_killed_writes_are_removed_on_the_next_start(store, capsys, one_torch_thread):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    folder = store / "checkpoints" / "ml-100k"
    folder.mkdir(parents=True)
    dead = folder / f".sasrec-s0-0123.pt.{ended.stdout.strip()}.tmp"
    alive = folder / f".gru4rec-s0-0123.pt.{os.getpid()}.tmp"  # a write in progress: left alone
    dead.write_bytes(b"half a checkpoint")
    alive.write_bytes(b"half a checkpoint")
    main(args(store))
    assert f"removed {dead}, left by a checkpoint write that was killed" in capsys.readouterr().out
    assert not dead.exists() and alive.exists()


def test_a_run_killed_before_its_first_checkpoint_is_trained_again_in_its_own_run(store, one_torch_thread):
    killed = subprocess.Popen([sys.executable, "-m", "prism_rec.cli", *args(store)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        end = time.monotonic() + 120
        while not list((store / "checkpoints").rglob("*.lock")) or children().empty:  # its run began
            assert killed.poll() is None and time.monotonic() < end
            time.sleep(0.01)
        killed.send_signal(signal.SIGKILL)  # in its first epoch: no checkpoint yet, its lock file stays
    finally:
        killed.kill()
        killed.wait()
    assert not list((store / "checkpoints").rglob("*.pt")), "killed after its first checkpoint: rerun the test"
    [before] = children()["run_id"]
    main([*args(store), "--resume"])
    after = children()
    assert list(after["run_id"]) == [before] and list(after["status"]) == ["FINISHED"]
    assert not list((store / "checkpoints").rglob("*.pt*"))  # the dead process's lock file went with the run


def test_final_metrics_are_logged_once_when_a_run_is_stopped_after_logging_them(store, monkeypatch, one_torch_thread):
    logged = bench.runs.log_result

    def then_stopped(result, title, curve=True):  # a SIGTERM arriving just after the final metrics, before the run ends
        logged(result, title, curve)
        raise KeyboardInterrupt("stopped after the final metrics")

    monkeypatch.setattr(bench.runs, "log_result", then_stopped)
    with pytest.raises(SystemExit):
        main(args(store))
    assert list(children()["status"]) == ["KILLED"]
    monkeypatch.setattr(bench.runs, "log_result", logged)
    main([*args(store), "--resume"])
    [run_id] = children()["run_id"]
    assert list(children()["status"]) == ["FINISHED"]
    for name in ("test_auc", "best_epoch", "wall_seconds"):
        assert len(mlflow.MlflowClient().get_metric_history(run_id, name)) == 1, name


def test_a_killed_twin_already_in_the_store_is_tagged_superseded_on_the_next_bench(store, one_torch_thread):
    main(args(store))
    [(finished, config_hash)] = children()[["run_id", "tags.config_hash"]].itertuples(index=False)
    client = mlflow.MlflowClient()
    experiment = mlflow.get_experiment_by_name("ml-100k").experiment_id
    twin = client.create_run(experiment, run_name="older twin",  # what an older version left beside it
                             tags={"prism_rec_role": "child", "config_hash": config_hash}).info.run_id
    client.set_terminated(twin, status="KILLED")
    main(args(store))  # the run is finished: nothing trains, the twin is tagged
    tags = client.get_run(twin).data.tags
    assert tags["superseded_by"] == finished
    assert "superseded_by" not in client.get_run(finished).data.tags
