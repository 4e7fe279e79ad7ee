"""The headline driver: run records into MLflow and tables, manifest resume, the wall-clock budget."""

from __future__ import annotations

import atexit
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from prism_rec.cli import main
from prism_rec.errors import OptionError
from prism_rec.experiments.campaign import Status, merge_manifests
from prism_rec.experiments.headline import driver, protocol
from prism_rec.experiments.jobs import WorkerDevices, gpu_sharing, run_jobs
from prism_rec.files import read_jsonl
from prism_rec.tracking.records import make_record, read_records
from prism_rec.tracking.runs import import_records
from prism_rec.training.candidates import candidates_description
from prism_rec.training.devices import check_devices
from prism_rec.training.metrics import METRIC_NAMES
from prism_rec.training.trainer import FitResult

DATA_OPTIONS = {"min_user_interactions": 5, "min_item_interactions": 5, "split": "loo", "dedup": "none",
                "skipped_lines": 0}


def fake_dataset(name: str = "ml-100k") -> SimpleNamespace:
    return SimpleNamespace(name=name, options=dict(DATA_OPTIONS),
                           stats=lambda: {"users": 10, "items": 20, "interactions": 100, "mean_length": 10.0})


def fake_result(auc: float) -> FitResult:
    metrics = {name: auc if name == "auc" else 0.1 for name in METRIC_NAMES}
    history = [{"train_loss": 3.0, **{f"valid_{k}": v for k, v in metrics.items()}}] * 2
    cases = {"users": np.arange(3), "twice_rank": np.array([0, 3, 40]), "n_items": 21}
    return FitResult(model=None, history=history, test=metrics, valid=metrics, best_epoch=1, epochs_run=2,
                     train_tokens_per_s=1000.0, peak_memory_mb=10.0, wall_seconds=1.5, n_parameters=1234,
                     test_case_ranks=cases, diverged_epoch=0)


def fake_record(model: str, seed: int, auc: float) -> dict:
    config = protocol.training_config("ml-100k", model, seed, "cpu", {}, 1e-3)
    tags = {"git_commit": "abc", "device": "cuda", "machine": "NVIDIA H200", "torch_version": "2.11",
            "triton_version": "3.6", "command": "prism-rec headline run --out X"}
    return make_record(fake_dataset(), model, config, fake_result(auc), tags, time.time() - 5)


def test_records_round_trip_into_mlflow_and_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    from prism_rec.tracking.records import append_jsonl
    from prism_rec.tracking.tables import finished_child_runs, write_tables

    records = [fake_record("sasrec", 0, 0.8), fake_record("sasrec", 1, 0.9), fake_record("prism", 0, 0.7)]
    for record in records:
        append_jsonl(tmp_path / "runs" / driver.RECORDS_NAME, record)
    assert read_records(tmp_path / "runs") == records
    assert import_records(tmp_path / "runs", "import") == {"imported": 3, "already there": 0}
    assert import_records(tmp_path / "runs", "import") == {"imported": 0, "already there": 3}
    runs, other_protocols = finished_child_runs("ml-100k")
    assert other_protocols == 0
    assert sorted(runs["tags.mlflow.runName"]) == ["prism-s0", "sasrec-s0", "sasrec-s1"]
    sasrec = runs[runs["tags.mlflow.runName"] == "sasrec-s1"].iloc[0]
    assert sasrec["metrics.test_auc"] == 0.9 and sasrec["params.batch_size"] == "256"
    assert sasrec["tags.prism_rec_role"] == "child" and sasrec["tags.machine"] == "NVIDIA H200"
    markdown, csv, _ = write_tables("ml-100k", tmp_path / "results")
    assert "| sasrec | **0.8500 ± 0.0707**" in markdown.read_text()
    assert "prism-rec headline run --out X" in markdown.read_text()


@pytest.fixture
def fake_training(monkeypatch):
    """run_headline over fake datasets and an instant fake training that records its calls."""
    calls = []

    def train(job):
        calls.append(job.label)
        auc = VALID_AUC.get((job.model, job.config.lr), 0.5)
        tags = {"git_commit": "abc", "device": "cpu", "machine": "CPU", "command": job.command}
        return {"status": "finished", "gpu_sharing": "none",
                "record": make_record(fake_dataset(job.dataset), job.model, job.config, fake_result(auc), tags,
                                      time.time())}

    monkeypatch.setattr(driver, "load_dataset", fake_dataset)
    monkeypatch.setattr(driver, "train_cell", train)
    return calls


