"""`prism-rec throughput` end to end in its tiny CPU configuration: report, plot, MLflow runs,
over-time and out-of-memory cases, option errors."""

from pathlib import Path

import mlflow
import pytest
import torch

from prism_rec.cli import main
from prism_rec.experiments.throughput import command, measure, report, shapes
from prism_rec.paths import RESULTS_DIR
from prism_rec.tracking import plots

TINY = ["--config", "tiny", "--device", "cpu"]


def test_tiny_run_writes_report_plot_and_mlflow_runs(tmp_path, monkeypatch, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    main(["throughput", *TINY, "--models", "sasrec,gated_deltanet,pop", "--results-dir", str(tmp_path),
          "--mlflow", "on"])
    assert "skipped pop: no training step to time" in capsys.readouterr().out

    report = (tmp_path / "throughput-tiny.md").read_text()
    assert "Produced by: `prism-rec throughput --models sasrec,gated_deltanet,pop --config tiny" in report
    assert "| pop |" not in report
    for row in ("| sasrec | 2 x 16 |", "| gated_deltanet | 2 x 16 |", "| sasrec | 2 x 8 |"):
        assert row in report
    assert "tok/s" in report and "Logged to MLflow" in report
    assert "PRISM (L = 3) vs Gated DeltaNet: not measured" in report
    assert "gated_deltanet: tokens/s at 64 within 10% of its 32 figure" in report
    assert (tmp_path / "throughput-tiny.png").read_bytes().startswith(b"\x89PNG")

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["throughput"])
    assert sorted(runs["tags.mlflow.runName"]) == ["gated_deltanet lm-tiny", "gated_deltanet recsys-tiny",
                                                 "sasrec lm-tiny", "sasrec recsys-tiny"]
    run_id = runs.loc[runs["tags.mlflow.runName"] == "sasrec lm-tiny", "run_id"].iloc[0]
    history = mlflow.MlflowClient().get_metric_history(run_id, "tokens_per_s")
    assert [metric.step for metric in history] == [32, 64] and all(metric.value > 0 for metric in history)
    assert runs["tags.torch_version"].notna().all()


def tiny_configuration(**changes) -> shapes.Configuration:
    return shapes.Configuration(**{**shapes.CONFIGURATIONS["tiny"].__dict__, **changes})


def test_over_time_case_gives_a_bound_and_skips_longer_lengths(tmp_path):
    results = command.run(["sasrec"], tiny_configuration(warmup=2, case_budget_s=1e-9), torch.device("cpu"), tmp_path,
                             "off", None, "test")
    first, longer = results[0].cases
    assert first.status == "over time" and first.step_s > 0 and first.steps == 0 and first.tokens_per_s > 0
    assert longer.status == "over time" and longer.detail == "skipped: over time at length 32"
    assert "over time (~" in (tmp_path / "throughput-tiny.md").read_text()


def test_out_of_memory_is_marked_and_the_run_continues(tmp_path, monkeypatch):
    measure_steps = measure.measure_steps

    def short_of_memory_at_32(training_step, case, *args):
        if case.length == 32:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return measure_steps(training_step, case, *args)

    monkeypatch.setattr(measure, "measure_steps", short_of_memory_at_32)
    results = command.run(["sasrec"], tiny_configuration(steps=1), torch.device("cpu"), tmp_path, "off", None,
                             "test")
    assert [case.status for entry in results for case in entry.cases] == ["out of memory", "ok", "ok"]
    assert "| out of memory |" in (tmp_path / "throughput-tiny.md").read_text()


def test_spent_total_budget_marks_cases_not_run(tmp_path):
    results = command.run(["sasrec"], tiny_configuration(), torch.device("cpu"), tmp_path, "off", 1e-9, "test")
    assert {case.status for entry in results for case in entry.cases} == {"not run"}


@pytest.mark.parametrize("arguments, message", [
    (["--models", "no-such-model"], "option --models"),
    (["--steps", "0"], "option --steps"),
    (["--total-budget", "0"], "option --total-budget"),
])
def test_option_errors_name_the_option(arguments, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # an OptionError is printed (status 2), other errors are the exit message
        main(["throughput", *TINY, "--results-dir", str(tmp_path), "--mlflow", "off", *arguments])
    assert message in f"{stop.value.code} {capsys.readouterr().err}"
    assert not Path(tmp_path / "throughput-tiny.md").exists()


def test_report_name_writes_its_own_report_and_its_import_redraws_that_plot(tmp_path, monkeypatch):
    device_store, local_store = f"sqlite:///{tmp_path / 'device.db'}", f"sqlite:///{tmp_path / 'local.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", device_store)
    main(["throughput", *TINY, "--models", "sasrec", "--results-dir", str(tmp_path / "device"), "--mlflow", "on",
          "--report-name", "throughput-serial"])
    report = (tmp_path / "device" / "throughput-serial.md").read_text()
    assert "--report-name throughput-serial" in report and "| sasrec | 2 x 16 |" in report
    assert not (tmp_path / "device" / "throughput-tiny.md").exists()

    monkeypatch.setenv("MLFLOW_TRACKING_URI", local_store)
    mlflow.set_tracking_uri(local_store)
    main(["throughput", "--import-store", device_store, "--results-dir", str(tmp_path / "local")])
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["throughput-serial.png", "throughput-serial.svg"]


@pytest.mark.parametrize("arguments", [["--report-name", "../x"], ["--report-name", "x.md"],
                                       ["--report-name", "x", "--import-store", "sqlite:///nowhere.db"]])
