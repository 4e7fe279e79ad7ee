"""Dataset sources: the base class every registered dataset extends, where their raw and processed files
live, and ``load_dataset``, the cached processing around them.

A source is a ``DatasetSource`` subclass registered with ``prism_rec.registry.register_dataset`` in any
module of ``prism_rec/data/``: the registry imports every module of the package, so a new file is all it
takes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..paths import PROJECT_ROOT
from ..registry import get_dataset
from .core import DataError, ProcessedDataset, fingerprint, prepare
from .parsing import ReadContext

DEFAULT_RAW_ROOT = PROJECT_ROOT / "datasets" / "raw"
DEFAULT_PROCESSED_ROOT = PROJECT_ROOT / "datasets" / "processed"


class DatasetSource:
    """A registered dataset: its raw files, its reader and its default filtering thresholds.

    Subclasses set ``name``, ``description`` and implement ``source_files`` (the raw files in
    ``raw_dir``, raising ``MissingDataError`` that says what to place where) and either ``read`` (an
    interactions frame with columns user, item, timestamp[, rating] in file order) or
    ``read_interactions`` (the same, reporting bad lines and progress through a ``ReadContext``).
    ``item_categories`` may map original item ids to a category from optional metadata files.
    ``downloads`` lists (file name, URL, required) fetched by ``prism-rec data download``;
    ``download_help`` says how to get the files by hand. ``formats`` names the raw formats the source
    accepts as ``raw_format`` (None: detect from the file).
    """

    name = ""
    description = ""
    min_user_interactions = 40
    min_item_interactions = 5
    max_len = 200
    downloads: tuple[tuple[str, str, bool], ...] = ()
    download_help = ""
    formats: tuple[str, ...] = ()
    untimed = ""  # the raw file(s) whose interactions carry no times (a position is then the time), if any

    def __init__(self, progress: bool = False, raw_format: str | None = None):
        if raw_format is not None and raw_format not in self.formats:
            accepted = f"one of {', '.join(self.formats)}" if self.formats else "no --format (it has one format)"
            raise DataError(f"option --format: unknown format {raw_format!r} for dataset {self.name!r}; "
                            f"expected {accepted}")
        self.progress = progress
        self.raw_format = raw_format
        self.context = ReadContext()

    def default_raw_dir(self) -> Path:
        return DEFAULT_RAW_ROOT / self.name

    def source_files(self, raw_dir: Path) -> list[Path]:
        raise NotImplementedError

    def read(self, files: list[Path], skip_bad_lines: bool = False) -> pd.DataFrame:
        self.context = ReadContext(skip_bad_lines, progress=self.progress)
        try:
            return self.read_interactions(files, self.context)
        finally:
            self.context.close()

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        raise NotImplementedError

    def unpack(self, raw_dir: Path) -> list[Path]:
        """Extract downloaded archives into the files ``read`` uses; returns the files written."""
        return []

    def item_categories(self, files: list[Path], items: set[str], context: ReadContext) -> dict[str, str] | None:
        return None


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
    progress: bool = False,
    raw_format: str | None = None,
) -> ProcessedDataset:
    """Load dataset ``name`` processed with the given options, from the cache when it is there.

    The cache file is keyed by a hash of the raw files' bytes and every option that can change the
    result (``skip_bad_lines`` and ``raw_format`` when given), and written, to a temporary name renamed
    when complete, only once every file has been read and checked. ``raw_format`` overrides the detected
    raw format. ``progress`` shows a lines/s bar while raw files are read. The number of skipped bad
    lines is logged and kept in ``options["skipped_lines"]``. A dataset with fewer than two test users
    or no validation case is refused (see :func:`check_cases`), cached or not.
    """
    source: DatasetSource = get_dataset(name)(progress=progress, raw_format=raw_format)
    raw_dir = Path(raw_dir) if raw_dir else source.default_raw_dir()
    files = source.source_files(raw_dir)
    options = {
        "min_user_interactions": (source.min_user_interactions if min_user_interactions is None
                                  else min_user_interactions),
        "min_item_interactions": (source.min_item_interactions if min_item_interactions is None
                                  else min_item_interactions),
        "split": split,
        "dedup": dedup,
    }
    key = {**options, **({"format": raw_format} if raw_format else {}),
           **({"skip_bad_lines": True} if skip_bad_lines else {})}  # absent at their defaults: older caches stay valid
    cache = Path(processed_dir or DEFAULT_PROCESSED_ROOT) / name / f"{fingerprint(files, key)}.npz"
    if use_cache and cache.is_file():
        cached = ProcessedDataset.load(cache)
        if all(values is None or not np.isinf(values).any() for values in (cached.timestamps, cached.ratings)):
            return check_cases(cached, files[0])
        cache.unlink()  # written before non-finite numbers were refused: read again, to name the line
    frame = source.read(files, skip_bad_lines=skip_bad_lines)
    if frame.empty:
        raise DataError(f"{files[0]}: no interactions could be read")
    dataset = prepare(frame, name=name, source=str(files[0]), **options)
    dataset.options["skipped_lines"] = source.context.skipped
    meta_context = ReadContext(skip_bad_lines)
    categories = source.item_categories(files, set(dataset.item_ids[1:].tolist()), meta_context)
    meta_context.close()
    dataset.options["skipped_lines"] += meta_context.skipped
    if categories is not None:
        dataset.item_categories = np.array([categories.get(item, "") for item in dataset.item_ids.tolist()], dtype=str)
        dataset.item_categories[0] = ""
    check_cases(dataset, files[0])
    if use_cache:
        dataset.save(cache)
    return dataset


def check_cases(dataset: ProcessedDataset, source: Path) -> ProcessedDataset:
    """``dataset`` if its split leaves a validation case and at least two test users, else ``DataError``:
    a test AUC of one user is one case's rank, not an estimate."""
    test_users = len(np.unique(dataset.test_cases[:, 0]))
    problem = ("no validation case" if not len(dataset.valid_cases) else
               f"{test_users} test user(s)" if test_users < 2 else "")
    if problem:
        raise DataError(f"{source}: {problem} after filtering and the {dataset.options['split']} split "
                        f"({dataset.n_users} user(s)); expected a validation case and at least 2 test users: "
                        f"add users or lower --min-user-interactions/--min-item-interactions")
    return dataset

