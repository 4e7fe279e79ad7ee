"""Every subcommand's options are checked before any work or logging: one line naming the option, exit 2;
output folders and the MLflow store are checked up front too."""

import os
import sqlite3

import pytest

from prism_rec.cli import main
from prism_rec.errors import OptionError
from prism_rec.options import parse_on_off
from prism_rec.tracking import store as tracking_store

BAD = [
    ("bench --n-heads -2", "option --n-heads: must be an integer in [1, 4096], got -2"),
    ("bench --n-heads 0", "option --n-heads: must be an integer in [1, 4096], got 0"),
    ("bench --dropout nan", "option --dropout: must be a finite number in [0, 1], got nan"),
    ("bench --seeds=-1,2", "option --seeds: -1 is not a seed in [0, 4294967295]"),
    ("bench --seeds 4294967296,1", "option --seeds: 4294967296 is not a seed"),
    ("bench --seeds 1000000000000", "option --seeds: 1000000000000 seeds, at most 10000"),
    ("bench --seeds 1e12", "option --seeds: expected a count or a comma list of integers"),
    ("bench --lr 1e300", "option --lr: must be a finite number in [0, 10]"),
    ("bench --lr inf", "option --lr: must be a finite number"),
    ("bench --max-len 1000000000", "option --max-len: must be an integer in [1, 1000000]"),
    ("bench --max-len 0", "option --max-len: must be an integer in [1, 1000000], got 0"),
    ("bench --max-len 1e9", "argument --max-len: invalid int value: '1e9'"),
    ("bench --n-negatives 1000000000000", "option --n-negatives: must be an integer in [1, 16777216]"),
    ("bench --device tpu", "option --device: 'tpu' is not a usable device"),
    ("bench --models sasrec,sasrec", "option --models: sasrec listed twice"),
    ("bench --models prism --option L=abc", "option --option L=abc: backbone prism takes int L (default 3)"),
    ("bench --models prism --option L=nan", "option --option L=nan: backbone prism takes int L"),
    ("bench --option L", "argument --option: option --option: expected key=value"),
    ("probe --time-budget nan", "option --time-budget: must be a finite number in (0, 1e+09], got nan"),
    ("probe --seeds=-1", "option --seeds: need at least one seed"),
    ("probe --lr -1", "option --lr: must be a finite number in [0, 10], got -1.0"),
    ("probe --models sasrec,sasrec", "option --models: sasrec listed twice"),
    ("headline run --out {tmp}/h --budget nan", "option --budget: must be a finite number in (0, 1e+09], got nan"),
    ("headline run --out {tmp}/h --seeds 0", "option --seeds: a count in [1, 10000], got 0"),
    ("headline run --out {tmp}/h --set exclude_history=maybe", "option --set exclude_history: 'maybe' is not on"),
    ("headline run --out {tmp}/h --set cutoffs=10,x", "option --set 'cutoffs=10,x': '10,x' is not a comma list"),
    ("throughput --steps 0", "option --steps: must be an integer in [1, 1000000000], got 0"),
    ("throughput --total-budget -5", "option --total-budget: must be a finite number in (0, 1e+09], got -5.0"),
    ("throughput --device cuda:x", "option --device: 'cuda:x' is not a usable device"),
    ("ui --port 70000", "option --port: must be an integer in [1, 65535], got 70000"),
    ("list --d-model 0", "option --d-model: must be an integer in [1, 65536], got 0"),
    ("data download --dataset ml-100k --timeout nan", "option --timeout: must be a finite number in (0, 1e+06]"),
    ("bench --results-dir /proc/no/such", "option --results-dir: cannot write in /proc"),
    ("bench --checkpoint-dir {tmp}/file", "option --checkpoint-dir: {tmp}/file is a file; expected a folder"),
    ("probe --out /proc/x", "option --out: cannot write in /proc"),
]


@pytest.mark.parametrize("command, message", BAD, ids=[command for command, _ in BAD])
def test_a_bad_option_ends_in_one_line_naming_it_before_any_work(store, capsys, command, message):
    (store / "file").write_text("")
    argv = command.format(tmp=store).split()
    with pytest.raises(SystemExit) as exit:
        main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1, err
    assert message.format(tmp=store) in err
    assert not (store / "mlflow.db").exists()  # nothing logged, not even the store created


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_a_read_only_results_folder_is_found_up_front(store, capsys):
    folder = store / "read-only"
    folder.mkdir(mode=0o555)
    with pytest.raises(SystemExit) as exit:
        main(["bench", "--results-dir", str(folder / "results")])
    assert exit.value.code == 2 and f"option --results-dir: cannot write in {folder}" in capsys.readouterr().err


def test_a_locked_or_corrupt_store_is_one_line(store, monkeypatch):
    monkeypatch.setattr(tracking_store, "STORE_WAIT_SECONDS", 0.1)
    database = store / "mlflow.db"
    holder = sqlite3.connect(database)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    try:
        with pytest.raises(SystemExit) as exit:
            main(["tables", "--results-dir", str(store / "results")])
        assert exit.value.code == f"prism-rec tables: MLflow store {database}: database is locked (another " \
                                  "process holds it, or it cannot be written); wait for it or free it"
    finally:
        holder.close()
    database.write_bytes(b"this is not a database" * 100)
    for argv in (["tables", "--results-dir", str(store / "results")],
                 ["probe", "--tasks", "parity", "--models", "sasrec", "--seeds", "1", "--steps", "2",
                  "--out", str(store / "probes")],
                 ["throughput", "--mlflow", "on", "--results-dir", str(store / "throughput")]):
        with pytest.raises(SystemExit) as exit:
            main(argv)
        assert exit.value.code == (f"prism-rec {argv[0]}: MLflow store {database}: not a usable sqlite database "
                                   "(file is not a database); move it away to start a new store")


def test_probe_with_the_default_device_runs_on_the_cpu(store, capsys):
    main(["probe", "--tasks", "parity", "--models", "sasrec", "--seeds", "1", "--steps", "2", "--eval-size", "16",
          "--batch-size", "4", "--seq-len", "8", "--out", str(store / "probes"), "--no-mlflow"])
    assert "--device auto" in capsys.readouterr().out and (store / "probes" / "probes.md").is_file()


def test_on_off_reads_the_words_and_flags_and_refuses_the_rest():
    words = {"on": True, "ON": True, " yes ": True, "true": True, "1": True,
             "off": False, "Off": False, "no": False, "false": False, "0": False}
    assert {word: parse_on_off(word, "--x") for word in words} == words
    assert [parse_on_off(value, "--x") for value in (True, False, 1, 0)] == [True, False, True, False]
    for value in ("maybe", "", 2, None, "offf"):
        with pytest.raises(OptionError, match=f"option --gain: {value!r} is not on or off"):
            parse_on_off(value, "--gain")
