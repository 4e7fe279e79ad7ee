"""benchmarks/step_bench.py end to end on CPU with tiny settings: the step table, Books scale, the
profile lines and the solo-throughput CSV that the Pareto plot reads."""

import csv
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from prism_rec.training import compile as compile_module

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def step_bench():
    """benchmarks/step_bench.py as its command line imports it: its sibling modules importable."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        spec = importlib.util.spec_from_file_location("step_bench", BENCHMARKS / "step_bench.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


def test_step_bench_on_cpu(step_bench, tmp_path, capsys):
    step_bench.main(["--device", "cpu", "--steps", "2", "--warmup", "1", "--items", "500", "--models", "sasrec,pop",
                     "--lengths", "8", "--batch-size", "8", "--d-model", "16", "--books-items", "600",
                     "--books-length", "8", "--profile-steps", "1", "--loss-path", "chunked",
                     "--datasets", "ml-100k,not-a-dataset", "--solo-steps", "2", "--solo-warmup", "1",
                     "--out-dir", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "pop: ranks by popularity and trains nothing; skipped" in printed
    assert "'not-a-dataset' is not registered; skipped" in printed
    steps = list(csv.DictReader((tmp_path / "step.csv").open()))
    assert [(r["section"], r["model"], r["seq_len"], r["n_items"], r["loss_path"], r["status"]) for r in steps] == [
        ("step", "sasrec", "8", "500", "chunked", "ok"), ("books", "sasrec", "8", "600", "chunked", "ok")]
    assert all(float(r["step_ms"]) > 0 for r in steps)
    report = (tmp_path / "step.md").read_text()
    assert "command `python benchmarks/step_bench.py --device cpu" in report and "torch " in report
    assert "| sasrec |" in report and "| sasrec | T 8, chunked | off |" in report
    with (tmp_path / "solo_throughput.csv").open() as handle:
        reader = csv.DictReader(handle)
        solo = list(reader)
    assert reader.fieldnames == ["dataset", "model", "tokens_per_s", "step_ms", "step_ms_max", "batch_size",
                                 "max_len", "n_items", "dtype", "machine", "command", "compile"]
    assert ([(r["dataset"], r["model"], r["max_len"], r["batch_size"]) for r in solo]
            == [("ml-100k", "sasrec", "50", "8")])
    assert float(solo[0]["tokens_per_s"]) > 0 and solo[0]["dtype"] == "fp32"


def test_solo_speed_is_the_median_step_over_full_batches(step_bench, monkeypatch):
    """One slow step (a kernel tuned again) leaves the solo figure alone, and the epoch's last, smaller batch
    (another shape) is never timed."""
    seen = []
    import step_solo

    def timed_steps(step, batches, warmup, steps, cell_seconds):
        seen.extend(len(batch) for batch in batches)
        return [10.0, 400.0, 12.0]

    monkeypatch.setattr(step_solo, "bench_step", lambda *args: SimpleNamespace(compile="off"))
    monkeypatch.setattr(step_solo, "timed_steps", timed_steps)
    windows = torch.ones(10, 5, dtype=torch.long)  # 10 windows of 4 targets each: batches of 4, 4 and 2
    dataset = SimpleNamespace(name="tiny", n_items=3)
    args = SimpleNamespace(batch_size=4, solo_warmup=1, solo_steps=3, cell_seconds=1.0, solo_loss_path="chunked")
    row = step_solo.solo_cell(dataset, windows, "sasrec", "off", args, torch.device("cpu"), "cmd",
                               step_bench.Budget(60.0))
    assert seen == [4, 4]
    assert (row["step_ms"], row["step_ms_max"]) == ("12.000", "400.000")
    assert row["tokens_per_s"] == f"{4 * 4 / 12.0 * 1000:.0f}"


def test_fused_path_is_skipped_without_cuda(step_bench, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    step_bench.main(["--device", "cpu", "--steps", "2", "--warmup", "1", "--items", "50", "--models", "sasrec",
                     "--lengths", "4", "--batch-size", "2", "--d-model", "8", "--books-models", "",
                     "--profile-steps", "0", "--out-dir", str(tmp_path)])
    assert "loss path 'fused' skipped on cpu" in capsys.readouterr().out
    steps = list(csv.DictReader((tmp_path / "step.csv").open()))
    assert [(r["loss_path"], r["status"]) for r in steps] == [("chunked", "ok")]
    assert not (tmp_path / "solo_throughput.csv").exists()


def test_compiled_and_eager_columns_speedups_and_time_budget(step_bench, tmp_path, monkeypatch):
    """Eager and compiled cells side by side (cudagraphs is inductor on CPU), their speed-up line, a
    spent time budget recording the cells left as skipped, and the two runs merged into one report.
    torch.compile runs with the "aot_eager" backend (the same graphs, run eagerly): TorchInductor's C++
    build of the scan's forward and backward takes minutes on a CI core and proves nothing about the report."""
    inductor_function = compile_module.CompiledFunction
    monkeypatch.setattr(compile_module, "CompiledFunction",
                        lambda function, mode, backend=None: inductor_function(function, mode, "aot_eager"))
    step_bench.main(["--device", "cpu", "--steps", "2", "--warmup", "1", "--items", "50", "--models", "gated_deltanet",
                     "--lengths", "6", "--batch-size", "2", "--d-model", "8", "--books-models", "", "--profile-steps",
                     "0", "--loss-path", "chunked", "--compile", "off,cudagraphs", "--check-compiled",
                     "gated_deltanet", "--out-dir", str(tmp_path)])
    steps = list(csv.DictReader((tmp_path / "step.csv").open()))
    assert [(r["compile"], r["status"]) for r in steps] == [("off", "ok"), ("inductor", "ok")]
    report = (tmp_path / "step.md").read_text()
    assert "compile off | 2 x 6, 50 items, chunked, compile inductor |" in report
    assert "- gated_deltanet, compile inductor: relative gap of the output " in report
    assert "Speed-up of the compiled step over eager: gated_deltanet 2 x 6 chunked inductor " in report
    assert "All 1 backbones measured both ways at 2 x 6 (chunked), one step of each: eager " in report
    assert "Warm-up seconds of the compiled cells (compilation included): gated_deltanet 2 x 6 inductor " in report
    assert float(steps[1]["warmup_s"]) > 0
    step_bench.main(["--device", "cpu", "--items", "50", "--models", "sasrec", "--lengths", "6", "--batch-size", "2",
                     "--d-model", "8", "--books-models", "", "--loss-path", "chunked", "--time-budget", "0",
                     "--datasets", "ml-100k", "--out-dir", str(tmp_path / "b")])
    steps = list(csv.DictReader((tmp_path / "b" / "step.csv").open()))
    assert [r["status"] for r in steps] == ["skipped: time budget"]
    assert list(csv.DictReader((tmp_path / "b" / "solo_throughput.csv").open())) == []
    step_bench.main(["--merge", f"{tmp_path},{tmp_path / 'b'},{tmp_path / 'absent'}", "--out-dir", str(tmp_path / "m")])
    merged = list(csv.DictReader((tmp_path / "m" / "step.csv").open()))
    assert [(r["model"], r["compile"], r["status"]) for r in merged] == [
        ("gated_deltanet", "off",
         "ok"), ("gated_deltanet", "inductor", "ok"), ("sasrec", "off", "skipped: time budget")]
    report = (tmp_path / "m" / "step.md").read_text()
    assert "Merged from 2 runs (their commands; each row is from one of them)" in report
    assert f"no results: {tmp_path / 'absent'}" in report
    assert "- gated_deltanet, compile inductor: relative gap of the output " in report


