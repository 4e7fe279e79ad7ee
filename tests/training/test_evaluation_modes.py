"""MRR, extra cutoffs, history-excluded and sampled evaluation against a direct loop over cases."""

import base64
import math
import zlib

import numpy as np
import pandas as pd
import pytest
import torch

from prism_rec.data.core import prepare
from prism_rec.models.popularity import training_counts
from prism_rec.tracking.case_ranks import decode, encode
from prism_rec.training.candidates import check_sampled, sample_negatives
from prism_rec.training.config import TrainConfig
from prism_rec.training.evaluation import evaluate
from prism_rec.training.metrics import beyond_accuracy_names, metric_names, rank_metrics


def tiny_dataset(seed=0, users=12, items=30, length=9):
    """Random sequences with repeated items, so that history exclusion has repeats to skip."""
    generator = np.random.default_rng(seed)
    rows = [(f"u{u}", f"i{generator.integers(items)}", t) for u in range(users) for t in range(length)]
    return prepare(pd.DataFrame(rows, columns=["user", "item", "timestamp"]), "tiny", 3, 1)


class TableScorer(torch.nn.Module):
    """Integer scores (many ties) fixed per user: scores[user] [n_items]."""

    def __init__(self, n_users, n_items, seed=0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.table = torch.randint(0, 6, (n_users, n_items), generator=generator).double()

    def score_histories(self, histories, users):
        return self.table[users]


def loop_metrics(scores, target, candidates, cutoffs):
    """One case's metrics by counting over its candidate columns (the target among them) one by one."""
    above = sum(1 for c in candidates if c != target and scores[c] > scores[target])
    tied = sum(1 for c in candidates if c != target and scores[c] == scores[target])
    below = len(candidates) - 1 - above - tied
    rank = above + tied
    row = {"auc": (below + 0.5 * tied) / (len(candidates) - 1), "mrr": 1 / (rank + 1)}
    for k in sorted({10, 200, 500} | set(cutoffs)):
        row[f"hit_{k}"] = float(rank < k)
        row[f"ndcg_{k}"] = float(rank < k) / math.log2(rank + 2)
    return row


def loop_means(dataset, model, cases, cutoffs, candidates_of):
    rows = []
    for index, (user, position) in enumerate(cases):
        target = dataset.items[dataset.offsets[user] + position] - 1
        scores = model.table[user].tolist()
        rows.append(loop_metrics(scores, target, candidates_of(index, user, position, target), cutoffs))
    return {name: float(np.mean([row[name] for row in rows])) for name in rows[0]}


def test_mrr_and_cutoffs_match_a_loop():
    generator = torch.Generator().manual_seed(1)
    scores = torch.randint(0, 8, (40, 25), generator=generator).double()
    targets = torch.randint(0, 25, (40,), generator=generator)
    per_case = rank_metrics(scores, targets, cutoffs=(1, 3, 7))
    assert tuple(per_case) == metric_names((1, 3, 7)) == ("auc", "mrr", "hit_1", "ndcg_1", "hit_3", "ndcg_3",
                                                          "hit_7", "ndcg_7", "hit_10", "ndcg_10", "hit_200",
                                                          "ndcg_200", "hit_500", "ndcg_500")
    for case in range(40):
        expected = loop_metrics(scores[case].tolist(), int(targets[case]), range(25), (1, 3, 7))
        for name, value in expected.items():
            assert per_case[name][case].item() == pytest.approx(value), (case, name)


@pytest.mark.parametrize("exclude_history", [False, True])
def test_full_ranking_with_and_without_history(exclude_history):
    dataset = tiny_dataset()
    model = TableScorer(dataset.n_users, dataset.n_items)
    config = TrainConfig(max_len=4, eval_batch_size=5, progress=False, cutoffs=(2, 5), exclude_history=exclude_history)
    ranks = {}
    means = evaluate(model, dataset, dataset.test_cases, config, torch.device("cpu"), case_ranks=ranks)

    def candidates(index, user, position, target):
        history = set(dataset.items[dataset.offsets[user] : dataset.offsets[user] + position] - 1) - {target}
        return [c for c in range(dataset.n_items) if not (exclude_history and c in history)]

    expected = loop_means(dataset, model, dataset.test_cases, (2, 5), candidates)
    assert set(means) == set(expected) | set(beyond_accuracy_names((2, 5)))  # those below
    assert {name: means[name] for name in expected} == pytest.approx(expected)
    # the case ranks stay full-ranking ones (history kept), whatever the mode
    full = loop_means(dataset, model, dataset.test_cases, (2, 5), lambda i, u, p, t: range(dataset.n_items))
    assert np.mean(1 - ranks["twice_rank"] / (2 * (dataset.n_items - 1))) == pytest.approx(full["auc"])
    if exclude_history:
        assert means["auc"] != pytest.approx(full["auc"])  # the fixture has history items to exclude


@pytest.mark.parametrize("sampler", ["uniform", "popularity"])
@pytest.mark.parametrize("exclude_history", [False, True])
def test_sampled_negatives_and_metrics(sampler, exclude_history):
    dataset = tiny_dataset(seed=2)
    cases = dataset.test_cases
    spec = f"{sampler}:6"
    negatives = sample_negatives(dataset, cases, spec, seed=3, exclude_history=exclude_history, chunk_cells=100)
    assert negatives.shape == (len(cases), 6)
    counts = training_counts(dataset)
    for row, (user, position) in zip(negatives, cases):
        target = dataset.items[dataset.offsets[user] + position] - 1
        history = set(dataset.items[dataset.offsets[user] : dataset.offsets[user] + position] - 1) - {target}
        assert len(set(row)) == 6 and target not in row
        assert not (exclude_history and history & set(row))
        assert sampler == "uniform" or (counts[row] > 0).all()  # items never trained on are never drawn
    # fixed per case and seed: another chunking gives the same draws, another seed others
    assert (sample_negatives(dataset, cases, spec, 3, exclude_history) == negatives).all()
    assert (sample_negatives(dataset, cases, spec, 4, exclude_history) != negatives).any()
    model = TableScorer(dataset.n_users, dataset.n_items, seed=5)
    config = TrainConfig(max_len=4, eval_batch_size=4, progress=False, seed=3, sampled=spec,
                         exclude_history=exclude_history)
    means = evaluate(model, dataset, cases, config, torch.device("cpu"))
    expected = loop_means(dataset, model, cases, config.cutoffs, lambda i, u, p, t: [t, *negatives[i]])
    assert means == pytest.approx(expected)


def test_popularity_sampling_follows_the_counts():
    dataset = tiny_dataset(seed=4, users=40, items=12, length=20)
    cases = np.repeat(dataset.test_cases[:1], 4000, axis=0)
    drawn = np.bincount(sample_negatives(dataset, cases, "popularity:1", 0, False).ravel(), minlength=dataset.n_items)
    target = dataset.items[dataset.offsets[cases[0, 0]] + cases[0, 1]] - 1
    weights = training_counts(dataset).astype(float)
    weights[target] = 0
    assert drawn / drawn.sum() == pytest.approx(weights / weights.sum(), abs=0.02)


def test_bad_evaluation_options_name_the_option():
    with pytest.raises(ValueError, match="option --cutoffs"):
        TrainConfig(cutoffs=(10, 0)).validate()
    with pytest.raises(ValueError, match="option --sampled"):
        TrainConfig(sampled="uniform").validate()
    with pytest.raises(ValueError, match="option --sampled"):
        TrainConfig(sampled="zipf:10").validate()
    dataset = tiny_dataset()
    check_sampled(dataset, f"uniform:{dataset.n_items - 1}", False)
    with pytest.raises(ValueError, match="option --sampled: 'uniform:30' asks for 30 negatives"):
        check_sampled(dataset, f"uniform:{dataset.n_items}", False)
    with pytest.raises(ValueError, match="option --sampled.*history excluded"):
        check_sampled(dataset, f"uniform:{dataset.n_items - 2}", True)


def test_default_evaluation_keeps_run_hashes():
    assert set(TrainConfig().identity()).isdisjoint({"cutoffs", "exclude_history", "sampled"})
    assert TrainConfig(cutoffs=[10, 200, 500]).identity() == TrainConfig().identity()
    assert TrainConfig(sampled="uniform:100").identity()["sampled"] == "uniform:100"


def loop_training_counts(dataset):
    """Each item's training rows, counted one user's training prefix at a time."""
    counts = np.zeros(dataset.n_items)
    for user in range(dataset.n_users):
        for item in dataset.sequence(user)[: dataset.train_length[user]]:
            counts[item - 1] += 1
    return counts


@pytest.mark.parametrize("exclude_history", [False, True])
@pytest.mark.parametrize("sampled", ["none", "uniform:5"])
def test_coverage_and_popularity_match_a_loop(exclude_history, sampled):
    dataset = tiny_dataset(seed=6, users=15)
    model = TableScorer(dataset.n_users, dataset.n_items, seed=7)
    config = TrainConfig(max_len=4, eval_batch_size=4, progress=False, cutoffs=(3,), exclude_history=exclude_history,
                         sampled=sampled)
    ranks = {}
    means = evaluate(model, dataset, dataset.test_cases, config, torch.device("cpu"), case_ranks=ranks)
    counts = loop_training_counts(dataset)
    lists = []
    for user, position in dataset.test_cases:
        target = dataset.items[dataset.offsets[user] + position] - 1
        history = set(dataset.items[dataset.offsets[user] : dataset.offsets[user] + position] - 1) - {target}
        scores = model.table[user].tolist()
        allowed = [c for c in range(dataset.n_items) if not (exclude_history and c in history)]
        lists.append(sorted(allowed, key=lambda c: (-scores[c], c))[:10])  # ties to the lower column
    assert set(ranks) == {"users", "twice_rank", "n_items"}  # the lists are not kept (case_ranks.py)
    for k in (3, 10):
        assert means[f"coverage_{k}"] == pytest.approx(len({c for row in lists for c in row[:k]}) / dataset.n_items)
        assert means[f"avg_pop_{k}"] == pytest.approx(np.mean([np.mean([counts[c] for c in row[:k]]) for row in lists]))
    assert not {"coverage_200", "avg_pop_500"} & set(means)  # no list that long is kept
    valid = evaluate(model, dataset, dataset.valid_cases, config, torch.device("cpu"))
    assert "coverage_10" not in valid  # only a test evaluation (case_ranks) keeps the lists


def test_an_entry_with_the_top_items_once_written_still_reads():
    generator = np.random.default_rng(0)
    users, ranks = np.arange(6), generator.integers(0, 2 * 300 - 1, 6)
    top = generator.integers(0, 300, (6, 4)).astype("<u2")  # as entries held them: uint16 item columns
    entry = {**encode(users, ranks, 300), "top_k": 4,
             "top_items": base64.b64encode(zlib.compress(top.tobytes(), 9)).decode()}
    decoded = decode(entry)
    assert (decoded.users == users).all() and (decoded.twice_rank == ranks).all() and decoded.n_items == 300
    assert set(encode(users, ranks, 300)) == {"format", "n_items", "n_cases", "users", "twice_rank"}


@pytest.mark.parametrize(("options", "message"), [
    (["--cutoffs", "10,0"], "option --cutoffs: every cutoff must be an integer >= 1, got [10, 0]"),
    (["--sampled", "uniform:5000"], "option --sampled: 'uniform:5000' asks for 5000 negatives but ml-100k has only "),
    (["--models", "recbole:FEARec"], "option --models: recbole:FEARec is not a RecBole model the bridge runs"),
])
def test_bench_refuses_bad_evaluation_options_before_training(options, message, store, capsys, monkeypatch):
    from prism_rec.cli import main

    for trainer in ("fit", "fit_recbole"):
        monkeypatch.setattr(f"prism_rec.experiments.bench.{trainer}", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--models", "sasrec", *options, "--epochs", "1", "--no-progress", "--device", "cpu"])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
