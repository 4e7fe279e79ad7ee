"""Speed and peak memory of reading + preparing a synthetic Books-sized Amazon 2014 5-core file.

    python benchmarks/data_bench.py [--lines 8900000] [--gzip] [--write-results]

Writes ``reviews_Books_5.json(.gz)`` (same fields and layout as the real file; review texts of 200-1100
characters) into a temporary folder, then runs ``load_dataset("books", ...)`` on it with the paper's
thresholds in a child process, reporting wall time, lines/s and the child's peak resident memory.
``--write-results`` replaces the bench section of results/datasets.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

WORDS = ["the", "a", "story", "book", "author", "character", "plot", "read", "reading", "loved", "great", "boring",
         "chapter", "ending", "series", "recommend", "page", "writing", "style", "novel", "history", "life"]
TEMPLATE = ('{{"reviewerID": "A{user:013d}", "asin": "{item:010d}", "reviewerName": "Reader {user}", '
            '"helpful": [{h0}, {h1}], "reviewText": "{text}", "overall": {rating}.0, "summary": "{summary}", '
            '"unixReviewTime": {stamp}, "reviewTime": "01 1, 2013"}}\n')


def generate(path: Path, lines: int, seed: int = 0) -> None:
    """Books-like counts (603,668 users and 367,982 items at 8.9M lines, scaled with ``lines``) with a
    heavy head, so the filter keeps a Books-like share."""
    rng = random.Random(seed)
    users, items = max(1, 603_668 * lines // 8_898_041), max(1, 367_982 * lines // 8_898_041)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(35, 180))) for _ in range(1000)]
    opener = gzip.open(path, "wt", compresslevel=1) if path.suffix == ".gz" else open(path, "w")  # noqa: SIM115
    with opener as handle:
        block = []
        for number in range(lines):
            block.append(TEMPLATE.format(
                user=int(users * rng.random() ** 2), item=int(items * rng.random() ** 2),
                h0=number % 3, h1=number % 5, text=texts[number % 1000], rating=1 + number % 5,
                summary=texts[(number * 7) % 1000][:40], stamp=946684800 + rng.randrange(460_000_000)))
            if len(block) == 100_000:
                handle.write("".join(block))
                block = []
        handle.write("".join(block))


def measure(raw_dir: Path) -> dict:
    """Run in a fresh interpreter so its peak memory is the pipeline's alone."""
    from prism_rec.data.sources import load_dataset

    start = time.perf_counter()
    dataset = load_dataset("books", raw_dir=raw_dir, use_cache=False)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_gib": peak_kib / 2**20, **dataset.stats()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=8_900_000)
    parser.add_argument("--gzip", action="store_true", help="write .json.gz as distributed (default .json)")
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure))))
        return
    with tempfile.TemporaryDirectory(prefix="prism-data-bench-") as folder:
        path = Path(folder) / ("reviews_Books_5.json.gz" if args.gzip else "reviews_Books_5.json")
        start = time.perf_counter()
        generate(path, args.lines)
        generated = time.perf_counter() - start
        size = path.stat().st_size
        child = subprocess.run([sys.executable, __file__, "--measure", folder], capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(f"measurement failed:\n{child.stderr[-2000:]}")
        result = json.loads(child.stdout.strip().splitlines()[-1])
    result.update(lines=args.lines, lines_per_s=args.lines / result["seconds"], file_gb=size / 1e9,
                  generate_s=generated, file=path.name)
    print(json.dumps(result, indent=2))
    if args.write_results:
        write_results(result, " ".join(["python benchmarks/data_bench.py"] + sys.argv[1:]))


def write_results(result: dict, command: str) -> None:
    from prism_rec.data.stats import RESULTS_FILE, TITLE
    from prism_rec.markdown import replace_section

    cpu = platform.processor()
    if Path("/proc/cpuinfo").exists():
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    body = "\n".join([
        "## Read + prepare speed (synthetic Books-sized file)",
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {os.cpu_count()} cores, {cpu}, "
        f"Python {platform.python_version()}",
        f"- command: `{command}`",
        f"- file: {result['file']}, {result['lines']:,} lines, {result['file_gb']:.2f} GB (Amazon 2014 5-core layout)",
        f"- load_dataset('books') with users >= 40, items >= 5, leave-one-out (read, filter, sort, split; no cache): "
        f"**{result['seconds']:.1f} s**, **{result['lines_per_s']:,.0f} lines/s**, peak memory "
        f"**{result['peak_gib']:.2f} GiB** (targets: < 120 s, < 4 GB)",
        f"- kept: {result['users']:,} users, {result['items']:,} items, {result['interactions']:,} interactions",
    ])
    replace_section(RESULTS_FILE, "bench", body, TITLE)


if __name__ == "__main__":
    main()
