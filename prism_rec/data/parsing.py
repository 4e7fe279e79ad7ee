"""Streaming readers of raw interaction files with exact error locations.

Every reader reports a bad line as ``<file>:<line>: <what is wrong>; expected <what>``. Without
``skip_bad_lines`` the first bad line raises ``DataError``; with it, bad lines are skipped and counted in
the ``ReadContext``. Blank lines are ignored everywhere (they carry no interaction). A truncated gzip
stream always stops the read: what followed the cut is unknown, so no count of skipped lines would be
honest.

Timestamps come out as float seconds since the epoch (UTC); sources without times use the position of
the interaction in the user's history. A time or rating that is not a finite number (``1e400`` reads as
infinity, a bare ``NaN`` in JSON as NaN) is a bad line, as are bytes that are not UTF-8. Lines end in LF,
CR LF or a lone CR; a UTF-8 byte-order mark at the start of a file is dropped.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from .core import DataError

log = logging.getLogger("prism_rec.data")

Opener = Callable[[], BinaryIO]
DATETIME_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\Z")


class ReadContext:
    """Bad-line policy, the count of skipped lines, and an optional progress bar (lines/s) on stderr."""

    def __init__(self, skip_bad_lines: bool = False, progress: bool = False):
        self.skip_bad_lines = skip_bad_lines
        self.skipped = 0
        self.first_skipped = ""
        self.lines = 0
        self._bar = None
        if progress:
            from tqdm import tqdm

            self._bar = tqdm(unit=" lines", unit_scale=True, mininterval=0.5, dynamic_ncols=True)

    def bad(self, where: str, line_no: int, message: str) -> None:
        text = f"{where}:{line_no}: {message}"
        if not self.skip_bad_lines:
            raise DataError(text + " (use --skip-bad-lines to skip such lines)")
        self.skipped += 1
        if not self.first_skipped:
            self.first_skipped = text

    def advance(self, lines: int, label: str = "") -> None:
        self.lines += lines
        if self._bar is not None:
            if label and self._bar.desc != label:
                self._bar.set_description(label)
            self._bar.update(lines)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.skipped:
            log.warning("skipped %d bad line(s); first: %s", self.skipped, self.first_skipped)

    def summary(self) -> str:
        return f"skipped {self.skipped} bad line(s); first: {self.first_skipped}" if self.skipped else ""


class PathOpener:
    """Opens ``path`` for binary reading, decompressing ``.gz`` files; ``path`` lets pyarrow read natively."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __call__(self) -> BinaryIO:
        return gzip.open(self.path, "rb") if self.path.name.endswith(".gz") else open(self.path, "rb")


def path_opener(path: Path) -> Opener:
    return PathOpener(path)


BYTE_ORDER_MARK = b"\xef\xbb\xbf"
CHUNK_BYTES = 1 << 20


def split_lines(handle: BinaryIO) -> Iterator[bytes]:
    """The lines of ``handle`` without their endings, which may be LF, CR LF or a lone CR (old Mac files),
    the UTF-8 byte-order mark at the start of the file removed."""
    rest = b""
    first = True
    while True:
        chunk = handle.read(CHUNK_BYTES)
        if not chunk:
            break
        if first:
            chunk, first = chunk.removeprefix(BYTE_ORDER_MARK), False
        lines = (rest + chunk).splitlines(keepends=True)
        # the last piece may go on in the next chunk (no ending yet, or a CR whose LF is still to come)
        rest = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        for line in lines:
            yield line.rstrip(b"\r\n")
    if rest:
        yield rest.rstrip(b"\r\n")


