"""Headline v3: the rate grid extends to an interior optimum, v2 runs are reused, the verdict rules against
direct computations, a bootstrap verdict that holds across resampling seeds, bad input refused."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import pytest
import torch
from scipy import optimize, stats

from prism_rec import registry
from prism_rec.cli import main
from prism_rec.experiments.headline import driver, verdicts
from prism_rec.experiments.headline.protocol import DATASETS, V2
from prism_rec.experiments.headline.v3 import V3
from prism_rec.files import read_jsonl
from prism_rec.statistics import seeds_needed, welch
from prism_rec.tracking.bootstrap import _percentile_interval
from prism_rec.tracking.records import make_record
from tests.experiments.test_headline import fake_dataset, fake_result

D64 = {"d64": V3.widths["d64"]}


def objective(model: str, lr: float) -> float:
    """A validation AUC peaking at 3e-2 for sasrec (above the start grid) and at 1e-3 for prism."""
    best = 3e-2 if model == "sasrec" else 1e-3
    return 0.8 - 0.01 * abs(math.log10(lr / best))


@pytest.fixture
def trained(monkeypatch):
    calls = []

    def train(job):
        calls.append(job.label)
        tags = {"git_commit": "abc", "device": "cpu", "machine": "CPU", "command": job.command}
        return {"status": "finished", "gpu_sharing": "none",
                "record": make_record(fake_dataset(job.dataset), job.model, job.config,
                                      fake_result(objective(job.model, job.config.lr)), tags, time.time())}

    monkeypatch.setattr(driver, "load_dataset", fake_dataset)
    monkeypatch.setattr(driver, "train_cell", train)
    return calls


def test_the_grid_extends_past_its_edge_to_an_interior_optimum(tmp_path, trained):
    counts = driver.run_headline(["ml-100k"], ["sasrec", "prism"], [0, 1], tmp_path, 1, None, grid=V3.grid,
                                 protocol=V3, widths=D64)
    sasrec_rates = [label for label in trained if label.startswith("ml-100k/sasrec/") and label.endswith("/s0")]
    assert sasrec_rates == [f"ml-100k/sasrec/lr{r:g}/s0" for r in (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)]
    assert {label for label in trained if label.startswith("ml-100k/prism/")} == {
        f"ml-100k/prism/lr{r:g}/s0" for r in (3e-4, 1e-3, 3e-3, 1e-2)} | {"ml-100k/prism/lr0.001/s1"}
    assert "ml-100k/sasrec/lr0.03/s1" in trained and counts["finished"] == 12
    manifest = read_jsonl(tmp_path / V3.manifest_name)
    assert {e["protocol"] for e in manifest} == {"headline-v3"} and {e["width"] for e in manifest} == {"d64"}
    assert driver.tuning.chosen_rates(manifest, V3.grid) == {("ml-100k", "sasrec"): 3e-2, ("ml-100k", "prism"): 1e-3}
    assert driver.tuning.edge_cells(manifest, V3.grid) == set()


def test_v2_runs_whose_settings_match_are_reused_not_retrained(tmp_path, trained):
    driver.run_headline(["ml-100k"], ["prism"], [0, 1, 2], tmp_path / "v2", 1, None, grid=(3e-4, 1e-3, 3e-3))
    v2_lines = read_jsonl(tmp_path / "v2" / V2.manifest_name)
    assert len(v2_lines) == 5
    trained.clear()
    counts = driver.run_headline(["ml-100k"], ["prism"], [0, 1, 2, 3, 4], tmp_path / "v3", 1, None, grid=V3.grid,
                                 protocol=V3, widths=D64, reuse=(tmp_path / "v2" / V2.manifest_name,))
    assert sorted(trained) == ["ml-100k/prism/lr0.001/s3", "ml-100k/prism/lr0.001/s4", "ml-100k/prism/lr0.01/s0"]
    assert counts["already in manifest"] == 5 and counts["finished"] == 3
    v3_lines = read_jsonl(tmp_path / "v3" / V3.manifest_name)
    assert [e["record_id"] for e in v3_lines[:5]] == [e["record_id"] for e in v2_lines]
    trained.clear()
    driver.run_headline(["ml-100k"], ["prism"], [0, 1, 2, 3, 4], tmp_path / "v3", 1, None, grid=V3.grid,
                        protocol=V3, widths=D64, reuse=(tmp_path / "v2" / V2.manifest_name,))
    assert trained == [] and len(read_jsonl(tmp_path / "v3" / V3.manifest_name)) == 8  # copied once


def test_the_wide_preset_is_its_own_grid_on_its_models_and_datasets(tmp_path, trained):
    driver.run_headline(["ml-100k", "yelp-iclrec"], ["sasrec", "gru4rec"], [0], tmp_path, 1, None, grid=(1e-3,),
                        protocol=V3)
    assert sorted(trained) == ["ml-100k/gru4rec/lr0.001/s0", "ml-100k/sasrec/lr0.001/s0",
                               "yelp-iclrec/d256/sasrec/lr0.001/s0", "yelp-iclrec/gru4rec/lr0.001/s0",
                               "yelp-iclrec/sasrec/lr0.001/s0"]
    wide = [e for e in read_jsonl(tmp_path / V3.manifest_name) if e["width"] == "d256"]
    assert len(wide) == 1 and len({e["config_hash"] for e in read_jsonl(tmp_path / V3.manifest_name)}) == 5


def direct_welch(a, b, alpha=0.05):
    """Welch's interval and p written out: Welch-Satterthwaite degrees of freedom, the t quantile."""
    a, b = np.asarray(a), np.asarray(b)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    diff, se = a.mean() - b.mean(), math.sqrt(va + vb)
    half = stats.t.ppf(1 - alpha / 2, dof) * se
    return diff - half, diff + half, 2 * stats.t.sf(abs(diff) / se, dof)


