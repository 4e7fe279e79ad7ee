"""The real subsets in ../shared/data (skipped where that folder is absent)."""

import csv

import numpy as np
import pytest

from prism_rec.data.sources import load_dataset

from .helpers import SHARED_DATA

pytestmark = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"shared real data absent ({SHARED_DATA}); "
                                "these subsets exist only on the project's build machines")


@pytest.mark.parametrize("name,expected", [
    ("yelp-iclrec", (30_431, 20_033, 316_354)),
    ("electronics-gerec", (6_274, 3_666, 151_279)),
    ("books-dealrec", (28_568, 27_250, 680_201)),
    ("movies-fedcsr", (11_948, 9_847, 54_511)),
    ("movies-long", (1_234, 19_995, 191_885)),
])
def test_shared_subset_sizes(name, expected, tmp_path):
    dataset = load_dataset(name, processed_dir=tmp_path)
    assert (dataset.n_users, dataset.n_items, dataset.n_interactions) == expected


def test_gerec_history_is_test_prefix_plus_basket(tmp_path):
    dataset = load_dataset("electronics-gerec", processed_dir=tmp_path, min_user_interactions=3,
                           min_item_interactions=1)
    user = dataset.user_ids.tolist().index("1")
    items = dataset.item_ids[dataset.sequence(user)].tolist()
    assert items == [str(item) for item in range(23, 49)]  # test prefix 23..43 plus basket 44..48
    assert dataset.timestamps[dataset.offsets[user]:dataset.offsets[user + 1]].tolist()[-6:] == [10, 11, 11, 11, 11, 11]


def test_fedcsr_keeps_movies_only_named_by_asin(tmp_path):
    dataset = load_dataset("movies-fedcsr", processed_dir=tmp_path)
    assert all(len(item) == 10 for item in dataset.item_ids[1:].tolist())
    assert dataset.timestamps.min() >= 8.5e8


def test_movies_long_cases_are_the_shipped_rows(tmp_path):
    """Each history is the user's train_group items, then its validation.csv item (the validation case),
    then its test.csv item (the test case); no user or item is filtered out."""
    dataset = load_dataset("movies-long", processed_dir=tmp_path)
    assert round(dataset.stats()["mean_length"], 1) == 155.5 and dataset.stats()["max_length"] == 1_508
    folder = SHARED_DATA / "movies-long"

    def rows(part, **options):
        return csv.DictReader((folder / f"Movies_and_TV_100.{part}.csv").read_text().splitlines(), **options)

    expected = {row["uid"]: row["iids"].split(",") for row in rows("train_group", delimiter="\t")}
    for part in ("validation", "test"):
        for row in rows(part):
            expected[row["userId"]].append(row["itemId"])
    assert {user: dataset.item_ids[dataset.sequence(index)].tolist()
            for index, user in enumerate(dataset.user_ids.tolist())} == expected
    lengths = np.diff(dataset.offsets)
    assert dataset.valid_cases.tolist() == [[user, length - 2] for user, length in enumerate(lengths)]
    assert dataset.test_cases.tolist() == [[user, length - 1] for user, length in enumerate(lengths)]
