"""Every raw format gives the exact sequences, ids, times and split of the fixture story."""

import sys
import textwrap

import numpy as np
import pytest

import prism_rec.data
from prism_rec import registry
from prism_rec.data.core import DataError, prepare
from prism_rec.data.sources import load_dataset
from prism_rec.registry import get_dataset, list_datasets

from .helpers import A1, A2, FIXTURES, I1, I2, I3, I4, SEQUENCES, TIMES, sequences


def load(name, folder, tmp_path, **options):
    options = {"min_user_interactions": 3, "min_item_interactions": 1, "use_cache": False, **options}
    return load_dataset(name, raw_dir=FIXTURES / folder, processed_dir=tmp_path, **options)


def test_registered():
    assert {"books", "movies", "electronics", "yelp", "recbole-inter", "sequence-text", "yelp-iclrec",
            "electronics-gerec", "books-dealrec", "movies-fedcsr", "movies-long"} <= set(list_datasets())


NEW_SOURCE = '''
from pathlib import Path

from prism_rec.data.generic import read_sequence_text
from prism_rec.data.sources import DatasetSource
from prism_rec.registry import register_dataset


@register_dataset("added-source")
class AddedSource(DatasetSource):
    name = "added-source"
    description = "a source no import line names"

    def source_files(self, raw_dir):
        return sorted(Path(raw_dir).glob("*.txt"))

    def read_interactions(self, files, context):
        return read_sequence_text(files, context)
'''


def test_a_new_source_module_is_discovered_without_an_import_line(tmp_path, monkeypatch):
    """A module dropped into the package (here: a folder added to its search path) registers its source the
    first time the registry is read, as a new file in prism_rec/data/ would."""
    monkeypatch.setattr(registry, "_DATASETS", {name: get_dataset(name) for name in list_datasets()})
    monkeypatch.setattr(registry, "_discovered", False)
    (tmp_path / "package").mkdir()
    (tmp_path / "package" / "added_source.py").write_text(textwrap.dedent(NEW_SOURCE))
    monkeypatch.setattr(prism_rec.data, "__path__", [*prism_rec.data.__path__, str(tmp_path / "package")])
    monkeypatch.delitem(sys.modules, "prism_rec.data.added_source", raising=False)
    try:
        assert "added-source" in list_datasets()
        dataset = load("added-source", "sequence", tmp_path)
        assert sequences(dataset) == sequences(load("sequence-text", "sequence", tmp_path))
    finally:
        sys.modules.pop("prism_rec.data.added_source", None)


@pytest.mark.parametrize("folder", ["amazon2014", "amazon2014csv", "amazon2018", "amazon2018csv", "amazon2023"])
def test_amazon_formats_detected(folder, tmp_path):
    dataset = load("books", folder, tmp_path)
    assert sequences(dataset) == SEQUENCES
    assert dataset.user_ids.tolist() == [A1, A2]
    assert dataset.item_ids.tolist() == ["", I1, I3, I4, I2]  # first appearance after sorting by (user, time)
    assert dataset.items.tolist() == [1, 2, 3, 4, 4, 4, 1, 2, 3]
    assert dataset.offsets.tolist() == [0, 5, 9]
    assert dataset.train_length.tolist() == [3, 2]
    assert dataset.valid_cases.tolist() == [[0, 3], [1, 2]]
    assert dataset.test_cases.tolist() == [[0, 4], [1, 3]]
    extra = 0.007 if folder == "amazon2023" else 0.0  # 2023 times are milliseconds (+7 ms in the fixture)
    np.testing.assert_allclose(dataset.timestamps, np.array(TIMES[A1] + TIMES[A2]) + extra)
    assert dataset.ratings.tolist() == [5.0, 4.0, 2.0, 3.0, 1.0, 4.0, 5.0, 3.0, 5.0]


@pytest.mark.parametrize("folder,fmt", [("amazon2014", "amazon-2014-json"), ("amazon2018csv", "amazon-2018-csv")])
def test_explicit_format(folder, fmt, tmp_path):
    assert sequences(load("books", folder, tmp_path, raw_format=fmt)) == SEQUENCES


def test_dedup_first_and_fixed_point(tmp_path):
    deduplicated = load("books", "amazon2014", tmp_path, dedup="first")
    assert sequences(deduplicated) == {A1: [I1, I3, I4, I2], A2: [I2, I1, I3, I4]}
    # items >= 2: i5 (A3 only) goes; A3 keeps 1 interaction and goes; every other item still has >= 2.
    assert sequences(load("books", "amazon2014", tmp_path, min_item_interactions=2)) == SEQUENCES


