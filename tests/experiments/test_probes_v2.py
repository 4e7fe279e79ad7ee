"""Probes v2 (issue 24): the authors' probe Transformer, the grid and its order, the resumable runner with
``weights_only`` checkpoints, and the report on a synthetic manifest (no GPU results exist yet)."""

from __future__ import annotations

import math
import os
import time

import pytest
import torch
import torch.nn.functional as F

from prism_rec.cli import main
from prism_rec.experiments.probes.grid import (
    PAPER_COLUMNS,
    SEEDS,
    SWEEP_LENGTHS,
    SWEEP_MODELS,
    TABLE_MODELS,
    grid_runs,
    product_runs,
)
from prism_rec.experiments.probes.manifest import CHECKPOINTS_NAME, PROTOCOL, load_manifest, save_manifest
from prism_rec.experiments.probes.model import PROBE_BACKBONES, ProbeModel, build_probe_backbone
from prism_rec.experiments.probes.report import write_grid_report
from prism_rec.experiments.probes.runner import _load_checkpoints, _save_checkpoints, run_probes
from prism_rec.experiments.probes.tasks import TASKS
from prism_rec.registry import list_backbones
from tests.models import test_backbone_contract as contract
from tests.models import test_init

PRESET = "transformer-authors-probe"


def build_preset(name=PRESET, **options):
    torch.manual_seed(0)
    return build_probe_backbone(name, contract.D_MODEL, dropout=0.0, **options).eval()


@pytest.mark.parametrize("check", [contract.test_shape_and_finite, contract.test_causal,
                                   contract.test_prefix_alone_gives_the_same_outputs,
                                   contract.test_left_padding_invariant, contract.test_every_parameter_gets_gradient])
def test_the_preset_keeps_the_backbone_contract(check, monkeypatch):
    monkeypatch.setattr(contract, "build", build_preset)
    check(PRESET)


def test_the_preset_starts_from_pytorch_defaults_and_stays_out_of_the_main_registry(monkeypatch):
    monkeypatch.setattr(test_init, "build", lambda name: build_probe_backbone(name, test_init.D))
    test_init.test_backbone_starts_from_its_reference(PRESET)
    assert PRESET not in list_backbones() and set(PROBE_BACKBONES) == {PRESET}


