"""Amazon review datasets (Books, Movies_and_TV, Electronics) in the 2014, 2018 and 2023 releases."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pandas as pd

from ..registry import register_dataset
from .core import MissingDataError
from .formats import resolve_format
from .parsing import ReadContext, decode, iter_lines, path_opener, read_records
from .sources import DatasetSource

AMAZON_2014_URL = "https://snap.stanford.edu/data/amazon/productGraph/categoryFiles/"
_META_ID = re.compile(rb"""["'](?:parent_asin|asin)["']\s*:\s*["']([^"']*)["']""")


class AmazonSource(DatasetSource):
    """An Amazon category; the paper's data are the 2014 5-core review files of McAuley's lab.

    Review files looked for in the raw folder, first found wins (each also uncompressed):
    ``reviews_<Cat>_5.json.gz`` (2014), ``<Cat>_5.json.gz`` (2018), ``<Cat>.jsonl.gz`` (2023),
    ``ratings_<Cat>.csv`` (2014), ``<Cat>.csv`` (2018). The format is detected from the file or forced
    with ``--format``. Optional metadata ``meta_<Cat>.json.gz`` (2014: Python dict literals, read with
    ``ast.literal_eval``; 2018: JSON) or ``meta_<Cat>.jsonl.gz`` (2023) gives each item the most specific
    category of its first category path ("" when the item has no entry).
    Thresholds: the paper's users >= 40, items >= 5.
    """

    category = ""
    formats = ("amazon-2014-json", "amazon-2018-json", "amazon-2023-jsonl", "amazon-2014-csv", "amazon-2018-csv")

    def review_names(self) -> dict[str, list[str]]:
        cat = self.category
        return {
            "amazon-2014-json": [f"reviews_{cat}_5.json.gz", f"reviews_{cat}_5.json"],
            "amazon-2018-json": [f"{cat}_5.json.gz", f"{cat}_5.json"],
            "amazon-2023-jsonl": [f"{cat}.jsonl.gz", f"{cat}.jsonl"],
            "amazon-2014-csv": [f"ratings_{cat}.csv", f"ratings_{cat}.csv.gz"],
            "amazon-2018-csv": [f"{cat}.csv", f"{cat}.csv.gz"],
        }

    def meta_names(self) -> list[str]:
        cat = self.category
        return [f"meta_{cat}.json.gz", f"meta_{cat}.json", f"meta_{cat}.jsonl.gz", f"meta_{cat}.jsonl"]

    def source_files(self, raw_dir: Path) -> list[Path]:
        raw_dir = Path(raw_dir)
        wanted = self.review_names()
        names = wanted[self.raw_format] if self.raw_format else [name for group in wanted.values() for name in group]
        review = next((raw_dir / name for name in names if (raw_dir / name).is_file()), None)
        if review is None:
            raise MissingDataError(
                f"{self.name}: no review file in {raw_dir}; expected one of {', '.join(names)} "
                f"(run `prism-rec data download --dataset {self.name}`, or place the file there)"
            )
        meta = [raw_dir / name for name in self.meta_names() if (raw_dir / name).is_file()]
        return [review] + meta[:1]

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        fmt = resolve_format(files[0], self.raw_format)
        return read_records(path_opener(files[0]), str(files[0]), fmt, context)

    def item_categories(self, files: list[Path], items: set[str], context: ReadContext) -> dict[str, str] | None:
        return read_categories(files[1], items, context) if len(files) > 1 else None


def read_categories(path: Path, items: set[str], context: ReadContext) -> dict[str, str]:
    """Category of each item of ``items`` found in an Amazon metadata file (any release).

    Lines are JSON (2018, 2023) or Python dict literals (2014), decided by whether the first line is valid
    JSON; literals are read with ``ast.literal_eval``, which evaluates no code. Lines of other items are
    skipped without being parsed.
    """
    where = str(path)
    categories: dict[str, str] = {}
    parse = None
    for line_no, raw in iter_lines(path_opener(path), where, context):
        found = _META_ID.search(raw)
        if found and found.group(1).decode("utf-8", "replace") not in items:
            continue
        text = decode(raw, where, line_no, context)
        if text is None:
            continue
        if parse is None:
            parse = json.loads if _is_json(text) else ast.literal_eval
        try:
            record = parse(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as error:
            context.bad(where, line_no, f"unreadable metadata ({type(error).__name__}: {error}); expected one "
                                        f"{'JSON object' if parse is json.loads else 'Python dict literal'} per line")
            continue
        item = record.get("parent_asin") or record.get("asin") if isinstance(record, dict) else None
        if not isinstance(item, str):
            context.bad(where, line_no, "no 'asin' or 'parent_asin'; expected an item's metadata record")
            continue
        if item in items:
            categories[item] = _category(record)
    return categories


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _category(record: dict) -> str:
    """The most specific category of the first path: 2014 ``categories`` [[...]], 2018 ``category`` [...],
    2023 ``categories`` [...] or else ``main_category``."""
    value = record.get("categories") or record.get("category") or []
    if value and isinstance(value[0], list):
        value = value[0]
    names = [name for name in value if isinstance(name, str) and name.strip()]
    if names:
        return names[-1].strip()
    main = record.get("main_category")
    return main.strip() if isinstance(main, str) else ""


def _amazon(name: str, category: str):
    @register_dataset(name)
    class Source(AmazonSource):
        __doc__ = AmazonSource.__doc__.replace("An Amazon category", f"Amazon {category}")

    Source.__name__ = Source.__qualname__ = f"Amazon{category.replace('_', '')}"
    Source.name = name
    Source.category = category
    Source.description = f"Amazon {category} reviews (2014 5-core by default; 2018/2023 accepted)"
    Source.downloads = (
        (f"reviews_{category}_5.json.gz", AMAZON_2014_URL + f"reviews_{category}_5.json.gz", True),
        (f"meta_{category}.json.gz", AMAZON_2014_URL + f"meta_{category}.json.gz", False),
    )
    return Source


AmazonBooks = _amazon("books", "Books")
AmazonMovies = _amazon("movies", "Movies_and_TV")
AmazonElectronics = _amazon("electronics", "Electronics")
