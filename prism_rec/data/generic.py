"""Generic processed inputs: RecBole atomic ``.inter`` files and ``user item item ...`` sequence text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..registry import register_dataset
from .core import DataError, MissingDataError
from .parsing import ReadContext, decode, finite_number, iter_lines, merge_windows, path_opener
from .sources import DatasetSource


def read_sequence_text(files: list[Path], context: ReadContext) -> pd.DataFrame:
    """Lines ``user item item ...`` (whitespace-separated, items in chronological order).

    There are no timestamps: an interaction's time is its position in the user's history, counted on
    across files, so a user's line in a later file continues the history of an earlier file. A line with
    a user and no items adds nothing.
    """
    users, items, times = [], [], []
    position: dict[str, int] = {}
    for path in files:
        where = str(path)
        for line_no, raw in iter_lines(path_opener(path), where, context):
            text = decode(raw, where, line_no, context)
            if text is None:
                continue
            user, *sequence = text.split()
            start = position.get(user, 0)
            position[user] = start + len(sequence)
            users.extend([user] * len(sequence))
            items.extend(sequence)
            times.extend(range(start, start + len(sequence)))
    return pd.DataFrame({"user": users, "item": items, "timestamp": np.asarray(times, dtype=np.float64)})


def _header(path: Path, context: ReadContext) -> tuple[list[str], int, bytes]:
    """The field names of a .inter file's typed header, its line number and the line itself."""
    for line_no, raw in iter_lines(path_opener(path), str(path), context):
        fields = raw.decode("utf-8", "replace").split("\t")
        if not all(":" in field for field in fields) or not any(f.startswith("user_id:") for f in fields):
            raise DataError(f"{path}:{line_no}: header {fields!r} is not typed; expected RecBole atomic fields "
                            f"like user_id:token<TAB>item_id:token<TAB>timestamp:float")
        return [field.split(":")[0] for field in fields], line_no, raw
    raise DataError(f"{path}:1: empty file; expected a RecBole .inter header")


def _window_events(parts: list[str], column: dict, target: str, times: str | None, at: tuple[str, int],
                   context: ReadContext) -> list[tuple] | None:
    """One sequential row's (item, time) events: item_id_list then the target items, with the time list's
    numbers (or None without one); None, with the line reported bad, when the time list does not fit."""
    sequence = parts[column["item_id_list"]].split() + parts[column[target]].split()
    clock = parts[column[times]].split() if times else [None] * len(sequence)
    if len(clock) != len(sequence):
        context.bad(*at, f"{times} has {len(clock)} entries; expected one per item of item_id_list and {target} "
                         f"({len(sequence)})")
        return None
    events = [(item, None if stamp is None else finite_number(stamp)) for item, stamp in zip(sequence, clock)]
    if times and any(stamp is None for _, stamp in events):
        context.bad(*at, f"{times} {clock!r} holds a non-number; expected finite numbers")
        return None
    return events


def _layout(names: list[str], at: str) -> tuple[dict[str, int], str, str | None]:
    """A header's columns by name, its target field (item_id or items_in_target_basket) and its time list
    field (``*time*_list``, or None)."""
    column = {name: index for index, name in enumerate(names)}
    target = next((name for name in ("item_id", "items_in_target_basket") if name in column), None)
    if target is None:
        raise DataError(f"{at}: no item_id:token or items_in_target_basket field; expected a RecBole .inter header "
                        f"with one of them")
    return column, target, next((name for name in names if name.endswith("_list") and "time" in name), None)


def _rating_and_time(parts: list[str], column: dict, names: list[str], at: tuple[str, int],
                     context: ReadContext) -> tuple[float, float] | None:
    """One interaction row's (rating, timestamp), NaN where the header has no such field; None, with the line
    reported bad, when one is not a finite number."""
    rating = finite_number(parts[column["rating"]]) if "rating" in column else np.nan
    stamp = finite_number(parts[column["timestamp"]]) if "timestamp" in column else np.nan
    if stamp is None or rating is None:
        context.bad(*at, f"rating or timestamp is not a finite number; expected float fields ({', '.join(names)})")
        return None
    return rating, stamp


