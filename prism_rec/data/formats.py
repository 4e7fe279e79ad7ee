"""The raw record formats of Amazon reviews and Yelp, and their detection from a file."""

from __future__ import annotations

import json
from pathlib import Path

from .core import DataError
from .parsing import RecordFormat, path_opener, sniff_first_line

FORMATS = {
    fmt.name: fmt
    for fmt in (
        RecordFormat("amazon-2014-json", "json", "reviewerID", "asin", "overall", "unixReviewTime", "s",
                     description="Amazon 2014 review"),
        RecordFormat("amazon-2018-json", "json", "reviewerID", "asin", "overall", "unixReviewTime", "s",
                     description="Amazon 2018 review"),
        RecordFormat("amazon-2023-jsonl", "json", "user_id", "parent_asin", "rating", "timestamp", "ms",
                     description="Amazon 2023 review"),
        RecordFormat("amazon-2014-csv", "csv", 0, 1, 2, 3, "s", description="Amazon 2014 rating"),
        RecordFormat("amazon-2018-csv", "csv", 1, 0, 2, 3, "s", description="Amazon 2018 rating"),
        RecordFormat("yelp-json", "json", "user_id", "business_id", "stars", "date", "datetime",
                     description="Yelp review"),
    )
}

_JSON_KEYS = (
    ({"reviewerID", "asin", "unixReviewTime"}, "amazon-{year}-json"),
    ({"user_id", "parent_asin", "timestamp"}, "amazon-2023-jsonl"),
    ({"user_id", "business_id", "date"}, "yelp-json"),
)


def detect_format(path: Path) -> RecordFormat:
    """The format of ``path`` from its first non-blank line, and its name where content is ambiguous.

    JSON lines are told apart by their keys (Amazon 2014 and 2018 share them; a ``reviews_`` prefix marks
    2014). Ratings CSVs are told apart by name only, as their content looks the same: ``ratings_<Cat>.csv``
    is 2014 (user,item,rating,time), any other ``.csv`` is 2018 (item,user,rating,time).
    """
    first = sniff_first_line(path_opener(path), str(path))
    expected = ("expected JSON lines of Amazon 2014/2018 (reviewerID, asin, unixReviewTime), Amazon 2023 "
                "(user_id, parent_asin, timestamp) or Yelp (user_id, business_id, date), or a 4-column ratings "
                "CSV; or pass --format")
    if not first:
        raise DataError(f"{path}:1: empty file; {expected}")
    if first.startswith(b"{"):
        try:
            keys = set(json.loads(first.decode("utf-8")))
        except UnicodeDecodeError as error:
            raise DataError(f"{path}:1: not UTF-8 ({error.reason} at byte {error.start}); {expected}") from error
        except ValueError as error:
            raise DataError(f"{path}:1: malformed JSON ({error}); {expected}") from error
        for required, name in _JSON_KEYS:
            if required <= keys:
                return FORMATS[name.format(year="2014" if path.name.startswith("reviews_") else "2018")]
        raise DataError(f"{path}:1: unknown format (keys {sorted(keys)}); {expected}")
    if first.count(b",") == 3:
        return FORMATS["amazon-2014-csv" if path.name.startswith("ratings_") else "amazon-2018-csv"]
    raise DataError(f"{path}:1: unknown format (line starts {first[:40]!r}); {expected}")


def resolve_format(path: Path, name: str | None) -> RecordFormat:
    """``name`` when given (checked against the known formats), else the format detected from the file."""
    if name is None:
        return detect_format(path)
    if name not in FORMATS:
        raise DataError(f"option --format: unknown format {name!r}; expected one of {', '.join(FORMATS)}")
    return FORMATS[name]
