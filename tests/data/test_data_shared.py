"""The real subsets in ../shared/data (skipped where that folder is absent)."""

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
])
def test_shared_subset_sizes(name, expected, tmp_path):
    dataset = load_dataset(name, processed_dir=tmp_path)
    assert (dataset.n_users, dataset.n_items, dataset.n_interactions) == expected


def test_gerec_history_is_test_prefix_plus_basket(tmp_path):
    dataset = load_dataset("electronics-gerec", processed_dir=tmp_path, min_user_interactions=3, min_item_interactions=1)
    user = dataset.user_ids.tolist().index("1")
    items = dataset.item_ids[dataset.sequence(user)].tolist()
    assert items == [str(item) for item in range(23, 49)]  # test prefix 23..43 plus basket 44..48
    assert dataset.timestamps[dataset.offsets[user]:dataset.offsets[user + 1]].tolist()[-6:] == [10, 11, 11, 11, 11, 11]


def test_fedcsr_keeps_movies_only_named_by_asin(tmp_path):
    dataset = load_dataset("movies-fedcsr", processed_dir=tmp_path)
    assert all(len(item) == 10 for item in dataset.item_ids[1:].tolist())
    assert dataset.timestamps.min() >= 8.5e8
