"""Names that become parts of paths (datasets, experiments, models, runs, reports): checked to be one plain
path component, and paths checked to stay inside the folder they are written under."""

from __future__ import annotations

import re
from pathlib import Path

# one component: starts with a letter or digit (so never '.', '..', '-x' or empty), then letters, digits, . _ + = -
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]{0,127}\Z")


def path_name(text: object, what: str) -> str:
    """``text`` when it is a plain name that can be one path component; else a ValueError saying ``what``
    it is (e.g. "record 3 experiment") and why ('..', a separator, NUL, an absolute path...)."""
    if isinstance(text, str) and NAME_PATTERN.match(text):
        return text
    if not isinstance(text, str):
        reason = f"not a string ({type(text).__name__})"
    elif "\0" in text:
        reason = "contains NUL"
    elif "/" in text or "\\" in text:
        reason = "contains a path separator" + (" (an absolute path)" if text.startswith(("/", "\\")) else "")
    elif text in ("", ".", ".."):
        reason = "empty or a relative folder"
    else:
        reason = "not letters, digits and . _ + = - starting with a letter or digit"
    raise ValueError(f"{what} {text!r}: {reason}; expected a plain name")


def inside(path: Path, root: Path, what: str) -> Path:
    """``path`` when it resolves to ``root`` or below it (symbolic links followed); else a ValueError naming
    ``what`` and both folders."""
    resolved, base = Path(path).resolve(), Path(root).resolve()
    if resolved != base and base not in resolved.parents:
        raise ValueError(f"{what}: {path} lies outside {root}")
    return Path(path)
