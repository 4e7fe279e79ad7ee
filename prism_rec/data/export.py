"""RecBole atomic export of a processed dataset, so RecBole can run on exactly the same data."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from .core import DataError, ProcessedDataset

INTER_HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"


def _atomic_write(path: Path, header: str, columns: list[np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(header)
            block = 1 << 18
            for start in range(0, len(columns[0]), block):
                rows = zip(*(column[start : start + block].tolist() for column in columns))
                handle.write("".join("\t".join(row) + "\n" for row in rows))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_tokens(values: np.ndarray, what: str) -> None:
    bad = [value for value in values.tolist() if "\t" in value or "\n" in value or "\r" in value]
    if bad:
        raise DataError(f"RecBole export: {what} id {bad[0]!r} holds a tab or newline; expected plain tokens")


def _number(values: np.ndarray) -> np.ndarray:
    return np.array([repr(float(value)) if value != int(value) else str(int(value)) for value in values.tolist()])


def export_recbole(dataset: ProcessedDataset, out_dir: Path) -> list[Path]:
    """Write ``<out_dir>/<name>.inter`` (and ``<name>.item`` with categories when known).

    One row per kept interaction: original user and item ids, rating (1 for sources without ratings:
    implicit feedback), timestamp in seconds (the position for sources without times); rows sorted by
    user (the dataset's user order) then time, ties in file order. Files are written to a temporary name
    and renamed when complete.
    """
    if dataset.timestamps is None or dataset.ratings is None:
        raise DataError(f"{dataset.name}: processed cache lacks timestamps/ratings; delete the "
                        f"cache file to rebuild it")
    _check_tokens(dataset.user_ids, "user")
    _check_tokens(dataset.item_ids, "item")
    lengths = np.diff(dataset.offsets)
    ratings = np.where(np.isnan(dataset.ratings), 1.0, dataset.ratings)
    out_dir = Path(out_dir)
    inter = out_dir / f"{dataset.name}.inter"
    _atomic_write(inter, INTER_HEADER, [
        np.repeat(dataset.user_ids, lengths), dataset.item_ids[dataset.items],
        _number(ratings), _number(dataset.timestamps),
    ])
    written = [inter]
    if dataset.item_categories is not None:
        item = out_dir / f"{dataset.name}.item"
        _atomic_write(item, "item_id:token\tcategory:token\n", [dataset.item_ids[1:], dataset.item_categories[1:]])
        written.append(item)
    return written
