"""Raw files as editors and old tools write them: a byte-order mark, CR line endings, a bare NaN rating."""

import gzip
import io
import shutil

import pytest
from data.helpers import A1, FIXTURES, SEQUENCES, sequences

from prism_rec.data.core import DataError
from prism_rec.data.parsing import split_lines
from prism_rec.data.sources import load_dataset

THRESHOLDS = {"min_user_interactions": 3, "min_item_interactions": 1}
BOM = b"\xef\xbb\xbf"


def raw_copy(tmp_path, folder):
    shutil.copytree(FIXTURES / folder, tmp_path / "raw")
    return tmp_path / "raw"


def load(name, raw, tmp_path, **options):
    return load_dataset(name, raw_dir=raw, processed_dir=tmp_path / "processed", **{**THRESHOLDS, **options})


def rewrite(path, change):
    packed = path.name.endswith(".gz")
    data = gzip.decompress(path.read_bytes()) if packed else path.read_bytes()
    data = change(data)
    path.write_bytes(gzip.compress(data) if packed else data)


@pytest.mark.parametrize("folder, name, file", [("amazon2014", "books", "reviews_Books_5.json.gz"),
                                                ("amazon2014csv", "books", "ratings_Books.csv")])
@pytest.mark.parametrize("edit", ["byte-order mark", "CR line endings", "CR LF line endings"])
def test_edited_files_read_as_the_original(tmp_path, folder, name, file, edit):
    original = sequences(load(name, FIXTURES / folder, tmp_path / "a"))
    raw = raw_copy(tmp_path, folder)
    change = {"byte-order mark": lambda data: BOM + data,
              "CR line endings": lambda data: data.replace(b"\n", b"\r"),
              "CR LF line endings": lambda data: data.replace(b"\n", b"\r\n")}[edit]
    rewrite(raw / file, change)
    dataset = load(name, raw, tmp_path / "b")
    assert sequences(dataset) == original and sequences(dataset)[A1] == SEQUENCES[A1]
    assert not any(user.startswith("\ufeff") for user in dataset.user_ids.tolist())


def test_a_bare_nan_rating_is_a_bad_line(tmp_path):
    raw = raw_copy(tmp_path, "amazon2014")
    rewrite(raw / "reviews_Books_5.json.gz", lambda data: data.replace(b'"overall": 5.0', b'"overall": NaN', 1))
    with pytest.raises(DataError, match=r"reviews_Books_5\.json\.gz:\d+: 'overall' is nan; expected a finite number"):
        load("books", raw, tmp_path)
    assert load("books", raw, tmp_path, skip_bad_lines=True).options["skipped_lines"] == 1


def test_lines_split_at_every_ending_across_chunks(monkeypatch):
    monkeypatch.setattr("prism_rec.data.parsing.CHUNK_BYTES", 3)
    data = BOM + b"ab\rcd\r\nef\n\rgh\r"
    assert list(split_lines(io.BytesIO(data))) == [b"ab", b"cd", b"ef", b"", b"gh"]
    assert list(split_lines(io.BytesIO(b"x\r\n"))) == [b"x"] and list(split_lines(io.BytesIO(b""))) == []


def test_a_damaged_processed_cache_says_delete_it(tmp_path):
    load("books", FIXTURES / "amazon2014", tmp_path)
    [cache] = (tmp_path / "processed").rglob("*.npz")
    cache.write_bytes(cache.read_bytes()[:200])
    with pytest.raises(DataError, match=rf"{cache}: unreadable processed cache \(.*\); delete it to rebuild"):
        load("books", FIXTURES / "amazon2014", tmp_path)