def direct_detectable(std, n_a, n_b, alpha=0.05, power=0.8):
    """The difference a two-sided pooled t test detects with ``power``: noncentral t, solved by brentq."""
    dof, scale = n_a + n_b - 2, math.sqrt(n_a * n_b / (n_a + n_b))
    crit = stats.t.ppf(1 - alpha / 2, dof)

    def gap(effect):
        nc = effect * scale
        return stats.nct.sf(crit, dof, nc) + np.nan_to_num(stats.nct.cdf(-crit, dof, nc)) - power  # NaN: underflow

    return optimize.brentq(gap, 1e-6, 50) * std


def direct_holm(p):
    order = np.argsort(p)
    adjusted, running = np.empty(len(p)), 0.0
    for rank, index in enumerate(order):
        running = max(running, (len(p) - rank) * p[index])
        adjusted[index] = min(1.0, running)
    return adjusted


def test_seed_figures_match_their_direct_computations():
    a, b = [0.712, 0.715, 0.709, 0.718, 0.711], [0.701, 0.706, 0.699, 0.703, 0.708]
    comparison = welch(a, b)
    low, high, p = direct_welch(a, b)
    assert (comparison.low, comparison.high, comparison.p) == pytest.approx((low, high, p), rel=1e-9)
    pooled = math.sqrt((np.var(a, ddof=1) * 4 + np.var(b, ddof=1) * 4) / 8)
    assert comparison.detectable == pytest.approx(direct_detectable(pooled, 5, 5), rel=1e-4)
    assert comparison.std == pytest.approx(pooled, rel=1e-12)
    # the seeds that would detect a gap: the detectable difference of that many seeds reaches it, of one fewer not
    needed = seeds_needed(comparison.std, 0.0025)
    assert direct_detectable(pooled, needed, needed) <= 0.0025 < direct_detectable(pooled, needed - 1, needed - 1)
    family = [0.004, 0.03, 0.2]
    assert verdicts.seedstats.holm(family) == pytest.approx(direct_holm(np.array(family)).tolist())


def users(mean: float, spread: float, n: int = 400, seed: int = 0) -> np.ndarray:
    """Per-user AUC [1, n] differences centred exactly on ``mean`` with sample std ``spread``."""
    values = np.random.default_rng(seed).normal(size=n)
    return (mean + spread * (values - values.mean()) / values.std(ddof=1))[np.newaxis]


