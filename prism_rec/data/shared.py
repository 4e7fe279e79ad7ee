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

from ..paths import PROJECT_ROOT
from ..registry import register_dataset
from .core import DataError, MissingDataError
from .generic import read_recbole_inter, read_sequence_text
from .parsing import ReadContext, decode, finite_number, iter_lines, path_opener
from .sources import DatasetSource

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
SHARED_DATA_ENV = "PRISM_REC_SHARED_DATA"


def shared_data_root() -> Path:
    """``$PRISM_REC_SHARED_DATA`` when set, else ../shared/data beside the project."""
    return Path(os.environ[SHARED_DATA_ENV]) if os.environ.get(SHARED_DATA_ENV) else SHARED_DATA


class SharedSubset(DatasetSource):
    """A real subset read in place from the shared data folder.

    Training windows are 50 items (not the paper's 200): these histories are short (mean length 4.6 to
    24, 99th percentile at most 171), so longer windows would be almost all padding; a longer history is
    still used whole, cut into several windows. movies-long (mean length 155.5) keeps the paper's 200.
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
    untimed = "Yelp.txt"
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
    untimed = "Electronics-Sample.*.inter (order ranks, not times)"
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
    untimed = "sequential_valid.txt, sequential_test.txt"
    files = ("sequential_valid.txt", "sequential_test.txt")
    min_user_interactions = 5
    min_item_interactions = 5

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        return read_sequence_text(files, context)


MOVIE_ITEMS = 36845


@register_dataset("movies-fedcsr")
class MoviesFedCSR(SharedSubset):
    """Amazon 2014 Movies_and_TV from FedCSR's Movie-Book set: the movie interactions only.

    A short-sequence domain: the mean history is 4.6 items (3-12), and no model beats item popularity by
    much here. For the Movies domain use ``movies-long`` (mean history 155.5); this one stays as a
    short-sequence case.

    ``Movie-Book_{valid,test}data_new.txt`` hold disjoint users, one per line:
    ``user<TAB>n<TAB>item|unix_time|date|<TAB>...`` mixing movies (index < 36,845) and books. Kept: the
    movie events, with their unix time (the date column is the same instant in UTC+8 and is ignored, as
    is the second column), the item named by its ASIN from ``Movie-Book_Alist.txt`` (``n<TAB>ASIN<TAB>index``).
    Lines are not always in time order; the stable sort by time orders them, keeping file order on ties.
    Thresholds: users >= 3, items >= 2 (every user has 3-12 movie events).
    """

    name = "movies-fedcsr"
    description = ("Amazon Movies_and_TV part of FedCSR's Movie-Book set (../shared/data/movies); a short-sequence "
                   "domain (mean history 4.6), use movies-long for Movies")
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
                    if (len(fields) != 4 or not fields[0].isascii() or not fields[0].isdigit()
                            or not fields[1].isascii() or not fields[1].isdigit() or finite_number(fields[1]) is None):
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
        text = decode(raw, where, line_no, context)
        if text is None:
            continue
        fields = text.split("\t")
        if len(fields) != 3 or not fields[2].isascii() or not fields[2].isdigit():
            context.bad(where, line_no, f"{len(fields)} field(s) {fields!r}; expected n<TAB>ASIN<TAB>index")
            continue
        asins[int(fields[2])] = fields[1]
    return asins


@register_dataset("movies-long")
class MoviesLong(SharedSubset):
    """Amazon 2018 Movies_and_TV, users with more than 100 interactions (``Movies_and_TV_100.*.csv``).

    ``train_group.csv`` is tab-separated ``uid<TAB>iid,iid,...`` under the header ``uid<TAB>iids``: each
    user's training items in time order (no times). ``validation.csv`` and ``test.csv`` are
    ``userId,itemId,rate,timestamp`` under that header, one row per user. A user's history is the
    train_group items in file order, then its validation item, then its test item, so leave-one-out's
    validation and test cases are exactly the shipped rows. Ids are non-negative integers, kept as
    written. Repeated items are kept (1,133 users repeat a training item); ``--dedup first|last`` drops
    11,251 repeats and, for 42 users, a validation or test item seen earlier in the history, so it is not
    the shipped split. The held-out rows' rate is kept (training items have none: all are rated >= 4).

    Times: the training items carry none, so the position in the history is the time (the held-out unix
    times are checked as numbers but not used). ``--split time`` therefore splits by position, as for
    yelp-iclrec and books-dealrec: the global 70 %/85 % quantiles of positions, not dates, and its cases
    are not the shipped validation/test rows; ``--split loo`` (the default) is the shipped split.

    Every line is checked before anything is cached: the header (a missing one stops even with
    ``--skip-bad-lines``; a repeated one is a bad line), the column count, integer ids, a non-empty item
    list, UTF-8, a user given twice in one file, a validation/test user absent from train_group, and a
    train_group user without a validation or a test row (reported at its train_group line). With
    ``--skip-bad-lines`` such lines are skipped and counted, and a user with a skipped line is left out
    whole: its other rows are not counted, only left out.

    Thresholds: users >= 3, items >= 1: the shipped split is kept whole (1,234 users, 19,995 items,
    191,885 interactions; histories of 14-1,508 items). Items >= 2 would remove the 2,539 items that
    occur once, among them a validation or test item of 80 users, whose cases would then be other items.
    Windows of 200 items (the paper's): mean length 155.5.
    """

    name = "movies-long"
    untimed = "train_group.csv"
    description = ("Amazon 2018 Movies_and_TV, users with > 100 interactions, long histories "
                   "(../shared/data/movies-long)")
    folder = "movies-long"
    files = tuple(f"Movies_and_TV_100.{part}.csv" for part in ("train_group", "validation", "test"))
    min_user_interactions = 3
    min_item_interactions = 1
    max_len = 200

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        train_path, held_out_paths = files[0], files[1:]
        dropped: set[str] = set()
        train = _UserRows(train_path, "uid", "uid<TAB>iid,iid,... (integer ids, one line per user)", dropped, context)
        for line_no, (user, items) in _header_rows(train_path, "uid\tiids", "\t", context):
            sequence = items.split(",")
            problem = _id_problem("uid", user) or ("empty item list" if not items else "") or next(
                filter(None, (_id_problem("iid", item) for item in sequence)), "")
            train.add(line_no, user, (line_no, sequence), problem)
        held_out = []
        for path in held_out_paths:
            rows = _UserRows(path, "userId", "userId,itemId,rate,timestamp (integer ids, unix seconds), one row per "
                             "train_group user", dropped, context, known=(train.rows, train_path.name))
            for line_no, (user, item, rate, stamp) in _header_rows(path, "userId,itemId,rate,timestamp", ",", context):
                problem = _id_problem("userId", user) or _id_problem("itemId", item)
                rating = finite_number(rate)
                if rating is None or finite_number(stamp) is None:
                    problem = problem or f"rate {rate!r} or timestamp {stamp!r} is not a finite number"
                rows.add(line_no, user, None if problem else (item, rating), problem)
            held_out.append(rows.rows)
        users, items, ratings, times = [], [], [], []
        for user, (line_no, sequence) in train.rows.items():
            if user in dropped:
                continue
            missing = [path.name for path, rows in zip(held_out_paths, held_out) if user not in rows]
            if missing:
                context.bad(str(train_path), line_no, f"uid {user} has no row in {' or '.join(missing)}; expected "
                                                      f"one validation and one test row per train_group user")
                continue
            rows = [rows[user] for rows in held_out]
            history = sequence + [item for item, _ in rows]
            users.extend([user] * len(history))
            items.extend(history)
            ratings.extend([np.nan] * len(sequence) + [rate for _, rate in rows])
            times.extend(range(len(history)))
        return pd.DataFrame({"user": users, "item": items, "rating": np.asarray(ratings, dtype=np.float64),
                             "timestamp": np.asarray(times, dtype=np.float64)})


def _header_rows(path: Path, header: str, separator: str, context: ReadContext):
    """(line number, fields) of each data line of a file that starts with the line ``header``.

    Data before the header (or no header) stops the read; a repeated header, another field count or
    non-UTF-8 bytes make a bad line.
    """
    where = str(path)
    width = len(header.split(separator))
    header_line = 0
    for line_no, raw in iter_lines(path_opener(path), where, context):
        text = decode(raw, where, line_no, context)
        if text is None:
            continue
        if text == header:
            if header_line:
                context.bad(where, line_no, f"repeated header (first on line {header_line}); expected one header line")
            header_line = header_line or line_no
            continue
        if not header_line:
            raise DataError(f"{where}:{line_no}: {text[:60]!r} before the header; expected the header {header!r} "
                            f"on the first line")
        fields = text.split(separator)
        if len(fields) != width:
            context.bad(where, line_no, f"{len(fields)} field(s); expected {width} ({header!r})")
            continue
        yield line_no, fields
    if not header_line:
        raise DataError(f"{where}:1: empty file; expected the header {header!r} and one line per user")


def _id_problem(what: str, value: str) -> str:
    return "" if value.isascii() and value.isdigit() else f"{what} {value!r} is not an integer"


class _UserRows:
    """The one row per user of a file. A bad row (``problem``), a repeated user or one absent from
    ``known`` (rows, file name) is reported and leaves its user out of every file (``dropped``, shared);
    a dropped user's other rows are ignored."""

    def __init__(self, path: Path, field: str, expected: str, dropped: set[str], context: ReadContext,
                 known: tuple[dict, str] | None = None):
        self.where, self.field, self.expected, self.dropped, self.context = str(path), field, expected, dropped, context
        self.known = known
        self.rows: dict[str, object] = {}
        self.first_line: dict[str, int] = {}

    def add(self, line_no: int, user: str, row: object, problem: str) -> None:
        if user in self.dropped:
            return
        if not problem and user in self.first_line:
            problem = f"{self.field} {user} repeats line {self.first_line[user]}"
        elif not problem and self.known is not None and user not in self.known[0]:
            problem = f"{self.field} {user} is not in {self.known[1]}"
        self.first_line.setdefault(user, line_no)
        if problem:
            if not _id_problem("", user):  # an unreadable id names no one
                self.rows.pop(user, None)
                self.dropped.add(user)
            self.context.bad(self.where, line_no, f"{problem}; expected {self.expected}")
            return
        self.rows[user] = row
