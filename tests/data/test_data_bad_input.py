"""Bad input stops with file, line and expectation; --skip-bad-lines skips and counts; nothing half-written."""

import gzip
import io
import json
import shutil
import tarfile

import numpy as np
import pytest

from prism_rec.data.core import DataError
from prism_rec.data.sources import load_dataset
from prism_rec.data.yelp import extract_members

from .helpers import A1, A2, FIXTURES, SEQUENCES, sequences

THRESHOLDS = {"min_user_interactions": 3, "min_item_interactions": 1}


def raw_copy(tmp_path, folder):
    target = tmp_path / "raw"
    shutil.copytree(FIXTURES / folder, target)
    return target


def load(name, raw, tmp_path, **options):
    return load_dataset(name, raw_dir=raw, processed_dir=tmp_path / "processed", **{**THRESHOLDS, **options})


def rewrite_json_lines(path, line_no, text):
    lines = gzip.decompress(path.read_bytes()).decode().split("\n")
    lines[line_no - 1] = text
    path.write_bytes(gzip.compress("\n".join(lines).encode()))


@pytest.mark.parametrize("line,expected", [
    ('{"reviewerID": "A1EE2E3N7PW666", "asin": ', "malformed JSON"),
    ('{"reviewerID": "A1EE2E3N7PW666", "overall": 5.0, "unixReviewTime": 5}', "missing field 'asin'"),
    ('{"reviewerID": "A1EE2E3N7PW666", "asin": "x", "unixReviewTime": "yesterday"}', "'unixReviewTime' is 'yesterday'"),
])
def test_bad_json_line(line, expected, tmp_path):
    raw = raw_copy(tmp_path, "amazon2014")
    rewrite_json_lines(raw / "reviews_Books_5.json.gz", 3, line)  # A1's first i2 review
    with pytest.raises(DataError, match=rf"reviews_Books_5\.json\.gz:3: {expected}.*expected"):
        load("books", raw, tmp_path)
    assert not (tmp_path / "processed").exists()
    dataset = load("books", raw, tmp_path, skip_bad_lines=True)
    assert dataset.options["skipped_lines"] == 1
    assert sequences(dataset)[A1] == SEQUENCES[A1][:3] + SEQUENCES[A1][4:]


def test_truncated_gzip(tmp_path):
    raw = raw_copy(tmp_path, "amazon2014")
    path = raw / "reviews_Books_5.json.gz"
    path.write_bytes(path.read_bytes()[:-12])
    for skip in (False, True):
        with pytest.raises(DataError, match=r"reviews_Books_5\.json\.gz:\d+: truncated or corrupt gzip"):
            load("books", raw, tmp_path, skip_bad_lines=skip)
    assert not (tmp_path / "processed").exists()


def test_wrong_column_count(tmp_path):
    raw = raw_copy(tmp_path, "amazon2014csv")
    path = raw / "ratings_Books.csv"
    path.write_text(path.read_text().replace("AQZH7YTWQPOBE,B00000I1BZ,4.0,50", "AQZH7YTWQPOBE,B00000I1BZ,4.0"))
    with pytest.raises(DataError,
                       match=r"ratings_Books\.csv:2: 3 column\(s\); expected 4 \(user,item,rating,timestamp"):
        load("books", raw, tmp_path)
    dataset = load("books", raw, tmp_path, skip_bad_lines=True)
    assert dataset.options["skipped_lines"] == 1
    assert sequences(dataset)[A2] == SEQUENCES[A2][1:]


def test_unknown_format(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "Books_5.json").write_text('{"who": "u", "what": "i"}\n')
    with pytest.raises(DataError, match=r"Books_5\.json:1: unknown format \(keys \['what', 'who'\]\); expected JSON"):
        load("books", raw, tmp_path)
    with pytest.raises(DataError, match="option --format: unknown format 'amazon-1999'"):
        load("books", raw, tmp_path, raw_format="amazon-1999")


def test_empty_after_filtering(tmp_path):
    with pytest.raises(DataError,
                       match=r"reviews_Books_5\.json\.gz: no interactions left after filtering \(users >= 9"):
        load("books", FIXTURES / "amazon2014", tmp_path, min_user_interactions=9)
    assert not (tmp_path / "processed").exists()