VALID_AUC = {("sasrec", 3e-3): 0.7, ("sasrec", 1e-3): 0.6, ("prism", 1e-3): 0.8, ("prism", 3e-3): 0.6}
GRID = (1e-3, 3e-3)


def test_rates_are_tuned_on_seed_0_then_the_seeds_and_presets_follow(tmp_path, fake_training):
    models = ["pop", "sasrec", "prism", "prism-L1"]
    counts = driver.run_headline(["ml-100k"], models, [0, 1], tmp_path, 1, None, grid=GRID)
    assert counts["finished"] == 9
    assert set(fake_training[:5]) == {"ml-100k/pop/lr0/s0", "ml-100k/sasrec/lr0.001/s0", "ml-100k/sasrec/lr0.003/s0",
                                      "ml-100k/prism/lr0.001/s0", "ml-100k/prism/lr0.003/s0"}  # tuning first
    assert sorted(fake_training[5:]) == ["ml-100k/prism-L1/lr0.001/s0", "ml-100k/prism-L1/lr0.001/s1",
                                         "ml-100k/prism/lr0.001/s1", "ml-100k/sasrec/lr0.003/s1"]
    manifest = read_jsonl(tmp_path / protocol.MANIFEST_NAME)
    assert len(manifest) == 9 and {e["protocol"] for e in manifest} == {"headline-v2"}
    assert ({(e["gpu_sharing"], e["jobs_per_device"], e["epochs"], e["patience"]) for e in manifest}
            == {("none", 1.0, 200, 10)})
    case_ranks = read_jsonl(tmp_path / protocol.CASE_RANKS_NAME)
    assert {e["record_id"] for e in case_ranks} == {e["record_id"] for e in manifest}
    fake_training.clear()
    counts = driver.run_headline(["ml-100k"], models, [0, 1, 2], tmp_path, 1, None, grid=GRID)
    assert counts["already in manifest"] == 9 and counts["finished"] == 3
    assert sorted(fake_training) == ["ml-100k/prism-L1/lr0.001/s2", "ml-100k/prism/lr0.001/s2",
                                     "ml-100k/sasrec/lr0.003/s2"]


def test_speculation_starts_seeds_at_the_leading_rate_and_passes_over_a_lost_guess(tmp_path, fake_training):
    """With one worker: sasrec's s1 is guessed at 1e-3 (its first rate), then 3e-3 wins and the guess is
    passed over; prism's guess (1e-3) holds and its s1 does not train twice."""
    counts = driver.run_headline(["ml-100k"], ["sasrec", "prism"], [0, 1], tmp_path, 1, None, grid=GRID,
                                 speculate=True)
    assert sorted(fake_training[:4]) == ["ml-100k/prism/lr0.001/s0", "ml-100k/prism/lr0.003/s0",
                                         "ml-100k/sasrec/lr0.001/s0", "ml-100k/sasrec/lr0.003/s0"]
    assert sorted(fake_training[4:]) == ["ml-100k/prism/lr0.001/s1", "ml-100k/sasrec/lr0.003/s1"]
    assert counts["finished"] == 6 and counts["passed over (guessed rate lost)"] == 1 and counts["not started"] == 0
    manifest = read_jsonl(tmp_path / protocol.MANIFEST_NAME)
    first_sasrec = [e for e in manifest if e["model"] == "sasrec"][:1]
    assert driver.tuning.leading_rates(first_sasrec, GRID) == {("ml-100k", "sasrec"): first_sasrec[0]["lr"]}
    assert driver.tuning.leading_rates(manifest, GRID) == {}  # every grid complete: chosen, not leading


def test_a_preset_needs_its_base_and_the_grid_is_checked(tmp_path, fake_training, capsys):
    with pytest.raises(ValueError, match="option --models: prism-L1 take the learning rate chosen for prism"):
        driver.run_headline(["ml-100k"], ["prism-L1"], [0], tmp_path, 1, None)
    with pytest.raises(ValueError, match="option --lr-grid: the learning-rate grid is empty"):
        driver.run_headline(["ml-100k"], ["sasrec"], [0], tmp_path, 1, None, grid=())
    with pytest.raises(ValueError, match="option --lr-grid: 'x' is not a number"):
        driver.tuning.parse_grid("1e-3,x")
    with pytest.raises(ValueError, match="option --lr-grid: -0.001 is not a positive"):
        driver.tuning.parse_grid("-1e-3")
    with pytest.raises(SystemExit) as exit_:
        main(["headline", "run", "--out", str(tmp_path), "--models", "sasrec", "--eager-models", "sasrec,mamba3"])
    assert exit_.value.code == 2 and "option --eager-models: unknown backbone(s) ['mamba3']" in capsys.readouterr().err
    assert not fake_training


