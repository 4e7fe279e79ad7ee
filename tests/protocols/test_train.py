"""Runs, the grid and the report of the authors' protocol on the tiny edge list (CPU, seconds)."""

import json

import pytest
import torch

from prism_rec.cli import main
from prism_rec.errors import OptionError
from prism_rec.experiments.tuning import RATE_LADDER, TuningGrid
from prism_rec.files import write_jsonl
from prism_rec.protocols.authors import grid
from prism_rec.protocols.authors.design import DESIGN_MODELS, Design
from prism_rec.protocols.authors.report import device_note, machine_note, scan_note, write_report
from prism_rec.protocols.authors.train import GRAPHED_MODELS, EarlyStopping, RunConfig, run, step_kind
from prism_rec.tracking.store import machine_description

TINY = dict(epochs=2, batch_size=16, n_neighbours=3, channel=4, n_heads=1)
CPU = torch.device("cpu")


def strip(record):
    return {key: value for key, value in record.items() if key != "wall_seconds"}


@pytest.mark.parametrize("model", ["sasrec", "gdn-authors", "null"])
def test_a_cpu_run_repeats_itself_from_its_seed(task, model):
    first = run(task, RunConfig(model=model, seed=3, **TINY), CPU, log=lambda line: None)
    second = run(task, RunConfig(model=model, seed=3, **TINY), CPU, log=lambda line: None)
    assert strip(first) == strip(second)
    assert len(first["cases"]["above"]) == task.stats["test_edges"] == len(first["cases"]["user"])
    assert 0 <= first["test_full_auc"] <= 1 and first["epochs"] == 2


def test_the_record_names_the_scan_backend_and_a_scanless_model_refuses_one(task):
    record = run(task, RunConfig(model="gated_deltanet", **TINY), CPU, log=lambda line: None, scan_backend="naive")
    assert record["scan"] == "naive"
    assert run(task, RunConfig(model="gated_deltanet", **TINY), CPU, log=lambda line: None)["scan"] == "torch"
    assert run(task, RunConfig(model="pop", **TINY), CPU)["scan"] is None
    with pytest.raises(OptionError, match="option --scan-backend: sasrec runs no delta scan"):
        run(task, RunConfig(model="sasrec", **TINY), CPU, scan_backend="torch")


def test_pop_trains_nothing_and_ranks_by_training_edges(task):
    record = run(task, RunConfig(model="pop", **TINY), CPU)
    assert record["epochs"] == 0 and record["n_parameters"] == 0


def test_early_stopping_keeps_weights_only_when_every_metric_improves():
    model = torch.nn.Linear(1, 1)
    stopper = EarlyStopping(patience=2)
    history = [{"ap": 0.5, "auc": 0.5}, {"ap": 0.6, "auc": 0.4}, {"ap": 0.6, "auc": 0.5}, {"ap": 0.7, "auc": 0.4},
               {"ap": 0.8, "auc": 0.4}]
    stops = [stopper.step(metrics, model, epoch) for epoch, metrics in enumerate(history, 1)]
    assert stops == [False, False, False, False, True] and stopper.best_epoch == 3  # ties count as improving


def write_inter(frame, folder):
    """The tiny edge list as the ml-100k source reads it (folder/ml-100k.inter, RecBole's atomic format)."""
    folder.mkdir()
    lines = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    lines += [f"{row.user}\t{row.item}\t1\t{row.timestamp:.0f}" for row in frame.itertuples()]
    (folder / "ml-100k.inter").write_text("\n".join(lines) + "\n")


TINY_OPTIONS = ["--datasets", "ml-100k", "--min-user-edges", "5", "--epochs", "2", "--batch-size", "16",
                "--n-neighbours", "3", "--channel", "4", "--n-heads", "1", "--seeds", "2", "--lr-grid", "1e-3,1e-2",
                "--models", "sasrec,null,pop", "--equal-head", "4", "--device", "cpu"]