def test_verdicts_follow_the_rule(monkeypatch):
    monkeypatch.setattr(verdicts, "N_MOST", 20_000)
    zero = np.zeros((1, 400))
    data = {"prism": ([0.890, 0.891, 0.889, 0.892, 0.890], users(0.01, 0.05) + 0.5),
            "gated_deltanet": ([0.880, 0.881, 0.879, 0.882, 0.880], zero + 0.5),
            "sasrec": ([0.8901, 0.8903, 0.8899, 0.8902, 0.8900], users(0.0, 0.05, seed=1) + 0.5)}
    family = verdicts.family([("prism", "gated_deltanet"), ("prism", "sasrec")], data, "books-dealrec")
    p_values = [direct_welch(data["prism"][0], data[other][0])[2] for other in ("gated_deltanet", "sasrec")]
    assert [c.adjusted_p for c in family] == pytest.approx(direct_holm(np.array(p_values)).tolist())
    assert family[0].verdict == "prism > gated_deltanet" and family[0].users.level == pytest.approx(0.975)
    low, high, _ = direct_welch(data["prism"][0], data["sasrec"][0])
    bound = max(abs(low), abs(high))
    assert bound <= family[1].gap == pytest.approx(0.0022)  # paper: Books PRISM .8888, SASRec .8910
    assert family[1].verdict == f"equal within ±{bound:.4f}"
    noisy = {**data, "sasrec": ([0.87, 0.91, 0.88, 0.90, 0.89], data["sasrec"][1])}
    assert verdicts.family([("prism", "sasrec")], noisy, "books-dealrec")[0].verdict.startswith("not resolved")
    users_disagree = {**data, "gated_deltanet": (data["gated_deltanet"][0], users(0.01, 0.05) + 0.5)}
    assert verdicts.family([("prism", "gated_deltanet")], users_disagree, "books-dealrec")[0].verdict == (
        "not resolved (seeds separate them; the test users' interval includes 0)")
    # the users' interval below 0 where the seeds put prism above: no order; "equal within" where the rule allows it
    users_opposite = {**data, "gated_deltanet": (data["gated_deltanet"][0], users(0.01, 0.05) + 0.5)}
    users_opposite["prism"] = (data["prism"][0], zero + 0.5)
    assert verdicts.family([("prism", "gated_deltanet")], users_opposite, "books-dealrec")[0].verdict == (
        "not resolved (seeds separate them; the test users' interval excludes 0 on the other side)")
    close = {**users_opposite, "prism": ([0.801, 0.802, 0.8015, 0.8012, 0.8018], zero + 0.5),
             "gated_deltanet": ([0.800, 0.8005, 0.8002, 0.8001, 0.8003], users(0.01, 0.05) + 0.5)}
    low, high, p = direct_welch(close["prism"][0], close["gated_deltanet"][0])
    assert p < 0.05 and low > 0 and max(abs(low), abs(high)) < 0.0044  # paper: Books PRISM .8888, GDN .8844
    assert verdicts.family([("prism", "gated_deltanet")], close, "books-dealrec")[0].verdict == (
        f"equal within ±{max(abs(low), abs(high)):.4f}")


def test_the_users_level_counts_the_comparisons_holm_counts():
    data = {"prism": ([0.890, 0.891, 0.889], users(0.01, 0.05) + 0.5),
            "gated_deltanet": ([0.880, 0.881, 0.879], users(0.0, 0.05, seed=1) + 0.5),
            "sasrec": ([0.885], users(0.0, 0.05, seed=2) + 0.5)}  # one seed: its spread, and Welch's p, unknown
    both = verdicts.family([("prism", "gated_deltanet"), ("prism", "sasrec")], data, "books-dealrec")
    assert math.isnan(both[1].adjusted_p) and both[1].verdict == "not resolved (seed spread unknown)"
    assert both[0].users.level == pytest.approx(0.95)  # a family of one test, as Holm's
    assert both[0].adjusted_p == pytest.approx(direct_welch(data["prism"][0], data["gated_deltanet"][0])[2])