def test_check_refuses_a_preset_without_its_base_and_trains_nothing(tmp_path, fake_training, capsys):
    """--check (what the device scripts run before any other work) applies run's every refusal, the presets'
    bases included, and writes nothing."""
    out = tmp_path / "grid"
    with pytest.raises(SystemExit) as exit_:
        main(["headline", "run", "--protocol", "v3", "--out", str(out), "--datasets", "ml-100k",
              "--models", "mamba2-authors,prism-L1,prism-nogelu", "--check"])
    assert exit_.value.code == 2
    assert "option --models: prism-L1, prism-nogelu take the learning rate chosen for prism" in capsys.readouterr().err
    main(["headline", "run", "--protocol", "v3", "--out", str(out), "--datasets", "ml-100k,yelp-iclrec",
          "--models", "prism,prism-L1", "--widths", "d64", "--check"])
    assert capsys.readouterr().out.strip() == ("options accepted: protocol v3, ml-100k, yelp-iclrec x prism, prism-L1, "
                                               "5 seed(s), widths d64")
    assert not fake_training and not out.exists()


def test_finished_runs_feed_the_time_estimates(tmp_path, fake_training, monkeypatch):
    fed = []
    monkeypatch.setattr(driver.CorrectedEstimates, "finished", lambda self, job, seconds: fed.append(job.label))
    driver.run_headline(["ml-100k"], ["sasrec"], [0, 1], tmp_path, 1, None, grid=(1e-3,))
    assert fed == ["ml-100k/sasrec/lr0.001/s0", "ml-100k/sasrec/lr0.001/s1"]


def test_budget_stops_starting_jobs(tmp_path, fake_training, monkeypatch):
    clock = iter(range(1000))
    monkeypatch.setattr(driver.time, "time", lambda: 1000.0 + next(clock))
    counts = driver.run_headline(["ml-100k"], ["sasrec", "hstu"], [0], tmp_path, 1, budget=2.5, grid=GRID)
    assert counts["finished"] >= 1 and counts["not started"] == 4 - counts["finished"]
    with pytest.raises(ValueError, match="--budget"):
        driver.run_headline(["ml-100k"], ["sasrec"], [0], tmp_path, 1, budget=0)


def test_a_free_worker_skips_jobs_expected_to_outlast_the_deadline():
    results = []
    not_started = run_jobs([60.0, 0.01, 0.02], time.sleep, workers=1, deadline=time.time() + 5,
                           on_result=lambda job, result: results.append(job), expected_seconds=lambda job: job)
    assert results == [0.01, 0.02] and not_started == [60.0]


def test_device_lists_are_checked(tmp_path):
    with pytest.raises(ValueError, match="--device: 'cpu': a list takes numbered CUDA devices"):
        check_devices("cpu,cuda:0")
    with pytest.raises(ValueError,
                       match="--device: 'cuda"
                             + ("': a list takes" if torch.cuda.is_available() else ":0' is not a usable")):
        check_devices("cuda:0,cuda")
    with pytest.raises(ValueError, match="--device: 'cuda:99'"):
        check_devices("cuda:99")
    assert check_devices("cpu") == ["cpu"]


def test_set_overrides_are_checked_and_named():
    assert driver.parse_overrides(["epochs=3", "precision=fp32"]) == {"epochs": 3, "precision": "fp32"}
    with pytest.raises(ValueError, match="option --set: precision: 'fp16' is not one of"):
        driver.parse_overrides(["precision=fp16"])
    with pytest.raises(ValueError, match="option --set 'epochs=x': 'x' is not an integer"):
        driver.parse_overrides(["epochs=x"])
    with pytest.raises(ValueError, match="option --set 'seed=1': 'seed' is not one of"):
        driver.parse_overrides(["seed=1"])


