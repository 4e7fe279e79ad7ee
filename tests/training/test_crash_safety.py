"""Issue 21 on a dataset of seconds: resuming after a hard kill, a stop at any point, options checked before
training, a safe first use of a store, and identical CPU reruns."""

import os
import random
import signal
import subprocess
import sys
import time

import mlflow
import pytest
import torch

from prism_rec.cli import main
from prism_rec.data.sources import load_dataset
from prism_rec.errors import OptionError
from prism_rec.experiments.bench import bench
from prism_rec.tracking.store import end_runs_of_dead_processes, experiment_id, process_tags
from prism_rec.training.checkpoint import INTERRUPT_AFTER_BATCHES_ENV
from prism_rec.training.config import TrainConfig
from prism_rec.training.trainer import _deterministic, fit

EPOCHS = 40
SHAPE = dict(d_model=16, max_len=8, batch_size=16, eval_batch_size=64)


@pytest.fixture
def raw(tmp_path):
    """60 users of 5-12 items among 40: an epoch takes milliseconds."""
    folder = tmp_path / "raw"
    folder.mkdir()
    draw = random.Random(0)
    lines = []
    for user in range(60):
        start = draw.randint(1, 30)
        lines.append(f"u{user} " + " ".join(f"i{(start + k * draw.randint(1, 3)) % 40}"
                                            for k in range(draw.randint(5, 12))))
    (folder / "data.txt").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def args(raw, store):
    return ["bench", "--dataset", "sequence-text", "--raw-dir", raw, "--epochs", EPOCHS, "--patience", EPOCHS,
            "--d-model", 16, "--max-len", 8, "--batch-size", 16, "--eval-batch-size", 64, "--device", "cpu",
            "--no-progress", "--results-dir", store / "results", "--checkpoint-dir", store / "checkpoints"]


def config(**changes):
    return TrainConfig(**{**SHAPE, "epochs": EPOCHS, "patience": EPOCHS, "progress": False, "device": "cpu", **changes})


def runs():
    return mlflow.search_runs(experiment_names=["sequence-text"])


def checkpoints(store):
    return sorted((store / "checkpoints").rglob("*.pt"))


def start_bench(args):
    """The bench in a child process (one torch thread, as run_cli); returns once its first checkpoint exists."""
    child = subprocess.Popen([sys.executable, "-m", "prism_rec.cli", *map(str, args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    folder = args[args.index("--checkpoint-dir") + 1]
    deadline = time.monotonic() + 120
    while not list(folder.rglob("*.pt")):
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.02)
    return child


def test_sigkill_then_resume_continues_the_same_runs(args, store, run_cli, raw, one_torch_thread):
    child = start_bench(args)
    child.kill()
    child.wait()
    assert set(runs()["status"]) == {"RUNNING"}  # what SIGKILL leaves behind

    refused = run_cli(*args, check=False)  # without --resume the checkpoint is neither trained over nor deleted
    assert refused.returncode == 2 and "option --resume" in refused.stderr and "Traceback" not in refused.stderr
    assert "marked KILLED" in refused.stdout and set(runs()["status"]) == {"KILLED"} and len(checkpoints(store)) == 1

    resumed = run_cli(*args, "--resume")
    assert "resuming from" in resumed.stdout
    after = runs()
    assert len(after) == 2 and set(after["status"]) == {"FINISHED"} and not checkpoints(store)
    uninterrupted = fit(load_dataset("sequence-text", raw_dir=raw), "sasrec", config())
    child_run = after[after["tags.prism_rec_role"] == "child"].iloc[0]
    assert child_run["metrics.test_auc"] == uninterrupted.test["auc"]
    history = mlflow.MlflowClient().get_metric_history(child_run["run_id"], "valid_auc")
    assert sorted((m.step, m.value) for m in history) == [(e, row["valid_auc"])
                                                           for e, row in enumerate(uninterrupted.history, start=1)]


def test_sighup_stops_with_a_checkpoint_and_killed_runs(args, store):
    child = start_bench(args)
    child.send_signal(signal.SIGHUP)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 130 and "--resume" in stderr
    assert set(runs()["status"]) == {"KILLED"} and len(checkpoints(store)) == 1


def test_stop_during_the_last_validation_is_honoured(raw, store, monkeypatch, one_torch_thread):
    from prism_rec.training import trainer

    evaluate = trainer.evaluate

    def stop_during_validation(model, dataset, cases, config, *rest, **options):
        if cases is dataset.valid_cases:
            os.kill(os.getpid(), signal.SIGINT)
        return evaluate(model, dataset, cases, config, *rest, **options)

    monkeypatch.setattr(trainer, "evaluate", stop_during_validation)
    with pytest.raises(KeyboardInterrupt):  # seed 1 never starts
        bench("sequence-text", ["sasrec"], [0, 1], config(epochs=1), {"raw_dir": raw}, store / "results",
              checkpoint_dir=store / "checkpoints")
    assert sorted(runs()["tags.mlflow.runName"].str.split("-").str[0]) == ["bench", "sasrec"]
    assert set(runs()["status"]) == {"KILLED"} and len(checkpoints(store)) == 1
    monkeypatch.setattr(trainer, "evaluate", evaluate)
    results = bench("sequence-text", ["sasrec"], [0, 1], config(epochs=1), {"raw_dir": raw}, store / "results",
                    resume=True, checkpoint_dir=store / "checkpoints")
    assert results[("sasrec", 0)].test == fit(load_dataset("sequence-text", raw_dir=raw), "sasrec",
                                                 config(epochs=1)).test


def test_truncated_checkpoint_is_one_message(args, store, monkeypatch, capsys, one_torch_thread):
    monkeypatch.setenv(INTERRUPT_AFTER_BATCHES_ENV, "3")
    with pytest.raises(SystemExit) as interrupted:
        main(list(map(str, args)))
    assert interrupted.value.code == 130
    monkeypatch.delenv(INTERRUPT_AFTER_BATCHES_ENV)
    [path] = checkpoints(store)
    path.write_bytes(path.read_bytes()[:1000])
    capsys.readouterr()
    with pytest.raises(SystemExit) as resumed:
        main([*map(str, args), "--resume"])
    assert str(resumed.value).startswith(f"prism-rec bench: checkpoint "
                                         f"{path}: content digest mismatch") and "\n" not in str(resumed.value)
    assert "Traceback" not in capsys.readouterr().err
    assert set(runs()["status"]) == {"KILLED"} and len(runs()) == 2  # no run was started


@pytest.mark.parametrize("options, models, named", [
    (["--option", "bogus=1"], "sasrec", "option --option bogus=1: backbone sasrec has no option 'bogus'"),
    (["--lr", "-1"], "sasrec", "option --lr: must be a finite number in [0, 10], got -1.0"),
    (["--n-heads", "3"], "sasrec,prism",
     "option --n-heads 3: backbone sasrec: d_model=64 is not divisible by n_heads=3"),
    (["--option", "L=-1"], "prism", "option --option L=-1: backbone prism: L must be >= 0, got -1"),
    (["--option", "nonlinearity=foo"], "prism",
     "option --option nonlinearity=foo: backbone prism: nonlinearity must be"),
    (["--seeds", "two"], "sasrec", "option --seeds: expected a count or a comma list of integers, got 'two'"),
    (["--min-item-interactions", "0"], "sasrec", "option --min-item-interactions: must be >= 1, got 0"),
])
def test_bad_options_stop_before_training_with_one_line(options, models, named, raw, store, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--dataset", "sequence-text", "--raw-dir", str(raw), "--models", models, *options])
    [line] = capsys.readouterr().err.splitlines()
    assert stopped.value.code == 2 and line.startswith(f"prism-rec bench: {named}")
    assert mlflow.get_experiment_by_name("sequence-text") is None  # nothing logged, nothing trained


def test_runs_of_dead_processes_are_marked_killed(store):
    experiment = experiment_id("sequence-text")
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = {**process_tags(), "prism_rec_pid": finished.stdout.strip(), "prism_rec_process_start": "1"}
    for name, tags in (("dead", dead), ("alive", process_tags())):
        mlflow.start_run(experiment_id=experiment, run_name=name, tags=tags)
        mlflow.end_run(status="RUNNING")  # leaves it RUNNING, as a killed process does
    assert end_runs_of_dead_processes(experiment) == ["dead"]
    assert dict(zip(runs()["tags.mlflow.runName"], runs()["status"])) == {"dead": "KILLED", "alive": "RUNNING"}


def test_concurrent_first_use_of_a_store(tmp_path):
    code = "from prism_rec.tracking.store import experiment_id; print(experiment_id('race'))"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'new.db'}"}
    children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env) for _ in range(2)]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err[-2000:] for _, err in outputs]
    assert len({out.strip() for out, _ in outputs}) == 1


