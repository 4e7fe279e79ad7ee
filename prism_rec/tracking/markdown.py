"""Markdown: the one writer of tables, and report prose from templates with the computed values filled in."""

from __future__ import annotations

import string
from pathlib import Path


def pipe_table(header: list[str], rows: list[list[str]], align: str) -> str:
    """A markdown table: ``align`` holds one letter per column, l (left) or r (right)."""
    if len(align) != len(header) or any(len(row) != len(header) for row in rows):
        raise ValueError(f"pipe_table: {len(header)} columns, align {align!r}, rows of "
                         f"{sorted({len(r) for r in rows})}")
    rule = "|" + "|".join("---" if side == "l" else "---:" for side in align) + "|"
    return "\n".join(["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(row) + " |" for row in rows)])


def fill(template: Path, **values) -> str:
    """The text of ``template`` (without the file's final newline) with ``values`` in place of its $names."""
    return string.Template(Path(template).read_text().removesuffix("\n")).substitute(values)
