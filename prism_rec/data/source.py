"""The base class of dataset sources and where their raw and processed files live."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..paths import PROJECT_ROOT
from .core import DataError
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
