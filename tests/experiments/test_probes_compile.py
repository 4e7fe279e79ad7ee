"""The probes' compiled training step (``prism-rec probe --compile``) against eager, on CPU.

torch.compile runs with the "aot_eager" backend here (the graphs it builds, forward and backward, run
eagerly: seconds, no C++ compiler), put in place of the mode's backend; CUDA graphs need a GPU and are
checked on the device by ``--check-compile`` (benchmarks/probes_gpu.sh runs it before the grid).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from prism_rec.cli import main
from prism_rec.experiments.probes import train
from prism_rec.experiments.probes.grid import TABLE_MODELS, product_runs
from prism_rec.experiments.probes.manifest import load_manifest
from prism_rec.experiments.probes.runner import run_probes
from prism_rec.experiments.probes.settings import settings_for
from prism_rec.training import compile as compile_module

TINY = {"seq_len": 12, "batch_size": 4, "eval_size": 32, "d_model": 8, "n_layers": 1}


@pytest.fixture
def aot_eager(monkeypatch):
    """Every compilation of the probes with torch.compile's "aot_eager" backend."""
    monkeypatch.setattr(train, "CompiledFunction",
                        functools.partial(compile_module.CompiledFunction, backend="aot_eager"))


def test_the_graphs_backend_traces_the_authors_preset():
    """The "graphs" wiring (torch.compile's cudagraphs backend, which runs a CPU graph without CUDA graphs) on
    the probe model whose backbone the recommender's compile tests do not cover."""
    settings = settings_for("paper", "parity", TINY)
    torch.manual_seed(0)
    model = train._probe_model("transformer-authors-probe", settings, torch.device("cpu"))
    tokens, targets = train._final_batch("parity", np.random.default_rng(0), 4, settings, torch.device("cpu"))
    gaps = compile_module.compiled_gaps(model, model.loss, compile_module.CompiledFunction(model.loss, "graphs"),
                                        tokens, targets)
    assert gaps["output"] < 1e-6 and gaps["gradients"] < 1e-5, gaps


@pytest.mark.parametrize("model", TABLE_MODELS)
def test_compiled_training_matches_eager(model, aot_eager):
    """One step's loss and gradients, and the loss curve of 4 whole steps (clipping, AdamW), for every model
    of the grid's table."""
    gaps = train.compiled_step_gaps(model, "local_xor", settings_for("paper", "local_xor", TINY), "inductor",
                                    steps=4)
    assert gaps["output"] < 1e-6 and gaps["gradients"] < 1e-5 and gaps["loss_curve"] < 1e-6, gaps


def test_a_compiled_run_gives_eager_accuracy_and_keeps_its_identity(tmp_path, aot_eager):
    """A 30-step run compiled ends at eager's accuracy and loss curve (within 1e-5: float rounding of the
    compiled graphs); the manifest records the mode, and a run of the other mode is taken for the same run."""
    runs = product_runs(["local_xor"], ["gated_deltanet"], [0], "paper", {**TINY, "steps": 30})
    run_probes(runs, tmp_path / "eager", device="cpu", log_mlflow=False, compile="off")
    run_probes(runs, tmp_path / "compiled", device="cpu", log_mlflow=False, compile="inductor")
    (eager,), (compiled,) = load_manifest(tmp_path / "eager"), load_manifest(tmp_path / "compiled")
    assert (eager["compile"], compiled["compile"]) == ("off", "inductor")
    assert compiled["accuracy"] == eager["accuracy"]
    assert [loss for _, loss in compiled["loss_curve"]] == pytest.approx([loss for _, loss in eager["loss_curve"]],
                                                                          rel=1e-5)
    again = run_probes(runs, tmp_path / "compiled", device="cpu", log_mlflow=False, compile="off")
    assert again["counts"]["skipped (already in manifest)"] == 1


def test_the_default_compiles_nothing_on_cpu_and_the_check_says_so(tmp_path, capsys):
    options = ["--tasks", "local_xor", "--models", "sasrec", "--seeds", "1", "--steps", "2", "--seq-len", "12",
               "--batch-size", "4", "--eval-size", "16", "--device", "cpu", "--out", str(tmp_path), "--no-mlflow"]
    main(["probe", *options])
    assert load_manifest(tmp_path)[0]["compile"] == "off" and "compile off" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="graphs compiles nothing on cpu"):
        main(["probe", *options, "--check-compile"])


def test_the_check_prints_each_model_once(tmp_path, aot_eager, capsys):
    main(["probe", "--tasks", "local_xor,parity", "--models", "sasrec", "--seeds", "2", "--steps", "4", "--seq-len",
          "12", "--batch-size", "4", "--d-model", "8", "--n-layers", "1", "--device", "cpu", "--compile", "inductor",
          "--check-compile", "--out", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("compile inductor, paper/local_xor/T12/sasrec/s0: relative gap")
    assert not load_manifest(tmp_path)