def test_set_converts_each_value_by_its_fields_type():
    got = driver.parse_overrides(["batch_size=32", "dropout=0.25", "cutoffs=5,20,50", "loss=sampled",
                                  "exclude_history=on"])
    assert got == {"batch_size": 32, "dropout": 0.25, "cutoffs": (5, 20, 50), "loss": "sampled",
                   "exclude_history": True}
    assert [type(got[key]) for key in ("batch_size", "dropout", "exclude_history")] == [int, float, bool]
    assert all(type(k) is int for k in got["cutoffs"])


@pytest.mark.parametrize("word, meaning", [("off", False), ("OFF", False), ("false", False), ("0", False),
                                           ("no", False), ("on", True), ("True", True), ("1", True), ("yes", True)])
def test_set_reads_a_switch_as_on_or_off(word, meaning):
    # the old bug: bool("off") is True, so --set exclude_history=off ranked against the history's items removed
    assert driver.parse_overrides([f"exclude_history={word}"]) == {"exclude_history": meaning}


@pytest.mark.parametrize("pair, message", [
    ("exclude_history=maybe", "option --set exclude_history: 'maybe' is not on or off \\(one of on, true, 1, yes, "
                              "off, false, 0, no\\)"),
    ("exclude_history=", "option --set exclude_history: '' is not on or off"),
    ("cutoffs=5,x", "option --set 'cutoffs=5,x': '5,x' is not a comma list of integers"),
    ("cutoffs=5,0", r"option --set: cutoffs: every cutoff must be an integer >= 1, got \[5, 0\]"),
    ("dropout=high", "option --set 'dropout=high': 'high' is not a number"),
    ("dropout=nan", r"option --set: dropout: must be a finite number in \[0, 1\], got nan"),
    ("epochs=0", r"option --set: epochs: must be an integer in \[1, 1000000\], got 0"),
    ("epochs", "option --set 'epochs': expected KEY=VALUE"),
    ("progress=off", "option --set 'progress=off': 'progress' is not one of d_model, n_layers, "),
    ("colour=red", "option --set 'colour=red': 'colour' is not one of d_model, n_layers, .*exclude_history, "
                   "sampled$"),
])
def test_set_refuses_a_bad_pair_naming_it(pair, message):
    with pytest.raises(OptionError, match=message):
        driver.parse_overrides([pair])


def test_a_cuda_index_beyond_the_machine_is_refused(monkeypatch):
    from prism_rec.training.devices import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match="--device: 'cuda:2': this machine has 2 CUDA device"):
        resolve_device("cuda:2")


def test_jobs_in_flight_at_the_deadline_are_abandoned():
    results = []
    started = time.time()
    not_started = run_jobs([30.0, 30.0, 30.0], time.sleep, workers=2, deadline=time.time() + 2,
                           on_result=lambda job, result: results.append(result["status"]), abandon_after=0)
    assert results == [Status.ABANDONED, Status.ABANDONED] and not_started == [30.0]
    assert time.time() - started < 20


def _sleep_until(end: float) -> dict:
    time.sleep(max(0.0, end - time.time()))
    return {"status": "finished"}


def test_jobs_in_flight_get_abandon_after_seconds_past_the_deadline():
    """A job ending within the grace after the deadline is kept; one still running at its end is abandoned."""
    results = {}
    deadline = time.time() + 20  # time for two spawned workers to start on a loaded machine before it
    run_jobs([deadline + 1, deadline + 120], _sleep_until, workers=2, deadline=deadline, abandon_after=4,
             on_result=lambda job, result: results.update({job - deadline: (result["status"], time.time() - deadline)}))
    assert results[1][0] == "finished" and results[120][0] == Status.ABANDONED
    assert 4 <= results[120][1] < 10


def _exit_slowly(log: Path) -> dict:
    """A job whose worker, at its exit, logs when the exit began and ended, a second apart."""
    def exit_slowly() -> None:
        began = time.time()
        time.sleep(1.0)
        with log.open("a") as file:
            file.write(f"{began} {time.time()}\n")

    atexit.register(exit_slowly)
    return {"status": "finished"}


def test_workers_are_stopped_side_by_side(tmp_path):
    """The pool tells every worker to stop before waiting on any: their slow exits overlap."""
    log = tmp_path / "exits.txt"
    run_jobs([log] * 3, _exit_slowly, workers=3, deadline=time.time() + 120, on_result=lambda job, result: None)
    exits = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    assert len(exits) == 3
    assert max(began for began, _ in exits) < min(ended for _, ended in exits)