def test_grid_speedup_from_solo_rows(step_bench):
    rows = [{"dataset": d, "model": m, "compile": c, "step_ms": ms} for d, m, c, ms in [
        ("a", "x", "off", "10"), ("a", "x", "cudagraphs", "4"), ("a", "y", "off", "30"), ("a", "y", "cudagraphs", "16"),
        ("b", "x", "off", "8"), ("b", "x", "cudagraphs", "2"), ("b", "y", "off", "5")]]
    import step_report

    [line] = step_report.grid_speedup_lines(rows)
    assert "compile cudagraphs over eager" in line and "2.18x over all" in line
    assert "a 2.00x (2 backbones); b 4.00x (1 backbones)" in line


def test_check_only_exits_1_on_a_compiled_gap_or_failure(step_bench, tmp_path, monkeypatch, capsys):
    """--check-only runs the compiled-against-eager checks alone (no steps, no report) and exits 1 when a
    gap is over COMPILED_GAP_LIMIT or a compilation fails: the gate headline_gpu.sh runs before a compiled grid."""
    def check(args):
        with pytest.raises(SystemExit) as exit_:
            step_bench.main(["--device", "cpu", "--check-only", "--compile", "cudagraphs", "--check-compiled", args,
                             "--out-dir", str(tmp_path)])
        return exit_.value.code

    gaps = {"output": 1e-7, "gradients": 2e-5, "worst": "w"}
    import step_checks

    monkeypatch.setattr(step_checks, "gaps_to_eager", lambda model, mode, items: gaps)
    assert check("sasrec,pop") == 0
    assert "- sasrec, compile inductor: relative gap of the output 1.0e-07, of the gradients 2.0e-05 (worst: w)\n" \
        in capsys.readouterr().out
    gaps["gradients"] = 0.5
    assert check("sasrec") == 1 and "over 0.001, FAILED" in capsys.readouterr().out
    gaps["gradients"] = float("nan")
    assert check("sasrec") == 1 and "of the gradients nan (worst: w): over 0.001, FAILED" in capsys.readouterr().out

    def broken(model, mode, items):
        raise RuntimeError("graph break")

    monkeypatch.setattr(step_checks, "gaps_to_eager", broken)
    assert check("sasrec") == 1 and "failed: RuntimeError: graph break" in capsys.readouterr().out
    assert not (tmp_path / "step.md").exists()


