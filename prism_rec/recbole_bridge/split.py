"""A ProcessedDataset's split as RecBole pre-split atomic files (its ``benchmark_filename`` option).

``<folder>/<NAME>/<NAME>.train.inter``, ``.valid.inter`` and ``.test.inter`` hold one row per case:
``user_id:token`` (our user index), ``item_id_list:token_seq`` (the items before the target, oldest first,
the last ``max_len`` of them: what our evaluator feeds a model) and ``item_id:token`` (the target, our
item id). The training file has a case for every training interaction but each user's first, predicted
from the items before it: the targets our trainer trains on (RecBole's own data augmentation of a
sequence, written out). The validation and test files hold exactly ``dataset.valid_cases`` and
``dataset.test_cases``, in their order. ``<NAME>.item`` lists every item, so that RecBole's vocabulary
holds all of them, whether or not a file mentions one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..data.batching import evaluation_batch
from ..data.core import ProcessedDataset
from ..files import write_atomically

NAME = "prism_split"  # not a dataset RecBole ships a properties file for
PARTS = ("train", "valid", "test")
INTER_HEADER = "user_id:token\titem_id_list:token_seq\titem_id:token\n"


def training_cases(dataset: ProcessedDataset) -> np.ndarray:
    """(user, position) [C, 2] of every training interaction but each user's first."""
    counts = np.maximum(dataset.train_length.astype(np.int64) - 1, 0)
    users = np.repeat(np.arange(dataset.n_users), counts)
    positions = np.arange(len(users)) - np.repeat(np.cumsum(counts) - counts, counts) + 1
    return np.stack([users, positions], axis=1)


def split_cases(dataset: ProcessedDataset) -> dict[str, np.ndarray]:
    """The (user, position) cases of each file of :data:`PARTS`."""
    return {"train": training_cases(dataset), "valid": dataset.valid_cases, "test": dataset.test_cases}


def _inter_text(dataset: ProcessedDataset, cases: np.ndarray, max_len: int) -> str:
    histories, targets = evaluation_batch(dataset, cases, max_len)  # [C, max_len] left-padded, [C]
    rows = [f"{user}\t{' '.join(map(str, history[history > 0].tolist()))}\t{target}\n"
            for user, history, target in zip(cases[:, 0].tolist(), histories, targets.tolist())]
    return INTER_HEADER + "".join(rows)


def write_split(dataset: ProcessedDataset, folder: Path, max_len: int) -> Path:
    """Write the files of the module docstring under ``folder`` (each atomically); returns
    ``folder / NAME``, the folder RecBole reads (its data_path is ``folder``, its dataset NAME)."""
    target = Path(folder) / NAME
    for part, cases in split_cases(dataset).items():
        write_atomically(target / f"{NAME}.{part}.inter", _inter_text(dataset, cases, max_len))
    items = "".join(f"{item}\n" for item in range(1, dataset.n_items + 1))
    write_atomically(target / f"{NAME}.item", "item_id:token\n" + items)
    return target
