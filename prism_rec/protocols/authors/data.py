"""The edge task of the authors' code: edges, the time split, the user filter and neighbour histories.

Follows rec/utils/DataLoader.py:82-198 and rec/utils/utils.py:83-226, 295-314 (gpr-prism/prism 435f392):

- one edge per (user, item, time): exact repeats are dropped (their edge_list.csv has one row per edge);
- the split times are the 70 % and 85 % quantiles (numpy's linear interpolation) of the times of all
  edges, taken before the user filter (DataLoader.py:127); train t <= q70, validation q70 < t <= q85,
  test t > q85 (172, 184-185); every validation and test edge is a case, so a user has several;
- users with >= ``min_user_edges`` edges over the whole data are kept (136-149); items are not filtered
  again; the retrieval candidates are the distinct items of the kept edges (evaluate_models_utils.py:121);
- node ids: 0 is padding, users 1..U, items U+1..U+I (one id space, as DTGB's); edge ids 1..E in time
  order, 0 for the padding slots and the user's own token;
- neighbours ('recent' strategy, load_configs.py:26): a user's ``n_neighbours`` latest edges strictly
  before the edge's time (np.searchsorted left, utils.py:153), oldest first, left-padded with node 0,
  edge 0, time 0 (utils.py:212-221). Every edge before a training edge is a training edge, so one history
  over all kept edges serves their training sampler (train edges) and their evaluation sampler (all).

Differences: edges are sorted by time here (stable on ties); DTGB's files are already in time order. The
fallback features (no text): fixed N(0, 1) vectors of width 768 per node and per edge as DataLoader.py:
121-122 draws them, but from a seeded generator (``feature_seed``) where theirs are unseeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ...data.core import DataError
from ...errors import OptionError
from ...registry import get_dataset, list_datasets

FEATURE_DIM = 768  # NODE_FEAT_DIM = EDGE_FEAT_DIM, DataLoader.py:91-92
SPLIT_QUANTILES = (0.70, 0.85)  # 1 - val_ratio - test_ratio, 1 - test_ratio (load_configs.py:51-52)
MIN_USER_EDGES = 40  # DataLoader.py:139
# What each dataset's time column is, as its source documents it (prism_rec/data/*.py docstrings).
TIME_KINDS = {
    "ml-100k": "unix seconds",
    "movies-fedcsr": "unix seconds",
    "movies-long": "position",
    "books-dealrec": "position",
    "yelp-iclrec": "position",
}
# Thresholds where the data hold too few users with MIN_USER_EDGES edges (every movies-fedcsr user has 3-12).
DATASET_MIN_USER_EDGES = {"movies-fedcsr": 3}


@dataclass(frozen=True)
class EdgeTask:
    """Kept edges in time order [E], their split and each edge's neighbour history.

    src, dst: node ids of user and item [E]; time [E]; part: 0 train, 1 validation, 2 test [E];
    by_user: edge indices grouped by user, in time order [E]; history_end: for edge e, the index in by_user
    one past its latest strictly earlier edge of the same user [E]; user_start: the index in by_user of its
    user's first edge [E]; items: the retrieval candidates, node ids of the kept edges' distinct items [I].
    """

    name: str
    time_kind: str
    n_users: int
    n_nodes: int
    src: np.ndarray
    dst: np.ndarray
    time: np.ndarray
    part: np.ndarray
    by_user: np.ndarray
    history_end: np.ndarray
    user_start: np.ndarray
    items: np.ndarray
    stats: dict

    def cases(self, part: int) -> np.ndarray:
        """Edge indices of split ``part`` in time order."""
        return np.flatnonzero(self.part == part)

    def neighbours(self, edges: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Node ids, edge ids and times [B, k] of each edge's k latest earlier edges of its user, oldest
        first and left-padded with zeros (node 0, edge 0, time 0)."""
        end = self.history_end[edges][:, None]                       # [B, 1]
        count = np.minimum(k, end[:, 0] - self.user_start[edges])    # [B]
        slots = end - k + np.arange(k)[None, :]                      # [B, k] positions in by_user
        real = np.arange(k)[None, :] >= (k - count)[:, None]         # [B, k]
        neighbour_edges = self.by_user[np.where(real, slots, 0)]     # [B, k]
        nodes = np.where(real, self.dst[neighbour_edges], 0)
        edge_ids = np.where(real, neighbour_edges + 1, 0)
        times = np.where(real, self.time[neighbour_edges], 0.0)
        return nodes, edge_ids, times


