"""The RecBole bridge on a tiny fixture split: RecBole reads exactly our cases, its GRU4Rec trains and our
evaluator ranks its test cases with the scores RecBole's own model gives, and bad models are refused."""

import numpy as np
import pandas as pd
import pytest
import torch

from prism_rec.cli import main
from prism_rec.data.batching import evaluation_batch
from prism_rec.data.core import prepare
from prism_rec.errors import OptionError
from prism_rec.experiments.bench import check_bench_options
from prism_rec.recbole_bridge.compat import import_recbole, isolated_config
from prism_rec.recbole_bridge.config import config_dict, model_class_name
from prism_rec.recbole_bridge.run import fit_recbole
from prism_rec.recbole_bridge.split import NAME, split_cases, write_split
from prism_rec.training.config import TrainConfig

MAX_LEN = 4


@pytest.fixture(scope="module")
def dataset():
    """12 users with sequences of 5 to 9 items among 15 (repeats included), a leave-one-out split."""
    generator = np.random.default_rng(0)
    rows = [(f"user{u}", f"item{generator.integers(15)}", t) for u in range(12) for t in range(5 + u % 5)]
    return prepare(pd.DataFrame(rows, columns=["user", "item", "timestamp"]), "tiny", 3, 1)


def tiny_config(**changes):
    settings = dict(d_model=8, max_len=MAX_LEN, epochs=1, batch_size=16, eval_batch_size=8, progress=False,
                    device="cpu")
    return TrainConfig(**{**settings, **changes})


def recbole_parts(dataset, folder, model="recbole:GRU4Rec"):
    """RecBole's own Dataset of the split files written under ``folder``, and its train/valid/test parts."""
    recbole_config, recbole_data, _, _ = import_recbole()
    data_path = write_split(dataset, folder, MAX_LEN).parent
    with isolated_config():
        settings = recbole_config.Config(model=model_class_name(model), dataset=NAME, config_dict={
            **config_dict(model, tiny_config(), data_path, folder, use_gpu=False), "state": "ERROR"})
    loaded = recbole_data.create_dataset(settings)
    return loaded, dict(zip(("train", "valid", "test"), loaded.build()))


def test_split_files_round_trip_our_split(dataset, tmp_path):
    loaded, parts = recbole_parts(dataset, tmp_path)
    users, items = loaded.field2id_token["user_id"], loaded.field2id_token["item_id"]
    assert sorted(items[1:].astype(int).tolist()) == list(range(1, dataset.n_items + 1))
    for part, cases in split_cases(dataset).items():
        frame = parts[part].inter_feat
        histories, targets = evaluation_batch(dataset, cases, MAX_LEN)
        ours = [(str(u), [str(i) for i in h[h > 0]], str(t)) for u, h, t in zip(cases[:, 0], histories, targets)]
        theirs = [(users[u], items[s[:n]].tolist(), items[t]) for u, s, n, t in zip(
            frame["user_id"].tolist(), frame["item_id_list"].numpy(), frame["item_length"].tolist(),
            frame["item_id"].tolist())]
        assert theirs == ours, part
    # the training file holds every training interaction but each user's first as a target, once
    train = split_cases(dataset)["train"]
    assert len(train) == int((dataset.train_length - 1).sum())
    assert all(1 <= p < dataset.train_length[u] for u, p in train)


