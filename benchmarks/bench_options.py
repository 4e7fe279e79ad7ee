"""Command-line parsing shared by the small kernel benchmarks (short_conv_bench.py, mixer_scan_bench.py)."""

from __future__ import annotations


def parse_dims(text: str, layout: str) -> list[tuple[int, ...]]:
    """--shapes: comma-separated sizes in ``layout`` ("BxT", "BxTxC"), each a positive integer."""
    width = len(layout.split("x"))
    shapes = []
    for item in text.split(","):
        parts = item.split("x")
        if len(parts) != width or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"--shapes: {item!r} is not {layout} with {width} positive integers")
        shapes.append(tuple(int(p) for p in parts))
    return shapes