def test_the_table_marks_an_interval_at_the_boundary():
    from prism_rec.experiments.headline import v3_tables

    data = {"prism": ([0.890, 0.891, 0.889], users(0.01, 0.05) + 0.5),
            "gated_deltanet": ([0.880, 0.881, 0.879], users(0.0, 0.05, seed=1) + 0.5)}
    comparison = verdicts.family([("prism", "gated_deltanet")], data, "books-dealrec")[0]
    plain = v3_tables.comparison_table([comparison], set())
    assert "at the boundary" not in plain
    boundary = dataclasses.replace(comparison, users=dataclasses.replace(comparison.users, at_boundary=True))
    assert "resamples, at the boundary: 0 not excluded) |" in v3_tables.comparison_table([boundary], set())


def test_the_bootstrap_verdict_does_not_move_with_the_resampling_seed():
    n = 400
    boundary = users(1.96 * 0.05 / math.sqrt(n), 0.05, n)[0]  # the ideal 2.5% bound sits at about 0
    plain = {_percentile_interval(boundary, 10_000, 0.95, seed)[0] > 0 for seed in range(8)}
    assert plain == {True, False}  # one fixed-size bootstrap flips with its seed on this case
    sides = {verdicts.stable_interval(boundary, seed=seed).side for seed in range(4)}
    assert sides == {0}
    clear = users(0.01, 0.05, n)[0]
    assert {verdicts.stable_interval(clear, seed=seed).side for seed in range(4)} == {1}
    result = verdicts.stable_interval(clear, seed=0)
    assert result.n_resamples == verdicts.N_START and not result.at_boundary


@pytest.mark.parametrize("options, message", [
    (["--lr-grid", ","], "option --lr-grid: the learning-rate grid is empty"),
    (["--lr-grid", "1e-3,3e-4"], "option --lr-grid: the rates must increase"),
    (["--lr-grid", "0,1e-3"], "option --lr-grid: 0.0 is not a positive learning rate"),
    (["--lr-grid", "2e-3"], "option --lr-grid: 0.002 not on the rate ladder"),
    (["--seeds", "0"], "option --seeds: a count in [1, 10000], got 0"),
    (["--widths", "d64,d128"], "option --widths: unknown width preset(s) d128"),
])
def test_bad_input_is_refused_before_any_training(tmp_path, trained, capsys, options, message):
    with pytest.raises(SystemExit) as exit_:
        main(["headline", "run", "--protocol", "v3", "--out", str(tmp_path), "--models", "sasrec", *options])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not trained and not (tmp_path / V3.manifest_name).exists()


def assert_seed_counts_stated(comparisons, findings: str, dataset: str) -> None:
    """Each unresolved comparison of the one dataset compared names its seed counts as the span's ends."""
    from prism_rec.experiments.headline import v3_tables

    for comparison in comparisons:
        if comparison.verdict.startswith("not resolved (a gap of"):
            counts = [v3_tables.seed_count_text(seeds).replace("> ", "more than ")
                      for seeds in (comparison.seeds_for_gap, comparison.seeds_to_bound)]
            assert (f"where a gap of interest is not excluded, at least {counts[0]} ({dataset}) seeds per backbone "
                    f"would detect a difference of its size with 80% power, and {counts[1]} ({dataset}) would bound "
                    f"a zero difference within it (at the observed spread)") in findings
        else:
            assert v3_tables.gap_seed_counts_text(comparison) == "—"


