"""Markdown: the one writer of tables, report prose from templates with the computed values filled in, and
sections of a shared markdown file that each writer replaces on its own."""

from __future__ import annotations

import re
import string
from pathlib import Path

from .files import write_atomically


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


def replace_section(path: Path, name: str, body: str, title: str = "") -> None:
    """Replace (or append) the section ``name`` of the markdown file ``path``, atomically: the text between
    ``<!-- name:start -->`` and ``<!-- name:end -->``. A file that does not exist yet starts with ``title``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.rstrip()}\n{end}\n"
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.is_file() else title
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + block
    write_atomically(path, text)
