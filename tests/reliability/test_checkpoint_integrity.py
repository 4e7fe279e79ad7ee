"""Checkpoints carry a digest and their run's identity: a damaged or foreign file is refused before it loads."""

import pytest

from prism_rec.data.sources import load_dataset
from prism_rec.training.checkpoint import CHECKPOINT_MAGIC, INTERRUPT_AFTER_BATCHES_ENV, load
from prism_rec.training.config import TrainConfig
from prism_rec.training.trainer import fit

CONFIG = dict(epochs=1, d_model=16, max_len=8, batch_size=256, eval_batch_size=1024, progress=False, device="cpu")


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("ml-100k")


def interrupted(dataset, path, monkeypatch, model="sasrec", **settings):
    monkeypatch.setenv(INTERRUPT_AFTER_BATCHES_ENV, "1")
    with pytest.raises(KeyboardInterrupt):
        fit(dataset, model, TrainConfig(**{**CONFIG, **settings}), checkpoint_path=path)
    monkeypatch.delenv(INTERRUPT_AFTER_BATCHES_ENV)
    return path.read_bytes()


def resume(dataset, path, model="sasrec", **settings):
    return fit(dataset, model, TrainConfig(**{**CONFIG, **settings}), checkpoint_path=path, resume=True)


@pytest.mark.parametrize("damage", ["64 bytes", "one bit", "truncated"])
def test_a_damaged_checkpoint_is_refused_naming_the_file(dataset, tmp_path, monkeypatch, damage):
    path = tmp_path / "run.pt"
    data = bytearray(interrupted(dataset, path, monkeypatch))
    middle = len(data) // 2
    if damage == "64 bytes":
        data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    elif damage == "one bit":
        data[middle] ^= 0x01
    else:
        data = data[:middle]
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"checkpoint {path}: content digest mismatch") as error:
        resume(dataset, path)
    assert "\n" not in str(error.value)


def test_another_models_checkpoint_is_refused_before_it_loads(dataset, tmp_path, monkeypatch):
    theirs, ours = tmp_path / "gru4rec.pt", tmp_path / "sasrec.pt"
    ours.write_bytes(interrupted(dataset, theirs, monkeypatch, model="gru4rec"))
    with pytest.raises(ValueError, match=rf"checkpoint {ours}: written for model 'gru4rec', this run is 'sasrec'"):
        resume(dataset, ours)


def test_other_settings_and_data_are_named(dataset, tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    interrupted(dataset, path, monkeypatch)
    with pytest.raises(ValueError, match=r"written with other settings \(dropout, lr\)"):
        resume(dataset, path, lr=0.01, dropout=0.2)
    other = load_dataset("ml-100k", split="time")
    with pytest.raises(ValueError, match="trained on other data"):
        resume(other, path)


def test_an_intact_checkpoint_resumes_and_a_foreign_file_is_named(dataset, tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    data = interrupted(dataset, path, monkeypatch)
    assert data.startswith(CHECKPOINT_MAGIC) and load(path)["progress"]["next_batch"] == 1
    assert resume(dataset, path).epochs_run == 1
    path.write_bytes(CHECKPOINT_MAGIC + b"{not json\n" + data[-100:])
    with pytest.raises(ValueError, match="header is damaged"):
        resume(dataset, path)
