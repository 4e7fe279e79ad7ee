"""``prism-rec data ...``: command-line entry points of the data pipeline (download, prepare, stats).

Errors in the data (a bad line, a missing file, an offline machine) end the command with a one-line
message and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..paths import PROJECT_ROOT
from ..registry import get_dataset, list_datasets
from .core import DataError
from .download import download
from .export import export_recbole
from .formats import FORMATS
from .sources import DEFAULT_PROCESSED_ROOT, load_dataset
from .stats import RESULTS_FILE, write_stats

DEFAULT_LOCK = PROJECT_ROOT / "datasets" / "download.lock.json"


def add_parser(subparsers) -> None:
    data = subparsers.add_parser("data", help="download, prepare and describe datasets")
    commands = data.add_subparsers(dest="data_command", required=True)

    fetch = commands.add_parser("download", help="fetch a registered dataset's raw files (resumable, verified)")
    fetch.add_argument("--dataset", required=True)
    fetch.add_argument("--raw-dir")
    fetch.add_argument("--with-meta", action="store_true", help="also fetch the optional item metadata")
    fetch.add_argument("--base-url", help="mirror to fetch the files from (same file names)")
    fetch.add_argument("--lock", default=str(DEFAULT_LOCK), help="sha256/size lock file")
    fetch.add_argument("--timeout", type=float, default=30.0, help="network timeout in seconds")
    fetch.set_defaults(func=run_download)

    prepare = commands.add_parser("prepare", help="filter, split and cache a registered dataset; export RecBole .inter")
    prepare.add_argument("--dataset", required=True)
    prepare.add_argument("--raw-dir")
    prepare.add_argument("--out", help="processed cache and .inter folder (default datasets/processed)")
    prepare.add_argument("--format", choices=sorted(FORMATS), help="raw format (default: detected from the file)")
    prepare.add_argument("--min-user-interactions", type=int)
    prepare.add_argument("--min-item-interactions", type=int)
    prepare.add_argument("--split", choices=("loo", "time"), default="loo")
    prepare.add_argument("--dedup", choices=("none", "first", "last"), default="none")
    prepare.add_argument("--skip-bad-lines", action="store_true")
    prepare.add_argument("--no-progress", action="store_true", help="hide the lines/s progress bar")
    prepare.set_defaults(func=run_prepare)

    stats = commands.add_parser("stats", help="write dataset statistics beside the paper's Table 7")
    stats.add_argument("--dataset", action="append", help="dataset(s) to include (default: all registered)")
    stats.add_argument("--out", default=str(RESULTS_FILE), help="markdown file (its stats section is replaced)")
    stats.add_argument("--processed-dir", help="processed cache folder (default datasets/processed)")
    stats.set_defaults(func=run_stats)


def _fail(error: Exception) -> None:
    raise SystemExit(f"error: {error}")


def _source(name: str):
    try:
        return get_dataset(name)()
    except KeyError:
        _fail(DataError(f"unknown dataset {name!r}; registered: {', '.join(list_datasets())}"))


def run_download(args: argparse.Namespace) -> None:
    source = _source(args.dataset)
    raw_dir = Path(args.raw_dir) if args.raw_dir else source.default_raw_dir()
    try:
        for name, url, required in source.downloads:
            if required or args.with_meta:
                if args.base_url:
                    url = args.base_url.rstrip("/") + "/" + name
                print(f"{name}: {url}", file=sys.stderr)
                download(url, raw_dir / name, Path(args.lock), timeout=args.timeout, progress=_byte_progress(name))
        for path in source.unpack(raw_dir):
            print(f"extracted {path}", file=sys.stderr)
        files = source.source_files(raw_dir)
    except DataError as error:
        _fail(error)
    print(json.dumps({"dataset": args.dataset, "files": [str(path) for path in files]}, indent=2))


def _byte_progress(label: str):
    state = {"bar": None}

    def update(done: int, total: int | None) -> None:
        from tqdm import tqdm

        if state["bar"] is None:
            state["bar"] = tqdm(total=total, initial=0, unit="B", unit_scale=True, desc=label, file=sys.stderr)
        bar = state["bar"]
        bar.update(done - bar.n)
        if total is not None and done >= total:
            bar.close()

    return update


def run_prepare(args: argparse.Namespace) -> None:
    try:
        dataset = load_dataset(
            args.dataset, raw_dir=args.raw_dir, processed_dir=args.out, split=args.split,
            min_user_interactions=args.min_user_interactions, min_item_interactions=args.min_item_interactions,
            dedup=args.dedup, skip_bad_lines=args.skip_bad_lines, progress=not args.no_progress,
            raw_format=args.format,
        )
        exported = export_recbole(dataset, Path(args.out or DEFAULT_PROCESSED_ROOT))
    except KeyError as error:
        _fail(DataError(error.args[0]))
    except DataError as error:
        _fail(error)
    skipped = dataset.options.get("skipped_lines", 0)
    if skipped:
        print(f"skipped {skipped} bad line(s) (see the log for the first)", file=sys.stderr)
    print(json.dumps({"dataset": args.dataset, **dataset.stats(), "skipped_lines": skipped,
                      "recbole": [str(path) for path in exported]}, indent=2))


def run_stats(args: argparse.Namespace) -> None:
    rows = write_stats(Path(args.out), names=args.dataset,
                       processed_dir=Path(args.processed_dir) if args.processed_dir else None)
    print(json.dumps(rows, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
