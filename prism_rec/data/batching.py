"""Turn a ProcessedDataset into left-padded id matrices for training and evaluation."""

from __future__ import annotations

import numpy as np

from .core import ProcessedDataset


def left_padded_windows(dataset: ProcessedDataset, users: np.ndarray, ends: np.ndarray, width: int) -> np.ndarray:
    """Items of ``users`` just before positions ``ends`` (exclusive), the last ``width`` of them,
    left-padded with 0: [len(users), width] int64."""
    starts = dataset.offsets[users]  # [C]
    index = starts[:, None] + ends[:, None] - width + np.arange(width)[None, :]  # [C, width]
    valid = index >= starts[:, None]
    return np.where(valid, dataset.items[np.clip(index, 0, None)], 0).astype(np.int64)


def training_windows(dataset: ProcessedDataset, max_len: int) -> np.ndarray:
    """Every user's training prefix cut, from its end, into windows of ``max_len + 1`` items
    [W, max_len + 1], consecutive windows overlapping by one item.

    Position t of window[:, :-1] is trained to predict window[:, t + 1], so every training item but a
    user's first is a target exactly once per epoch. Users with fewer than two training items have
    nothing to learn from and are left out.
    """
    lengths = dataset.train_length.astype(np.int64)
    n_windows = np.where(lengths >= 2, -(-(lengths - 1) // max_len), 0)  # ceil((length - 1) / max_len)
    users = np.repeat(np.arange(dataset.n_users), n_windows)
    first_window = np.repeat(np.cumsum(n_windows) - n_windows, n_windows)
    ends = lengths[users] - (np.arange(len(users)) - first_window) * max_len
    return left_padded_windows(dataset, users, ends, max_len + 1)


def evaluation_batch(dataset: ProcessedDataset, cases: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Histories [C, max_len] (left-padded) and target item ids [C] for cases (user, position)."""
    users, positions = cases[:, 0], cases[:, 1]
    histories = left_padded_windows(dataset, users, positions, max_len)
    targets = dataset.items[dataset.offsets[users] + positions].astype(np.int64)
    return histories, targets