def test_time_estimates_follow_the_planned_concurrency_and_the_epochs_of_the_rate():
    """Seconds per epoch of the (dataset, model), scaled to the concurrency planned now, times the median
    epochs of the same (dataset, model, rate), else of the dataset's runs at the rate (lower rates train
    longer), else of the rate on any dataset, else of any run."""
    def job(dataset, model, seed, lr):
        return driver.HeadlineJob(dataset, model, protocol.training_config(dataset, model, seed, "cpu", {}, lr),
                                  f"hash-{dataset}-{model}-{lr:g}-s{seed}", "")

    sasrec, slow = job("ml-100k", "sasrec", 2, 1e-3), job("ml-100k", "sasrec", 0, 3e-4)
    fresh_slow, fresh = job("yelp-iclrec", "sasrec", 0, 3e-4), job("yelp-iclrec", "sasrec", 0, 1e-3)  # no yelp run yet
    seen = [{"dataset": "ml-100k", "model": "sasrec", "config_hash": f"hash-ml-100k-sasrec-0.001-s{seed}",
             "wall_seconds": 140.0, "epochs_run": 20, "lr": 1e-3, "jobs_per_device": 14.0} for seed in (0, 1)]
    seen.append({**seen[0], "model": "prism", "config_hash": "hash-ml-100k-prism-0.001-s0", "epochs_run": 80})
    seen.append({**seen[0], "model": "prism", "config_hash": "hash-ml-100k-prism-0.0003-s0", "epochs_run": 50,
                 "lr": 3e-4})
    jobs = [sasrec, slow, fresh_slow, fresh]
    hashes = {entry["config_hash"] for entry in seen} | {j.run_hash for j in jobs}
    interactions = {"ml-100k": 1000, "yelp-iclrec": 1000}
    expected, basis, timed = driver.estimate_seconds(jobs, seen, interactions, hashes, 7.0)
    assert timed and expected[sasrec.label] == pytest.approx(3.5 * 20)  # 3.5 s per epoch x its own 20 epochs
    assert basis[sasrec.label] == "seen" and basis[fresh.label] == "other dataset"  # ml-100k's sasrec, carried
    assert expected[slow.label] == pytest.approx(3.5 * 50)  # the dataset's 50 epochs at 3e-4
    assert expected[fresh_slow.label] / expected[fresh.label] == pytest.approx(50 / 20)  # any dataset's, per rate
    seen.pop()  # no run at 3e-4 left: any run's epochs (20, 20, 80: median 20)
    assert driver.estimate_seconds([slow], seen, interactions, hashes, 7.0)[0][slow.label] == pytest.approx(3.5 * 20)
    other_settings = [{**entry, "config_hash": "elsewhere"} for entry in seen]
    assert not driver.estimate_seconds([sasrec], other_settings, interactions, {sasrec.run_hash}, 7.0)[2]


def test_time_estimates_prefer_runs_in_the_jobs_compile_mode():
    """A run's seconds per epoch in the job's own compile mode win over those of another mode (a run
    recorded before the compile option trained eager); with only another mode's, the basis says so."""
    compiled = driver.HeadlineJob("ml-100k", "sasrec", protocol.training_config(
        "ml-100k", "sasrec", 1, "cpu", {"compile": "graphs"}, 1e-3), "hash-s1", "")
    eager_run = {"dataset": "ml-100k", "model": "sasrec", "config_hash": "hash-s0", "wall_seconds": 300.0,
                 "epochs_run": 10, "lr": 1e-3, "jobs_per_device": 7.0}
    compiled_run = {**eager_run, "config_hash": "hash-s2", "wall_seconds": 100.0, "compile": "graphs"}
    hashes = {"hash-s0", "hash-s1", "hash-s2"}
    expected, basis, _ = driver.estimate_seconds([compiled], [eager_run], {"ml-100k": 1000}, hashes, 7.0)
    assert expected[compiled.label] == pytest.approx(300.0) and basis[compiled.label] == "other mode"
    expected, basis, _ = driver.estimate_seconds([compiled], [eager_run, compiled_run], {"ml-100k": 1000},
                                                 hashes, 7.0)
    assert expected[compiled.label] == pytest.approx(100.0) and basis[compiled.label] == "seen"