def test_the_grid_runs_the_design_resumes_and_respects_its_budget(frame, tmp_path, capsys):
    write_inter(frame, tmp_path / "raw")
    out = tmp_path / "out"
    options = ["authors", "grid", "--out", str(out), "--raw-dir", str(tmp_path / "raw"), *TINY_OPTIONS]
    with pytest.raises(SystemExit) as exit_info:
        main([*options, "--workers", "2", "--budget", "1e-6"])  # past the budget before the first run ends
    assert exit_info.value.code == 3
    main([*options, "--workers", "2"])  # two spawned workers
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    runs = sorted((r["config"]["model"], r["config"]["head_width"], r["config"]["seed"], r["config"]["lr"])
                  for r in rows)
    rule = TuningGrid((1e-3, 1e-2), RATE_LADDER)  # --lr-grid extends along headline v3's ladder
    expected = [("pop", "per-backbone", 0, RunConfig.lr)]
    for model in ("sasrec", "null"):
        tried = {r["config"]["lr"]: r["valid_full_auc"] for r in rows
                 if r["config"]["model"] == model and r["config"]["seed"] == 0 and r["config"]["head_width"] != "4"}
        assert {1e-3, 1e-2} <= set(tried) and rule.next_rate(tried) is None  # seed 0's grid is complete
        chosen = rule.choice(tried)
        expected += [(model, "per-backbone", 0, lr) for lr in tried] + [(model, "per-backbone", 1, chosen)]
        if model == "sasrec":  # the equal-heads arm; null's head is 4 wide already
            expected += [("sasrec", "4", seed, chosen) for seed in (0, 1)]
    assert runs == sorted(expected)
    assert all((out / "cases" / f"{r['key']}.json").is_file() for r in rows)
    main([*options])  # nothing left: no run is trained again
    assert capsys.readouterr().out.strip().endswith(f"authors grid: 0 finished, 0 dropped at the budget, 0 ready "
                                                    f"for the next call ({out}/manifest.jsonl)")
    assert len((out / "manifest.jsonl").read_text().splitlines()) == len(rows)
    rows[0]["task"] = {**rows[0]["task"], "min_user_edges": 1}
    write_jsonl(out / "manifest.jsonl", rows)
    with pytest.raises(OptionError, match="option --from: the runs of ml-100k were made on different edge tasks"):
        write_report([out], tmp_path / "report.md")


def test_a_run_expected_past_the_budget_does_not_start(task, tmp_path, monkeypatch):
    monkeypatch.setattr(grid, "load_task", lambda *args: task)
    design = Design(("tiny",), ("null",), (0,), RunConfig(model="null", **TINY), TuningGrid((1e-3, 1e-2)), None)
    slow = {"key": "slow", "dataset": "tiny", "wall_seconds": 3600.0, "valid_full_auc": 0.5,
            "config": {**design.base.to_dict(), "lr": 1e-3}}
    write_jsonl(tmp_path / "manifest.jsonl", [slow])
    counts = grid.run_grid(tmp_path, design, 60.0, "cpu", log=lambda line: None)
    assert counts == {"finished": 0, "dropped": 0, "failed": 0, "pending": 1}
    counts = grid.run_grid(tmp_path, design, None, "cpu", log=lambda line: None)
    assert counts == {"finished": 1, "dropped": 0, "failed": 0, "pending": 0}


def test_the_grid_trains_in_the_designs_priority_order_through_the_campaign(task, tmp_path, monkeypatch):
    """Each run the grid starts is the first the design lists as pending at that moment (follow-ups: a rate
    extension, the seeds a chosen rate releases, the equal-heads arm), as asking the design run by run gives."""
    import math

    design = Design(("tiny",), ("sasrec", "null", "pop"), (0, 1), RunConfig(model="null", **TINY),
                    TuningGrid((1e-3, 1e-2), RATE_LADDER), "4")

    def record(config):  # validation AUC peaks at 1e-4: seed 0's grid extends down the ladder once
        return {"config": config.to_dict(), "dataset": "tiny", "wall_seconds": 1.0, "cases": {},
                "valid_full_auc": -abs(math.log10(config.lr) + 4)}

    trained = []
    monkeypatch.setattr(grid, "load_task", lambda *args: task)
    monkeypatch.setattr(grid, "describe", lambda record: "")
    monkeypatch.setattr(grid, "run", lambda task, config, *args, **kwargs: trained.append(config) or record(config))
    counts = grid.run_grid(tmp_path, design, None, "cpu", log=lambda line: None)
    rows, expected = [], []
    while pending := design.pending(rows):
        expected.append(pending[0][1])
        rows.append(record(pending[0][1]))
    assert trained == expected and counts == {"finished": len(expected), "dropped": 0, "failed": 0, "pending": 0}
    assert ("sasrec", 0, 1e-4, "per-backbone") in [(c.model, c.seed, c.lr, c.head_width) for c in trained]


def test_the_grid_gives_its_scan_backend_to_the_scan_models_only(task, tmp_path, monkeypatch):
    design = Design(("tiny",), ("gated_deltanet", "sasrec"), (0,), RunConfig(model="null", **TINY),
                    TuningGrid((1e-3,)), None)
    backends = {}

    def fake_run(task, config, *args, scan_backend="auto", **kwargs):
        backends.setdefault(config.model, set()).add(scan_backend)
        return {"config": config.to_dict(), "dataset": "tiny", "wall_seconds": 1.0, "cases": {}, "valid_full_auc": 0.5}

    monkeypatch.setattr(grid, "load_task", lambda *args: task)
    monkeypatch.setattr(grid, "describe", lambda record: "")
    monkeypatch.setattr(grid, "run", fake_run)
    grid.run_grid(tmp_path, design, None, "cpu", log=lambda line: None, scan_backend="naive")
    assert backends == {"gated_deltanet": {"naive"}, "sasrec": {"auto"}}
    with pytest.raises(OptionError, match="option --scan-backend: expected one of"):
        grid.run_grid(tmp_path, design, None, "cpu", scan_backend="fast")


