"""Two benches over the same run: the one that claims it first trains it under its lock file, the other
skips it, says so, and leaves its checkpoint alone."""

import os
import signal
import subprocess
import sys
import time

import mlflow

from prism_rec.training.checkpoint import RunLock

TINY = ["--seeds", "1", "--device", "cpu", "--epochs", "2", "--d-model", "16", "--max-len", "8", "--batch-size", "256",
        "--eval-batch-size", "1024", "--no-progress"]


def bench(store, models, mlflow_db):
    """A bench subprocess over the shared checkpoint folder, logging to the sqlite store ``mlflow_db``."""
    return subprocess.Popen([sys.executable, "-m", "prism_rec.cli", "bench", "--models", models, *TINY,
                             "--checkpoint-dir", str(store / "checkpoints"), "--results-dir", str(store / "results")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"})


def wait_for(store, pattern, process, seconds=120):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        found = list((store / "checkpoints").rglob(pattern))
        if found:
            return found[0]
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.02)
    raise AssertionError(f"no {pattern} after {seconds} s")


def test_a_second_bench_skips_the_run_another_trains(store):
    """The benches share the checkpoint folder but not the MLflow store, so only the lock can tell them apart
    (the store's RUNNING runs say nothing across stores)."""
    other_store = store / "other.db"
    first = bench(store, "gru4rec", other_store)
    second = None
    try:
        lock = wait_for(store, "gru4rec-*.lock", first)
        first.send_signal(signal.SIGSTOP)  # holds gru4rec's lock while the second bench reaches it
        second = bench(store, "gru4rec", store / "mlflow.db")
        output = second.communicate(timeout=300)[0]
        assert second.returncode == 0, output
        assert f"gru4rec seed 0: skipped, being trained by process {first.pid} (lock {lock})" in output
        assert lock.exists() and not RunLock(lock.with_suffix("")).acquire()  # still the first bench's
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=300) == 0, first.stdout.read()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
    skipped = mlflow.search_runs(experiment_names=["ml-100k"])
    assert list(skipped["tags.prism_rec_role"]) == ["parent"]  # the second bench trained nothing
    mlflow.set_tracking_uri(f"sqlite:///{other_store}")
    runs = mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'child'")
    assert list(runs["tags.model"]) == ["gru4rec"] and list(runs["status"]) == ["FINISHED"]
    assert not list((store / "checkpoints").rglob("*.pt*"))  # the first removed its checkpoints and locks


def test_the_lock_goes_with_its_process(tmp_path):
    path = tmp_path / "run.pt"
    script = (f"import time; from prism_rec.training.checkpoint import RunLock; lock = RunLock({str(path)!r}); "
              "lock.acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        lock = RunLock(path)
        assert not lock.acquire() and lock.holder == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert lock.acquire() and lock.path.read_text() == str(os.getpid())  # the killed holder's lock is free
    lock.release()
    assert not lock.path.exists()