def build_task(frame: pd.DataFrame, name: str, time_kind: str, min_user_edges: int) -> EdgeTask:
    """The edge task of an interactions frame (columns user, item, timestamp in file order)."""
    if min_user_edges < 1:
        raise OptionError(f"option --min-user-edges: must be >= 1, got {min_user_edges}")
    frame = frame[["user", "item", "timestamp"]].astype({"user": str, "item": str, "timestamp": np.float64})
    frame = frame.drop_duplicates(["user", "item", "timestamp"])
    frame = frame.iloc[np.argsort(frame["timestamp"].to_numpy(), kind="stable")]
    train_end, valid_end = np.quantile(frame["timestamp"].to_numpy(), SPLIT_QUANTILES)  # before the user filter
    counts = frame["user"].value_counts()
    frame = frame[frame["user"].map(counts).to_numpy() >= min_user_edges]
    if frame["user"].nunique() < 2:
        raise OptionError(f"option --min-user-edges: dataset {name!r} has {frame['user'].nunique()} user(s) with "
                          f">= {min_user_edges} edges; at least 2 are needed")
    user_codes, users = pd.factorize(frame["user"], sort=False)
    item_codes, items = pd.factorize(frame["item"], sort=False)
    src = (user_codes + 1).astype(np.int64)
    dst = (item_codes + 1 + len(users)).astype(np.int64)
    time = frame["timestamp"].to_numpy(np.float64)
    part = np.where(time <= train_end, 0, np.where(time <= valid_end, 1, 2)).astype(np.int8)
    for index, label in ((0, "training"), (1, "validation"), (2, "test")):
        if not (part == index).any():
            raise OptionError(f"option --min-user-edges: dataset {name!r} keeps no {label} edge with users >= "
                              f"{min_user_edges}")
    by_user = np.argsort(src, kind="stable")                  # per user in time order
    sorted_src, sorted_time = src[by_user], time[by_user]
    new_run = np.ones(len(by_user), dtype=bool)               # a run: one user's edges at one time
    new_run[1:] = (sorted_src[1:] != sorted_src[:-1]) | (sorted_time[1:] != sorted_time[:-1])
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(len(by_user)), 0))
    new_user = np.ones(len(by_user), dtype=bool)
    new_user[1:] = sorted_src[1:] != sorted_src[:-1]
    first_of_user = np.maximum.accumulate(np.where(new_user, np.arange(len(by_user)), 0))
    history_end, user_start = np.empty(len(src), np.int64), np.empty(len(src), np.int64)
    history_end[by_user], user_start[by_user] = run_start, first_of_user
    stats = {"users": len(users), "items": len(items), "edges": len(src),
             "train_edges": int((part == 0).sum()), "valid_edges": int((part == 1).sum()),
             "test_edges": int((part == 2).sum()), "min_user_edges": min_user_edges,
             "split_times": [float(train_end), float(valid_end)]}
    return EdgeTask(name, time_kind, len(users), 1 + len(users) + len(items), src, dst, time, part, by_user,
                    history_end, user_start, np.unique(dst), stats)


def min_user_edges_for(dataset: str, given: int | None) -> int:
    """The user threshold: ``given``, else the dataset's exception, else the authors' 40."""
    return given if given is not None else DATASET_MIN_USER_EDGES.get(dataset, MIN_USER_EDGES)


def check_dataset(dataset: str, option: str = "--dataset") -> str:
    """The time kind of ``dataset``; OptionError naming ``option`` when it is unknown or has no time column."""
    if dataset not in list_datasets():
        raise OptionError(f"option {option}: unknown dataset {dataset!r}; registered: {', '.join(list_datasets())}")
    if dataset not in TIME_KINDS:
        raise OptionError(f"option {option}: dataset {dataset!r} has no time per interaction (the authors' split "
                          f"and time encoding need one); datasets with one: {', '.join(sorted(TIME_KINDS))}")
    return TIME_KINDS[dataset]


def load_task(dataset: str, min_user_edges: int | None = None, raw_dir: str | Path | None = None) -> EdgeTask:
    """Read ``dataset`` through its registered source and build its edge task."""
    time_kind = check_dataset(dataset)
    source = get_dataset(dataset)()
    files = source.source_files(Path(raw_dir) if raw_dir else source.default_raw_dir())
    frame = source.read(files)
    if frame.empty:
        raise DataError(f"{files[0]}: no interactions could be read")
    return build_task(frame, dataset, time_kind, min_user_edges_for(dataset, min_user_edges))


def fallback_features(rows: int, seed: int, device: torch.device) -> torch.Tensor:
    """Fixed N(0, 1) features [rows, 768] from a generator seeded with ``seed`` (DataLoader.py:121-122)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, FEATURE_DIM, generator=generator).to(device)
