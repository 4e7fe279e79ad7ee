"""Shared expectations of the fixture story (see tests/make_data_fixtures.py)."""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
A1, A2 = "A1EE2E3N7PW666", "AQZH7YTWQPOBE"
I1, I2, I3, I4 = "0000000116", "B00000I1BZ", "B000FC1MZA", "0439023483"
# users >= 3, items >= 1: A3 is dropped; A1's tie (i3, i4 at t=200) keeps file order; i2 twice (duplicate).
SEQUENCES = {A1: [I1, I3, I4, I2, I2], A2: [I2, I1, I3, I4]}
TIMES = {A1: [100, 200, 200, 300, 400], A2: [50, 60, 70, 80]}



def sequences(dataset) -> dict:
    """{original user id: [original item ids in order]}"""
    return {user: [dataset.item_ids[item] for item in dataset.sequence(index)]
            for index, user in enumerate(dataset.user_ids.tolist())}
