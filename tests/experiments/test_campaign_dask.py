"""The dask executor on a real cluster on loopback: a scheduler and two worker processes on 127.0.0.1
started here (and always stopped by their process ids), a tiny CPU grid (a synthetic yelp-iclrec of 60
users, read through PRISM_REC_SHARED_DATA) whose manifest equals the local pool's run for run, a worker
killed mid-run whose run finishes on the other one with the metrics of an uninterrupted run, and the
refusals that come before any work; the probes through the same cluster."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from prism_rec.cli import main
from prism_rec.data.shared import SHARED_DATA_ENV
from prism_rec.experiments import cluster
from prism_rec.experiments.headline import driver, protocol
from prism_rec.files import read_jsonl

distributed = pytest.importorskip("distributed")

DATASET = "yelp-iclrec"
TINY = {"epochs": 2, "d_model": 16, "max_len": 8, "batch_size": 256, "eval_batch_size": 1024}
GRID = (1e-3, 3e-3)
START_SECONDS = 60.0
ARM_ENV = "PRISM_REC_TEST_ARM"  # the file whose presence arms the hook below
# preloaded by each worker: once armed, the first worker to write a training checkpoint exits at once
DIE_AFTER_FIRST_CHECKPOINT = f"""
import os
from prism_rec.training import trainer

save = getattr(trainer.Training.save_checkpoint, "saves", trainer.Training.save_checkpoint)  # imported twice


def save_then_die_once(self):
    save(self)
    arm = os.environ["{ARM_ENV}"]
    if os.path.exists(arm):
        try:
            os.close(os.open(arm + ".fired", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os._exit(1)


save_then_die_once.saves = save
trainer.Training.save_checkpoint = save_then_die_once
"""
RUN_KEYS = ("dataset", "model", "seed", "lr", "config_hash")
COST_KEYS = {"record_id", "finished_at", "wall_seconds", "train_tokens_per_s", "peak_memory_mb", "machine",
             "command", "jobs_per_device", "git_commit"}


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the worker and nothing else
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    """A shared-data folder whose yelp/Yelp.txt holds 60 users of 8 to 12 of 30 items, set as
    PRISM_REC_SHARED_DATA here (the local pool's processes inherit it) for the module's tests."""
    root = tmp_path_factory.mktemp("shared")
    rng = np.random.default_rng(0)
    (root / "yelp").mkdir()
    (root / "yelp" / "Yelp.txt").write_text("".join(
        f"{user} {' '.join(map(str, rng.integers(1, 31, size=rng.integers(8, 13))))}\n" for user in range(1, 61)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SHARED_DATA_ENV, str(root))
        yield root


@pytest.fixture(scope="module")
def loopback(tmp_path_factory, tiny_data):
    """A scheduler and two single-threaded worker processes (no nanny: a killed worker stays dead) on
    127.0.0.1; yields (client, the workers' processes, the arming file)."""
    folder = tmp_path_factory.mktemp("dask")
    scheduler_file, arm = folder / "scheduler.json", folder / "arm"
    environment = {**os.environ, ARM_ENV: str(arm)}
    common = ["--no-dashboard", "--host", "127.0.0.1"]
    processes = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0",
                                   "--scheduler-file", str(scheduler_file), *common], start_new_session=True,
                                  env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    client, started = None, time.time()
    try:
        while not scheduler_file.exists():
            assert time.time() - started < START_SECONDS and processes[0].poll() is None, "no scheduler started"
            time.sleep(0.1)
        workers = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                     str(scheduler_file), "--nthreads", "1", "--no-nanny", "--preload",
                                     DIE_AFTER_FIRST_CHECKPOINT, *common], start_new_session=True, env=environment,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
        processes += workers
        client = distributed.Client(scheduler_file=str(scheduler_file), timeout=START_SECONDS, set_as_default=False)
        client.wait_for_workers(2, timeout=START_SECONDS)
        yield client, workers, arm
    finally:
        if client is not None:
            client.close()
        _stop(processes)


def dask_executor(client) -> cluster.DaskExecutor:
    """An executor over ``client``'s cluster that leaves the client open (the module's tests share it)."""
    executor = cluster.DaskExecutor(client, None, "cpu")
    executor.close = lambda: None
    return executor


def by_run(manifest: list[dict]) -> dict[tuple, dict]:
    """Each run's manifest line without what measures cost or names the call: {(dataset, model, seed, lr,
    hash): its settings and metrics}."""
    return {tuple(entry[key] for key in RUN_KEYS): {k: v for k, v in entry.items() if k not in COST_KEYS}
            for entry in manifest}


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory, tiny_data):
    """The tiny grid (sasrec: two rates on seed 0, then seed 1 at the chosen one) through the local pool of
    two processes."""
    out = tmp_path_factory.mktemp("local")
    counts = driver.run_headline([DATASET], ["sasrec"], [0, 1], out, 2, None, device="cpu", overrides=TINY,
                                 command="test", grid=GRID)
    assert counts["finished"] == 3
    return read_jsonl(out / protocol.MANIFEST_NAME)


def test_a_dask_cluster_trains_the_grid_as_the_local_pool_does(tmp_path, loopback, local_grid):
    client, _, _ = loopback
    counts = driver.run_headline([DATASET], ["sasrec"], [0, 1], tmp_path, 1, None, overrides=TINY,
                                 command="test", grid=GRID, executor=dask_executor(client),
                                 checkpoints=tmp_path / "checkpoints")
    assert counts["finished"] == 3 and counts["failed"] == 0
    manifest = read_jsonl(tmp_path / protocol.MANIFEST_NAME)
    assert by_run(manifest) == by_run(local_grid)  # the follow-up seed included: the rate was chosen alike
    assert {entry["seed"] for entry in manifest} == {0, 1}
    assert not list((tmp_path / "checkpoints").rglob("*.pt"))  # removed once each run ended


def test_an_unreachable_scheduler_is_refused_in_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 1.0)
    started = time.time()
    with pytest.raises(SystemExit) as exit_:
        main(["headline", "run", "--out", str(tmp_path / "out"), "--models", "sasrec", "--executor", "dask",
              "--scheduler", address])
    error = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(error.splitlines()) == 1
    assert f"option --scheduler: no Dask scheduler answers at {address}" in error
    assert time.time() - started < 30 and not (tmp_path / "out").exists()