def test_time_estimates_carry_another_modes_time_over_by_the_ratio_seen_between_the_modes():
    """A cell seen only eager is timed for cudagraphs by the ratio of the two modes in the cells seen in both."""
    job = driver.HeadlineJob("yelp-iclrec", "sasrec", protocol.training_config(
        "yelp-iclrec", "sasrec", 1, "cpu", {"compile": "cudagraphs"}, 1e-3), "hash-yelp", "")

    def run(dataset, model, mode, seconds):
        return {"dataset": dataset, "model": model, "config_hash": f"hash-{dataset}-{model}-{mode}", "compile": mode,
                "wall_seconds": seconds, "epochs_run": 10, "lr": 1e-3, "jobs_per_device": 7.0}

    runs = [run("yelp-iclrec", "sasrec", "off", 200.0),  # 20 s per epoch eager
            run("ml-100k", "prism", "off", 100.0), run("ml-100k", "prism", "cudagraphs", 50.0),  # half the time
            run("ml-100k", "mamba2", "off", 100.0), run("ml-100k", "mamba2", "cudagraphs", 30.0)]
    hashes = {r["config_hash"] for r in runs} | {job.run_hash}
    expected, basis, _ = driver.estimate_seconds([job], runs, {"yelp-iclrec": 1000, "ml-100k": 100}, hashes, 7.0)
    assert basis[job.label] == "other mode"
    assert expected[job.label] == pytest.approx(20.0 * statistics.median([0.5, 0.3]) * 10)


def test_time_estimates_of_a_new_width_come_from_the_same_width_on_another_dataset():
    """A (backbone, width) with no run on the job's dataset is timed from its runs on another dataset, scaled
    by the datasets' ratio (interactions where no model ran on both), not from parameters: a model four times
    wider has 16x the parameters, not 16x the time."""
    def job(dataset, model, width):
        config = protocol.training_config(dataset, model, 0, "cpu", {}, 1e-3)
        return driver.HeadlineJob(dataset, model, config, f"hash-{dataset}-{model}-{width}", "", width=width)

    wide = job("books-dealrec", "prism", "d256")
    def run(dataset, width, seconds):
        return {"dataset": dataset, "model": "prism", "width": width, "config_hash": f"hash-{dataset}-prism-{width}",
                "wall_seconds": seconds, "epochs_run": 10, "lr": 1e-3, "jobs_per_device": 7.0}

    runs = [run("yelp-iclrec", "d256", 300.0), run("books-dealrec", "d64", 100.0)]
    hashes = {entry["config_hash"] for entry in runs} | {wide.run_hash}
    interactions = {"yelp-iclrec": 1000, "books-dealrec": 3000}
    expected, basis, _ = driver.estimate_seconds([wide], runs, interactions, hashes, 7.0)
    assert basis[wide.label] == "other dataset"
    assert expected[wide.label] == pytest.approx(30.0 * 3 * 10)  # 30 s per epoch on yelp, 3x the interactions
    # prism d64 seen on both datasets: yelp's epochs take half as long as books' (not a third, as interactions say)
    runs.append(run("yelp-iclrec", "d64", 50.0))
    hashes.add("hash-yelp-iclrec-prism-d64")
    expected, _, _ = driver.estimate_seconds([wide], runs, interactions, hashes, 7.0)
    assert expected[wide.label] == pytest.approx(30.0 * 2 * 10)
    narrow = job("books-dealrec", "prism", "d64")  # a job of the call: its parameters set the scaling
    expected, basis, _ = driver.estimate_seconds([wide, narrow], runs[1:2], interactions, hashes, 7.0)
    assert basis[wide.label] == "scaled"
    # a call over books alone: yelp's runs (hashes it cannot check) still carry over, by the ratio of prism d64
    books_only, books_hashes = {"books-dealrec": 3000}, {wide.run_hash, "hash-books-dealrec-prism-d64"}
    expected, basis, _ = driver.estimate_seconds([wide], runs, books_only, books_hashes, 7.0)
    assert basis[wide.label] == "other dataset" and expected[wide.label] == pytest.approx(30.0 * 2 * 10)


