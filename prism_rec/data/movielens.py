"""MovieLens-100k, the embedded default dataset: the RecBole atomic file shipped inside the recbole wheel."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import pandas as pd

from ..registry import register_dataset
from .core import MissingDataError
from .generic import read_recbole_inter
from .parsing import ReadContext
from .sources import DatasetSource

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
        return read_recbole_inter(files, context)
