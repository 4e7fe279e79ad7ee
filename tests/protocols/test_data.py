"""The edge task against direct computations: split, user filter, neighbour histories, refusals."""

import numpy as np
import pytest

from prism_rec.errors import OptionError
from prism_rec.protocols.authors.data import build_task, check_dataset


def test_split_quantiles_are_taken_before_the_user_filter(frame, task):
    unique = frame.drop_duplicates()
    low, high = np.quantile(unique["timestamp"].to_numpy(), [0.70, 0.85])  # u4's edges included
    assert task.stats["split_times"] == [low, high]
    expected = np.where(task.time <= low, 0, np.where(task.time <= high, 1, 2))
    np.testing.assert_array_equal(task.part, expected)
    kept = unique[unique["user"] != "u4"]
    assert task.stats["edges"] == len(kept) and task.stats["users"] == 4
    assert task.stats["items"] == kept["item"].nunique()  # items are not filtered again
    assert np.all(np.diff(task.time) >= 0)
    np.testing.assert_array_equal(task.items, np.unique(task.dst))


def test_neighbours_are_the_latest_edges_strictly_before_the_edge(task):
    k = 4
    nodes, edges, times = task.neighbours(np.arange(len(task.src)), k)
    for e in range(len(task.src)):  # a direct loop over all edges of the same user
        earlier = [j for j in range(len(task.src)) if task.src[j] == task.src[e] and task.time[j] < task.time[e]]
        earlier = sorted(earlier, key=lambda j: (task.time[j], j))[-k:]
        pad = k - len(earlier)
        assert nodes[e].tolist() == [0] * pad + [int(task.dst[j]) for j in earlier]
        assert edges[e].tolist() == [0] * pad + [j + 1 for j in earlier]
        assert times[e].tolist() == [0.0] * pad + [float(task.time[j]) for j in earlier]
    assert (task.time[:, None] > times)[edges > 0].all()


def test_ids_share_one_space_with_padding_zero(task):
    assert task.src.min() == 1 and task.src.max() == task.n_users
    assert task.dst.min() == task.n_users + 1 and task.dst.max() == task.n_nodes - 1


def test_refusals_name_the_option(frame):
    with pytest.raises(OptionError, match="--min-user-edges: dataset 'tiny' has 0 user"):
        build_task(frame, "tiny", "unix seconds", 100)
    with pytest.raises(OptionError, match="--min-user-edges: must be >= 1"):
        build_task(frame, "tiny", "unix seconds", 0)
    with pytest.raises(OptionError, match="--datasets: dataset 'electronics-gerec' has no time"):
        check_dataset("electronics-gerec", "--datasets")
    with pytest.raises(OptionError, match="--dataset: unknown dataset 'nope'"):
        check_dataset("nope")