def test_the_ratio_of_two_datasets_compares_their_times_in_the_jobs_mode_and_unknown_jobs_are_not_held_back():
    """books d256 prism (cudagraphs) from yelp d256: the books/yelp ratio is that of prism d64 in cudagraphs on
    both (10 s against 5 s), not of yelp's d64 runs of every mode lumped together (mostly a whole-step mode at
    30 s); a job nothing can time (no run of its dataset, none shared) gets 0 s, "unknown"."""
    def job(dataset, model, width):
        config = protocol.training_config(dataset, model, 0, "cpu", {"compile": "cudagraphs"}, 1e-3)
        return driver.HeadlineJob(dataset, model, config, f"hash-{dataset}-{model}-{width}", "", width=width)

    def run(dataset, width, mode, seconds, seed=0):
        return {"dataset": dataset, "model": "prism", "width": width, "compile": mode, "epochs_run": 10,
                "config_hash": f"hash-{dataset}-prism-{width}-{mode}-s{seed}", "wall_seconds": seconds, "lr": 1e-3,
                "jobs_per_device": 7.0}

    wide, fresh = job("books-dealrec", "prism", "d256"), job("books-dealrec", "sasrec", "d64")
    narrow = job("books-dealrec", "prism", "d64")  # seen: with its parameters, books' runs scale sasrec
    runs = [run("books-dealrec", "d64", "cudagraphs", 100.0), run("yelp-iclrec", "d64", "cudagraphs", 50.0),
            *(run("yelp-iclrec", "d64", "step-graphs", 300.0, seed) for seed in range(3)),
            run("yelp-iclrec", "d256", "cudagraphs", 300.0)]
    hashes = {r["config_hash"] for r in runs} | {wide.run_hash, fresh.run_hash}
    expected, basis, timed = driver.estimate_seconds([wide, fresh, narrow], runs, {"books-dealrec": 3000}, hashes,
                                                     7.0)
    assert basis[wide.label] == "other dataset" and expected[wide.label] == pytest.approx(30.0 * 2 * 10)
    assert timed and expected[fresh.label] > 0 and basis[fresh.label] == "scaled"
    outside_only = [r for r in runs if r["dataset"] == "yelp-iclrec"]  # books has no run: nothing is shared
    expected, basis, timed = driver.estimate_seconds([wide, fresh], outside_only, {"books-dealrec": 3000},
                                                     hashes, 7.0)
    assert basis == {wide.label: "unknown", fresh.label: "unknown"} and not timed
    assert expected == {wide.label: 0.0, fresh.label: 0.0}


def test_eager_models_train_with_compile_off_under_the_same_hashes():
    dataset = SimpleNamespace(options={})
    plain = driver.GridPlan({"ml-100k": dataset}, ["sasrec", "prism"], [0], (1e-3,), "cpu", {"compile": "graphs"}, "")
    eager = driver.GridPlan({"ml-100k": dataset}, ["sasrec", "prism"], [0], (1e-3,), "cpu", {"compile": "graphs"}, "",
                              frozenset({"prism"}))
    assert {key: job.config.compile for key, job in eager.jobs.items()} == {
        ("d64", "ml-100k", "sasrec", 0, 1e-3): "graphs", ("d64", "ml-100k", "prism", 0, 1e-3): "off"}
    assert eager.hashes == plain.hashes


def _job(model: str, seed: int) -> driver.HeadlineJob:
    return driver.HeadlineJob("ml-100k", model, protocol.training_config("ml-100k", model, seed, "cpu", {}, 1e-3),
                                f"hash-{model}-s{seed}", "")


def test_jobs_go_tuning_runs_first_then_longest_first():
    jobs = [_job(model, seed) for seed in (1, 0) for model in ("sasrec", "prism", "hstu", "prism-L1")]
    expected = {job.label: {"sasrec": 10.0, "prism": 30.0, "hstu": 20.0, "prism-L1": 40.0}[job.model] for job in jobs}
    order = [job.label.replace("/lr0.001", "") for job in driver.order_jobs(jobs, expected)]
    assert order == ["ml-100k/prism/s0", "ml-100k/hstu/s0", "ml-100k/sasrec/s0", "ml-100k/prism-L1/s1",
                     "ml-100k/prism-L1/s0", "ml-100k/prism/s1", "ml-100k/hstu/s1", "ml-100k/sasrec/s1"]