def test_the_v3_pages_state_grids_edges_verdicts_what_moved_and_what_is_incomplete(tmp_path, monkeypatch, capsys):
    from prism_rec.experiments.headline import v3_tables
    from tests.experiments.test_headline_report import ELECTRONICS, run

    monkeypatch.setattr(verdicts, "N_MOST", 20_000)
    books, lines = "books-dealrec", []

    def add(dataset, model, seed, lr, quality, protocol="headline-v3", width="d64", **kwargs):
        entry, ranks = run(dataset, model, seed, lr, quality, protocol=protocol, **kwargs)
        lines.append(({**entry, "width": width, "record_id": f"{entry['record_id']}-{width}"},
                      {**ranks, "record_id": f"{entry['record_id']}-{width}"}))

    valid = {"sasrec": {3e-4: .70, 1e-3: .74, 3e-3: .78, 1e-2: .79, 3e-2: .75},  # v2 chose 3e-3, v3 1e-2
             "prism": {3e-4: .72, 1e-3: .80, 3e-3: .76, 1e-2: .70}, "gated_deltanet": {3e-4: .7, 1e-3: .78,
                                                                                        3e-3: .74, 1e-2: .7}}
    chosen = {"sasrec": 1e-2, "prism": 1e-3, "gated_deltanet": 1e-3}
    for model, rates in valid.items():
        for lr, quality in rates.items():
            add(ELECTRONICS, model, 0, lr, quality, "headline-v2" if lr < 1e-2 else "headline-v3", best_valid=quality)
        for seed in (1, 2):  # v2's seeds at v2's choice, and v3's at its own
            add(ELECTRONICS, model, seed, 3e-3 if model == "sasrec" else 1e-3, 0.75, "headline-v2")
        for seed in range(1 if model == "sasrec" else 3, 5):
            add(ELECTRONICS, model, seed, chosen[model], {"prism": .78, "gated_deltanet": .74}.get(model, .7))
    for model in ("prism", "gated_deltanet"):
        for lr in (1e-4, 3e-4, 1e-3, 3e-3, 1e-2):
            add(books, model, 0, lr, 0.8 - lr, width="d256", best_valid=0.8 - lr)
        for seed in range(1, 5 if model == "prism" else 4):  # gated_deltanet's seed 4 still missing
            add(books, model, seed, 1e-4, 0.8, width="d256")
    add(books, "mamba2", 0, 3e-4, 0.7, width="d256")  # one rate of its grid so far
    for name, rows in ((V3.manifest_name, [e for e, _ in lines]), (V3.case_ranks_name, [r for _, r in lines])):
        (tmp_path / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    main(["headline", "tables", "--protocol", "v3", "--results-dir", str(tmp_path), "--metrics", "hit_10,mrr"])
    front_path, detail_path = tmp_path / "README.md", tmp_path / "headline_v3.md"
    assert capsys.readouterr().out.splitlines() == [f"wrote {front_path}", f"wrote {detail_path}"]
    detail, front = detail_path.read_text(), front_path.read_text()
    assert "| v2 rank | test Hit@10 | test MRR |" in detail
    assert "Test metrics: each test case ranks its target against all items." in detail
    row = next(line for line in detail.splitlines() if line.startswith("| prism | ") and "0.1000" in line)
    assert row.endswith("| 0.1000 ± 0.0000 | missing |")  # every run has Hit@10 (the fixture's 0.1), none MRR
    assert (f"| {ELECTRONICS} | sasrec | 0.0003 0.7000, 0.001 0.7400, 0.003 0.7800, **0.01** 0.7900, 0.03 0.7500 "
            "| 0.01 | 0.003 |") in detail
    assert f"| {books} | prism | **0.0001** 0.7999" in detail and "0.0001 ⚠ at the edge of the ladder" in detail
    assert "[README.md](README.md)" in detail and "**prism > gated_deltanet**" not in detail

    headings = [line for line in front.splitlines() if line.startswith("## ")]
    assert headings == ["## Findings", "## Verdicts per dataset", "## What moved from v2", "## Width study"]
    v2_choice = {m: max((lr for lr in rates if lr < 1e-2), key=rates.get) for m, rates in valid.items()}
    v3_choice = {m: max(rates, key=rates.get) for m, rates in valid.items()}
    moved = [m for m in valid if v2_choice[m] != v3_choice[m]]
    assert (f"whose chosen rate moved, at d64 (the width v2 trained): {len(moved)} of the {len(valid)} with a choice "
            f"in both protocols ({', '.join(f'{ELECTRONICS}/{m}' for m in moved)}).") in front
    assert f"**From v2: {len(moved)} of {len(valid)} cells moved rate, " in front
    assert "Where they trained: d64: " in front and " on NVIDIA H200 (CUDA 13.0)" in front
    entries = [e for e, _ in lines]
    cells = v3_tables.cells_of([e for e in entries if e["width"] == "d64"],
                               {r["record_id"]: r for _, r in lines}, V3.grid, 5)
    assert [len(cells[(ELECTRONICS, m)].runs) for m in chosen] == [5, 5, 5]
    expected = verdicts.family([("prism", "gated_deltanet"), ("prism", "sasrec")],
                               {m: (cells[(ELECTRONICS, m)].aucs, cells[(ELECTRONICS, m)].per_user) for m in chosen},
                               ELECTRONICS)
    section = front.split(f"### {ELECTRONICS} (d64)")[1].split("###")[0]
    for comparison in expected:
        u = comparison.users
        assert (f"| {comparison.first} − {comparison.second}" in section and f"**{comparison.verdict}**" in section
                and f"[{u.low:+.4f}, {u.high:+.4f}]" in section and f"| {comparison.seeds.detectable:.4f} |" in section
                and f"({comparison.gap_source}) | {v3_tables.gap_seed_counts_text(comparison)} |" in section)
        assert comparison.seeds_for_gap == seeds_needed(comparison.seeds.std, comparison.gap)
    assert "Incomplete" not in section
    registered = registry.list_backbones()
    never = [m for m in registered if m not in {"prism", "gated_deltanet", "sasrec", "pop"}]  # no electronics run
    assert ("- **Not run under headline-v3 yet** (not ranked here; v2's tables, where v2 ran them: "
            f"[v2/README.md](v2/README.md)): {', '.join(never)}.") in section
    wide = front.split(f"### {books} (d256)")[1].split("##")[0]
    assert ("**Incomplete**: gated_deltanet (4 of 5 seeds); mamba2 (rate grid incomplete, next 0.001); "
            "prism-L0 (no runs); sasrec (no runs); transformer++ (no runs)") in wide
    assert "- prism − sasrec: not computed, incomplete (sasrec: no runs)." in wide
    assert ("- prism − gated_deltanet: not computed, incomplete (prism: no runs; gated_deltanet: no runs)."
            in front.split("### ml-100k (d64)")[1].split("###")[0])  # a dataset without runs is said, not dropped
    study = front.split("## Width study")[1]
    assert f"| {books} | d256 | " in study and study.count(f"| {books} | d64 | — | — | — | incomplete | "
                                                           "prism: no runs; gated_deltanet: no runs |") == 1
    assert next(line for line in study.splitlines() if line.startswith(f"| {books} | d256 |")).endswith(
        "| gated_deltanet: 4 of 5 seeds |")
    assert "gated_deltanet − prism" not in front and front.count("| prism − gated_deltanet (best − second) |") == 2
    found = front.split("## Findings")[1].split("## Verdicts")[0]
    assert_seed_counts_stated(expected, found, ELECTRONICS)
    assert len([line for line in found.splitlines() if line[:3] in {f"{n}. " for n in range(1, 10)}]) == 7
    d64_tables = sum(f"### {d} (d64)" in front for d in DATASETS)
    assert "hstu, mamba2, mamba2-authors" in found and f"on all {d64_tables} d64 tables" in found
    assert f"{books} d256: gated_deltanet (4 of 5 seeds)" in found


def test_the_cells_refuse_case_ranks_that_disagree_with_their_runs(monkeypatch):
    from prism_rec.experiments import tuning
    from prism_rec.experiments.headline import v3_tables
    from prism_rec.tracking import case_ranks
    from tests.experiments.test_headline_report import ELECTRONICS, run

    monkeypatch.setattr(tuning, "selected_entries", lambda entries, grid: entries)  # the runs, as chosen
    lines = [run(ELECTRONICS, "sasrec", seed, 1e-3, 0.8) for seed in range(2)]
    entries, ranks = [e for e, _ in lines], {r["record_id"]: r for _, r in lines}
    assert v3_tables.cells_of(entries, ranks, V3.grid, 2)[(ELECTRONICS, "sasrec")].per_user.shape[0] == 2
    off = [{**entries[0], "test_auc": entries[0]["test_auc"] + 0.01}, entries[1]]
    with pytest.raises(ValueError, match=f"case ranks of {ELECTRONICS}/sasrec/s0 .* do not give its test AUC"):
        v3_tables.cells_of(off, ranks, V3.grid, 2)
    decoded = case_ranks.decode(ranks[entries[1]["record_id"]]["case_ranks"])
    other_users = case_ranks.encode(decoded.users + 1, decoded.twice_rank, decoded.n_items)
    moved = {**ranks, entries[1]["record_id"]: {**ranks[entries[1]["record_id"]], "case_ranks": other_users}}
    with pytest.raises(ValueError, match="its test users differ from the other runs of"):
        v3_tables.cells_of(entries, moved, V3.grid, 2)


def test_the_page_says_where_the_table_runs_trained():
    from prism_rec.experiments.headline import v3_tables
    from prism_rec.tracking.cells import Cell
    from prism_rec.tracking.store import machine_description

    gpu, cpu = "NVIDIA H200 (CUDA 13.0)", machine_description(torch.device("cpu"))  # as a record writes them
    cells = {("ml-100k", "prism"): Cell("ml-100k", "prism", [{"machine": gpu}] * 5, 5),
             ("ml-100k", "prism-L1"): Cell("ml-100k", "prism-L1", [{"machine": gpu}] * 3 + [{"machine": cpu}] * 2, 5),
             ("ml-100k", "pop"): Cell("ml-100k", "pop", [{}], 1)}
    assert v3_tables.machines_text(cells) == (
        f"8 on {gpu}, 2 on {cpu}, 1 on machine not recorded; seeds on a CPU (fp32) beside seeds on a GPU "
        "(bf16 autocast) in 1 cell: ml-100k/prism-L1")
    assert v3_tables.machines_text({k: v for k, v in cells.items() if k[1] == "prism"}) == f"5 on {gpu}"


def test_the_rate_table_marks_seed_0_rates_trained_on_a_cpu_beside_gpu_ones():
    from prism_rec.experiments.headline import v3_tables
    from prism_rec.tracking.store import machine_description

    gpu, cpu = "NVIDIA H100 80GB HBM3 (CUDA 13.0)", machine_description(torch.device("cpu"))

    def seed0(model, lr, auc, machine):
        return {"dataset": "ml-100k", "model": model, "seed": 0, "lr": lr, "best_valid_auc": auc, "machine": machine}

    entries = [seed0("sasrec", 3e-4, 0.80, gpu), seed0("sasrec", 1e-3, 0.82, gpu), seed0("sasrec", 3e-3, 0.84, gpu),
               seed0("sasrec", 1e-2, 0.83, cpu), seed0("prism", 3e-4, 0.80, cpu), seed0("prism", 1e-3, 0.81, cpu),
               {**seed0("sasrec", 1e-3, 0.82, gpu), "seed": 1, "machine": cpu}]  # not seed 0: not marked
    lines, counts = v3_tables.tuning_table(entries, {}, "d64")
    table = "\n".join(lines)
    assert ("| ml-100k | sasrec | 0.0003 0.8000, 0.001 0.8200, **0.003** 0.8400, 0.01 0.8300 (CPU) | 0.003 | — |"
            in table)
    assert "| ml-100k | prism | 0.0003 0.8000, 0.001 0.8100 | incomplete (next 0.003) | — |" in table  # all on CPU
    assert lines[-1] == ("In 1 cell seed 0 trained on a CPU (fp32) at the rates marked (CPU) and on a GPU (bf16 "
                         "autocast) at the others, so the choice compares runs of two numeric settings.")
    assert counts["cells"] == 2
    assert "(CPU)" not in "\n".join(v3_tables.tuning_table(entries[:3], {}, "d64")[0])
