"""The one writer of markdown tables."""

from __future__ import annotations


def pipe_table(header: list[str], rows: list[list[str]], align: str) -> str:
    """A markdown table: ``align`` holds one letter per column, l (left) or r (right)."""
    if len(align) != len(header) or any(len(row) != len(header) for row in rows):
        raise ValueError(f"pipe_table: {len(header)} columns, align {align!r}, rows of "
                         f"{sorted({len(r) for r in rows})}")
    rule = "|" + "|".join("---" if side == "l" else "---:" for side in align) + "|"
    return "\n".join(["| " + " | ".join(header) + " |", rule, *("| " + " | ".join(row) + " |" for row in rows)])