def test_dask_options_are_checked_before_any_work(tmp_path, monkeypatch, capsys):
    def refused(*options: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            main(["headline", "run", "--out", str(tmp_path / "out"), "--models", "sasrec", *options])
        assert exit_.value.code == 2
        return capsys.readouterr().err.strip()

    assert "option --scheduler: only with --executor dask" in refused("--scheduler", "tcp://127.0.0.1:8786")
    assert "give --scheduler tcp://HOST:PORT or --cluster slurm" in refused("--executor", "dask")
    assert "'127.0.0.1' is not an address like tcp://HOST:PORT" in refused("--executor", "dask", "--scheduler",
                                                                            "127.0.0.1")
    assert "option --workers" in refused("--executor", "dask", "--scheduler", "tcp://127.0.0.1:1", "--workers", "4")
    monkeypatch.setitem(sys.modules, "distributed", None)  # as where the extra is not installed
    assert refused("--executor", "dask", "--scheduler", "tcp://127.0.0.1:1").endswith(
        "Dask is not installed here; pip install -e '.[cluster]'")
    assert not (tmp_path / "out").exists()


def test_slurm_jobs_take_one_gpu_each_with_k_single_threaded_workers_sharing_it():
    pytest.importorskip("dask_jobqueue")
    from dask_jobqueue.slurm import SLURMJob

    options = {"memory": "16GB", "queue": "gpu", "job_extra_directives": ["--account=lab"]}
    settings = cluster.slurm_settings(4, options)
    assert options["job_extra_directives"] == ["--account=lab"]  # extended, not changed
    script = SLURMJob(scheduler="tcp://127.0.0.1:8786", name="test", **settings).job_script()
    for line in ("#SBATCH --gres=gpu:1", "#SBATCH --account=lab", "#SBATCH -p gpu", "--nworkers 4", "--nthreads 1",
                 "--resources GPU=0.25"):
        assert line in script, line


def test_probes_train_on_the_cluster_as_in_the_local_pool(tmp_path, loopback):
    from prism_rec.experiments.probes.grid import product_runs
    from prism_rec.experiments.probes.manifest import load_manifest
    from prism_rec.experiments.probes.runner import run_probes

    client, _, _ = loopback
    runs = product_runs(["local_xor"], ["sasrec"], [0, 1], "paper",
                        {"steps": 20, "seq_len": 12, "batch_size": 4, "eval_size": 32, "d_model": 8})
    local = run_probes(runs, tmp_path / "local", device="cpu", workers=2, log_mlflow=False)
    dask = run_probes(runs, tmp_path / "dask", log_mlflow=False, executor=dask_executor(client))
    assert local["counts"]["finished"] == dask["counts"]["finished"] == 2

    def results(folder) -> dict:
        return {(e["seed"], e["task"]): (e["accuracy"], e["final_train_loss"], e["loss_curve"])
                for e in load_manifest(folder)}

    assert results(tmp_path / "dask") == results(tmp_path / "local")


def test_a_killed_workers_run_finishes_on_the_other_with_the_metrics_of_an_uninterrupted_run(
        tmp_path, loopback, local_grid):
    """The first worker to checkpoint the run (after epoch 1 of 2) dies; the scheduler runs it again on the
    other, which resumes from that checkpoint (on storage both read)."""
    client, workers, arm = loopback
    arm.touch()
    counts = driver.run_headline([DATASET], ["sasrec"], [0], tmp_path, 1, None, overrides=TINY, command="test",
                                 grid=(1e-3,), executor=dask_executor(client), checkpoints=tmp_path / "checkpoints")
    assert counts["finished"] == 1 and counts["failed"] == 0
    assert sorted(worker.poll() is None for worker in workers) == [False, True]  # one died, the other ran on
    assert len(client.scheduler_info(n_workers=-1)["workers"]) == 1
    (entry,) = read_jsonl(tmp_path / protocol.MANIFEST_NAME)
    uninterrupted = {key: value for key, value in by_run(local_grid).items() if key[2] == 0 and key[3] == 1e-3}
    assert by_run([entry]) == uninterrupted and entry["epochs_run"] == 2
    assert (arm.parent / "arm.fired").exists()  # the hook did kill a worker after its first checkpoint


def test_the_authors_grid_trains_on_the_cluster_as_in_this_process(tmp_path, loopback):
    """issue 39's grid through the same campaign runner: the cluster's manifest equals the in-process one,
    run for run (settings, figures and the design each row records)."""
    from prism_rec.experiments.tuning import TuningGrid
    from prism_rec.protocols.authors.design import Design
    from prism_rec.protocols.authors.grid import MANIFEST, run_grid
    from prism_rec.protocols.authors.train import RunConfig
    from tests.protocols.conftest import edge_frame
    from tests.protocols.test_train import TINY as AUTHORS_TINY
    from tests.protocols.test_train import write_inter

    client, _, _ = loopback
    write_inter(edge_frame(), tmp_path / "raw")
    design = Design(("ml-100k",), ("sasrec", "pop"), (0, 1), RunConfig(model="null", **AUTHORS_TINY),
                    TuningGrid((1e-3, 1e-2)), None)
    manifests = {}
    for name, executor in (("here", None), ("cluster", dask_executor(client))):
        counts = run_grid(tmp_path / name, design, None, "cpu", 5, str(tmp_path / "raw"), executor=executor,
                          log=lambda line: None)
        assert counts == {"finished": 4, "dropped": 0, "failed": 0, "pending": 0}  # 2 rates, seed 1, pop
        manifests[name] = {row["key"]: {k: v for k, v in row.items() if k not in ("wall_seconds", "device")}
                           for row in read_jsonl(tmp_path / name / MANIFEST)}
    assert manifests["cluster"] == manifests["here"]
