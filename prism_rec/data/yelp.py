"""The Yelp Open Dataset, from its extracted JSON files or straight from the distributed archive."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import pandas as pd

from ..registry import register_dataset
from .core import DataError, MissingDataError
from .formats import FORMATS
from .parsing import ReadContext, iter_lines, path_opener, read_records
from .sources import DatasetSource

REVIEW_FILE = "yelp_academic_dataset_review.json"
BUSINESS_FILE = "yelp_academic_dataset_business.json"
ARCHIVE_NAMES = ("Yelp-JSON.zip", "yelp_dataset.zip", "yelp_dataset.tar", "yelp_dataset.tar.gz", "yelp_dataset.tgz")


@register_dataset("yelp")
class Yelp(DatasetSource):
    """Yelp Open Dataset reviews: user_id, business_id, stars, date "YYYY-MM-DD HH:MM:SS" read as UTC.

    Reads ``yelp_academic_dataset_review.json`` (and, when present, ``..._business.json`` for each
    business's first listed category) from the raw folder, or else streams them out of the archive as
    distributed (``Yelp-JSON.zip`` holding ``yelp_dataset.tar``, which is gzip-compressed; a bare tar or
    tgz works too). ``prism-rec data download --dataset yelp`` extracts the two files from the archive.
    Thresholds: the paper's users >= 40, items >= 5.
    """

    name = "yelp"
    description = "Yelp Open Dataset reviews (licence: place the archive by hand)"
    download_help = (
        "Yelp requires accepting its licence: download the JSON dataset from https://www.yelp.com/dataset "
        "and put the archive as downloaded (Yelp-JSON.zip, or the yelp_dataset.tar inside it) or the extracted "
        f"{REVIEW_FILE} (and optionally {BUSINESS_FILE}) into {{raw_dir}}"
    )

    def source_files(self, raw_dir: Path) -> list[Path]:
        raw_dir = Path(raw_dir)
        if (raw_dir / REVIEW_FILE).is_file():
            return [raw_dir / REVIEW_FILE] + [raw_dir / BUSINESS_FILE] * (raw_dir / BUSINESS_FILE).is_file()
        for name in ARCHIVE_NAMES:
            if (raw_dir / name).is_file():
                return [raw_dir / name]
        raise MissingDataError("yelp: no review file. " + self.download_help.format(raw_dir=raw_dir))

    def read_interactions(self, files: list[Path], context: ReadContext) -> pd.DataFrame:
        path = files[0]
        if path.name == REVIEW_FILE:
            return read_records(path_opener(path), str(path), FORMATS["yelp-json"], context)
        return read_records(lambda: open_member(path, REVIEW_FILE), f"{path}!{REVIEW_FILE}", FORMATS["yelp-json"],
                            context)

    def item_categories(self, files: list[Path], items: set[str], context: ReadContext) -> dict[str, str] | None:
        path = files[-1]
        if path.name == BUSINESS_FILE:
            return read_business_categories(path_opener(path), str(path), context)
        if path.name == REVIEW_FILE:
            return None
        try:
            return read_business_categories(lambda: open_member(path, BUSINESS_FILE), f"{path}!{BUSINESS_FILE}",
                                            context)
        except MissingDataError:
            return None

    def unpack(self, raw_dir: Path) -> list[Path]:
        raw_dir = Path(raw_dir)
        if (raw_dir / REVIEW_FILE).is_file():
            return []
        archive = self.source_files(raw_dir)[0]
        return extract_members(archive, raw_dir, {REVIEW_FILE, BUSINESS_FILE})


def read_business_categories(opener, where: str, context: ReadContext) -> dict[str, str]:
    """business_id -> first category of its comma-separated ``categories`` ("" when null)."""
    categories = {}
    for line_no, raw in iter_lines(opener, where, context):
        try:
            record = json.loads(raw)
            business = record["business_id"]
        except (ValueError, KeyError, TypeError) as error:
            context.bad(where, line_no, f"unreadable business record ({error!r}); expected JSON with business_id")
            continue
        names = [name.strip() for name in (record.get("categories") or "").split(",") if name.strip()]
        categories[str(business)] = names[0] if names else ""
    return categories


@contextlib.contextmanager
def _tar_stream(archive: Path) -> Iterator[tarfile.TarFile]:
    """The tar inside ``archive`` opened as a stream (compression detected from its bytes)."""
    with contextlib.ExitStack() as stack:
        if zipfile.is_zipfile(archive):
            bundle = stack.enter_context(zipfile.ZipFile(archive))
            inner = [info for info in bundle.infolist()
                     if PurePosixPath(info.filename).suffix in (".tar", ".tgz", ".gz")]
            if not inner:
                raise DataError(f"{archive}: no .tar member in the zip; expected the Yelp JSON archive")
            fileobj = stack.enter_context(bundle.open(inner[0]))
        else:
            fileobj = stack.enter_context(open(archive, "rb"))
        try:
            yield stack.enter_context(tarfile.open(fileobj=fileobj, mode="r|*"))
        except tarfile.TarError as error:
            raise DataError(f"{archive}: unreadable tar archive ({error}); expected the Yelp JSON archive") from error


@contextlib.contextmanager
def open_member(archive: Path, basename: str) -> Iterator[BinaryIO]:
    """Stream the first regular member of the archive whose file name is ``basename``."""
    with _tar_stream(archive) as tar:
        for member in tar:
            if member.isfile() and PurePosixPath(member.name).name == basename:
                yield tar.extractfile(member)
                return
    raise MissingDataError(f"{archive}: no member {basename}; expected the Yelp JSON archive")


def check_member(member: tarfile.TarInfo, target: Path) -> None:
    """Refuse a member that is a link or device, or whose path would leave ``target``."""
    path = PurePosixPath(member.name)
    destination = (target / member.name).resolve()
    if (path.is_absolute() or ".." in path.parts or not destination.is_relative_to(target.resolve())
            or not (member.isfile() or member.isdir())):
        raise DataError(f"refusing archive member {member.name!r}: it is a link or device, or escapes {target}")


def extract_members(archive: Path, target: Path, basenames: set[str]) -> list[Path]:
    """Extract the regular members named ``basenames`` into ``target`` (flat), checking every member.

    Each file is written to a temporary name and renamed when complete; if any member is refused or the
    archive is broken, the files extracted so far are removed again.
    """
    target = Path(target)
    written: list[Path] = []
    try:
        with _tar_stream(archive) as tar:
            for member in tar:
                check_member(member, target)
                name = PurePosixPath(member.name).name
                if not member.isfile() or name not in basenames:
                    continue
                fd, tmp = tempfile.mkstemp(dir=target, prefix=name + ".", suffix=".tmp")
                try:
                    with os.fdopen(fd, "wb") as out, tar.extractfile(member) as source:
                        shutil.copyfileobj(source, out, 1 << 22)
                    os.replace(tmp, target / name)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
                written.append(target / name)
    except (tarfile.TarError, EOFError, OSError) as error:
        for path in written:
            path.unlink(missing_ok=True)
        raise DataError(f"{archive}: broken archive ({error}); expected the complete Yelp JSON archive") from error
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    if REVIEW_FILE in basenames and target / REVIEW_FILE not in written:
        raise MissingDataError(f"{archive}: no member {REVIEW_FILE}; expected the Yelp JSON archive")
    return written
