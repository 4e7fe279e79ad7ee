"""``prism-rec authors {train,grid,table}`` refuse a bad option in one line naming it (exit status 2) before
any data is read, anything trains or a file is written; the campaign commands share one --device help."""

import pytest

from prism_rec.cli import main
from prism_rec.experiments.campaign import DEVICE_HELP
from prism_rec.protocols.authors import commands
from prism_rec.training.devices import ONE_DEVICE_HELP


def refusal(argv: list[str], capsys) -> str:
    """The one line with which ``prism-rec ARGV`` ends, after checking that it ends with exit status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error, error
    return error


@pytest.fixture
def no_work(monkeypatch):
    """Reading a dataset, training or running the grid fails the test."""
    def work(*args, **kwargs):
        raise AssertionError("a refused command started work")

    for name in ("load_task", "run", "run_grid"):
        monkeypatch.setattr(commands, name, work)
    # a Triton scan backend off CUDA is refused unless Triton's interpreter is on, which tests/kernels/conftest.py
    # turns on for the whole session
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.parametrize("argv, message", [
    (["--model", "bogus"], "option --model: unknown model 'bogus'; known: "),
    (["--head-width", "0"], "option --head-width: expected per-backbone or a positive integer, got '0'"),
    (["--head-width", "wide"], "option --head-width: expected per-backbone or a positive integer, got 'wide'"),
    (["--min-user-edges", "0"], "option --min-user-edges: must be >= 1, got 0"),
    (["--dataset", "bogus"], "option --dataset: unknown dataset 'bogus'; registered: "),
    (["--dataset", "electronics-gerec"], "option --dataset: dataset 'electronics-gerec' has no time per interaction"),
    (["--seed", "-1"], "option --seed: must be >= 0, got -1"),
    (["--epochs", "0"], "option --epochs: must be an integer in [1, 1000000], got 0"),
    (["--lr", "0"], "option --lr: must be a positive finite number, got 0.0"),
    (["--dropout", "1"], "option --dropout: must be in [0, 1), got 1.0"),
    (["--device", "tpu"], "option --device: 'tpu' is not a usable device"),
    (["--scan-backend", "fast"], "option --scan-backend: expected one of auto, naive, torch"),
    (["--scan-backend", "torch"], "option --scan-backend: sasrec runs no delta scan"),
    (["--model", "prism", "--scan-backend", "triton"], "option --scan-backend: triton needs a CUDA device"),
])
def test_bad_train_options_are_refused_before_work(argv, message, tmp_path, capsys, no_work):
    record = tmp_path / "record.json"
    error = refusal(["authors", "train", "--device", "cpu", "--record", str(record), *argv], capsys)
    assert error.startswith(f"prism-rec authors: {message}"), error
    assert not record.exists()


@pytest.mark.parametrize("argv, message", [
    (["--models", "bogus"], "option --models: unknown model 'bogus'"),
    (["--models", ","], "option --models: empty list"),
    (["--models", "prism-L0"], "option --models: prism-L0 take the learning rate chosen for prism"),
    (["--datasets", "bogus"], "option --datasets: unknown dataset 'bogus'; registered: "),
    (["--datasets", "electronics-gerec"], "option --datasets: dataset 'electronics-gerec' has no time"),
    (["--lr", "0.001"], "option --lr: the grid chooses its rates"),
    (["--lr-grid", ""], "option --lr-grid: the learning-rate grid is empty"),
    (["--lr-grid", ","], "option --lr-grid: the learning-rate grid is empty"),
    (["--lr-grid", "1e-2,1e-3"], "option --lr-grid: the rates must increase, each once; got '1e-2,1e-3'"),
    (["--lr-grid", "1e-3,1e-3"], "option --lr-grid: the rates must increase, each once"),
    (["--lr-grid", "1e-3,x"], "option --lr-grid: 'x' is not a number"),
    (["--lr-grid", "2e-3"], "option --lr-grid: 0.002 not on the rate ladder"),
    (["--seeds", "0"], "option --seeds: need at least one seed"),
    (["--seeds", "-2"], "option --seeds: need at least one seed"),
    (["--seeds", "three"], "option --seeds: "),
    (["--equal-head", "x"], "option --equal-head: expected per-backbone or a positive integer"),
    (["--equal-head", "0"], "option --equal-head: expected per-backbone or a positive integer"),
    (["--budget", "-5"], "option --budget: must be a finite number in (0"),
    (["--workers", "0"], "option --workers: must be an integer in [1"),
    (["--min-user-edges", "0"], "option --min-user-edges: must be >= 1"),
    (["--device", "tpu"], "option --device: 'tpu' is not a usable device"),
    (["--scan-backend", "fast"], "option --scan-backend: expected one of auto, naive, torch"),
    (["--scan-backend", "triton"], "option --scan-backend: triton needs a CUDA device"),
    (["--models", "sasrec,null", "--scan-backend", "torch"],
     "option --scan-backend: none of the models (sasrec, null)"),
])
def test_bad_grid_options_are_refused_before_work(argv, message, tmp_path, capsys, no_work):
    error = refusal(["authors", "grid", "--out", str(tmp_path / "out"), "--device", "cpu", *argv], capsys)
    assert error.startswith(f"prism-rec authors: {message}"), error
    assert not (tmp_path / "out").exists()


def test_a_min_user_edges_that_keeps_no_user_is_refused_before_training(tmp_path, capsys):
    error = refusal(["authors", "grid", "--out", str(tmp_path / "out"), "--device", "cpu", "--datasets", "ml-100k",
                     "--min-user-edges", "100000"], capsys)
    assert error.startswith("prism-rec authors: option --min-user-edges: dataset 'ml-100k' has 0 user(s) with "
                            ">= 100000 edges")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, message", [
    (["--from", ","], "option --from: empty list"),
    (["--from", "{tmp}/missing"], "option --from: {tmp}/missing/manifest.jsonl does not exist"),
    (["--from", "{tmp}/empty"], "option --from: no finished runs in {tmp}/empty"),
    (["--from", "{tmp}/empty", "--next-item", ","], "option --next-item: empty list"),
])
def test_bad_table_options_are_refused_before_the_report_is_written(argv, message, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "manifest.jsonl").write_text("")
    report = tmp_path / "authors_protocol.md"
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    error = refusal(["authors", "table", "--report", str(report), *argv], capsys)
    assert error.startswith(f"prism-rec authors: {message.format(tmp=tmp_path)}"), error
    assert not report.exists()


@pytest.mark.parametrize("argv, message", [
    (["headline", "run", "--out", "OUT", "--protocol", "authors"], "argument --protocol: invalid choice: 'authors'"),
    (["headline", "run", "--out", "OUT", "--head-width", "64"], "unrecognized arguments: --head-width 64"),
    (["authors", "grid", "--out", "OUT", "--widths", "d64"], "unrecognized arguments: --widths d64"),
    (["authors", "grid", "--out", "OUT", "--lr-gr", "1e-3"], "unrecognized arguments: --lr-gr"),  # no prefixes
    (["authors", "train", "--protocol", "v3"], "unrecognized arguments: --protocol v3"),
])
def test_an_unknown_protocol_or_another_protocols_option_is_refused(argv, message, tmp_path, capsys):
    assert message in refusal([str(tmp_path / "out") if arg == "OUT" else arg for arg in argv], capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, device_help", [
    (["headline", "run"], DEVICE_HELP), (["split-study", "run"], DEVICE_HELP), (["probe"], DEVICE_HELP),
    (["authors", "grid"], DEVICE_HELP), (["authors", "train"], ONE_DEVICE_HELP), (["throughput"], ONE_DEVICE_HELP),
])
def test_the_campaign_commands_share_one_device_help(argv, device_help, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    described = " ".join(capsys.readouterr().out.split())
    assert f"--device DEVICE {device_help} " in described