def test_the_trainer_and_the_step_benchmark_run_the_same_step(step_bench, tmp_path, monkeypatch):
    """fit, the step benchmark and the throughput sweep all train through TrainingStep.__call__ (one
    definition of the step: model, loss, autocast, backward, optimizer)."""
    from prism_rec.data.batching import training_windows
    from prism_rec.data.sources import load_dataset
    from prism_rec.experiments.throughput import measure, shapes
    from prism_rec.training import step as step_module
    from prism_rec.training.config import TrainConfig
    from prism_rec.training.trainer import fit

    callers = []
    original = step_module.TrainingStep.__call__

    def recorded(self, windows, targets, scale):
        callers.append(self)
        return original(self, windows, targets, scale)

    monkeypatch.setattr(step_module.TrainingStep, "__call__", recorded)
    dataset = load_dataset("ml-100k")
    config = TrainConfig(epochs=1, d_model=8, max_len=4, batch_size=4096, eval_batch_size=1024, progress=False,
                         device="cpu")
    fit(dataset, "sasrec", config)
    assert config.compile == "off"  # "auto" resolved for the CPU, and recorded as such
    trained = len(callers)
    step_bench.main(["--device", "cpu", "--steps", "2", "--warmup", "1", "--items", "50", "--models", "sasrec",
                     "--lengths", "4", "--batch-size", "2", "--d-model", "8", "--books-models", "",
                     "--profile-steps", "0", "--loss-path", "chunked", "--out-dir", str(tmp_path)])
    benchmarked = len(callers) - trained
    configuration = shapes.Configuration(**{**shapes.CONFIGURATIONS["tiny"].__dict__, "warmup": 1, "steps": 1})
    measure.measure_backbone("sasrec", configuration.shapes[0], configuration, torch.device("cpu"), None)
    assert trained == -(-len(training_windows(dataset, 4)) // 4096) and benchmarked == 3  # 1 warm-up, 2 timed
    assert len(callers) > trained + benchmarked
    assert {type(caller) for caller in callers} == {step_module.TrainingStep}


def test_floor_ratios_and_verified_modes(step_bench, tmp_path, monkeypatch):
    """--floor with --shapes: the floor (identity mixer) is timed at every shape and mode, every backbone's
    step is given as a ratio to it and to sasrec, eager and compiled (the compiled column only from modes whose
    check passed), and the verified mode per backbone is named. torch.compile runs with "aot_eager"."""
    inductor_function = compile_module.CompiledFunction
    monkeypatch.setattr(compile_module, "CompiledFunction",
                        lambda function, mode, backend=None: inductor_function(function, mode, "aot_eager"))
    step_bench.main(["--device", "cpu", "--steps", "2", "--warmup", "1", "--items", "50", "--models",
                     "sasrec,gated_deltanet", "--floor", "--shapes", "3x6,1x12", "--d-model", "8",
                     "--books-models", "", "--profile-steps", "0", "--loss-path", "chunked", "--compile",
                     "off,inductor", "--check-compiled", "sasrec", "--out-dir", str(tmp_path)])
    steps = list(csv.DictReader((tmp_path / "step.csv").open()))
    assert [(r["model"], r["batch_size"], r["seq_len"], r["compile"]) for r in steps][:4] == [
        ("floor", "3", "6", "off"), ("sasrec", "3", "6", "off"), ("gated_deltanet", "3", "6", "off"),
        ("floor", "1", "12", "off")]  # every shape eager, then every shape compiled
    assert len(steps) == 12 and {r["status"] for r in steps} == {"ok"}
    ms = {(r["model"], r["batch_size"], r["compile"]): float(r["step_ms"]) for r in steps}
    report = (tmp_path / "step.md").read_text()
    assert "batch x length 3 x 6, 1 x 12, 50 items" in report
    assert "### 3 x 6, 50 items, chunked loss" in report and "### 1 x 12, 50 items, chunked loss" in report
    sasrec_row = next(line for line in report.split("### 1 x 12")[1].splitlines() if line.startswith("| sasrec |"))
    cells = [cell.strip() for cell in sasrec_row.strip("|").split("|")]
    eager, compiled = ms[("sasrec", "1", "off")], ms[("sasrec", "1", "inductor")]
    assert cells == ["sasrec", f"{eager:.2f}", f"{eager / ms[('floor', '1', 'off')]:.2f}x", "1.00x", "inductor",
                     f"{compiled:.2f}", f"{compiled / ms[('floor', '1', 'inductor')]:.2f}x", "1.00x"]
    gated_row = next(line for line in report.split("### 1 x 12")[1].splitlines()
                     if line.startswith("| gated_deltanet |"))
    assert "inductor unchecked" in gated_row  # gated_deltanet's compiled mode was not checked in this run
    assert "VERIFIED_MODES of prism_rec/training/compile.py is taken from here: `{'sasrec': 'inductor'}`" in report


def test_speedup_lines_without_eager_cells(step_bench):
    """A run with compiled cells only (--compile cudagraphs) has no speed-up to state; a shape whose backbones
    ran both ways gets its line. (A device run with --compile cudagraphs died writing its report on this.)"""
    import step_report

    def row(model, length, mode, ms):
        return {"model": model, "batch_size": 3, "seq_len": length, "n_items": 500, "loss_path": "fused",
                "compile": mode, "step_ms": ms, "status": "ok"}

    compiled_only = [row("floor", 16384, "cudagraphs", "48.0"), row("x", 16384, "cudagraphs", "9")]
    assert step_report.speedup_lines(compiled_only) == []
    lines = step_report.speedup_lines([row("x", 50, "off", "12"), row("x", 50, "cudagraphs", "4"),
                                       row("y", 16384, "cudagraphs", "9")])
    assert lines == ["Speed-up of the compiled step over eager: x 3 x 50 fused cudagraphs 3.00x.",
                     "All 1 backbones measured both ways at 3 x 50 (fused), one step of each: eager 12.0 ms, "
                     "cudagraphs 4.0 ms, 3.00x."]


@pytest.mark.parametrize("shapes", ["256x", "256X50", "0x50", "256x50x2", "256x-5"])
def test_bad_shapes_are_refused_before_any_step(step_bench, tmp_path, shapes):
    """--shapes takes BATCHxLENGTH pairs of positive integers (bench_options.parse_dims, shared with the other
    benchmarks); anything else stops the run with the option and the item named, before a model is built."""
    with pytest.raises(SystemExit) as exit_:
        step_bench.main(["--device", "cpu", "--shapes", f"8x4,{shapes}", "--models", "sasrec",
                         "--out-dir", str(tmp_path)])
    assert str(exit_.value) == f"--shapes: {shapes!r} is not BxT with 2 positive integers"
    assert not list(tmp_path.iterdir())
