"""Runs, the grid and the report of the authors' protocol on the tiny edge list (CPU, seconds)."""

import json

import pytest
import torch

from prism_rec.cli import main
from prism_rec.errors import OptionError
from prism_rec.files import write_jsonl
from prism_rec.protocols.authors import grid
from prism_rec.protocols.authors.report import write_report
from prism_rec.protocols.authors.train import EarlyStopping, RunConfig, run

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


def test_the_grid_resumes_and_respects_its_budget(task, tmp_path, monkeypatch):
    monkeypatch.setattr(grid, "load_task", lambda *args: task)
    monkeypatch.setattr(grid, "check_dataset", lambda *args: "unix seconds")
    jobs = grid.grid_configs(["tiny"], RunConfig(model="null", **TINY), ["null", "pop"], ["per-backbone", "8"],
                             [0, 1])
    assert len(jobs) == 6  # pop once per seed: it has no head
    counts = grid.run_grid(tmp_path, jobs[:4], None, CPU, log=lambda line: None)
    assert counts == {"finished": 4, "skipped": 0, "unstarted": 0}
    counts = grid.run_grid(tmp_path, jobs, 1e-9, CPU, log=lambda line: None)
    assert counts == {"finished": 0, "skipped": 4, "unstarted": 2}
    counts = grid.run_grid(tmp_path, jobs, None, CPU, log=lambda line: None)
    assert counts == {"finished": 2, "skipped": 4, "unstarted": 0}
    rows = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert len({row["key"] for row in rows}) == 6
    report = write_report([tmp_path], tmp_path / "report.md", "test")
    text = report.read_text()
    assert "### tiny, head width 8" in text and "| pop - null |" in text and "$" not in text
    rows[0]["task"] = {**rows[0]["task"], "min_user_edges": 1}
    write_jsonl(tmp_path / "manifest.jsonl", rows)
    with pytest.raises(OptionError, match="option --from: the runs of tiny were made on different edge tasks"):
        write_report([tmp_path], tmp_path / "report.md")


@pytest.mark.parametrize("argv, message", [
    (["--models", "bogus"], "option --models: unknown model 'bogus'"),
    (["--datasets", "electronics-gerec"], "option --datasets: dataset 'electronics-gerec' has no time"),
    (["--lr", "0"], "option --lr: must be a positive"),
    (["--seeds", "0"], "option --seeds: need at least one seed"),
    (["--head-widths", "per-backbone,x"], "option --head-widths: expected per-backbone or a positive integer"),
    (["--budget", "-5"], "option --budget: must be a finite number in (0"),
    (["--min-user-edges", "0"], "option --min-user-edges: must be >= 1"),
])
def test_bad_grid_options_are_refused_before_work(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["authors", "grid", "--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"prism-rec authors: {message}") and "\n" not in error
    assert not (tmp_path / "out").exists()