def test_cuda_graphs_are_refused_off_cuda(task):
    with pytest.raises(OptionError, match="CUDA graphs need a CUDA device"):
        run(task, RunConfig(model="sasrec", **TINY), CPU, log=lambda line: None, graphs=True)
    assert run(task, RunConfig(model="sasrec", **TINY), CPU, log=lambda line: None)["step"] == "eager"


def test_only_the_checked_models_replay_cuda_graphs_by_default():
    assert set(DESIGN_MODELS) > GRAPHED_MODELS
    for model in DESIGN_MODELS:
        graphed = model in GRAPHED_MODELS
        assert step_kind(model, "cuda") == ("cuda graphs" if graphed else "eager")
        assert step_kind(model, "cpu") == "eager"
        assert step_kind(model, "auto") == step_kind(model, "cuda" if torch.cuda.is_available() else "cpu")
        assert step_kind(model, torch.device("cuda", 1)) == step_kind(model, "cuda")
        assert step_kind(model, "cuda", graphs=False) == "eager"
        assert step_kind(model, "cuda", graphs=True) == ("eager" if model == "pop" else "cuda graphs")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("model", sorted(GRAPHED_MODELS))
def test_cuda_graphs_train_the_eager_run(task, model):
    """Full batches replayed from CUDA graphs give the eager run's curve and test figures (dropout included:
    the generator is restored after the capture's warm-up)."""
    config = RunConfig(model=model, seed=1, **{**TINY, "batch_size": 8})
    cuda = torch.device("cuda")
    eager = run(task, config, cuda, log=lambda line: None, graphs=False)
    graphed = run(task, config, cuda, log=lambda line: None, graphs=True)
    assert (eager["step"], graphed["step"]) == ("eager", "cuda graphs")
    for eager_epoch, graphed_epoch in zip(eager["curve"], graphed["curve"], strict=True):
        assert graphed_epoch == pytest.approx(eager_epoch, abs=1e-5)
    assert graphed["test_full_auc"] == pytest.approx(eager["test_full_auc"], abs=1e-5)
    assert graphed["test_link_average_precision"] == pytest.approx(eager["test_link_average_precision"], abs=1e-5)


def test_the_report_names_the_scan_backends_the_runs_trained_with():
    runs = [{"config": {"model": "prism"}, "scan": "torch"}] * 2 + [{"config": {"model": "prism"}, "scan": "triton"},
                                                                    {"config": {"model": "sasrec"}, "scan": None},
                                                                    {"config": {"model": "gated_deltanet"}}]
    assert scan_note(runs) == " Delta scan (kernels/delta_scan.py backend): prism torch (2), prism triton (1)."
    assert scan_note(runs[3:]) == ""


def test_the_record_names_its_machine_and_the_report_counts_them(task):
    record = run(task, RunConfig(model="null", **TINY), CPU, log=lambda line: None)
    assert record["machine"] == machine_description(CPU)  # as the headline's records name a machine
    runs = [{"machine": "NVIDIA H100 80GB HBM3 (CUDA 13.0)"}] * 2 + [{"machine": "NVIDIA H200 (CUDA 13.0)"}, {}]
    assert machine_note(runs) == (" Machines: NVIDIA H100 80GB HBM3 (CUDA 13.0) (2), NVIDIA H200 (CUDA 13.0) (1); "
                                  "machine not recorded (1: runs from before the record named it).")
    assert machine_note(runs[:3]) == " Machines: NVIDIA H100 80GB HBM3 (CUDA 13.0) (2), NVIDIA H200 (CUDA 13.0) (1)."
    assert machine_note([{}, {"machine": None}]) == ""


def test_the_report_names_the_devices_only_when_runs_span_two_kinds():
    runs = [{"config": {"model": "sasrec"}, "device": "cuda:0"}, {"config": {"model": "sasrec"}, "device": "cuda:1"},
            {"config": {"model": "sasrec"}, "device": "cpu"}, {"config": {"model": "null"}, "device": "cuda:0"}]
    assert device_note(runs).endswith(": null cuda (1), sasrec cpu (1), sasrec cuda (2).")
    assert device_note(runs[:2] + runs[3:]) == ""
    assert device_note([{"config": {"model": "pop"}}]) == ""