def authors_stack(model, x: torch.Tensor) -> torch.Tensor:
    """rec/test_syntheticdata.py 17-39, 336-350, 378-406 and 633-635, restated with the preset's weights on an
    unpadded sequence: x + Mixer(LN(x)), x + MLP(LN(x)); Mixer = RoPE attention over SiLU(conv_3(x))."""
    B, T, d = x.shape
    for mixer_norm, mixer, mlp_norm, mlp in zip(model.mixer_norms, model.mixers, model.mlp_norms, model.mlps):
        h = mixer_norm(x).transpose(1, 2)  # [B, d, T]
        conv = mixer.conv.conv
        c = F.silu(F.conv1d(F.pad(h, (2, 0)), conv.weight, conv.bias, groups=d).transpose(1, 2))
        H, D = mixer.n_heads, d // mixer.n_heads
        q, k, v = (c @ p.weight.T for p in (mixer.q_proj, mixer.k_proj, mixer.v_proj))
        q, k, v = (t.view(B, T, H, D) for t in (q, k, v))
        inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
        freqs = torch.outer(torch.arange(T).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)[None, :, None, :]  # [1, T, 1, D]

        def rotate_half(t, D=D):
            return torch.cat((-t[..., D // 2:], t[..., : D // 2]), dim=-1)

        q, k = q * emb.cos() + rotate_half(q) * emb.sin(), k * emb.cos() + rotate_half(k) * emb.sin()
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(torch.triu(torch.ones(T, T), diagonal=1).bool(), float("-inf")).softmax(-1)
        x = x + mixer.out_proj((att @ v).transpose(1, 2).reshape(B, T, d))
        x = x + mlp(mlp_norm(x))
    return x


@pytest.mark.parametrize("n_heads", [1, 2])
def test_the_preset_computes_the_authors_probe_transformer(n_heads):
    model = build_preset(n_heads=n_heads)
    torch.manual_seed(2)
    x = torch.randn(2, 13, contract.D_MODEL)
    with torch.no_grad():
        ours = model(x, torch.ones(2, 13, dtype=torch.bool))
        torch.testing.assert_close(ours, authors_stack(model, x), rtol=1e-5, atol=1e-5)


def test_the_probe_model_reads_the_final_token_with_a_bias_free_head():
    model = ProbeModel(PRESET, vocab_size=12, seq_len=9, d_model=8, n_layers=1, n_heads=1)
    assert model.head.bias is None
    assert model(torch.randint(0, 12, (3, 9))).shape == (3, 12)


def test_the_grid_plans_every_run_once_in_priority_order():
    runs = grid_runs()
    n_tasks = len(TASKS)
    assert len({run.identity for run in runs}) == len(runs) == \
        2 * n_tasks * len(TABLE_MODELS) * len(SEEDS) + (len(SWEEP_LENGTHS) - 1) * len(SWEEP_MODELS) * len(SEEDS)
    core = n_tasks * len(PAPER_COLUMNS) * len(SEEDS)
    assert {(r.profile, r.model in PAPER_COLUMNS) for r in runs[:core]} == {("paper", True)}
    assert [r.seed for r in runs[:core]] == sorted(r.seed for r in runs[:core])  # seed outermost
    assert {(r.profile, r.model in PAPER_COLUMNS) for r in runs[core:2 * core]} == {("authors-code", True)}
    sweep = runs[2 * core:2 * core + 39]  # 4 short lengths x 3 models x 3 seeds, and transformer++ at 128
    assert all(r.task == "local_xor" and r.profile == "paper" for r in sweep)
    assert [r.model for r in sweep if r.settings.seq_len == 128] == ["transformer++"] * 3
    assert runs[2 * core].settings.seq_len == 8 and runs[0].label == f"paper/parity/{PAPER_COLUMNS[0]}/s0"


def tiny_runs(models=("sasrec",), seeds=(0,), steps=40):
    overrides = {"steps": steps, "seq_len": 12, "batch_size": 4, "eval_size": 32, "d_model": 8}
    return product_runs(["local_xor"], list(models), list(seeds), "paper", overrides)


def test_a_budget_pauses_runs_with_weights_only_checkpoints_and_the_next_call_finishes_them(tmp_path, monkeypatch,
                                                                                               capsys):
    clock = iter(range(10**6))
    monkeypatch.setattr(time, "time", lambda: float(next(clock)))  # every module's clock: one tick a call
    runs = tiny_runs(models=("sasrec", PRESET))
    first = run_probes(runs, tmp_path, device="cpu", time_budget=12, log_mlflow=False)
    assert first["counts"]["paused"] == 1 and first["counts"]["not started"] == 1
    stored = torch.load(tmp_path / CHECKPOINTS_NAME, weights_only=True)
    assert list(stored) == [runs[0].identity]
    monkeypatch.undo()
    second = run_probes(runs, tmp_path, device="cpu", log_mlflow=False)
    assert second["counts"]["finished"] == 2 and not (tmp_path / CHECKPOINTS_NAME).exists()
    entries = load_manifest(tmp_path)
    assert [e["protocol"] for e in entries] == [PROTOCOL] * 2 and entries[0]["steps"] == 40
    assert run_probes(runs, tmp_path, device="cpu", log_mlflow=False)["counts"]["skipped (already in manifest)"] == 2


def test_a_checkpoint_over_the_limit_is_dropped(tmp_path, monkeypatch, capsys):
    clock = iter(range(10**6))
    monkeypatch.setattr(time, "time", lambda: float(next(clock)))
    result = run_probes(tiny_runs(), tmp_path, device="cpu", time_budget=12, log_mlflow=False, checkpoint_limit=100)
    assert result["counts"]["paused"] == 1 and not (tmp_path / CHECKPOINTS_NAME).exists()
    assert "dropped (the run starts over next time)" in capsys.readouterr().out


def test_the_checkpoint_file_is_the_size_of_its_checkpoints_and_reads_back_unchanged(tmp_path):
    checkpoints = {"paper/a/s0": os.urandom(300_000), "paper/b/s1": os.urandom(200_000)}  # incompressible bytes
    _save_checkpoints(tmp_path, checkpoints)
    assert (tmp_path / CHECKPOINTS_NAME).stat().st_size <= 500_000 + 4096  # not 1.5x, as pickled bytes were
    assert _load_checkpoints(tmp_path) == checkpoints


def test_no_run_starts_within_the_start_margin_of_the_budget_s_end(tmp_path):
    result = run_probes(tiny_runs(seeds=(0, 1)), tmp_path, device="cpu", time_budget=100, log_mlflow=False,
                        start_margin=100)
    assert result["counts"]["not started"] == 2 and result["counts"]["finished"] == 0
    with pytest.raises(ValueError, match="option --start-margin"):
        run_probes(tiny_runs(), tmp_path, device="cpu", start_margin=-1, log_mlflow=False)


def test_a_run_not_paused_within_the_grace_is_abandoned_and_keeps_its_earlier_checkpoint(tmp_path, monkeypatch,
                                                                                           capsys):
    from prism_rec.experiments.campaign import LocalExecutor, Status
    from prism_rec.experiments.probes import runner

    class AbandonAll(LocalExecutor):
        def run(self, jobs, work, deadline, on_result, abandon_after, expected_seconds, wanted):
            assert abandon_after == runner.PAUSE_GRACE_SECONDS
            for job in jobs:
                on_result(job, {"status": Status.ABANDONED.value})
            return []

    runs = tiny_runs(seeds=(0, 1))
    _save_checkpoints(tmp_path, {runs[0].identity: b"earlier"})
    result = run_probes(runs, tmp_path, time_budget=100, log_mlflow=False, executor=AbandonAll(2, "cpu"))
    assert result["counts"]["abandoned"] == 2 and result["unfinished"] == [run.label for run in runs]
    assert _load_checkpoints(tmp_path) == {runs[0].identity: b"earlier"}
    out = capsys.readouterr().out
    assert "resumes from its previous checkpoint next time" in out and "abandoned; it starts over next time" in out


def synthetic_entry(run, accuracy: float, protocol: int = PROTOCOL) -> dict:
    return {"task": run.task, "task_version": TASKS[run.task].version, "protocol": protocol, "model": run.model,
            "seed": run.seed, "profile": run.profile, "settings": run.settings.as_dict(), "accuracy": accuracy,
            "machine": "NVIDIA H200 (CUDA 13.0)", "git_commit": "abc1234", "torch_version": "2.11.0+cu130",
            "wall_seconds": 100.0 + run.seed}


def synthetic_accuracy(run) -> float:
    """Parity as the paper (Transformer and PRISM solve, linear attention at chance); MQAR solved by all;
    silence gate with PRISM above the Transformer; local XOR solved up to length 16."""
    if run.task == "local_xor":
        return 1.0 if run.settings.seq_len <= 16 else 0.5 + 0.001 * run.seed
    if run.task == "parity":
        return 0.5 + 0.01 * run.seed if run.model == "gated_deltanet" else 1.0
    if run.task == "silence_gate":
        return {"transformer-authors-probe": 0.7, "gated_deltanet": 0.5, "prism:L=2": 0.8}.get(run.model, 0.6)
    return 0.98


def test_the_report_from_a_synthetic_manifest(tmp_path):
    runs = grid_runs()
    entries = [synthetic_entry(run, synthetic_accuracy(run)) for run in runs if not (
        run.profile == "authors-code" and run.task == "mqar" and run.seed == 2)]  # one seed missing
    entries.append(synthetic_entry(runs[0], 0.123, protocol=1))  # an earlier run: never counted
    save_manifest(tmp_path, entries)
    text = write_grid_report(tmp_path, "prism-rec probe --grid", unfinished=[]).read_text()
    paper, authors = text.split("## Profile `paper`")[1].split("## Profile `authors-code`")
    one = "1.000 ± 0.000 (3/3)"
    assert f"| parity | {one} | {one} | {one} | 0.510 ± 0.010 (0/3) |" in paper
    assert "| 1.00 | 0.49 | 1.00 |" in paper  # the paper's figures beside ours
    assert f"{len(entries) - 1} of the {len(runs)} planned runs" in text and "1 earlier" in text
    assert "landed (`prism_rec/models/init.py`" in text and "Median wall time of a run: 101 s (412 runs)" in text
    assert "Machine: NVIDIA H200 (CUDA 13.0). torch 2.11.0+cu130. Commit: abc1234." in text
    assert ("Training step compile mode (prism_rec/training/compile.py; float rounding apart, the same training): "
            "off (412 runs).") in text
    claims = {line.split(" | ")[0].strip("| "): line.split(" | ")[-1] for line in paper.splitlines()
              if line.startswith("| ") and "checks" in line or line.endswith("holds |")}
    assert claims["parity"].startswith("holds")
    assert claims["palindrome"].startswith("partly holds (1 of 3 checks)")  # the paper's attention fails it
    assert "Transformer not above PRISM (0.700 vs 0.800)" in claims["silence_gate"]
    assert "| mqar |" in authors and "0.980 ± 0.000 (2/2; 1 missing)" in authors and "holds (2 seeds)" in authors
    sweep = text.split("## Local XOR by length")[1]
    assert f"| 16 | {one} | {one} | {one} |" in sweep
    assert ("- gated_deltanet: mean >= 0.9 at lengths 8, 16; below at lengths 32, 64, 128; the longest length a "
            "seed solved: 16 (3 of 3 seeds).") in sweep


def test_the_grid_cli_refuses_setting_options_and_a_spent_budget_writes_the_report(tmp_path, capsys):
    with pytest.raises(SystemExit, match="--grid: the grid fixes its settings; drop --steps"):
        main(["probe", "--grid", "--steps", "5", "--out", str(tmp_path)])
    main(["probe", "--grid", "--device", "cpu", "--time-budget", "1e-9", "--out", str(tmp_path), "--no-mlflow"])
    report = (tmp_path / "probes.md").read_text()
    assert "0 of the 420 planned runs" in report and "Not finished in this invocation: 420 runs" in report
    assert ("Command: `prism-rec probe --device cpu --compile graphs --workers 1 --time-budget 1e-09 "
            "--start-margin 60.0 --out") in report
