"""Probe tasks, settings, training (pause/resume) and the `probe` command (prism_rec/experiments/probes).

Each task's format is read back by an independent reference reader written from the documented format
(prism_rec/experiments/probes/tasks.py); the readers are checked on hand-made sequences, and every generator's
targets must equal what the reader finds in its sequences.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from prism_rec.cli import main
from prism_rec.experiments.probes import tasks
from prism_rec.experiments.probes.manifest import MANIFEST_NAME, load_manifest
from prism_rec.experiments.probes.settings import settings_for
from prism_rec.experiments.probes.train import ProbeJob, train_probe

QUERY, OP = 0, 1


def single(sequence, token):
    """The one position of ``token`` in ``sequence`` (it must occur exactly once)."""
    where = [i for i, t in enumerate(sequence) if t == token]
    assert len(where) == 1, f"token {token} occurs at {where}"
    return where[0]


def read_parity(s, n_bits=3):
    assert s[-1] == QUERY
    bit_tokens = s[single(s, OP) - n_bits:single(s, OP)]
    assert set(bit_tokens) <= {4, 5, 6, 7}
    return 3 if sum(t % 2 for t in bit_tokens) % 2 else 2


def read_local_xor(s):
    a, b = s[single(s, OP) - 2:single(s, OP)]
    return 3 if a % 2 != b % 2 else 2


def read_modulo_add(s, modulus=16):
    a, b = (t - 2 for t in s[single(s, OP) - 2:single(s, OP)])
    assert 0 <= a < modulus and 0 <= b < modulus
    return 2 + (a + b) % modulus


def read_palindrome(s, window=3):
    word = list(s[single(s, OP) - window:single(s, OP)])
    return 3 if word == word[::-1] else 2


def read_mqar(s):
    key = s[-1]
    return s[single(s[:-2], key) + 1]


def read_silence_gate(s):
    switch = [i for i, t in enumerate(s[:-2]) if t in (1, 2)]
    assert len(switch) == 1 and s[switch[0] + 1] == s[-1]
    return s[switch[0] + 2] if s[switch[0]] == 1 else 3


def read_mux(s):
    selector, channel0, channel1 = s[single(s, OP) - 3:single(s, OP)]
    return channel0 if selector == 2 else channel1


def read_variable_tracking(s):
    assignments = [i for i, t in enumerate(s[:-2]) if t == s[-1]]
    return s[assignments[-1] + 1]


READERS = {"parity": read_parity, "local_xor": read_local_xor, "modulo_add": read_modulo_add,
           "palindrome": read_palindrome, "mqar": read_mqar, "silence_gate": read_silence_gate, "mux": read_mux,
           "variable_tracking": read_variable_tracking}

HAND_MADE = [  # (task, sequence, expected target)
    ("parity", [9, 5, 4, 5, OP, 7, QUERY], 2),  # bits 1 0 1: even -> FALSE
    ("parity", [5, 5, 5, OP, 8, 9, QUERY], 3),  # bits 1 1 1: odd -> TRUE
    ("parity", [6, 4, 4, 4, OP, QUERY], 2),  # bits 0 0 0
    ("parity", [7, 5, 6, 7, 6, OP, 5, QUERY], 3),  # bits 0 1 0; bit tokens in the noise do not count
    ("local_xor", [7, 10, 13, OP, 12, QUERY], 3),  # low bits 0, 1 -> TRUE
    ("local_xor", [7, 10, 12, OP, 12, QUERY], 2),  # low bits 0, 0 -> FALSE
    ("local_xor", [7, 11, 12, OP, 12, QUERY], 3),  # low bits 1, 0 -> TRUE
    ("modulo_add", [20, 2 + 9, 2 + 12, OP, 30, QUERY], 2 + 5),  # (9 + 12) mod 16 = 5
    ("modulo_add", [2 + 3, 2 + 4, OP, QUERY], 2 + 7),
    ("palindrome", [9, 7, 8, 7, OP, 5, QUERY], 3),  # 7 8 7
    ("palindrome", [9, 7, 8, 8, OP, 5, QUERY], 2),  # 7 8 8
    ("mqar", [11, 30, 12, 31, 5, 6, 7, 8, 9, 10, QUERY, 12], 31),
    ("mqar", [11, 30, 12, 31, 5, 6, 7, 8, 9, 10, QUERY, 11], 30),
    ("silence_gate", [9, 1, 14, 15, 8, QUERY, 14], 15),  # switched ON: recall the value
    ("silence_gate", [9, 2, 14, 15, 8, QUERY, 14], 3),  # switched OFF: NULL
    ("mux", [9, 2, 20, 30, OP, 8, QUERY], 20),  # SEL0 -> ch0
    ("mux", [9, 3, 20, 30, OP, 8, QUERY], 30),  # SEL1 -> ch1
    ("variable_tracking", [1, 20, 9, 2, 21, 1, 22, 9, QUERY, 1], 22),  # x1 = 20, x2 = 21, x1 = 22; ask x1
    ("variable_tracking", [1, 20, 9, 2, 21, 1, 22, 9, QUERY, 2], 21),
]


@pytest.mark.parametrize("task, sequence, expected", HAND_MADE)
def test_readers_on_hand_made_sequences(task, sequence, expected):
    assert READERS[task](sequence) == expected


@pytest.mark.parametrize("task", list(tasks.TASKS))
@pytest.mark.parametrize("seq_len, vocab_size", [(128, 64), (24, 32)])
def test_generator_targets_match_the_reader(task, seq_len, vocab_size):
    tokens, targets = tasks.make_batch(task, np.random.default_rng(0), 400, seq_len, vocab_size)
    assert tokens.shape == targets.shape == (400, seq_len) and tokens.dtype == np.int64
    assert (targets[:, :-1] == tasks.IGNORE).all()
    assert tokens.min() >= 0 and tokens.max() < vocab_size and targets[:, -1].max() < vocab_size
    for sequence, target in zip(tokens.tolist(), targets[:, -1].tolist()):
        assert READERS[task](sequence) == target
    answers = targets[:, -1]
    if task in ("parity", "local_xor", "palindrome"):
        assert 0.4 < (answers == 3).mean() < 0.6  # balanced binary answer
    if task == "silence_gate":
        assert 0.4 < (answers == 3).mean() < 0.6


def test_generators_are_seeded():
    first = tasks.make_batch("mqar", np.random.default_rng(7), 8, 64, 64)
    again = tasks.make_batch("mqar", np.random.default_rng(7), 8, 64, 64)
    other = tasks.make_batch("mqar", np.random.default_rng(8), 8, 64, 64)
    assert all((a == b).all() for a, b in zip(first, again))
    assert not (first[0] == other[0]).all()


def test_bad_sizes_and_names_name_the_option():
    with pytest.raises(ValueError, match="--vocab-size"):
        tasks.make_batch("modulo_add", np.random.default_rng(0), 2, 64, 10)
    with pytest.raises(ValueError, match="--seq-len"):
        tasks.make_batch("parity", np.random.default_rng(0), 2, 3, 64)
    with pytest.raises(ValueError, match="--tasks"):
        tasks.resolve_tasks("parity,nope")
    with pytest.raises(ValueError, match="--profile"):
        settings_for("mine", "parity")
    with pytest.raises(ValueError, match="--n-heads"):
        settings_for("paper", "parity", {"n_heads": 3})
    with pytest.raises(ValueError, match="--lr"):
        settings_for("paper", "parity", {"lr": 0.0})


def test_profiles():
    paper = settings_for("paper", "mqar")
    assert (paper.d_model, paper.vocab_size, paper.seq_len, paper.steps, paper.n_layers) == (16, 64, 128, 10_000, 2)
    authors = settings_for("authors-code", "mqar")
    assert (authors.d_model, authors.vocab_size, authors.seq_len, authors.n_heads) == (128, 32, 64, 1)
    assert settings_for("authors-code", "parity").d_model == 16
    assert settings_for("paper", "parity", {"steps": 5, "lr": None}).steps == 5


def test_paused_and_resumed_run_equals_an_uninterrupted_one(monkeypatch):
    settings = settings_for("paper", "local_xor", {"steps": 6, "seq_len": 12, "batch_size": 4, "eval_size": 32})
    whole = train_probe(ProbeJob("local_xor", "sasrec", 3, settings))
    clock = iter(range(1000))
    monkeypatch.setattr("prism_rec.experiments.probes.train.time", types.SimpleNamespace(time=lambda: next(clock)))
    paused = train_probe(ProbeJob("local_xor", "sasrec", 3, settings, deadline=4))  # pauses mid-run
    assert paused["status"] == "paused" and 0 < paused["step"] < 6
    monkeypatch.undo()
    resumed = train_probe(ProbeJob("local_xor", "sasrec", 3, settings, checkpoint=paused["checkpoint"]))
    assert resumed["status"] == whole["status"] == "finished"
    assert resumed["accuracy"] == whole["accuracy"]
    assert resumed["loss_curve"][-1] == pytest.approx(whole["loss_curve"][-1], rel=1e-5)


SMOKE = ["--tasks", "parity,mqar", "--models", "sasrec,gated_deltanet", "--seeds", "1", "--steps", "2",
         "--seq-len", "12", "--batch-size", "4", "--eval-size", "16", "--device", "cpu"]


def test_cli_smoke_writes_table_manifest_and_mlflow(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    main(["probe", *SMOKE, "--out", str(tmp_path)])
    entries = load_manifest(tmp_path)
    assert {(e["task"], e["model"], e["seed"]) for e in entries} == {
        (t, m, 0) for t in ("parity", "mqar") for m in ("sasrec", "gated_deltanet")}
    table = (tmp_path / "probes.md").read_text()
    assert "| parity |" in table and "| mqar |" in table and "gated_deltanet" in table and "| missing" not in table
    assert "| 1.00 | 0.49 | 1.00 |" in table
    # paper figures beside ours
    assert "Command: `prism-rec probe --tasks parity,mqar --models sasrec,gated_deltanet" in table
    import mlflow

    runs = mlflow.search_runs(experiment_names=["probes"])
    assert len(runs) == 4 and runs["metrics.final_accuracy"].notna().all()
    main(["probe", "--out", str(tmp_path), "--log-manifest"])  # what a run made without MLflow is logged with
    assert len(mlflow.search_runs(experiment_names=["probes"])) == 4  # no duplicates

    main(["probe", *SMOKE, "--out", str(tmp_path), "--seeds", "0,1", "--models", "sasrec", "--tasks", "parity",
                "--time-budget", "1e-9", "--no-mlflow"])  # resume: seed 0 skipped, seed 1 never started
    assert "skipped (already in manifest): 1" in capsys.readouterr().out
    table = (tmp_path / "probes.md").read_text()
    assert "1 missing)" in table and "Not finished in this invocation (1): paper/parity/sasrec/s1" in table
    assert len(load_manifest(tmp_path)) == 4
    assert all(json.loads(line) for line in (tmp_path / MANIFEST_NAME).read_text().splitlines())


def test_runs_of_an_earlier_task_format_are_not_counted(tmp_path, capsys):
    main(["probe", *SMOKE, "--out", str(tmp_path), "--models", "sasrec", "--no-mlflow"])
    entries = load_manifest(tmp_path)
    assert {e["task"]: e["task_version"] for e in entries} == {"parity": 2, "mqar": 1}
    for entry in entries:  # as written before task versions existed (parity then had its first format)
        del entry["task_version"]
    (tmp_path / MANIFEST_NAME).write_text("".join(json.dumps(e) + "\n" for e in entries))
    main(["probe", *SMOKE, "--out", str(tmp_path), "--models", "sasrec", "--no-mlflow"])
    assert "1 probe runs to do" in capsys.readouterr().out  # parity again; the mqar run still counts
    assert len(load_manifest(tmp_path)) == 3


def test_cli_option_errors(tmp_path, capsys):
    with pytest.raises(SystemExit, match="--models"):
        main(["probe", "--models", "nosuchmodel", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--models"):
        main(["probe", "--models", "prism:L", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_:
        main(["probe", *SMOKE, "--workers", "0", "--out", str(tmp_path), "--no-mlflow"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "option --workers: must be an integer in [1, 4096], got 0" in err