def test_same_bench_twice_gives_identical_metrics(args, store):
    """Two benches on several threads give bit-identical metrics."""
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        for _ in range(2):
            main([*map(str, args), "--epochs", "3"])
    finally:
        torch.set_num_threads(threads)
    children = runs()[runs()["tags.prism_rec_role"] == "child"]
    metrics = children.filter(like="metrics.").drop(columns=["metrics.wall_seconds", "metrics.train_tokens_per_s",
                                                             "metrics.peak_memory_mb"])
    assert len(children) == 2 and metrics.iloc[0].equals(metrics.iloc[1])


def test_cpu_training_sums_gradients_in_a_fixed_order():
    """The backward of ``table[targets]`` adds rows from several threads; deterministic, it sorts first."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        table = torch.randn(1500, 64, requires_grad=True)
        rows = torch.randint(0, 1500, (8000,), generator=torch.Generator().manual_seed(0))
        weights = torch.randn(8000, 64, generator=torch.Generator().manual_seed(1))
        gradients = []
        with _deterministic(True):
            for _ in range(6):
                table.grad = None
                (table[rows] * weights).sum().backward()
                gradients.append(table.grad.clone())
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(gradient, gradients[0]) for gradient in gradients)
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the block


def test_unknown_dataset_is_an_option_error():
    from prism_rec.experiments.bench import check_bench_options

    with pytest.raises(OptionError, match="option --dataset: unknown dataset 'nope'"):
        check_bench_options("nope", ["sasrec"], TrainConfig(), {})


def test_a_run_that_a_live_process_trains_is_not_trained_twice(raw, store):
    from prism_rec.tracking.records import run_hash

    dataset = load_dataset("sequence-text", raw_dir=raw)
    tags = {**process_tags(), "prism_rec_role": "child",
            "config_hash": run_hash("sequence-text", dataset.options, "sasrec", config(seed=0))}
    mlflow.start_run(experiment_id=experiment_id("sequence-text"), run_name="sasrec-s0", tags=tags)
    mlflow.end_run(status="RUNNING")  # this test's own process: alive
    with pytest.raises(ValueError, match=f"sasrec seed 0 is being trained by process {os.getpid()}"):
        bench("sequence-text", ["sasrec"], [0], config(), {"raw_dir": raw}, store / "results",
              checkpoint_dir=store / "checkpoints")
    assert len(runs()) == 1