def test_gru4rec_trains_and_our_evaluator_ranks_its_scores(dataset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing of RecBole's may land in the working directory
    epochs = []
    result = fit_recbole(dataset, "recbole:GRU4Rec", tiny_config(), on_epoch=lambda e, row: epochs.append((e, row)))
    assert list(tmp_path.iterdir()) == []
    assert result.epochs_run == result.best_epoch == 1 and [e for e, _ in epochs] == [0]
    assert {"train_loss", "valid_auc", "valid_mrr", "recbole_valid_score"} <= set(result.history[0])
    assert np.isfinite(result.history[0]["train_loss"])
    ranks = result.test_case_ranks
    assert (ranks["users"] == dataset.test_cases[:, 0]).all() and ranks["n_items"] == dataset.n_items
    auc = 1 - ranks["twice_rank"] / (2 * (dataset.n_items - 1))
    assert result.test["auc"] == pytest.approx(auc.mean())
    # the scores our evaluator ranked are RecBole's own full_sort_predict on its own test interactions
    scorer = result.model
    loaded, parts = recbole_parts(dataset, tmp_path / "again")
    test = parts["test"].inter_feat
    with torch.no_grad():
        theirs = scorer.model.full_sort_predict(test)  # [C, RecBole's items]
    columns = [loaded.field2token_id["item_id"][str(i)] for i in range(1, dataset.n_items + 1)]
    histories, targets = evaluation_batch(dataset, dataset.test_cases, MAX_LEN)
    ours = scorer.score_histories(torch.from_numpy(histories), torch.from_numpy(dataset.test_cases[:, 0]))
    assert torch.equal(ours, theirs[:, columns].float())
    above = (ours > ours.gather(1, torch.from_numpy(targets - 1)[:, None])).sum(1)
    tied = (ours == ours.gather(1, torch.from_numpy(targets - 1)[:, None])).sum(1) - 1
    assert (ranks["twice_rank"] == (2 * above + tied).numpy()).all()


def test_an_unsupported_model_is_refused_by_name(capsys, monkeypatch):
    with pytest.raises(OptionError, match=r"option --models: recbole:FEARec is not a RecBole model the bridge runs "
                                          r"\(it runs recbole:BERT4Rec, recbole:Caser, recbole:GRU4Rec"):
        check_bench_options("ml-100k", ["sasrec", "recbole:FEARec"], tiny_config(), {})
    with pytest.raises(OptionError, match="option --option hidden_sise=32: recbole:SASRec has no RecBole setting"):
        check_bench_options("ml-100k", ["recbole:SASRec"], tiny_config(backbone_options={"hidden_sise": 32}), {})
    monkeypatch.setattr("prism_rec.experiments.bench.load_dataset", lambda *a, **k: pytest.fail("loaded data"))
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--models", "recbole:NoSuchModel", "--no-progress"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "option --models: recbole:NoSuchModel is not a RecBole model the bridge runs (it runs recbole:BERT4Rec, "
        "recbole:Caser, recbole:GRU4Rec, recbole:NARM, recbole:SASRec)")


def test_list_shows_the_bridged_models(capsys):
    main(["list"])
    out = capsys.readouterr().out
    for name in ("recbole:BERT4Rec", "recbole:Caser", "recbole:GRU4Rec", "recbole:NARM", "recbole:SASRec"):
        assert f"  {name} " in out


@pytest.mark.parametrize("model", ["recbole:BERT4Rec", "recbole:Caser", "recbole:NARM", "recbole:SASRec"])
def test_every_bridged_model_trains_and_is_ranked(dataset, model):
    # max_len 10: BERT4Rec masks int(0.2 * max_len) items, Caser's vertical filter spans max_len positions
    result = fit_recbole(dataset, model, tiny_config(max_len=10))
    assert result.epochs_run == 1 and 0 <= result.test["auc"] <= 1
    assert (result.test_case_ranks["users"] == dataset.test_cases[:, 0]).all()


def test_bench_runs_a_bridged_model_beside_ours(dataset, store, tmp_path, monkeypatch):
    import mlflow

    raw = tmp_path / "raw"
    raw.mkdir()
    users = np.repeat(dataset.user_ids, np.diff(dataset.offsets))
    lines = [f"{u}\t{dataset.item_ids[i]}\t1\t{t}" for u, i, t in zip(users, dataset.items, dataset.timestamps)]
    (raw / "tiny.inter").write_text("user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                                    + "\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    main(["bench", "--dataset", "recbole-inter", "--raw-dir", str(raw), "--models", "recbole:GRU4Rec,sasrec",
          "--epochs", "1", "--d-model", "8", "--max-len", str(MAX_LEN), "--no-progress", "--cutoffs", "3",
          "--results-dir", str(tmp_path / "results"), "--checkpoint-dir", str(tmp_path / "checkpoints")])
    runs = mlflow.search_runs(search_all_experiments=True, filter_string="tags.prism_rec_role = 'child'")
    assert sorted(runs["tags.model"]) == ["recbole:GRU4Rec", "sasrec"] and set(runs["status"]) == {"FINISHED"}
    bridged = runs[runs["tags.model"] == "recbole:GRU4Rec"].iloc[0]
    assert bridged["params.backbone.embedding_size"] == "8" and bridged["params.backbone.loss_type"] == "CE"
    assert bridged["params.precision"] == "fp32" and 0 <= bridged["metrics.test_hit_3"] <= 1
    assert "case_ranks.json" in {a.path for a in mlflow.MlflowClient().list_artifacts(bridged["run_id"])}
    assert not {"log", "log_tensorboard", "saved"} & {path.name for path in tmp_path.iterdir()}  # RecBole's cwd output


def test_missing_requirements_are_named(monkeypatch):
    from prism_rec.recbole_bridge import compat

    assert compat.unmet_requirements() == []  # this environment has all of them
    real = compat.importlib.util.find_spec

    def without(name, *args):
        if name == "google.protobuf":
            raise ModuleNotFoundError("No module named 'google'")
        return None if name in ("texttable", "colorlog") else real(name, *args)

    monkeypatch.setattr(compat.importlib.util, "find_spec", without)
    assert compat.unmet_requirements() == ["colorlog==4.7.2", "texttable>=0.9", "protobuf"]
    with pytest.raises(ImportError, match=r"the RecBole bridge needs colorlog==4.7.2, texttable>=0.9, protobuf: pip"):
        import_recbole()


def test_pandas_3_is_named(monkeypatch):
    """pandas 3 (the H200 image's) takes Series.agg(len) over the whole column, so RecBole 1.2.1 cannot split
    our item_id_list: the check names pandas<3 before any work instead."""
    from prism_rec.recbole_bridge import compat

    real = compat.importlib.metadata.version
    monkeypatch.setattr(compat.importlib.metadata, "version",
                        lambda name: "3.0.2" if name == "pandas" else real(name))
    assert compat.unmet_requirements() == ["pandas<3"]
    with pytest.raises(ImportError, match=r"the RecBole bridge needs pandas<3: pip"):
        import_recbole()


@pytest.mark.filterwarnings("ignore:using <built-in function len> in Series.agg:FutureWarning")
def test_installed_pandas_measures_token_seq_rows():
    """What recbole's Dataset._remap relies on of pandas, here where the check passes: Series.agg(len) over a
    column of arrays gives each row's length (pandas 3 gives the column's)."""
    rows = pd.Series([np.arange(2), np.arange(3), np.arange(1)])
    assert list(rows.agg(len)) == [2, 3, 1]
