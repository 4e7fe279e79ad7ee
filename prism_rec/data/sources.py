"""Dataset sources: where raw files live, how to read them, and the cached processing around them."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import pandas as pd

from ..registry import get_dataset, register_dataset
from .core import DataError, MissingDataError, ProcessedDataset, fingerprint, prepare

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RAW_ROOT = PROJECT_ROOT / "datasets" / "raw"
DEFAULT_PROCESSED_ROOT = PROJECT_ROOT / "datasets" / "processed"


class DatasetSource:
    """A registered dataset: its raw files, its reader and its default filtering thresholds.

    Subclasses set ``name``, ``description`` and implement ``source_files`` (the raw files in
    ``raw_dir``, raising ``MissingDataError`` that says what to place where) and ``read`` (an interactions
    frame with columns user, item, timestamp[, rating] in file order).
    """

    name = ""
    description = ""
    min_user_interactions = 40
    min_item_interactions = 5

    def default_raw_dir(self) -> Path:
        return DEFAULT_RAW_ROOT / self.name

    def source_files(self, raw_dir: Path) -> list[Path]:
        raise NotImplementedError

    def read(self, files: list[Path], skip_bad_lines: bool = False) -> pd.DataFrame:
        raise NotImplementedError


@register_dataset("ml-100k")
class MovieLens100K(DatasetSource):
    """MovieLens-100k as shipped inside the recbole wheel (RecBole atomic .inter file; real data).

    Thresholds: users >= 5 and items >= 5 (every ml-100k user has at least 20 ratings, so the paper's
    users >= 40 would drop half of them on this small default set).
    """

    name = "ml-100k"
    description = "MovieLens-100k bundled with recbole (embedded default, no download)"
    min_user_interactions = 5
    min_item_interactions = 5

    def default_raw_dir(self) -> Path:
        return Path(str(importlib.resources.files("recbole") / "dataset_example" / "ml-100k"))

    def source_files(self, raw_dir: Path) -> list[Path]:
        path = Path(raw_dir) / "ml-100k.inter"
        if not path.is_file():
            raise MissingDataError(f"ml-100k: expected {path} (it ships inside the recbole 1.2.1 wheel)")
        return [path]

    def read(self, files: list[Path], skip_bad_lines: bool = False) -> pd.DataFrame:
        frame = pd.read_csv(files[0], sep="\t", dtype=str)
        frame.columns = [column.split(":")[0] for column in frame.columns]
        return frame.rename(columns={"user_id": "user", "item_id": "item"})


def load_dataset(
    name: str,
    raw_dir: str | Path | None = None,
    processed_dir: str | Path | None = None,
    split: str = "loo",
    min_user_interactions: int | None = None,
    min_item_interactions: int | None = None,
    dedup: str = "none",
    skip_bad_lines: bool = False,
    use_cache: bool = True,
) -> ProcessedDataset:
    """Load dataset ``name`` processed with the given options, from the cache when it is there.

    The cache file is keyed by a hash of the raw files' bytes and the options, written to a temporary
    name and renamed when complete.
    """
    source: DatasetSource = get_dataset(name)()
    raw_dir = Path(raw_dir) if raw_dir else source.default_raw_dir()
    files = source.source_files(raw_dir)
    options = {
        "min_user_interactions": source.min_user_interactions if min_user_interactions is None else min_user_interactions,
        "min_item_interactions": source.min_item_interactions if min_item_interactions is None else min_item_interactions,
        "split": split,
        "dedup": dedup,
    }
    cache = Path(processed_dir or DEFAULT_PROCESSED_ROOT) / name / f"{fingerprint(files, options)}.npz"
    if use_cache and cache.is_file():
        return ProcessedDataset.load(cache)
    frame = source.read(files, skip_bad_lines=skip_bad_lines)
    if frame.empty:
        raise DataError(f"{files[0]}: no interactions could be read")
    dataset = prepare(frame, name=name, source=str(files[0]), **options)
    if use_cache:
        dataset.save(cache)
    return dataset