def test_amazon_2014_meta_literals(tmp_path):
    dataset = load("books", "amazon2014", tmp_path)
    categories = dict(zip(dataset.item_ids.tolist(), dataset.item_categories.tolist()))
    assert categories == {"": "", I1: "Poetry", I2: "Comics & Graphic Novels", I3: "Cuisine française", I4: ""}


def test_amazon_2023_meta_json(tmp_path):
    dataset = load("books", "amazon2023", tmp_path)
    categories = dict(zip(dataset.item_ids.tolist(), dataset.item_categories.tolist()))
    assert categories == {"": "", I1: "Poetry", I2: "Buy a Kindle", I3: "", I4: ""}


def test_time_split(tmp_path):
    source = get_dataset("books")()
    frame = source.read(source.source_files(FIXTURES / "amazon2014"))
    dataset = prepare(frame, "books", min_user_interactions=3, min_item_interactions=1, split="time")
    # q70 / q85 of the 9 kept times [100 200 200 300 400 50 60 70 80] are 200 and 280.
    assert dataset.train_length.tolist() == [3, 4]
    assert dataset.valid_cases.tolist() == []
    assert dataset.test_cases.tolist() == [[0, 3], [0, 4]]
    # no validation case and one test user: a bench would report the rank of one user as a test AUC
    with pytest.raises(DataError, match=r"reviews_Books_5\.json\.gz: no validation case after filtering and the "
                                        r"time split \(2 user\(s\)\); expected a validation case and at least 2 "
                                        r"test users"):
        load("books", "amazon2014", tmp_path, split="time", use_cache=True)
    assert list(tmp_path.iterdir()) == []  # nothing cached


@pytest.mark.parametrize("folder", ["yelp", "yelp_archive"])
def test_yelp_utc_dates_and_archive(folder, tmp_path):
    dataset = load("yelp", folder, tmp_path)
    users = [user.removesuffix("yelpXX") for user in dataset.user_ids.tolist()]
    items = [item.removesuffix("bizXXXXXXXXX") for item in dataset.item_ids.tolist()]
    assert users == [A1, A2]
    got = {users[u]: [items[i] for i in dataset.sequence(u)] for u in range(2)}
    assert got == SEQUENCES
    # "2016-03-09 23:30:00" is 1457566200 in UTC, whatever the machine's time zone.
    assert dataset.timestamps[5:].tolist() == [1457566200.0, 1457568000.0, 1483258559.0, 1483258560.0]
    assert dataset.timestamps[1] == dataset.timestamps[2] == 1531044000.0  # the tie keeps file order
    categories = dict(zip(items, dataset.item_categories.tolist()))
    assert categories == {"": "", I1: "Restaurants", I2: "Coffee & Tea", I3: "", I4: ""}


def test_recbole_inter_rows(tmp_path):
    dataset = load("recbole-inter", "recbole", tmp_path)
    assert sequences(dataset) == SEQUENCES
    assert dataset.timestamps.tolist() == TIMES[A1] + TIMES[A2]


def test_recbole_windows_merged(tmp_path):
    dataset = load("recbole-inter", "recbole_seq", tmp_path)
    assert sequences(dataset) == {"u1": list("bcdefg"), "u2": list("xyzw")}
    assert dataset.timestamps.tolist() == [1, 2, 2, 3, 4, 5, 0, 1, 2, 3]


def test_sequence_text_fixed_point(tmp_path):
    # d is rare -> u2 goes -> a and b are rare -> u1 goes; é (u3's 4th item, from the second file) is rare.
    dataset = load("sequence-text", "sequence", tmp_path, min_item_interactions=2)
    assert sequences(dataset) == {"u3": ["c", "x", "y"], "u4": ["c", "x", "y"]}
    assert dataset.timestamps.tolist() == [0, 1, 2, 0, 1, 2]
    kept = load("sequence-text", "sequence", tmp_path)
    assert sequences(kept) == {"u1": ["a", "b", "c"], "u2": ["a", "b", "d"], "u3": ["c", "x", "y", "é"],
                               "u4": ["c", "x", "y"]}
    assert kept.timestamps.tolist()[6:10] == [0, 1, 2, 3]


def test_cache_roundtrip_keeps_times_and_categories(tmp_path):
    first = load("books", "amazon2014", tmp_path, use_cache=True)
    again = load("books", "amazon2014", tmp_path, use_cache=True)
    assert len(list((tmp_path / "books").glob("*.npz"))) == 1
    assert again.timestamps.tolist() == first.timestamps.tolist()
    assert again.item_categories.tolist() == first.item_categories.tolist()
