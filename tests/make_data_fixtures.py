"""Write the raw-format fixture files of tests/data/fixtures (run: python tests/make_data_fixtures.py).

Every Amazon and Yelp fixture holds the same story, in file order:
user A1 reviews i1 (t=100), i2 (300), i3 (200), i4 (200, tied with i3, later in the file) and i2 again
(400, a duplicate pair); A2 reviews i2 (50), i1 (60), i3 (70), i4 (80, with unicode text); A3 reviews
i5 (10) and i1 (20) only (under a users >= 3 threshold). There is a blank line after the fourth record.
Gzip files are written with mtime 0 so the bytes are reproducible.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "data" / "fixtures"
ASIN = {"i1": "0000000116", "i2": "B00000I1BZ", "i3": "B000FC1MZA", "i4": "0439023483", "i5": "B0000C3HKE"}
USER = {"A1": "A1EE2E3N7PW666", "A2": "AQZH7YTWQPOBE", "A3": "A2XQ5LZHTD4AFT"}
EVENTS = [  # (user, item, rating, unix seconds)
    ("A1", "i1", 5.0, 100), ("A2", "i2", 4.0, 50), ("A1", "i2", 3.0, 300), ("A1", "i3", 4.0, 200),
    ("A1", "i4", 2.0, 200), ("A2", "i1", 5.0, 60), ("A1", "i2", 1.0, 400), ("A3", "i5", 5.0, 10),
    ("A2", "i3", 3.0, 70), ("A3", "i1", 4.0, 20), ("A2", "i4", 5.0, 80),
]
BLANK_AFTER = 4


def _write(path: Path, lines: list[str], compress: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if compress:
        buffer = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as handle:
            handle.write(data)
        data = buffer.getvalue()
    path.write_bytes(data)


def _with_blank(lines: list[str]) -> list[str]:
    return lines[:BLANK_AFTER] + [""] + lines[BLANK_AFTER:]


def _text(user: str) -> tuple[str, str]:
    return ("Zoë Ünïcødé 🙂", "Très bien — 好") if user == "A2" else ("Reader", "Good")


def amazon_2014() -> None:
    lines = []
    for user, item, rating, stamp in EVENTS:
        name, summary = _text(user)
        lines.append(json.dumps({"reviewerID": USER[user], "asin": ASIN[item], "reviewerName": name,
                                 "helpful": [0, 0], "reviewText": f"{summary}. Read it twice.", "overall": rating,
                                 "summary": summary, "unixReviewTime": stamp, "reviewTime": "01 1, 1970"}))
    _write(ROOT / "amazon2014" / "reviews_Books_5.json.gz", _with_blank(lines), compress=True)
    meta = [
        {"asin": ASIN["i1"], "title": "Cheap Thrills", "categories": [["Books", "Literature & Fiction", "Poetry"]]},
        {"asin": ASIN["i2"], "imUrl": "http://x/y.jpg",
         "categories": [["Books", "Comics & Graphic Novels"], ["Books"]]},
        {"asin": ASIN["i3"], "title": "Élan", "categories": [["Books", "Cuisine française"]]},
        {"asin": ASIN["i5"], "salesRank": {"Books": 2}, "categories": [["Books"]]},
    ]
    _write(ROOT / "amazon2014" / "meta_Books.json.gz", [repr(record) for record in meta], compress=True)
    _write(ROOT / "amazon2014csv" / "ratings_Books.csv",
           _with_blank([f"{USER[u]},{ASIN[i]},{r},{t}" for u, i, r, t in EVENTS]))


def amazon_2018() -> None:
    lines = []
    for user, item, rating, stamp in EVENTS:
        name, summary = _text(user)
        lines.append(json.dumps({"overall": rating, "verified": True, "reviewTime": "01 1, 1970",
                                 "reviewerID": USER[user], "asin": ASIN[item], "style": {"Format:": " Paperback"},
                                 "reviewerName": name, "reviewText": summary, "summary": summary,
                                 "unixReviewTime": stamp}, ensure_ascii=False))
    _write(ROOT / "amazon2018" / "Books_5.json.gz", _with_blank(lines), compress=True)
    _write(ROOT / "amazon2018csv" / "Books.csv", _with_blank([f"{ASIN[i]},{USER[u]},{r},{t}" for u, i, r, t in EVENTS]))


def amazon_2023() -> None:
    lines = []
    for user, item, rating, stamp in EVENTS:
        name, summary = _text(user)
        lines.append(json.dumps({"rating": rating, "title": summary, "text": name, "images": [],
                                 "asin": ASIN[item] + "X", "parent_asin": ASIN[item], "user_id": USER[user],
                                 "timestamp": stamp * 1000 + 7, "helpful_vote": 0, "verified_purchase": True}))
    _write(ROOT / "amazon2023" / "Books.jsonl.gz", _with_blank(lines), compress=True)
    meta = [{"main_category": "Books", "title": "Cheap Thrills", "categories": ["Books", "Poetry"],
             "parent_asin": ASIN["i1"]},
            {"main_category": "Buy a Kindle", "title": "x", "categories": [], "parent_asin": ASIN["i2"]}]
    _write(ROOT / "amazon2023" / "meta_Books.jsonl", [json.dumps(record) for record in meta])


YELP_DATES = {50: "2016-03-09 23:30:00", 60: "2016-03-10 00:00:00", 70: "2017-01-01 08:15:59",
              80: "2017-01-01 08:16:00", 100: "2018-07-07 10:00:00", 200: "2018-07-08 10:00:00",
              300: "2019-01-01 00:00:00", 400: "2019-01-01 00:00:01", 10: "2010-05-05 05:05:05",
              20: "2010-05-06 05:05:05"}


def yelp() -> None:
    lines = []
    for number, (user, item, rating, stamp) in enumerate(EVENTS):
        name, summary = _text(user)
        lines.append(json.dumps({"review_id": f"r{number:021d}", "user_id": USER[user] + "yelpXX",
                                 "business_id": ASIN[item] + "bizXXXXXXXXX", "stars": rating, "useful": 0,
                                 "funny": 0, "cool": 0, "text": summary, "date": YELP_DATES[stamp]}))
    business = [json.dumps({"business_id": ASIN[item] + "bizXXXXXXXXX", "name": f"Café {item}",
                            "categories": categories})
                for item, categories in (("i1", "Restaurants, Pizza"), ("i2", "Coffee & Tea, Food"), ("i3", None))]
    _write(ROOT / "yelp" / "yelp_academic_dataset_review.json", _with_blank(lines))
    _write(ROOT / "yelp" / "yelp_academic_dataset_business.json", business)
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name in ("Dataset_User_Agreement.pdf", "yelp_academic_dataset_business.json",
                     "yelp_academic_dataset_review.json"):
            data = b"%PDF-1.4\n" if name.endswith(".pdf") else (ROOT / "yelp" / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    (ROOT / "yelp_archive").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(ROOT / "yelp_archive" / "Yelp-JSON.zip", "w") as zf:
        info = zipfile.ZipInfo("Yelp JSON/yelp_dataset.tar", date_time=(2022, 1, 1, 0, 0, 0))
        zf.writestr(info, tar_bytes.getvalue())


def recbole() -> None:
    header = "user_id:token\titem_id:token\trating:float\ttimestamp:float"
    rows = [f"{USER[u]}\t{ASIN[i]}\t{r}\t{t}" for u, i, r, t in EVENTS]
    _write(ROOT / "recbole" / "books.inter", [header] + _with_blank(rows))
    # GeRec-style windows (prefix capped at 3; targets of train/valid/test are the last three baskets) of
    # u1 = a b c d e f g with ranks 0 1 2 2 3 4 5 (c and d one basket; a falls before every window) and
    # u2 = x y z w with ranks 0 1 2 3.
    seq_header = "user_id:token\titem_id_list:token_seq\titems_in_target_basket:token\titem_time_list:token_seq"
    _write(ROOT / "recbole_seq" / "1.train.inter", [seq_header, "u1\tb c d\te\t1 2 2 3", "u2\tx\ty\t0 1"])
    _write(ROOT / "recbole_seq" / "2.valid.inter", [seq_header, "u1\tc d e\tf\t2 2 3 4", "u2\tx y\tz\t0 1 2"])
    _write(ROOT / "recbole_seq" / "3.test.inter", [seq_header, "u1\td e f\tg\t2 3 4 5", "u2\tx y z\tw\t0 1 2 3"])


def sequences() -> None:
    # Fixed-point filtering (users >= 3, items >= 2): d is rare -> u2 drops -> a, b rare -> u1 drops.
    _write(ROOT / "sequence" / "1.txt", ["u1 a b c", "u2 a b d", "", "u3 c x y"])
    _write(ROOT / "sequence" / "2.txt", ["u4 c x y", "u3 é", "u5"])


MOVIES_LONG = "Movies_and_TV_100.{}.csv"


def movies_long() -> None:
    """movies-long (Movies_and_TV_100.*.csv of ../shared/data/movies-long): users 10, 2, 7 in train_group
    order; their validation and test rows in other orders; 10 repeats item 3; 2's test item equals its
    validation item. movies_long_bad holds the same users plus one of each malformed line (see
    tests/data/test_data_movies_long.py for what each one is)."""
    train = ["uid\tiids", "10\t5,3,9,3,7", "2\t3,8,5,12", "", "7\t7,1"]
    valid = ["userId,itemId,rate,timestamp", "7,9,4.0,1500000000", "10,3,5.0,1509580800", "2,12,2.0,1536278400"]
    test = ["userId,itemId,rate,timestamp", "2,12,5.0,1536278400", "10,4,3.0,1509580800", "7,8,1.0,1600000000"]
    for part, lines in (("train_group", train), ("validation", valid), ("test", test)):
        _write(ROOT / "movies_long" / MOVIES_LONG.format(part), lines)
    bad_train = train[:3] + ["3\t", "4\t1,x,2", "five\t1,2", "6\t1\t2", "uid\tiids", "8\t1,2\udcff", "7\t7,1",
                             "9\t1,2,3", "11\t4,5", "11\t4,6", "13\t1,5", "14\t2,3"]
    bad_valid = valid + ["4,1,3.0,1500000000", "9,2,4.0,1500000000", "11,5,4.0,1500000000", "12,5,4.0,1500000000",
                         "13,5,4.0,1500000000", "13,5,4.0,1500000000", "u1,1,4.0,1500000000", "14,5,4.0,1500000000"]
    bad_test = test + ["99,1", "14,8,good,1600000000", "13,8,1.0,1600000000"]
    folder = ROOT / "movies_long_bad"
    folder.mkdir(parents=True, exist_ok=True)
    for part, lines in (("train_group", bad_train), ("validation", bad_valid), ("test", bad_test)):
        text = "".join(line + "\n" for line in lines)
        (folder / MOVIES_LONG.format(part)).write_bytes(text.encode("utf-8", "surrogateescape"))


if __name__ == "__main__":
    amazon_2014()
    amazon_2018()
    amazon_2023()
    yelp()
    recbole()
    sequences()
    movies_long()