def test_estimates_correct_themselves_by_the_runs_finished_in_this_call():
    fast, slow, unseen, eager = _job("sasrec", 0), _job("prism", 0), _job("hstu", 0), _job("titans", 0)
    again, unseen_again, other = _job("sasrec", 1), _job("hstu", 1), _job("mamba2", 0)
    prior = {fast.label: 100.0, slow.label: 300.0, unseen.label: 200.0, eager.label: 400.0, again.label: 100.0,
             unseen_again.label: 200.0, other.label: 200.0}
    basis = {label: "scaled" for label in prior} | {eager.label: "other mode"}
    estimates = driver.CorrectedEstimates(prior, basis)
    estimates.finished(fast, 50.0)  # took half its estimate
    estimates.finished(slow, 120.0)  # 0.4 of it
    assert estimates(unseen) == 200.0  # fewer than MIN_RUNS of its basis finished: the prior
    assert estimates(again) == pytest.approx(50.0)  # a run of the same (dataset, model) finished: its ratio
    estimates.finished(unseen, 160.0)  # 0.8 of it
    assert estimates(other) == pytest.approx(200.0 * 0.5)  # MIN_RUNS of its basis: their median ratio
    assert estimates(unseen_again) == pytest.approx(200.0 * 0.8)  # its own backbone's ratio wins
    assert estimates(eager) == 400.0  # another basis's runs never correct it


def test_gpu_sharing_is_mps_only_where_a_server_control_pipe_is(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    assert gpu_sharing("cpu") == "none"
    assert gpu_sharing("auto") == ("time-slicing" if torch.cuda.is_available() else "none")
    assert gpu_sharing("cuda:1") == "time-slicing"
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert gpu_sharing("cuda") == "time-slicing"  # no server's control pipe there
    (tmp_path / "control").touch()
    assert gpu_sharing("cuda") == "mps"


def test_manifests_of_side_by_side_calls_merge_once_per_record(tmp_path):
    from prism_rec.tracking.records import append_jsonl

    base = {"record_id": "a", "dataset": "x"}
    for name, extra in (("one", {"record_id": "b"}), ("two", {"record_id": "c"})):
        for entry in (base, extra):
            append_jsonl(tmp_path / name / "m.jsonl", entry)
    merged = merge_manifests([tmp_path / "one" / "m.jsonl", tmp_path / "two" / "m.jsonl"])
    assert [e["record_id"] for e in merged] == ["a", "b", "c"]
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        merge_manifests([tmp_path / "missing.jsonl"])
    main(["headline", "merge", str(tmp_path / "out.jsonl"), str(tmp_path / "one" / "m.jsonl"),
          str(tmp_path / "two" / "m.jsonl")])
    assert [e["record_id"] for e in read_jsonl(tmp_path / "out.jsonl")] == ["a", "b", "c"]


def test_worker_devices_one_or_several():
    one, two = WorkerDevices(["cpu"]), WorkerDevices(["cuda:0", "cuda:1"])
    assert (one.job_device, one.cuda_devices) == ("cpu", None)
    assert (two.job_device, two.cuda_devices) == ("cuda", ["cuda:0", "cuda:1"])  # worker i: the i-th, current
    from prism_rec.tracking.store import machine_description

    assert one.describe() == f"{machine_description(torch.device('cpu'))} (cpu)"


def test_a_run_that_diverges_loses_its_rate_and_is_not_rerun(tmp_path, fake_training, monkeypatch):
    trained = driver.train_cell

    def diverging(job):
        if job.config.lr == 3e-3:
            fake_training.append(job.label)
            return {"status": driver.DIVERGED, "error": "non-finite item scores"}
        return trained(job)

    monkeypatch.setattr(driver, "train_cell", diverging)
    counts = driver.run_headline(["ml-100k"], ["sasrec"], [0, 1], tmp_path, 1, None, grid=GRID)
    assert counts["diverged"] == 1 and counts["finished"] == 2
    manifest = read_jsonl(tmp_path / protocol.MANIFEST_NAME)
    assert driver.tuning.chosen_rates(manifest, GRID) == {("ml-100k", "sasrec"): 1e-3}
    assert {(e["seed"], e["lr"]) for e in driver.tuning.selected_entries(manifest, GRID)} == {(0, 1e-3), (1, 1e-3)}
    fake_training.clear()
    assert driver.run_headline(["ml-100k"], ["sasrec"], [0, 1], tmp_path, 1, None, grid=GRID)["finished"] == 0
    assert not fake_training


def test_a_manifest_line_says_what_its_test_cases_rank_against():
    record = fake_record("sasrec", 0, 0.8)
    assert driver.manifest_entry(record)["evaluation"] == "each test case ranks its target against all items"
    sampled = {**record, "params": {**record["params"], "sampled": "popularity:100", "exclude_history": True}}
    assert driver.manifest_entry(sampled)["evaluation"] == candidates_description("popularity:100", True)
