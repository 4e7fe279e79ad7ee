"""Resumable, verified downloads with the standard library only.

A file is fetched to ``<name>.part`` (resumed with an HTTP Range request when a part exists) and renamed
when complete. The first complete download records its size and sha256 in a JSON lock file; every
later download or check of the same file must match them.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from .core import DataError

CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_lock(lock_path: Path) -> dict:
    if not lock_path.is_file():
        return {}
    try:
        return json.loads(lock_path.read_text())
    except ValueError as error:
        raise DataError(f"{lock_path}: unreadable lock file ({error}); expected JSON") from error


def write_lock(lock_path: Path, entries: dict) -> None:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=lock_path.parent, prefix=lock_path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(entries, handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, lock_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def verify(path: Path, lock_path: Path) -> str:
    """Check ``path`` against its lock entry, recording one when there is none; returns its sha256."""
    entries = read_lock(lock_path)
    digest, size = sha256_of(path), path.stat().st_size
    entry = entries.get(path.name)
    if entry is None:
        entries[path.name] = {"sha256": digest, "size": size}
        write_lock(lock_path, entries)
    elif entry != {"sha256": digest, "size": size}:
        raise DataError(f"{path}: size {size} / sha256 {digest} differ from {lock_path} (size {entry.get('size')}, "
                        f"sha256 {entry.get('sha256')}); delete the file to download it again")
    return digest


def download(url: str, dest: Path, lock_path: Path, timeout: float = 30.0,
             progress: Callable[[int, int | None], None] | None = None) -> Path:
    """Fetch ``url`` to ``dest`` (resuming ``dest.part``) unless ``dest`` exists; then verify it.

    ``progress(bytes_so_far, total_or_None)`` is called after every chunk. Network failures become a
    ``DataError`` that names the URL and where to put the file by hand.
    """
    dest = Path(dest)
    if dest.is_file():
        verify(dest, lock_path)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "prism-rec"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    by_hand = f"download it on a machine with internet access and place it at {dest}"
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if offset and response.status != 206:
                offset = 0
            length = response.headers.get("Content-Length")
            total = offset + int(length) if length is not None else None
            done = offset
            with open(part, "ab" if offset else "wb") as handle:
                for block in iter(lambda: response.read(CHUNK), b""):
                    handle.write(block)
                    done += len(block)
                    if progress:
                        progress(done, total)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:
            part.unlink()
            return download(url, dest, lock_path, timeout, progress)
        raise DataError(f"{url}: HTTP {error.code} {error.reason}; {by_hand}") from None
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        kept = f"the partial {part.name} is kept for resuming; " if part.is_file() and part.stat().st_size else ""
        raise DataError(f"{url}: cannot download ({reason}); this machine seems offline or the server is "
                        f"unreachable; {kept}or {by_hand}") from None
    if total is not None and done != total:
        raise DataError(f"{url}: got {done} of {total} bytes; run the download again to resume")
    os.replace(part, dest)
    try:
        verify(dest, lock_path)
    except DataError:
        dest.unlink()
        raise
    return dest
