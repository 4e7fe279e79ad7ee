"""The real public subsets in ../shared/data (see its README), read in place, never copied.

``PRISM_REC_SHARED_DATA`` names another folder with the same layout (e.g. a copy carried to a GPU machine).

They are already processed by their publishers, so the paper's users >= 40 would empty or gut them; each
class states its thresholds. Their statistics are in results/datasets.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..registry import register_dataset
from .core import MissingDataError
from .generic import read_recbole_inter, read_sequence_text
from .parsing import ReadContext, decode, iter_lines, path_opener
from .sources import PROJECT_ROOT, DatasetSource

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
SHARED_DATA_ENV = "PRISM_REC_SHARED_DATA"


def shared_data_root() -> Path:
    """``$PRISM_REC_SHARED_DATA`` when set, else ../shared/data beside the project."""
    return Path(os.environ[SHARED_DATA_ENV]) if os.environ.get(SHARED_DATA_ENV) else SHARED_DATA


class SharedSubset(DatasetSource):
    """A real subset read in place from the shared data folder.

    Training windows are 50 items (not the paper's 200): these histories are short (mean length 4.6 to
    24, 99th percentile at most 171), so longer windows would be almost all padding; a longer history is
    still used whole, cut into several windows.
    """

    max_len = 50
    folder = ""
    files: tuple[str, ...] = ()

    def default_raw_dir(self) -> Path:
        return shared_data_root() / self.folder

    def source_files(self, raw_dir: Path) -> list[Path]:
        paths = [Path(raw_dir) / name for name in self.files]
        missing = [str(path) for path in paths if not path.is_file()]
        if missing:
            raise MissingDataError(f"{self.name}: shared data file(s) absent: {', '.join(missing)}; this subset "
                                   f"exists only where ../shared/data does (see its README)")
        return paths


@register_dataset("yelp-iclrec")
class YelpICLRec(SharedSubset):
    """Yelp from ICLRec (``yelp/Yelp.txt``): one ``user item item ...`` line per user, in order.

    No timestamps: the position is the time (so ``--split time`` splits by position, not date).
    Thresholds: users >= 5, items >= 5 (the file is already 5-core; keeps all 30,431 users).
    """

    name = "yelp-iclrec"
    description = "Yelp subset of ICLRec (../shared/data/yelp)"
    folder = "yelp"
    files = ("Yelp.txt",)
    min_user_interactions = 5
    min_item_interactions = 5

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        return read_sequence_text(files, context)


@register_dataset("electronics-gerec")
class ElectronicsGeRec(SharedSubset):
    """Amazon 2018 Electronics from GeRec: ``Electronics-Sample.{train,valid,test}.inter``.

    Each row holds a prefix (``item_id_list``, capped at 50), a target basket and a per-user order rank
    for every item (``item_time_list``; items of one basket share a rank). A user's history is rebuilt
    by merging the train, valid and test windows (``merge_windows`` on (item, rank) pairs): for most users
    it is the test prefix plus the test basket; for the 167 whose prefix hit the cap the earlier windows
    add the items before it. The rank is the time; ties (a basket) keep file order.
    Thresholds: users >= 5, items >= 5 (the subset is 10-core before its split).
    """

    name = "electronics-gerec"
    description = "Amazon Electronics subset of GeRec (../shared/data/electronics)"
    folder = "electronics"
    files = tuple(f"Electronics-Sample.{part}.inter" for part in ("train", "valid", "test"))
    min_user_interactions = 5
    min_item_interactions = 5

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        return read_recbole_inter(files, context)


@register_dataset("books-dealrec")
class BooksDEALRec(SharedSubset):
    """Amazon Books from DEALRec: ``sequential_valid.txt`` then ``sequential_test.txt``.

    Line i is ``i item item ...``; a user's history is the valid-period items followed by the
    test-period items (the training period is not in the files). No timestamps: the position is the time.
    Thresholds: users >= 5, items >= 5 (users >= 40 would keep too few of these short histories).
    """

    name = "books-dealrec"
    description = "Amazon Books subset of DEALRec (../shared/data/books)"
    folder = "books"
    files = ("sequential_valid.txt", "sequential_test.txt")
    min_user_interactions = 5
    min_item_interactions = 5

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        return read_sequence_text(files, context)


MOVIE_ITEMS = 36845


@register_dataset("movies-fedcsr")
class MoviesFedCSR(SharedSubset):
    """Amazon 2014 Movies_and_TV from FedCSR's Movie-Book set: the movie interactions only.

    ``Movie-Book_{valid,test}data_new.txt`` hold disjoint users, one per line:
    ``user<TAB>n<TAB>item|unix_time|date|<TAB>...`` mixing movies (index < 36,845) and books. Kept: the
    movie events, with their unix time (the date column is the same instant in UTC+8 and is ignored, as
    is the second column), the item named by its ASIN from ``Movie-Book_Alist.txt`` (``n<TAB>ASIN<TAB>index``).
    Lines are not always in time order; the stable sort by time orders them, keeping file order on ties.
    Thresholds: users >= 3, items >= 2 (every user has 3-12 movie events).
    """

    name = "movies-fedcsr"
    description = "Amazon Movies_and_TV part of FedCSR's Movie-Book set (../shared/data/movies)"
    folder = "movies"
    files = ("Movie-Book_validdata_new.txt", "Movie-Book_testdata_new.txt", "Movie-Book_Alist.txt")
    min_user_interactions = 3
    min_item_interactions = 2

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        asin = read_movie_asins(files[2], context)
        users, items, times = [], [], []
        for path in files[:2]:
            where = str(path)
            for line_no, raw in iter_lines(path_opener(path), where, context):
                text = decode(raw, where, line_no, context)
                if text is None:
                    continue
                user, _, *events = text.split("\t") + [""]
                if not events[0]:
                    context.bad(where, line_no, "no events; expected user<TAB>n<TAB>item|unix_time|date|<TAB>...")
                    continue
                parsed = []
                for event in filter(None, events):
                    fields = event.split("|")
                    if len(fields) != 4 or not fields[0].isdigit() or not fields[1].isdigit():
                        parsed = None
                        break
                    parsed.append((int(fields[0]), float(fields[1])))
                if parsed is None:
                    context.bad(where, line_no, f"event {event!r}; expected item|unix_time|date| per event")
                    continue
                for item, stamp in parsed:
                    if item < MOVIE_ITEMS:
                        users.append(user)
                        items.append(asin.get(item, str(item)))
                        times.append(stamp)
        return pd.DataFrame({"user": users, "item": items, "timestamp": np.asarray(times, dtype=np.float64)})


def read_movie_asins(path: Path, context: ReadContext) -> dict[int, str]:
    """Movie index -> ASIN from ``Movie-Book_Alist.txt`` (``n<TAB>ASIN<TAB>index`` per line)."""
    asins = {}
    where = str(path)
    for line_no, raw in iter_lines(path_opener(path), where, context):
        fields = raw.decode("utf-8", "replace").split("\t")
        if len(fields) != 3 or not fields[2].isdigit():
            context.bad(where, line_no, f"{len(fields)} field(s) {fields!r}; expected n<TAB>ASIN<TAB>index")
            continue
        asins[int(fields[2])] = fields[1]
    return asins