def test_meta_missing_entry_and_bad_meta_line(tmp_path):
    raw = raw_copy(tmp_path, "amazon2014")
    meta = raw / "meta_Books.json.gz"
    meta.write_bytes(gzip.compress(gzip.decompress(meta.read_bytes()) + b"{'asin': '0439023483', 'categories': [[\n"))
    with pytest.raises(DataError, match=r"meta_Books\.json\.gz:5: unreadable metadata .*Python dict literal"):
        load("books", raw, tmp_path)
    dataset = load("books", raw, tmp_path, skip_bad_lines=True)
    assert dataset.options["skipped_lines"] == 1
    assert dataset.item_categories.tolist()[-2] == ""  # i4: no usable entry


def test_meta_literal_is_not_executed(tmp_path):
    raw = raw_copy(tmp_path, "amazon2014")
    (raw / "meta_Books.json.gz").write_bytes(gzip.compress(b"{'asin': '0439023483', 'x': __import__('os').getpid()}\n"))
    with pytest.raises(DataError, match=r"meta_Books\.json\.gz:1: unreadable metadata \(ValueError"):
        load("books", raw, tmp_path)


def test_yelp_bad_date(tmp_path):
    raw = raw_copy(tmp_path, "yelp")
    path = raw / "yelp_academic_dataset_review.json"
    lines = path.read_text().split("\n")
    record = json.loads(lines[1])
    record["date"] = "2016-13-09 23:30:00"
    lines[1] = json.dumps(record)
    path.write_text("\n".join(lines))
    with pytest.raises(DataError, match=r"review\.json:2: 'date' is '2016-13-09 23:30:00'; expected a valid date"):
        load("yelp", raw, tmp_path)


def make_tar(members):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return buffer.getvalue()


@pytest.mark.parametrize("evil", [("../escape.json", tarfile.REGTYPE), ("/tmp/abs.json", tarfile.REGTYPE),
                                  ("yelp_academic_dataset_business.json", tarfile.SYMTYPE)])
def test_extraction_refuses_escaping_members(evil, tmp_path):
    review = (FIXTURES / "yelp" / "yelp_academic_dataset_review.json").read_bytes()
    archive = tmp_path / "yelp_dataset.tar"
    archive.write_bytes(make_tar([("yelp_academic_dataset_review.json", review, tarfile.REGTYPE),
                                  (evil[0], b"{}", evil[1])]))
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(DataError, match="refusing archive member"):
        extract_members(archive, target, {"yelp_academic_dataset_review.json", "yelp_academic_dataset_business.json"})
    assert list(target.iterdir()) == []
    assert not (tmp_path / "escape.json").exists()


def test_extract_distributed_archive(tmp_path):
    target = tmp_path / "raw"
    shutil.copytree(FIXTURES / "yelp_archive", target)
    names = {"yelp_academic_dataset_review.json", "yelp_academic_dataset_business.json"}
    written = extract_members(target / "Yelp-JSON.zip", target, names)
    assert {path.name for path in written} == names
    assert (target / "yelp_academic_dataset_review.json").read_bytes() == \
        (FIXTURES / "yelp" / "yelp_academic_dataset_review.json").read_bytes()
    assert sorted(path.name for path in target.iterdir()) == sorted(names | {"Yelp-JSON.zip"})
    assert [user.removesuffix("yelpXX") for user in load("yelp", target, tmp_path).user_ids] == [A1, A2]


def rewrite(path, edit):
    """Apply ``edit`` to the bytes of ``path`` (decompressed and compressed again for .gz)."""
    packed = path.name.endswith(".gz")
    data = gzip.decompress(path.read_bytes()) if packed else path.read_bytes()
    data = edit(data)
    assert data != (gzip.decompress(path.read_bytes()) if packed else path.read_bytes())
    path.write_bytes(gzip.compress(data) if packed else data)


NOT_UTF8 = lambda data: data.replace(b"A1EE2E3N7PW666", b"A1EE2E3N7PW66\xff", 1)  # noqa: E731