def iter_lines(opener: Opener, where: str, context: ReadContext) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, line without its ending) of non-blank lines (:func:`split_lines`); counts
    progress."""
    line_no = 0
    pending = 0
    try:
        with opener() as handle:
            for line_no, raw in enumerate(split_lines(handle), 1):
                pending += 1
                if pending == 65536:
                    context.advance(pending, Path(where).name)
                    pending = 0
                if raw.strip():
                    yield line_no, raw
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(
            f"{where}:{line_no + 1}: truncated or corrupt gzip stream ({error}); expected a complete "
            f".gz file, download it again"
        ) from error
    finally:
        context.advance(pending, Path(where).name)


def decode(raw: bytes, where: str, line_no: int, context: ReadContext) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        context.bad(where, line_no, f"not UTF-8 ({error.reason} at byte {error.start}); expected UTF-8 text")
        return None


def finite_number(value: str | int | float) -> float | None:
    """``value`` as a float when it is a finite number, else None (``float`` reads "1e400" as infinity;
    JSON's 1 followed by 400 zeros is an int that no float holds)."""
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class RecordFormat:
    """Where user, item, rating and time sit in one record, and the unit of the time.

    ``kind`` is "json" (fields are keys) or "csv" (fields are 0-based columns of ``columns``);
    ``time_unit`` is "s", "ms" or "datetime" ("YYYY-MM-DD HH:MM:SS", read as UTC).
    """

    name: str
    kind: str
    user: str | int
    item: str | int
    rating: str | int
    time: str | int
    time_unit: str = "s"
    columns: int = 4
    description: str = ""
    required: tuple = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "required", (self.user, self.item, self.time))


def read_records(opener: Opener, where: str, fmt: RecordFormat, context: ReadContext) -> pd.DataFrame:
    """Read one file of ``fmt`` records into a frame user, item, rating, timestamp in file order."""
    if fmt.kind == "json":
        frame = _read_json_fast(opener, fmt, context, where)
        if frame is not None:
            return frame
        return _read_json_lines(opener, where, fmt, context)
    return _read_csv_lines(opener, where, fmt, context)