def test_bad_report_name_is_refused(arguments, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["throughput", *TINY, "--results-dir", str(tmp_path), "--mlflow", "off", *arguments])
    assert "option --report-name" in f"{stop.value.code} {capsys.readouterr().err}"
    assert not list(tmp_path.iterdir())


def test_import_store_copies_runs_once_and_redraws_the_plot(tmp_path, monkeypatch):
    device_store, local_store = f"sqlite:///{tmp_path / 'device.db'}", f"sqlite:///{tmp_path / 'local.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", device_store)
    main(["throughput", *TINY, "--models", "sasrec", "--results-dir", str(tmp_path / "device"), "--mlflow", "on"])

    monkeypatch.setenv("MLFLOW_TRACKING_URI", local_store)
    mlflow.set_tracking_uri(local_store)
    main(["throughput", "--import-store", device_store, "--results-dir", str(tmp_path / "local")])
    main(["throughput", "--import-store", device_store, "--results-dir", str(tmp_path / "local")])  # a no-op
    main(["throughput", "--import-store", local_store, "--results-dir", str(tmp_path / "local")])  # into itself: too
    runs = mlflow.search_runs(experiment_names=["throughput"])
    assert sorted(runs["tags.mlflow.runName"]) == ["sasrec lm-tiny", "sasrec recsys-tiny"]
    source = mlflow.MlflowClient(tracking_uri=device_store)
    run = runs[runs["tags.mlflow.runName"] == "sasrec lm-tiny"].iloc[0]
    copied = mlflow.MlflowClient().get_metric_history(run["run_id"], "tokens_per_s")
    original = source.get_metric_history(run["tags.source_run_id"], "tokens_per_s")
    assert [(m.step, m.value) for m in copied] == [(m.step, m.value) for m in original]
    assert (tmp_path / "local" / "throughput-tiny.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "local" / "throughput-tiny.md").exists()


def test_import_store_without_runs_names_the_option(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'local.db'}")
    with pytest.raises(SystemExit, match=f"option --import-store: no such file {tmp_path / 'typo.db'}"):
        main(["throughput", "--import-store", f"sqlite:///{tmp_path / 'typo.db'}"])
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'empty.db'}").search_experiments()  # creates the store
    with pytest.raises(SystemExit, match="option --import-store: no finished runs of experiment 'throughput'"):
        main(["throughput", "--import-store", f"sqlite:///{tmp_path / 'empty.db'}"])


def test_the_committed_report_reads_back_as_its_tables_print_it():
    results, configuration, device = report.read_report(RESULTS_DIR / "throughput.md")
    assert configuration.name == "paper" and configuration.file_stem == "throughput" and device.startswith("NVIDIA")
    lm = {entry.backbone: entry for entry in results if entry.shape.name == "lm-0.13B"}
    assert len(lm) == 18 and len(results) == 36
    first = lm["gated_deltanet"].cases[0]  # | gated_deltanet | 6 x 128 | 104.96M | 126.9K tok/s, 17.8 GiB | ...
    assert (first.status, first.length, first.batch) == ("ok", 2048, 8)
    assert first.tokens_per_s == pytest.approx(126_900) and first.peak_memory_mib == pytest.approx(17.8 * 1024)
    ttt = lm["ttt-linear"].cases  # 7.0K tok/s, 17.7 GiB (4 steps) | 2.8K (2 steps) | over time (~1.4K ...) | skipped
    assert ttt[0].steps == 4 and ttt[1].tokens_per_s == pytest.approx(2_800)
    assert ttt[2].status == "over time" and ttt[2].tokens_per_s == pytest.approx(1_400)
    assert ttt[3].status == "over time" and ttt[3].step_s is None


def test_redraw_draws_a_report_again_lines_labelled_per_backbone_coloured_by_family(tmp_path, monkeypatch):
    main(["throughput", *TINY, "--models", "sasrec,gated_deltanet,prism", "--results-dir", str(tmp_path),
          "--mlflow", "off"])
    drawn = {}
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: drawn.setdefault(path, figure) and path)
    main(["throughput", "--redraw", str(tmp_path / "throughput-tiny.md")])
    (path, figure), = drawn.items()
    assert path == tmp_path / "throughput-tiny.png"
    rate, memory, points = figure.axes[:3]
    assert rate.get_xscale() == "log" and rate.get_yscale() == "log"
    labels = {text.get_text(): text.get_color() for text in rate.texts}
    assert set(labels) == {"sasrec", "gated_deltanet", "prism"}  # one label per backbone
    families = {name: colour for name, (colour, _) in report.FAMILIES.items()}
    assert labels["sasrec"] == families["attention"] and labels["prism"] == families["PRISM and its ablations"]
    assert "no peak memory" in memory.texts[0].get_text()  # measured on CUDA only
    assert [tick.get_text() for tick in points.get_yticklabels()] == ["prism", "gated_deltanet", "sasrec"]
    assert "no whiskers: each point is the median of one case's timed steps" in figure.get_suptitle()


def test_redraw_refuses_a_file_that_is_no_report(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("# notes\n")
    with pytest.raises(SystemExit) as stop:
        main(["throughput", "--redraw", str(tmp_path / "notes.md")])
    assert f"{tmp_path / 'notes.md'}: not a throughput report" in f"{stop.value.code} {capsys.readouterr().err}"
    with pytest.raises(SystemExit) as stop:
        main(["throughput", "--redraw", str(tmp_path / "missing.md")])
    assert "missing.md" in f"{stop.value.code} {capsys.readouterr().err}"
