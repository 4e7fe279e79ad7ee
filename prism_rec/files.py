"""Writing files so that a reader never sees half of one."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename; the temporary
    file is removed if writing fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def jsonl_text(rows: list[dict]) -> str:
    """``rows`` as JSON lines, keys sorted."""
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` to ``path`` as JSON lines through :func:`write_atomically`."""
    write_atomically(path, jsonl_text(rows))


def write_figure_atomically(path: Path, figure, dpi: int) -> None:
    """Write a matplotlib ``figure`` as PNG to ``path`` through :func:`write_atomically`."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    write_atomically(path, buffer.getvalue())


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of ``path``, one per line; [] when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not a JSON line ({error})") from None
    return rows
