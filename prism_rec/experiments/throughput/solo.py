"""The solo-throughput file, ``solo_throughput.csv``: one row per (dataset, model) that the step benchmark's
solo pass (benchmarks/step_solo.py) timed alone on the GPU, written by benchmarks/step_report.py and read by
the headline report's cost table and Pareto plots. ``SOLO_COLUMNS`` is the one list of its columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

SOLO_NAME = "solo_throughput.csv"
SOLO_COLUMNS = ("dataset", "model", "tokens_per_s", "step_ms", "step_ms_max", "batch_size", "max_len", "n_items",
                "dtype", "machine", "command", "compile")


def read_solo(path: Path) -> dict[tuple[str, str], dict] | None:
    """{(dataset, model): row} of the solo throughput file (the last row per pair), None if it is absent."""
    if not Path(path).is_file():
        return None
    frame = pd.read_csv(path)
    missing = [c for c in SOLO_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: no column(s) {', '.join(missing)}")
    return {(row["dataset"], row["model"]): row for row in frame.to_dict("records")}
