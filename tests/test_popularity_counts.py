"""The popularity floor counts each item's training interactions only: never a validation or test target."""

import numpy as np

from prism_rec.data.sources import load_dataset
from prism_rec.models.popularity import training_counts


def direct_counts(dataset) -> np.ndarray:
    counts = np.zeros(dataset.n_items, dtype=np.int64)
    for user in range(dataset.n_users):
        start = dataset.offsets[user]
        for position in range(dataset.train_length[user]):
            counts[dataset.items[start + position] - 1] += 1
    return counts


def test_counts_are_the_training_prefixes(tmp_path):
    dataset = load_dataset("ml-100k", processed_dir=tmp_path)
    counts = training_counts(dataset)
    assert np.array_equal(counts, direct_counts(dataset))
    held_out = np.concatenate([dataset.items[dataset.offsets[cases[:, 0]] + cases[:, 1]]
                               for cases in (dataset.valid_cases, dataset.test_cases)])
    every_row = np.bincount(dataset.items, minlength=dataset.n_items + 1)[1:]
    assert counts.sum() == len(dataset.items) - len(held_out)  # leave-one-out: two held-out rows per user
    assert np.array_equal(every_row - counts, np.bincount(held_out, minlength=dataset.n_items + 1)[1:])