def read_recbole_inter(files: list[Path], context: ReadContext) -> pd.DataFrame:
    """RecBole atomic ``.inter`` files with a typed header; rows in file order.

    Two layouts: one interaction per row (``user_id:token item_id:token`` with optional
    ``rating:float`` and ``timestamp:float``; without timestamps the row order is the time), or
    sequential rows (``item_id_list:token_seq`` prefix plus a target ``item_id:token`` or a
    space-separated ``items_in_target_basket:token``, with an optional time list ``*time*_list``
    covering the prefix and the target). Sequential rows are windows of a user's history; each user's
    history is rebuilt with ``merge_windows`` from the windows in file order (files in the order given),
    so augmented prefixes and capped windows come back as one sequence. A time list gives the times
    (and makes window matching use (item, time) pairs); without one, the position is the time.
    """
    per_row: list[pd.DataFrame] = []
    windows: dict[str, list[list[tuple]]] = {}
    for path in files:
        where = str(path)
        names, header_line, header = _header(path, context)
        column, target, times = _layout(names, f"{where}:{header_line}")
        sequential = "item_id_list" in column
        users, items, ratings, stamps = [], [], [], []
        for line_no, raw in iter_lines(path_opener(path), where, context):
            if line_no <= header_line:
                continue
            if raw == header:
                context.bad(where, line_no, f"repeated header (first on line {header_line}); expected one header line")
                continue
            text = decode(raw, where, line_no, context)
            if text is None:
                continue
            parts = text.split("\t")
            if len(parts) != len(names):
                context.bad(where, line_no, f"{len(parts)} field(s); expected {len(names)} ({', '.join(names)})")
                continue
            user = parts[column["user_id"]]
            if sequential:
                events = _window_events(parts, column, target, times, (where, line_no), context)
                if events is not None:
                    windows.setdefault(user, []).append(events)
                continue
            numbers = _rating_and_time(parts, column, names, (where, line_no), context)
            if numbers is not None:
                users.append(user)
                items.append(parts[column[target]])
                ratings.append(numbers[0])
                stamps.append(numbers[1])
        if users:
            per_row.append(pd.DataFrame({"user": users, "item": items, "rating": ratings, "timestamp": stamps}))
    return _interactions(per_row + [_windows_frame(windows)] * bool(windows))


def _interactions(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The files' frames as one; without timestamps (a NaN anywhere) each user's row order is the time."""
    if not frames:
        return pd.DataFrame(columns=["user", "item", "rating", "timestamp"])
    frame = pd.concat(frames, ignore_index=True)
    if frame["timestamp"].isna().any():
        frame["timestamp"] = frame.groupby("user", sort=False).cumcount().astype(np.float64)
    return frame


def _windows_frame(windows: dict[str, list[list[tuple]]]) -> pd.DataFrame:
    users, items, times = [], [], []
    for user, pieces in windows.items():
        history = merge_windows(pieces)
        users.extend([user] * len(history))
        items.extend(item for item, _ in history)
        times.extend(float(position) if stamp is None else stamp for position, (_, stamp) in enumerate(history))
    return pd.DataFrame({"user": users, "item": items, "rating": np.nan,
                         "timestamp": np.asarray(times, dtype=np.float64)})


class _GenericSource(DatasetSource):
    suffixes: tuple[str, ...] = ()

    def source_files(self, raw_dir: Path) -> list[Path]:
        raw_dir = Path(raw_dir)
        files = sorted(path for path in raw_dir.glob("*") if path.is_file() and path.name.endswith(self.suffixes)) \
            if raw_dir.is_dir() else []
        if not files:
            raise MissingDataError(f"{self.name}: no {' or '.join(self.suffixes)} file in {raw_dir}; expected "
                                   f"{self.download_help}; pass the folder with --raw-dir")
        return files


@register_dataset("recbole-inter")
class RecBoleInter(_GenericSource):
    """Any RecBole atomic ``.inter`` data set: every ``*.inter`` file of the raw folder, in name order
    (name them so that order is chronological, e.g. 1.train, 2.valid, 3.test).

    Thresholds: users >= 3, items >= 1 (keep a processed set as it is; leave-one-out needs 3 items).
    """

    name = "recbole-inter"
    description = "generic RecBole atomic .inter file(s) (--raw-dir)"
    download_help = "RecBole atomic .inter files (typed header)"
    suffixes = (".inter",)
    min_user_interactions = 3
    min_item_interactions = 1

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        return read_recbole_inter(files, context)


@register_dataset("sequence-text")
class SequenceText(_GenericSource):
    """Any ``user item item ...`` text data set: every ``*.txt`` file of the raw folder, in name order.

    Thresholds: users >= 3, items >= 1 (keep a processed set as it is; leave-one-out needs 3 items).
    """

    name = "sequence-text"
    description = "generic 'user item item ...' text file(s) (--raw-dir)"
    download_help = "text files with one 'user item item ...' line per user"
    suffixes = (".txt",)
    min_user_interactions = 3
    min_item_interactions = 1

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        return read_sequence_text(files, context)
