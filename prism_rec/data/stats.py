"""Dataset statistics after filtering, beside the paper's Table 7, as a section of results/datasets.md.

results/datasets.md holds sections between ``<!-- name:start -->`` and ``<!-- name:end -->`` markers;
each writer replaces only its own section (``stats`` here, ``bench`` from benchmarks/data_bench.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ..markdown import fill, pipe_table, replace_section
from ..paths import RESULTS_DIR, TEMPLATES_DIR
from ..registry import get_dataset, list_datasets
from .core import DataError, MissingDataError
from .sources import load_dataset

RESULTS_FILE = RESULTS_DIR / "datasets.md"
TITLE = "# Datasets\n"

# users, items, interactions, mean length (paper Table 7)
PAPER_TABLE_7 = {
    "books": (31_103, 339_960, 3_319_359, 106.72),
    "movies": (9_429, 58_636, 1_142_976, 121.22),
    "electronics": (1_869, 33_135, 123_147, 65.89),
    "yelp": (17_233, 126_829, 1_605_608, 93.17),
}
PAPER_DOMAIN = {"yelp-iclrec": "yelp", "electronics-gerec": "electronics", "books-dealrec": "books",
                "movies-fedcsr": "movies"}


def collect(names: list[str] | None = None, raw_dirs: dict[str, Path] | None = None,
            processed_dir: Path | None = None) -> tuple[list[dict], list[str]]:
    """Statistics of each dataset whose files are present (default thresholds, leave-one-out);
    returns (rows, notes on the datasets skipped)."""
    rows, notes = [], []
    for name in names or list_datasets():
        source = get_dataset(name)()
        raw_dir = (raw_dirs or {}).get(name)
        try:
            dataset = load_dataset(name, raw_dir=raw_dir, processed_dir=processed_dir)
        except MissingDataError:
            notes.append(f"{name}: files not present in {raw_dir or source.default_raw_dir()} (datasets/README.md "
                         f"says what to place there)")
            continue
        except DataError as error:
            notes.append(f"{name}: {error}")
            continue
        rows.append({"name": name, "thresholds": f"{dataset.options['min_user_interactions']} / "
                     f"{dataset.options['min_item_interactions']}", "description": source.description,
                     **dataset.stats()})
    return rows, notes


def _paper_cells(paper: tuple) -> list[str]:
    """Users, items, interactions and mean length of a row of the paper's Table 7."""
    return [f"{paper[0]:,}", f"{paper[1]:,}", f"{paper[2]:,}", f"{paper[3]:.2f}"]


def render(rows: list[dict], notes: list[str]) -> str:
    lines = [fill(TEMPLATES_DIR / "data_stats.md", when=f"{datetime.now(UTC):%Y-%m-%d %H:%M}"), ""]
    table = []
    for row in rows:
        paper = PAPER_TABLE_7.get(PAPER_DOMAIN.get(row["name"], row["name"]))
        table.append([row["name"], row["thresholds"], f"{row['users']:,}", f"{row['items']:,}",
                      f"{row['interactions']:,}", f"{row['mean_length']:.2f}", f"{row['max_length']:,}",
                      *(_paper_cells(paper) if paper else ["-"] * 4)])
    missing = [name for name in PAPER_TABLE_7 if name not in {row["name"] for row in rows}]
    for name in missing:
        table.append([f"{name} (files not present)", "40 / 5", *["-"] * 5, *_paper_cells(PAPER_TABLE_7[name])])
    lines.append(pipe_table(["dataset", "users >= / items >=", "users", "items", "interactions", "mean len", "max len",
                             "paper users", "paper items", "paper interactions", "paper mean len"], table,
                            align="ll" + "r" * 9))
    if notes:
        lines += ["", "Not included:", ""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def write_stats(path: Path = RESULTS_FILE, **kwargs) -> list[dict]:
    rows, notes = collect(**kwargs)
    replace_section(Path(path), "stats", render(rows, notes), TITLE)
    return rows
