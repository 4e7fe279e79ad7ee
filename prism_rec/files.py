"""Writing files so that a reader never sees half of one."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"
TEMPORARY_PATTERN = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.tmp\Z")  # .<name>.<pid>.tmp of write_atomically


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename; the temporary
    file is removed if writing fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}{TEMPORARY_SUFFIX}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Delete the temporary files of :func:`write_atomically` under ``folder`` whose writing process no longer
    runs (a kill in the middle of a write leaves one); returns them."""
    removed = []
    for path in sorted(Path(folder).rglob(f".*{TEMPORARY_SUFFIX}")) if Path(folder).is_dir() else []:
        match = TEMPORARY_PATTERN.match(path.name)
        if match and path.is_file() and not process_alive(int(match["pid"])):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


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
