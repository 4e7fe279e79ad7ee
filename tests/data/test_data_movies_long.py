"""movies-long on fixtures in its exact raw format (tests/data/fixtures/movies_long*, written by
tests/make_data_fixtures.py): sequences, the shipped held-out rows as the cases, every malformed line."""

import shutil

import numpy as np
import pytest

from prism_rec.data.core import DataError
from prism_rec.data.sources import load_dataset
from prism_rec.registry import get_dataset

from .helpers import FIXTURES, sequences

TRAIN, VALID, TEST = (f"Movies_and_TV_100.{part}.csv" for part in ("train_group", "validation", "test"))
# train_group items, then the validation item, then the test item
SEQUENCES = {"10": ["5", "3", "9", "3", "7", "3", "4"], "2": ["3", "8", "5", "12", "12", "12"],
             "7": ["7", "1", "9", "8"]}
HELD_OUT = {"10": ("3", "4"), "2": ("12", "12"), "7": ("9", "8")}  # (validation, test) item of the files


def load(raw, tmp_path, **options):
    return load_dataset("movies-long", raw_dir=raw, processed_dir=tmp_path / "processed", **options)


def test_sequences_and_cases_are_the_file_rows(tmp_path):
    dataset = load(FIXTURES / "movies_long", tmp_path)
    assert get_dataset("movies-long").max_len == 200
    assert sequences(dataset) == SEQUENCES
    assert dataset.options["min_user_interactions"] == 3 and dataset.options["min_item_interactions"] == 1
    for cases, column in ((dataset.valid_cases, 0), (dataset.test_cases, 1)):
        assert len(cases) == dataset.n_users
        found = {dataset.user_ids[user]: dataset.item_ids[dataset.sequence(user)[position]] for user, position in cases}
        assert found == {user: rows[column] for user, rows in HELD_OUT.items()}
    lengths = np.diff(dataset.offsets)
    assert dataset.train_length.tolist() == (lengths - 2).tolist()
    assert dataset.timestamps.tolist() == [float(t) for length in lengths for t in range(length)]  # positions
    ratings = dict(zip(dataset.user_ids.tolist(), np.split(dataset.ratings, dataset.offsets[1:-1])))
    assert ratings["2"][-2:].tolist() == [2.0, 5.0] and np.isnan(ratings["2"][:-2]).all()


def test_split_time_splits_by_position(tmp_path):
    """--split time: global 70 %/85 % quantiles of positions (the training items have no dates)."""
    dataset = load(FIXTURES / "movies_long", tmp_path, split="time")
    positions = dataset.timestamps
    train_end, valid_end = np.quantile(positions, [0.70, 0.85])
    assert dataset.train_length.tolist() == [int((user <= train_end).sum())
                                             for user in np.split(positions, dataset.offsets[1:-1])]
    assert all(train_end < positions[dataset.offsets[u] + p] <= valid_end for u, p in dataset.valid_cases)
    assert all(positions[dataset.offsets[u] + p] > valid_end for u, p in dataset.test_cases)


def rewrite(raw, name, line_no, text):
    """Line ``line_no`` of ``name`` becomes ``text`` (bytes; may hold several lines; None deletes it)."""
    lines = (raw / name).read_bytes().split(b"\n")
    lines[line_no - 1:line_no] = [] if text is None else [text]
    (raw / name).write_bytes(b"\n".join(lines))