def _read_json_fast(opener: Opener, fmt: RecordFormat, context: ReadContext, where: str) -> pd.DataFrame | None:
    """pyarrow's multithreaded JSON reader; None when the file needs the line-by-line reader's checks.

    Any parse error, a missing required field, a type other than expected or an unreadable date sends the
    file to ``_read_json_lines``, which names the offending line (or skips it).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    time_type = pa.string() if fmt.time_unit == "datetime" else pa.int64()
    schema = pa.schema([(fmt.user, pa.string()), (fmt.item, pa.string()), (fmt.rating, pa.float64()),
                        (fmt.time, time_type)])
    batches = []
    lines_before = context.lines
    try:
        native = isinstance(opener, PathOpener)
        with pa.input_stream(str(opener.path), compression="detect") if native else opener() as handle:
            reader = pj.open_json(
                handle, read_options=pj.ReadOptions(block_size=16 << 20),
                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
            )
            for batch in reader:
                if any(batch.column(name).null_count for name in fmt.required) or pc.any(
                        pc.is_nan(batch.column(fmt.rating))).as_py():  # a NaN rating is a bad line
                    return None
                batches.append(batch)
                context.advance(batch.num_rows, Path(where).name)
    except (pa.ArrowException, EOFError, OSError, zlib.error):
        context.lines = lines_before
        return None
    try:  # ids that are not UTF-8 fail here
        frame = pa.Table.from_batches(batches, schema=schema).to_pandas(deduplicate_objects=True)
    except pa.ArrowException:
        context.lines = lines_before
        return None
    frame.columns = ["user", "item", "rating", "timestamp"]
    times = _convert_times(frame["timestamp"], fmt.time_unit)
    if times is None or not np.isfinite(times).all() or np.isinf(frame["rating"]).any():
        context.lines = lines_before
        return None
    frame["timestamp"] = times
    return frame


def _convert_times(values: pd.Series, unit: str) -> pd.Series | None:
    if unit == "datetime":
        parsed = pd.to_datetime(values, format="%Y-%m-%d %H:%M:%S", utc=True, errors="coerce")
        seconds = (parsed - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)
        return seconds.astype("float64")
    numbers = pd.to_numeric(values, errors="coerce").astype("float64")
    return numbers / 1000.0 if unit == "ms" else numbers


def _read_json_lines(opener: Opener, where: str, fmt: RecordFormat, context: ReadContext) -> pd.DataFrame:
    users, items, ratings, times, line_numbers = [], [], [], [], []
    fields = ", ".join(repr(name) for name in (fmt.user, fmt.item, fmt.rating, fmt.time))
    datetime = fmt.time_unit == "datetime"
    for line_no, raw in iter_lines(opener, where, context):
        text = decode(raw, where, line_no, context)
        if text is None:
            continue
        try:
            record = json.loads(text)
        except ValueError as error:
            context.bad(where, line_no,
                        f"malformed JSON ({error}); expected one {fmt.description} JSON object per line")
            continue
        if not isinstance(record, dict):
            context.bad(where, line_no, f"a JSON {type(record).__name__}; expected an object with {fields}")
            continue
        missing = [name for name in fmt.required if record.get(name) is None]
        if missing:
            context.bad(where, line_no, f"missing field {missing[0]!r}; expected {fields}")
            continue
        stamp = record[fmt.time]
        if datetime:
            if not (isinstance(stamp, str) and DATETIME_PATTERN.match(stamp)):
                context.bad(where, line_no, f"{fmt.time!r} is {stamp!r}; expected \"YYYY-MM-DD HH:MM:SS\"")
                continue
        elif isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or finite_number(stamp) is None:
            context.bad(where, line_no, f"{fmt.time!r} is {repr(stamp)[:40]}; expected a finite number "
                                        f"({fmt.time_unit} since 1970)")
            continue
        rating = record.get(fmt.rating)
        if isinstance(rating, (int, float)) and not isinstance(rating, bool) and finite_number(rating) is None:
            context.bad(where, line_no, f"{fmt.rating!r} is {rating!r}; expected a finite number")
            continue
        users.append(str(record[fmt.user]))
        items.append(str(record[fmt.item]))
        ratings.append(rating if isinstance(rating, (int, float)) and not isinstance(rating, bool) else np.nan)
        times.append(stamp)
        line_numbers.append(line_no)
    frame = pd.DataFrame({"user": users, "item": items, "rating": np.asarray(ratings, dtype=np.float64)})
    seconds = _convert_times(pd.Series(times, dtype=object), fmt.time_unit)
    bad_rows = np.flatnonzero(seconds.isna().to_numpy())
    for row in bad_rows:
        context.bad(where, line_numbers[row], f"{fmt.time!r} is {times[row]!r}; expected a valid date and time")
    frame["timestamp"] = seconds.to_numpy()
    if len(bad_rows):
        frame = frame.drop(index=bad_rows).reset_index(drop=True)
    return frame


def _read_csv_lines(opener: Opener, where: str, fmt: RecordFormat, context: ReadContext) -> pd.DataFrame:
    users, items, ratings, times = [], [], [], []
    layout = ",".join(name for _, name in sorted(
        ((fmt.user, "user"), (fmt.item, "item"), (fmt.rating, "rating"), (fmt.time, "timestamp"))))
    for line_no, raw in iter_lines(opener, where, context):
        text = decode(raw, where, line_no, context)
        if text is None:
            continue
        parts = text.split(",")
        if len(parts) != fmt.columns:
            context.bad(where, line_no, f"{len(parts)} column(s); expected {fmt.columns} ({layout}, no header)")
            continue
        stamp, rating = finite_number(parts[fmt.time]), finite_number(parts[fmt.rating])
        if stamp is None or rating is None:
            context.bad(where, line_no, f"rating {parts[fmt.rating]!r} or timestamp {parts[fmt.time]!r} is not "
                                        f"a finite number; expected {layout}")
            continue
        users.append(parts[fmt.user])
        items.append(parts[fmt.item])
        ratings.append(rating)
        times.append(stamp / 1000.0 if fmt.time_unit == "ms" else stamp)
    return pd.DataFrame({"user": users, "item": items, "rating": np.asarray(ratings, dtype=np.float64),
                         "timestamp": np.asarray(times, dtype=np.float64)})


def merge_windows(windows: list[list]) -> list:
    """Rebuild one user's history from windows (contiguous pieces of it) given in chronological order.

    Each window is appended after the longest overlap between the end of the history so far and the
    window's start; a window already contained at the end adds nothing. This reverses both prefix
    augmentation (one row per prefix) and length-capped sliding windows.
    """
    merged: list = []
    for window in windows:
        for start in range(max(0, len(merged) - len(window)), len(merged) + 1):
            overlap = len(merged) - start
            if merged[start:] == window[:overlap]:
                merged.extend(window[overlap:])
                break
    return merged


def sniff_first_line(opener: Opener, where: str) -> bytes:
    """The first non-blank line of a file (for format detection); b"" for an empty file."""
    try:
        with opener() as handle:
            for raw in split_lines(handle):
                if raw.strip():
                    return raw.strip()
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"{where}:1: truncated or corrupt gzip stream ({error}); expected "
                        f"a complete .gz file") from error
    return b""

