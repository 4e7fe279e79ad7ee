"""The RecBole export, read back by RecBole's own loader; the CLI commands end to end."""

import argparse
import json

import numpy as np
import pytest
import torch

from prism_rec.data.commands import add_parser
from prism_rec.data.export import export_recbole
from prism_rec.data.sources import load_dataset

from .helpers import A1, A2, FIXTURES, I1, I2, I3, I4


def cli(*argv):
    parser = argparse.ArgumentParser(prog="prism-rec")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    args.func(args)


def test_export_rows(tmp_path):
    dataset = load_dataset("books", raw_dir=FIXTURES / "amazon2014", processed_dir=tmp_path, use_cache=False,
                           min_user_interactions=3, min_item_interactions=1)
    inter, item = export_recbole(dataset, tmp_path)
    assert inter.read_text(encoding="utf-8").splitlines() == [
        "user_id:token\titem_id:token\trating:float\ttimestamp:float",
        f"{A1}\t{I1}\t5\t100", f"{A1}\t{I3}\t4\t200", f"{A1}\t{I4}\t2\t200", f"{A1}\t{I2}\t3\t300",
        f"{A1}\t{I2}\t1\t400", f"{A2}\t{I2}\t4\t50", f"{A2}\t{I1}\t5\t60", f"{A2}\t{I3}\t3\t70", f"{A2}\t{I4}\t5\t80",
    ]
    assert item.read_text(encoding="utf-8").splitlines()[1:] == [
        f"{I1}\tPoetry", f"{I3}\tCuisine française", f"{I4}\t", f"{I2}\tComics & Graphic Novels"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["books.inter", "books.item"]


def test_recbole_reads_the_same_data(tmp_path, monkeypatch, request):
    for alias, target in (("float_", "float64"), ("complex_", "complex128"), ("unicode_", "str_")):
        if not hasattr(np, alias):
            monkeypatch.setattr(np, alias, getattr(np, target), raising=False)
    # recbole loads its SINE model on the way, whose module turns torch's anomaly detection on for the whole
    # process (recbole/model/sequential_recommender/sine.py): every later test would run under it
    anomaly = torch.is_anomaly_enabled()
    request.addfinalizer(lambda: torch.autograd.set_detect_anomaly(anomaly))
    recbole_config = pytest.importorskip("recbole.config")
    recbole_data = pytest.importorskip("recbole.data")
    dataset = load_dataset("yelp", raw_dir=FIXTURES / "yelp", processed_dir=tmp_path, use_cache=False,
                           min_user_interactions=3, min_item_interactions=1)
    export_recbole(dataset, tmp_path / "yelp")
    config = recbole_config.Config(model="SASRec", dataset="yelp", config_dict={
        "data_path": str(tmp_path), "load_col": {"inter": ["user_id", "item_id", "rating", "timestamp"]},
        "user_inter_num_interval": None, "item_inter_num_interval": None, "val_interval": None,
        "checkpoint_dir": str(tmp_path / "saved"), "show_progress": False, "state": "ERROR",
        "train_neg_sample_args": None,
    })
    loaded = recbole_data.create_dataset(config)
    assert set(loaded.field2id_token["user_id"][1:]) == set(dataset.user_ids.tolist())
    assert set(loaded.field2id_token["item_id"][1:]) == set(dataset.item_ids[1:].tolist())
    assert loaded.inter_num == dataset.n_interactions
    frame = loaded.inter_feat
    users = loaded.field2id_token["user_id"][np.asarray(frame["user_id"])]
    items = loaded.field2id_token["item_id"][np.asarray(frame["item_id"])]
    pairs = sorted(zip(users.tolist(), items.tolist(), np.asarray(frame["timestamp"]).tolist()))
    ours = sorted(zip(np.repeat(dataset.user_ids, np.diff(dataset.offsets)).tolist(),
                      dataset.item_ids[dataset.items].tolist(), dataset.timestamps.tolist()))
    assert pairs == ours


def test_cli_prepare_and_stats(tmp_path, capsys):
    out = tmp_path / "processed"
    cli("data", "prepare", "--dataset", "books", "--raw-dir", str(FIXTURES / "amazon2014"), "--out", str(out),
        "--min-user-interactions", "3", "--min-item-interactions", "1", "--no-progress")
    report = json.loads(capsys.readouterr().out)
    assert (report["users"], report["items"], report["interactions"], report["skipped_lines"]) == (2, 4, 9, 0)
    assert (out / "books.inter").is_file()
    results = tmp_path / "datasets.md"
    results.write_text("# Datasets\n\n<!-- bench:start -->\nkept\n<!-- bench:end -->\n")
    cli("data", "stats", "--dataset", "sequence-text", "--dataset", "books", "--out", str(results),
        "--processed-dir", str(out))
    text = results.read_text()
    assert "<!-- bench:start -->\nkept\n<!-- bench:end -->" in text
    assert "| books (files not present) | 40 / 5 | - | - | - | - | - | 31,103 | 339,960 | 3,319,359 | 106.72 |" in text
    assert "sequence-text: files not present" in text


def test_cli_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit, match=r"^error: .*no review file in"):
        cli("data", "prepare", "--dataset", "movies", "--raw-dir", str(tmp_path), "--no-progress")
    with pytest.raises(SystemExit, match=r"^error: unknown dataset 'nope'"):
        cli("data", "download", "--dataset", "nope")
    with pytest.raises(SystemExit,
                       match=r"^error: https?://127\.0\.0\.1:9/reviews_Movies_and_TV_5\.json\.gz: cannot download"):
        cli("data", "download", "--dataset", "movies", "--raw-dir", str(tmp_path), "--base-url", "http://127.0.0.1:9",
            "--lock", str(tmp_path / "lock.json"), "--timeout", "2")
    with pytest.raises(SystemExit, match=r"^error: yelp: no review file\. Yelp requires accepting its licence"):
        cli("data", "download", "--dataset", "yelp", "--raw-dir", str(tmp_path))