@pytest.mark.parametrize("name, folder, file, edit, expected", [
    ("books", "amazon2014", "reviews_Books_5.json.gz", NOT_UTF8, r"reviews_Books_5\.json\.gz:1: not UTF-8"),
    ("books", "amazon2014", "reviews_Books_5.json.gz",
     lambda d: d.replace(b'"unixReviewTime": 100', b'"unixReviewTime": 1e400', 1),
     r"reviews_Books_5\.json\.gz:1: 'unixReviewTime' is inf; expected a finite number"),
    ("books", "amazon2023", "Books.jsonl.gz", lambda d: d.replace(b'"timestamp": ', b'"timestamp": 1e400, "x": ', 1),
     r"Books\.jsonl\.gz:1: 'timestamp' is inf; expected a finite number"),
    ("books", "amazon2014csv", "ratings_Books.csv", NOT_UTF8, r"ratings_Books\.csv:1: not UTF-8"),
    ("books", "amazon2014csv", "ratings_Books.csv", lambda d: d.replace(b",100\n", b",1e400\n", 1),
     r"ratings_Books\.csv:1: rating '5\.0' or timestamp '1e400' is not a finite number"),
    ("yelp", "yelp", "yelp_academic_dataset_review.json", lambda d: d.replace(b"A1EE2E3N7PW666", b"A1\xff", 1),
     r"review\.json:1: not UTF-8"),
    ("yelp", "yelp", "yelp_academic_dataset_review.json", lambda d: d.replace(b'"stars": 5.0', b'"stars": 1e400', 1),
     r"review\.json:1: 'stars' is inf; expected a finite number"),
    ("recbole-inter", "recbole", "books.inter", NOT_UTF8, r"books\.inter:2: not UTF-8"),
    ("recbole-inter", "recbole", "books.inter", lambda d: d.replace(b"\t100\n", b"\t1e400\n", 1),
     r"books\.inter:2: rating or timestamp is not a finite number"),
    ("sequence-text", "sequence", "1.txt", lambda d: d.replace(b"u1", b"u\xff", 1), r"1\.txt:1: not UTF-8"),
])
def test_bad_bytes_and_infinite_numbers_name_the_line(name, folder, file, edit, expected, tmp_path):
    raw = raw_copy(tmp_path, folder)
    rewrite(raw / file, edit)
    with pytest.raises(DataError, match=expected):
        load(name, raw, tmp_path)
    assert not (tmp_path / "processed").exists()  # nothing cached: a later --split time must not train on it


def test_ml100k_file_is_checked_line_by_line(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    shutil.copy(FIXTURES / "recbole" / "books.inter", raw / "ml-100k.inter")
    rewrite(raw / "ml-100k.inter", lambda d: d.replace(b"\t100\n", b"\t1e400\n", 1))
    with pytest.raises(DataError, match=r"ml-100k\.inter:2: rating or timestamp is not a finite number"):
        load("ml-100k", raw, tmp_path)
    assert not (tmp_path / "processed").exists()


def test_repeated_header_in_a_two_column_inter_file(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    rows = [f"{user}\t{item}" for user in ("u1", "u2") for item in ("a", "b", "c", "d")]
    header = "user_id:token\titem_id:token"
    (raw / "x.inter").write_text("\n".join([header, *rows[:5], header, *rows[5:]]) + "\n")
    with pytest.raises(DataError, match=r"x\.inter:7: repeated header \(first on line 1\); expected one header line"):
        load("recbole-inter", raw, tmp_path)
    dataset = load("recbole-inter", raw, tmp_path, skip_bad_lines=True)
    assert dataset.options["skipped_lines"] == 1 and "user_id:token" not in dataset.user_ids.tolist()


def test_skip_bad_lines_is_part_of_the_cache_key(tmp_path):
    raw = raw_copy(tmp_path, "sequence")
    rewrite(raw / "1.txt", lambda d: d.replace(b"u1", b"u\xff", 1) + b"u9 a b c\n")
    skipped = load("sequence-text", raw, tmp_path, skip_bad_lines=True)
    assert skipped.options["skipped_lines"] == 1
    with pytest.raises(DataError, match=r"1\.txt:1: not UTF-8"):  # the skipping run's cache is not reused
        load("sequence-text", raw, tmp_path)


def test_fewer_than_two_test_users_is_refused(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "one.txt").write_text("u1 a b c d e\n")
    with pytest.raises(DataError,
                       match=r"one\.txt: 1 test user\(s\) after filtering and the loo split \(1 user\(s\)\); "
                                        r"expected a validation case and at least 2 test users"):
        load("sequence-text", raw, tmp_path)
    assert not (tmp_path / "processed").exists()


def test_a_cache_holding_infinite_times_is_read_again(tmp_path):
    raw = raw_copy(tmp_path, "recbole")
    dataset = load("recbole-inter", raw, tmp_path)
    [cache] = (tmp_path / "processed").rglob("*.npz")
    dataset.timestamps[0] = np.inf  # as readers wrote 1e400 before they refused it
    dataset.save(cache)
    assert np.isfinite(load("recbole-inter", raw, tmp_path).timestamps).all()  # read from the files again
