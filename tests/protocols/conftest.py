"""A tiny hand-made edge list for the authors' protocol tests."""

import numpy as np
import pandas as pd
import pytest
import torch

from prism_rec.protocols.authors.data import build_task


def edge_frame() -> pd.DataFrame:
    """5 users: u0-u3 with 8-12 edges each, u4 with 2 (dropped by a filter of 5); times with ties; a
    repeated (user, item, time) row, which counts once."""
    rng = np.random.default_rng(7)
    rows = []
    for user, count in enumerate((12, 10, 9, 8, 2)):
        times = np.sort(rng.integers(0, 40, count))
        rows += [(f"u{user}", f"i{rng.integers(0, 6)}", float(t)) for t in times]
    rows.append(rows[3])
    return pd.DataFrame(rows, columns=["user", "item", "timestamp"]).sample(frac=1.0, random_state=1)


@pytest.fixture
def frame() -> pd.DataFrame:
    return edge_frame()


@pytest.fixture
def task():
    return build_task(edge_frame(), "tiny", "unix seconds", 5)


@pytest.fixture(autouse=True)
def one_thread():
    """One CPU thread, as `prism-rec authors` trains by default: several threads slow down many-fold
    on a shared machine and split reductions differently."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