# (file, line, new bytes, error naming file:line, skipped lines and users left with --skip-bad-lines)
CASES = [
    (TRAIN, 2, b"10\t", f"{TRAIN}:2: empty item list", 1, {"2", "7"}),
    (TRAIN, 2, b"10\t5,x,9", f"{TRAIN}:2: iid 'x' is not an integer", 1, {"2", "7"}),
    # an unreadable line names no user: user 10's validation row is then bad too (its test row is left out)
    (TRAIN, 2, b"ten\t5,3", f"{TRAIN}:2: uid 'ten' is not an integer", 2, {"2", "7"}),
    (TRAIN, 2, b"10\t5\t3", rf"{TRAIN}:2: 3 field\(s\); expected 2", 2, {"2", "7"}),
    (TRAIN, 2, b"10\t5,\xff", f"{TRAIN}:2: not UTF-8", 2, {"2", "7"}),
    (TRAIN, 3, b"uid\tiids\n2\t3,8,5,12", rf"{TRAIN}:3: repeated header \(first on line 1\)", 1, {"10", "2", "7"}),
    (TRAIN, 5, b"7\t7,1\n10\t1,2", f"{TRAIN}:6: uid 10 repeats line 2", 1, {"2", "7"}),
    (VALID, 2, b"7,9,4.0", rf"{VALID}:2: 3 field\(s\); expected 4", 2, {"10", "2"}),
    (VALID, 2, b"7,nine,4.0,1500000000", f"{VALID}:2: itemId 'nine' is not an integer", 1, {"10", "2"}),
    (VALID, 2, b"8,9,4.0,1500000000\n7,9,4.0,1500000000", f"{VALID}:2: userId 8 is not in {TRAIN}", 1,
     {"10", "2", "7"}),
    (VALID, 4, b"2,12,2.0,1536278400\n7,9,4.0,1500000000", f"{VALID}:5: userId 7 repeats line 2", 1, {"10", "2"}),
    (TEST, 2, b"2,12,five,1536278400", f"{TEST}:2: rate 'five' or timestamp '1536278400' is not a finite number", 1,
     {"10", "7"}),
    (TEST, 3, None, f"{TRAIN}:2: uid 10 has no row in {TEST}", 1, {"2", "7"}),
]


@pytest.mark.parametrize("name,line_no,text,message,skipped,users", CASES)
def test_malformed_line_names_file_and_line(name, line_no, text, message, skipped, users, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(FIXTURES / "movies_long", raw)
    rewrite(raw, name, line_no, text)
    with pytest.raises(DataError, match=message) as error:
        load(raw, tmp_path)
    assert "; expected" in str(error.value)
    assert not (tmp_path / "processed").exists()
    dataset = load(raw, tmp_path, skip_bad_lines=True)
    assert dataset.options["skipped_lines"] == skipped
    assert sequences(dataset) == {user: SEQUENCES[user] for user in users}


@pytest.mark.parametrize("name,text,message", [
    (TRAIN, b"10\t5,3", rf"{TRAIN}:1: '10\\t5,3' before the header; expected the header 'uid\\tiids'"),
    (VALID, b"", rf"{VALID}:1: empty file; expected the header 'userId,itemId,rate,timestamp'"),
])
def test_missing_header_stops_even_when_skipping(name, text, message, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(FIXTURES / "movies_long", raw)
    if text:
        rewrite(raw, name, 1, text)
    else:
        (raw / name).write_bytes(text)
    for skip in (False, True):
        with pytest.raises(DataError, match=message):
            load(raw, tmp_path, skip_bad_lines=skip)
    assert not (tmp_path / "processed").exists()


def test_every_malformed_kind_at_once(tmp_path):
    """movies_long_bad: the fixture's users plus one line of each malformed kind."""
    raw = FIXTURES / "movies_long_bad"
    with pytest.raises(DataError, match=f"{TRAIN}:4: empty item list"):
        load(raw, tmp_path)
    assert not (tmp_path / "processed").exists()
    dataset = load(raw, tmp_path, skip_bad_lines=True)
    # train_group lines 4-9 and 13, validation lines 8, 10, 11, test lines 5, 6, and user 9 (no test row)
    # reported at train_group line 11; the well-formed rows of users 4, 11, 13 and 14 are left out uncounted
    assert dataset.options["skipped_lines"] == 13
    assert sequences(dataset) == SEQUENCES
