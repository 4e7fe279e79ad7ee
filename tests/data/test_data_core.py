"""The data pipeline core: filtering to a fixed point, ordering, ids, splits, windows, cache."""

import numpy as np
import pandas as pd
import pytest

from prism_rec.data.batching import evaluation_batch, training_windows
from prism_rec.data.core import DataError, ProcessedDataset, filter_interactions, prepare


def frame(rows):
    return pd.DataFrame(rows, columns=["user", "item", "timestamp"])


def test_filter_iterates_to_fixed_point():
    # u2's removal (2 < 3 interactions) drops item c below 2 users, which then drops u1 below 3.
    rows = [("u1", "a", 1), ("u1", "b", 2), ("u1", "c", 3),
            ("u2", "c", 1), ("u2", "a", 2),
            ("u3", "a", 1), ("u3", "b", 2), ("u3", "d", 3), ("u3", "d", 4),
            ("u4", "a", 1), ("u4", "b", 2), ("u4", "d", 3)]
    kept = filter_interactions(frame(rows), min_user=3, min_item=2)
    assert sorted(kept["user"].unique()) == ["u3", "u4"]
    assert kept.groupby("item").size().min() >= 2 and kept.groupby("user").size().min() >= 3


def test_sequences_ids_and_leave_one_out():
    rows = [("u2", "x", 5), ("u1", "y", 2), ("u1", "x", 1), ("u2", "y", 5), ("u2", "z", 1), ("u1", "z", 3)]
    data = prepare(frame(rows), "toy", min_user_interactions=3, min_item_interactions=1)
    # users in file order of first appearance after sorting by (user id, time): u1 then u2
    assert list(data.user_ids) == ["u1", "u2"]
    assert list(data.item_ids) == ["", "x", "y", "z"]
    assert data.sequence(0).tolist() == [1, 2, 3]
    assert data.sequence(1).tolist() == [3, 1, 2]  # z@1, then x and y tied at 5 in file order
    assert data.train_length.tolist() == [1, 1]
    assert data.valid_cases.tolist() == [[0, 1], [1, 1]]
    assert data.test_cases.tolist() == [[0, 2], [1, 2]]


def test_dedup_modes():
    rows = [("u", "a", 1), ("u", "b", 2), ("u", "a", 3), ("u", "c", 4)]
    keep_all = prepare(frame(rows), "t", 3, 1)
    first = prepare(frame(rows), "t", 3, 1, dedup="first")
    last = prepare(frame(rows), "t", 3, 1, dedup="last")
    assert keep_all.sequence(0).tolist() == [1, 2, 1, 3]
    assert [first.item_ids[i] for i in first.sequence(0)] == ["a", "b", "c"]
    assert [last.item_ids[i] for i in last.sequence(0)] == ["b", "a", "c"]


def test_time_split_uses_global_quantiles():
    rows = [(f"u{u}", f"i{t % 3}", t + u) for u in range(2) for t in range(10)]
    data = prepare(frame(rows), "t", 3, 1, split="time")
    timestamps = np.array(sorted(t + u for u in range(2) for t in range(10)), dtype=float)
    train_end, valid_end = np.quantile(timestamps, [0.7, 0.85])
    for user in range(2):
        times = np.array([t + user for t in range(10)], dtype=float)
        assert data.train_length[user] == (times <= train_end).sum()
        valid_positions = data.valid_cases[data.valid_cases[:, 0] == user, 1]
        assert np.all((times[valid_positions] > train_end) & (times[valid_positions] <= valid_end))
    assert len(data.valid_cases) + len(data.test_cases) + data.train_length.sum() == 20


def test_bad_options_and_empty_result():
    rows = [("u", "a", 1), ("u", "b", 2), ("u", "c", 3)]
    with pytest.raises(DataError, match="--split"):
        prepare(frame(rows), "t", 3, 1, split="random")
    with pytest.raises(DataError, match="no interactions left"):
        prepare(frame(rows), "t", 3, 2)
    with pytest.raises(DataError, match="at least 3"):
        prepare(frame(rows), "t", 2, 1)


def toy_dataset():
    rows = [("u1", f"i{t}", t) for t in range(7)] + [("u2", f"i{t}", t) for t in range(3)]
    return prepare(frame(rows), "t", 3, 1)


def test_training_windows_cover_every_training_target_once():
    data = toy_dataset()  # u1: items 1..7, training prefix 1..5; u2: 1..3, training prefix 1
    windows = training_windows(data, max_len=2)  # u2 has one training item: nothing to learn
    assert windows.tolist() == [[3, 4, 5], [1, 2, 3]]
    targets = windows[:, 1:][(windows[:, :-1] > 0) & (windows[:, 1:] > 0)]
    assert sorted(targets.tolist()) == [2, 3, 4, 5]


def test_evaluation_batch_left_pads_history():
    data = toy_dataset()
    histories, targets = evaluation_batch(data, data.test_cases, max_len=4)
    assert histories.tolist() == [[3, 4, 5, 6], [0, 0, 1, 2]]
    assert targets.tolist() == [7, 3]


def test_cache_roundtrip_and_atomic_write(tmp_path, monkeypatch):
    data = toy_dataset()
    path = tmp_path / "cache.npz"
    data.save(path)
    loaded = ProcessedDataset.load(path)
    assert loaded.sequence(0).tolist() == data.sequence(0).tolist()
    assert list(loaded.item_ids) == list(data.item_ids) and loaded.options == data.options

    def broken_savez(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError):
        data.save(tmp_path / "other.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.npz"]
    (tmp_path / "bad.npz").write_bytes(b"not a cache")
    with pytest.raises(DataError, match="bad.npz"):
        ProcessedDataset.load(tmp_path / "bad.npz")
