"""Dataset sources: where raw files live, how to read them, and the cached processing around them."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import numpy as np
import pandas as pd

from ..registry import get_dataset, register_dataset
from . import amazon, generic, shared, yelp  # noqa: F401  (register their datasets)
from .core import DataError, MissingDataError, ProcessedDataset, fingerprint, prepare
from .parsing import ReadContext
from .source import DEFAULT_PROCESSED_ROOT, DatasetSource

RECBOLE_REQUIREMENT = "recbole==1.2.1"  # installed --no-deps (pyproject.toml says why): the Makefile's RECBOLE_SPEC


@register_dataset("ml-100k")
class MovieLens100K(DatasetSource):
    """MovieLens-100k as shipped inside the recbole wheel (RecBole atomic .inter file; real data).

    Thresholds: users >= 5 and items >= 5 (every ml-100k user has at least 20 ratings, so the paper's
    users >= 40 would drop half of them on this small default set). Training windows of 50 items keep the
    default `make bench` short on a laptop CPU; every training interaction is still used (see
    ``training_windows``).
    """

    name = "ml-100k"
    description = "MovieLens-100k bundled with recbole (embedded default, no download)"
    min_user_interactions = 5
    min_item_interactions = 5
    max_len = 50

    def default_raw_dir(self) -> Path:
        try:
            package = importlib.resources.files("recbole")
        except ModuleNotFoundError:
            raise MissingDataError(f"ml-100k is read from the copy inside the recbole wheel, which is not installed: "
                                   f"run `pip install --no-deps {RECBOLE_REQUIREMENT}` (`make install` does)") from None
        return Path(str(package / "dataset_example" / "ml-100k"))

    def source_files(self, raw_dir: Path) -> list[Path]:
        path = Path(raw_dir) / "ml-100k.inter"
        if not path.is_file():
            raise MissingDataError(f"ml-100k: expected {path} (it ships inside the {RECBOLE_REQUIREMENT} wheel)")
        return [path]

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        from .generic import read_recbole_inter

        return read_recbole_inter(files, context)


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

