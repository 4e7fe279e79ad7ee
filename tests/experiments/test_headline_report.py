"""The v2 headline report (headline/report/) on a synthetic v2 manifest and case-ranks file built here:
pop, tuning runs, presets, a plateau run, a capped run, a cell still tuning, missing cells, an old-protocol
line, v1 means and a partial solo-throughput file."""

from __future__ import annotations

import csv
import json
import re
import zlib

import numpy as np
import pytest

from prism_rec.cli import main
from prism_rec.experiments.headline import protocol, report
from prism_rec.experiments.headline.report import checks, cost, tables
from prism_rec.experiments.headline.report.grid import build_grid
from prism_rec.experiments.throughput.solo import SOLO_COLUMNS, SOLO_NAME
from prism_rec.tracking import case_ranks
from prism_rec.tracking.bootstrap import bootstrap_mean_ci, paired_difference, verdict
from prism_rec.training.candidates import SAMPLED_LABEL, candidates_description

N_USERS, N_ITEMS = 40, 101
ELECTRONICS, SHORT = "electronics-gerec", "movies-fedcsr"


def run(dataset, model, seed, lr, quality, *, best_valid=None, best_epoch=20, epochs_run=30, protocol="headline-v2"):
    """A manifest line and its case-ranks line: per-user ranks drawn around ``quality`` (the test AUC is
    their exact mean, as a real run's is)."""
    rng = np.random.default_rng(zlib.crc32(repr((dataset, model, seed, lr)).encode()))
    users = rng.permutation(np.arange(100, 100 + N_USERS))  # every run lists the same users, in its own order
    twice_rank = rng.binomial(2 * (N_ITEMS - 1), 1 - quality, size=N_USERS)
    test_auc = float(case_ranks.decode(case_ranks.encode(users, twice_rank, N_ITEMS)).auc().mean())
    record_id = f"{dataset}-{model}-{seed}-{lr}"
    entry = {"dataset": dataset, "model": model, "seed": seed, "lr": lr, "protocol": protocol, "epochs": 200,
             "patience": 10, "config_hash": "h", "record_id": record_id, "test_auc": test_auc,
             "best_valid_auc": quality if best_valid is None else best_valid, "best_epoch": best_epoch,
             "epochs_run": epochs_run, "train_tokens_per_s": 5000.0, "peak_memory_mb": 1.0, "wall_seconds": 9.0,
             "n_parameters": 1000, "machine": "NVIDIA H200 (CUDA 13.0)", "git_commit": "abc1234",
             "command": "prism-rec headline run --out X", "finished_at": "2026-12-01T00:00:00Z",
             "jobs_per_device": 8.0, "gpu_sharing": "mps"}
    for name in ("hit_10", "hit_200", "hit_500", "ndcg_10", "ndcg_200", "ndcg_500"):
        entry[f"test_{name}"] = entry[f"best_valid_{name}"] = 0.1
    line = {"record_id": record_id, "dataset": dataset, "model": model, "seed": seed, "lr": lr,
            "case_ranks": case_ranks.encode(users, twice_rank, N_ITEMS)}
    return entry, line


def fixture_runs():
    runs = [run(ELECTRONICS, "pop", 0, 0.0, 0.60, best_epoch=1, epochs_run=1),
            run(SHORT, "pop", 0, 0.0, 0.55, best_epoch=1, epochs_run=1)]
    quality = {"sasrec": 0.80, "gated_deltanet": 0.74, "prism": 0.76, "hstu": 0.70}
    for model, q in quality.items():  # seed 0 at every rate: 1e-3 wins (best validation)
        for lr, shift in ((3e-4, -0.02), (1e-3, 0.0), (3e-3, -0.01)):
            runs.append(run(ELECTRONICS, model, 0, lr, q + shift))
        for seed in (1, 2):
            runs.append(run(ELECTRONICS, model, seed, 1e-3, q + 0.003 * seed))
    runs[-1] = run(ELECTRONICS, "hstu", 2, 1e-3, 0.72, best_epoch=200, epochs_run=200)  # at the cap, improving
    runs.append(run(ELECTRONICS, "gated_deltanet", 1, 3e-4, 0.5, best_valid=0.5))  # an unchosen rate: not in the table
    for preset, q in (("prism-L1", 0.70), ("prism-nogelu", 0.75), ("prism-noconv", 0.755), ("prism-nogain", 0.758)):
        for seed in (0, 1, 2):
            runs.append(run(ELECTRONICS, preset, seed, 1e-3, q))
    runs.append(run(ELECTRONICS, "prism-L0", 0, 1e-3, 0.605, best_valid=0.605, best_epoch=2, epochs_run=12))  # plateau
    runs += [run(SHORT, "sasrec", 0, lr, 0.58) for lr in (3e-4, 1e-3)]  # sasrec still tuning on movies-fedcsr
    runs.append(run(ELECTRONICS, "sasrec", 0, 1e-3, 0.99, protocol="headline-v1"))  # another protocol: left out
    return [entry for entry, _ in runs], [line for entry, line in runs if entry["protocol"] == "headline-v2"]


@pytest.fixture
def results(tmp_path):
    manifest, lines = fixture_runs()
    (tmp_path / "v1").mkdir()
    v1 = [{"dataset": ELECTRONICS, "model": "gated_deltanet", "seed": s, "test_auc": auc}
          for s, auc in enumerate((0.73, 0.61, 0.61))]
    (tmp_path / "v1" / "headline_manifest.jsonl").write_text("".join(json.dumps(e) + "\n" for e in v1))
    (tmp_path / protocol.CASE_RANKS_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))
    with open(tmp_path / SOLO_NAME, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SOLO_COLUMNS)
        for model, speed in (("sasrec", 90000), ("gated_deltanet", 120000), ("prism", 60000), ("prism-L1", 50000)):
            writer.writerow([ELECTRONICS, model, speed, 3.0, 4.0, 256, 50, 3666, "bf16", "NVIDIA H200",
                             "prism-rec throughput", "off"])
    paths = report.write_results(manifest, tmp_path)
    return tmp_path, paths, manifest, lines


def cells_of(text: str, first: str) -> list[str]:
    """The cells of the markdown row that starts with ``first``."""
    row = next(line for line in text.splitlines() if line.startswith(f"| {first} |"))
    return [cell.strip() for cell in row.strip("|").split("|")]


def matrix(lines, dataset, model, seeds=(0, 1, 2), lr=1e-3):
    rows = []
    for seed in seeds:
        line = next(x for x in lines if (x["dataset"], x["model"], x["seed"], x["lr"]) == (dataset, model, seed, lr))
        decoded = case_ranks.decode(line["case_ranks"])
        rows.append(decoded.auc()[np.argsort(decoded.users)])
    return np.stack(rows)


def test_files_are_written_for_the_datasets_with_runs(results):
    folder, paths, _, _ = results
    names = sorted(str(p.relative_to(folder)) for p in paths)
    assert names == sorted(["v2/README.md", *(f"{d}/{f}" for d in (ELECTRONICS, SHORT)
                                           for f in ("auc.md", "auc.csv", "auc.png", "paired.png", "pareto.png"))])
    assert all(p.stat().st_size > 0 for p in paths)


def test_the_v2_page_is_results_v2_readme_and_its_links_reach_the_dataset_pages(results):
    folder, paths, _, _ = results
    page = folder / "v2" / "README.md"
    assert page in paths and not (folder / "README.md").exists()  # results/README.md is v3's front page
    targets = re.findall(r"\]\(([^)#]+)\)", page.read_text())
    assert "../README.md" in targets and f"../{ELECTRONICS}/auc.md" in targets
    assert all((page.parent / target).resolve().is_file() for target in targets if target != "../README.md")


def test_summary_rows_start_with_the_floor_and_say_missing(results):
    folder, _, manifest, lines = results
    text = (folder / "v2" / "README.md").read_text()
    summary = text.split("## Main table: test AUC")[1].split("For orientation")[0]
    rows = [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| backbone")]
    assert rows[0].startswith("| **baselines** |") and rows[1].startswith("| pop (floor) |")
    sasrec = [e["test_auc"] for e in manifest if e["model"] == "sasrec" and e["lr"] == 1e-3
              and e["dataset"] == ELECTRONICS and e["protocol"] == "headline-v2"]
    cells = cells_of(summary, "sasrec")
    header = cells_of(summary, "backbone")
    low, high = bootstrap_mean_ci(matrix(lines, ELECTRONICS, "sasrec"))
    assert cells[header.index(ELECTRONICS)] == (f"**{np.mean(sasrec):.4f} ± {np.std(sasrec, ddof=1):.4f} (3)** "
                                                f"[{low:.4f}, {high:.4f}]")
    assert cells[header.index("movies-fedcsr (short sequences)")] == "missing (tuning 2 of 3 rates)"
    assert cells[header.index("ml-100k")] == "missing"
    assert cells_of(summary, "pop (floor)")[-1] == "— (floor)"
    assert " (1 of 3 seeds) [" in cells_of(summary, "prism-L0")[header.index(ELECTRONICS)]
    assert "1 line(s) of other protocols left out" in text and "0.99" not in summary


def test_the_dataset_table_gives_the_interval_rate_epochs_and_cap(results):
    folder, _, manifest, lines = results
    text = (folder / ELECTRONICS / "auc.md").read_text()
    low, high = bootstrap_mean_ci(matrix(lines, ELECTRONICS, "prism"))
    cells = cells_of(text, "prism")
    assert cells[2:6] == [f"[{low:.4f}, {high:.4f}]", "0.001", "20/30, 20/30, 20/30", "0 of 3"]
    assert cells_of(text, "hstu")[4:6] == ["20/30, 20/30, 200/200", "1 of 3"]
    assert cells_of(text, "pop (floor)")[3:6] == ["— (no training)", "— (no training)", "—"]
    assert cells_of(text, "titans")[1:] == ["missing"] * 7
    assert "Made by `prism-rec headline tables`" in text
    from prism_rec.tracking.tables import table_folder

    assert table_folder(folder, ELECTRONICS) == folder / ELECTRONICS / "store"  # `prism-rec tables` keeps off it
    import pandas as pd

    table = pd.read_csv(folder / ELECTRONICS / "auc.csv").set_index("model")
    assert table.loc["prism", "auc_ci_low"] == pytest.approx(low, abs=1e-6)
    assert table.loc["hstu", "at_cap"] == 1 and table.loc["titans", "n_seeds"] == 0


def test_paired_differences_match_stats_and_say_within_noise(results):
    folder, _, _, lines = results
    text = (folder / "v2" / "README.md").read_text()
    section = text.split(f"### {ELECTRONICS}")[1].split("###")[0]
    expected = paired_difference(matrix(lines, ELECTRONICS, "prism"), matrix(lines, ELECTRONICS, "gated_deltanet"))
    cells = cells_of(section, "prism − gated_deltanet")
    assert cells[1:3] == [f"{expected.mean:+.4f}", f"[{expected.low:+.4f}, {expected.high:+.4f}]"]
    assert cells[4] == f"{expected.seed_p:.2g}" and cells[5] == (
        "**excludes 0** ✱" if expected.significant else verdict(expected))
    assert cells_of(section, "best − second: sasrec − prism")[0] == "best − second: sasrec − prism"
    noconv_vs_nogain = paired_difference(matrix(lines, ELECTRONICS, "prism-noconv"),
                                         matrix(lines, ELECTRONICS, "prism-nogain"))
    assert isinstance(noconv_vs_nogain.excludes_zero, bool)
    short = text.split(f"### {SHORT}")[1].split("## Paper as run")[0]
    assert cells_of(short,
                    "prism − sasrec")[1:] == ["missing"] * 4 + ["undetermined (prism, sasrec missing)"]


def test_checks_list_the_runs_near_the_floor_on_the_plateau_and_at_the_cap(results):
    folder, _, _, _ = results
    checks = (folder / "v2" / "README.md").read_text().split("## Appendix: checks")[1]
    near = checks.split("**Runs near the floor**")[1].split("**Runs stopped")[0]
    assert "electronics-gerec/prism-L0/s0:" in near
    assert "electronics-gerec/gated_deltanet/s1 (tuning run, lr 0.0003):" in near
    assert "electronics-gerec/sasrec/s0" not in near
    plateau = checks.split("**Runs stopped on the plateau.**")[1].split("**Runs at the epoch cap**")[0]
    assert "less than 0.01 above the pop row's validation AUC" in plateau
    assert "- electronics-gerec/prism-L0/s0: best valid AUC 0.6050 against pop's 0.6000" in plateau
    assert ": 2 of " in plateau  # prism-L0 and the unchosen-rate gated_deltanet run
    cap = checks.split("**Runs at the epoch cap**")[1]
    assert "(200 epochs): 1 of" in cap and "1 of them had their best epoch within" in cap
    assert "- electronics-gerec/hstu/s2: best epoch 200 of 200" in cap
    assert "the mean of each one's per-user AUC is its manifest test AUC" in checks


def test_ablation_v1_tuning_and_cost_sections(results):
    folder, _, _, _ = results
    text = (folder / "v2" / "README.md").read_text()
    ablation = text.split("## Ablation order")[1].split("## What changed")[0]
    assert "| 1 | prism 0.7134 | prism 0." in ablation and "The paper's order holds by mean" in ablation
    assert "| prism − prism-L1 |" in ablation
    changed = text.split("## What changed from v1")[1].split("## Learning-rate tuning")[0]
    header = cells_of(changed, "backbone")
    gated = cells_of(changed, "gated_deltanet")[header.index(f"{ELECTRONICS} v1 → v2")]
    assert gated.startswith(f"{np.mean([0.73, 0.61, 0.61]):.4f} → 0.7")
    assert cells_of(changed, "sasrec")[header.index(f"{ELECTRONICS} v1 → v2")].startswith("no v1 run → 0.8")
    assert "Cells that chose another rate than 0.001: 0 of 4" in changed
    tuning_rows = text.split("## Learning-rate tuning")[1].split("## Cost")[0]
    assert cells_of(tuning_rows, ELECTRONICS + " | prism")[2:] == ["0.7400", "**0.7600**", "0.7500", "0.001"]
    assert cells_of(tuning_rows, SHORT + " | sasrec")[2:] == ["0.5800", "0.5800", "missing", "missing (2 of 3 rates)"]
    cost = text.split("## Cost")[1]
    assert ("Backbones without a believable solo figure (none, or a suspect one above; left out of their plot, "
            "which names them): electronics-gerec: hstu, " in cost)
    assert "No figure is suspect" in cost
    assert "Shared-GPU training tokens/s" in cost and "[electronics-gerec](../electronics-gerec/pareto.png)" in cost
    solo = cost.split("Solo training tokens/s")[1].split("Shared-GPU")[0]
    assert "results/solo_throughput.csv, NVIDIA H200;" in solo
    assert cells_of(solo, "gated_deltanet")[3] == "120,000" and cells_of(solo, "hstu")[3] == "missing"
    assert "| pop (floor) |" not in solo and cells_of(cost, "pop (floor)")[1:3] == ["—", "none"]


def test_the_tables_subcommand_writes_the_report(tmp_path, monkeypatch):
    manifest, lines = fixture_runs()
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(e) + "\n" for e in manifest))
    (tmp_path / protocol.CASE_RANKS_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    main(["headline", "tables", "--manifest", str(tmp_path / "m.jsonl")])
    text = (tmp_path / "v2" / "README.md").read_text()
    assert "results/solo_throughput.csv is absent: the plots hold no points and say so." in text
    assert "no v1 run → " in text and (tmp_path / ELECTRONICS / "pareto.png").is_file()


def test_the_tables_subcommand_shows_the_metrics_asked_for(tmp_path, monkeypatch, capsys):
    manifest, lines = fixture_runs()
    for entry in manifest:  # MRR from every sasrec run but one (a run from before MRR); NDCG@20 from none
        if entry["model"] == "sasrec" and (entry["seed"], entry["lr"]) != (2, 1e-3):
            entry["test_mrr"] = 0.1 + entry["seed"] / 100
        if entry["model"] == "prism":  # prism evaluated against sampled negatives
            entry["evaluation"] = candidates_description("uniform:100", False)
            entry["test_mrr"] = 0.3
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(e) + "\n" for e in manifest))
    (tmp_path / protocol.CASE_RANKS_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    main(["headline", "tables", "--manifest", str(tmp_path / "m.jsonl"), "--metrics", "mrr,ndcg_20"])
    text = (tmp_path / ELECTRONICS / "auc.md").read_text()
    header = cells_of(text, "backbone")
    assert header[-4:] == ["test Hit@10 (sampled)", "test NDCG@10 (sampled)", "test MRR (sampled)",
                           "test NDCG@20 (sampled)"]
    assert text.startswith(f"# {ELECTRONICS}: sampled test metrics (protocol headline-v2)")
    assert f"against all items; {SAMPLED_LABEL}: each test case ranks its target against 100 uniform-sampled" in text
    assert cells_of(text, "sasrec")[-2:] == [f"{np.mean([0.10, 0.11]):.4f} ± {np.std([0.10, 0.11], ddof=1):.4f} "
                                             "(2 of 3 runs)", "missing"]
    assert cells_of(text, "prism")[-2] == "0.3000 ± 0.0000"
    short = (tmp_path / SHORT / "auc.md").read_text()  # no sampled run there: plain titles
    assert short.startswith(f"# {SHORT}: full-ranking test metrics") and "| test MRR | test NDCG@20 |" in short
    with pytest.raises(SystemExit):
        main(["headline", "tables", "--manifest", str(tmp_path / "m.jsonl"), "--metrics", "mrr,recall_10"])
    assert "argument --metrics: unknown metric 'recall_10'" in capsys.readouterr().err


def test_runs_of_one_dataset_must_share_their_test_users():
    manifest, lines = fixture_runs()
    other = next(i for i, line in enumerate(lines) if line["model"] == "prism" and line["seed"] == 1)
    entry = case_ranks.decode(lines[other]["case_ranks"])
    lines[other] = {**lines[other], "case_ranks": case_ranks.encode(entry.users + 1, entry.twice_rank, N_ITEMS)}
    with pytest.raises(ValueError, match="its test users differ from the other runs of electronics-gerec"):
        build_grid(manifest, lines, n_resamples=100)


def test_a_run_without_case_ranks_has_no_interval_and_nothing_is_estimated():
    manifest, lines = fixture_runs()
    lines = [line for line in lines if not (line["model"] == "prism" and line["seed"] == 2)]
    grid = build_grid(manifest, lines, n_resamples=100)
    assert grid.cell(ELECTRONICS, "prism").per_user is None
    assert tables.ci_text(grid.cell(ELECTRONICS, "prism")) == "missing (case ranks)"
    assert grid.paired(ELECTRONICS, "prism", "sasrec") == "no case ranks for prism"


def test_an_only_old_protocol_manifest_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no headline-v2 runs"):
        report.write_results([{"dataset": ELECTRONICS, "model": "sasrec", "seed": 0}], tmp_path, case_ranks=[])


def test_the_pareto_front_keeps_the_undominated_models():
    points = {"fast": (100.0, 0.70), "good": (10.0, 0.80), "both": (50.0, 0.75), "dominated": (40.0, 0.74),
              "tie": (50.0, 0.75)}
    assert cost.pareto_front(points) == ["fast", "both", "tie", "good"]
    assert cost.pareto_front({}) == []


def test_a_solo_step_far_above_its_backbones_median_is_suspect_and_left_out_of_the_plot():
    def row(step_ms):
        return {"tokens_per_s": 12800 / step_ms * 1000, "step_ms": step_ms, "machine": "NVIDIA H200"}

    # gated_deltanet's yelp step: 20x its median (as measured on the H200); titans' T 200 step:
    # 2x its median, as the datasets' own costs differ
    solo = {("ml-100k", "gated_deltanet"): row(19.0), ("yelp-iclrec", "gated_deltanet"): row(414.0),
            ("books-dealrec", "gated_deltanet"): row(18.8), ("ml-100k", "titans"): row(100.0),
            ("movies-long", "titans"): row(194.0), ("yelp-iclrec", "titans"): row(99.0)}
    suspect = cost.suspect_solo(solo)
    assert list(suspect) == [("yelp-iclrec", "gated_deltanet")] and suspect[("yelp-iclrec", "gated_deltanet")] > 20
    assert cost.suspect_solo(None) == {}
    note = cost.suspect_note(suspect)
    assert note.startswith("Suspect: 1 figure(s)") and "results/solo_checks.md" in note
    assert "solo_checks" not in cost.suspect_note({("ml-100k", "titans"): 5.0})  # nothing known of that one


def test_the_plateau_rule():
    floor = {"best_valid_auc": 0.60}
    base = {"best_valid_auc": 0.70, "best_epoch": 20, "epochs_run": 30, "epochs": 200, "patience": 10}
    assert checks.plateau_reason(base, floor) is None
    assert checks.plateau_reason({**base, "best_valid_auc": 0.6099}, floor).startswith("best valid AUC 0.6099")
    assert checks.plateau_reason({**base, "best_valid_auc": 0.55}, floor) is not None  # below the floor too
    early = {**base, "best_epoch": 2, "epochs_run": 12}
    assert checks.plateau_reason(early, floor) == "best epoch 2, stopped by patience 10 after 12"
    assert checks.plateau_reason({**early, "epochs_run": 11}, floor) is None  # patience not yet exhausted
    assert checks.plateau_reason({**early, "best_valid_auc": 0.55},
                                 None) == "best epoch 2, stopped by patience 10 after 12"


def test_equal_means_share_their_average_rank():
    d = protocol.DATASETS[0]
    cells = {(d, "a"): [0.9], (d, "b"): [0.8], (d, "c"): [0.8], (d, "d"): [0.7]}
    assert tables.mean_ranks(cells,
                             ["a", "b", "c", "d"]) == {"a": (1.0, 1), "b": (2.5, 1), "c": (2.5, 1), "d": (4.0, 1)}


def test_the_same_seed_check_compares_runs_at_the_same_rate_only():
    def entry(model, seed, auc, lr=1e-3, commit="abc1234", **compile_mode):
        return {"dataset": "yelp-iclrec", "model": model, "seed": seed, "test_auc": auc, "git_commit": commit, "lr": lr,
                **compile_mode}

    manifest = [entry("gated_deltanet", 0, 0.9), entry("prism-L0", 0, 0.9), entry("gated_deltanet", 1, 0.8),
                entry("prism-L0", 1, 0.80002, commit="def5678", compile="graphs"),
                entry("gated_deltanet", 2, 0.7, lr=3e-3),
                entry("prism-L0", 2, 0.6)]
    line = checks.same_seed_check(manifest, "prism-L0", "gated_deltanet", "the same model")
    assert line == ("**prism-L0 against gated_deltanet, seed by seed** (the same model): the same test AUC to every "
                    "digit in 1 of 2 runs; different in yelp-iclrec s1 (2.0e-05; commits def5678 and abc1234, "
                    "compile graphs and off) "
                    "(1 pair(s) trained at different rates left out).")


def test_the_sharing_note_counts_runs_by_how_they_shared_the_gpu():
    gpu = {"machine": "NVIDIA H200 (CUDA 13.0)"}  # as tracking.machine_description writes it
    manifest = [{**gpu, "jobs_per_device": 14.0}, {**gpu, "jobs_per_device": 12.0, "gpu_sharing": "mps"},
                {**gpu, "jobs_per_device": 12.0, "gpu_sharing": "mps"}, {"machine": "cpu", "jobs_per_device": 4.0}]
    note = cost.gpu_sharing_note(manifest)
    assert "with 12 or 14 worker processes" in note
    assert "runs: 2 through a CUDA MPS server, 1 in time slices" in note


def test_every_figure_is_a_300_dpi_png_with_its_svg_and_says_what_its_whiskers_are(results):
    from PIL import Image

    folder, paths, _, lines = results
    figures = [p for p in paths if p.suffix == ".png"]
    assert {p.name for p in figures} == {"auc.png", "paired.png", "pareto.png"}
    for path in figures:
        with Image.open(path) as image:
            assert image.info["dpi"] == pytest.approx((300, 300), abs=0.1)
        svg = path.with_suffix(".svg").read_text()
        assert svg.startswith("<?xml") and "whiskers: " in svg
    auc = (folder / ELECTRONICS / "auc.svg").read_text()
    assert "whiskers: 95% bootstrap CI over test users" in auc and "axis zoomed to the data" in auc
    forest = (folder / ELECTRONICS / "paired.svg").read_text()
    assert "whiskers: 95% paired bootstrap CI over test users" in forest
    shown = set(re.findall(r"prism − ([\w+-]+)", forest))
    assert shown == {"sasrec", "gated_deltanet", "hstu"}  # the trained baselines: no pop, ablation or preset
    difference = paired_difference(matrix(lines, ELECTRONICS, "prism"), matrix(lines, ELECTRONICS, "sasrec"))
    assert difference.mean < 0  # the fixture's prism is below sasrec: its point lies left of the zero line


def test_the_auc_chart_zooms_to_the_data_and_the_forest_plot_holds_zero(tmp_path, monkeypatch):
    import pandas as pd

    from prism_rec.tracking import plots

    drawn = {}
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: drawn.setdefault(path.name, figure) and path)
    summary = pd.DataFrame({"model": ["a", "b"], "auc_mean": [0.857, 0.880], "auc_std": [0.001, 0.002],
                            "n_seeds": [3, 3], "auc_ci_low": [0.850, 0.875], "auc_ci_high": [0.862, 0.884]})
    plots.auc_chart(summary, "toy", tmp_path / "auc.png")
    low, high = drawn["auc.png"].axes[0].get_xlim()
    assert 0.84 < low < 0.850 and 0.884 < high < 0.89  # the intervals with a margin: not from 0 or 0.5
    assert "95% bootstrap CI over test users" in drawn["auc.png"].axes[0].get_title()
    pop = pd.DataFrame({"model": ["pop (floor)"], "auc_mean": [0.60], "auc_std": [float("nan")], "n_seeds": [1],
                        "auc_ci_low": [0.59], "auc_ci_high": [0.61]})
    with_floor = pd.concat([summary, pop])
    plots.auc_chart(with_floor, "toy", tmp_path / "floor.png", floor="pop (floor)")
    axes = drawn["floor.png"].axes[0]
    assert axes.get_xlim()[0] > 0.84 and "pop (floor) 0.6000, off the axis" in axes.get_xlabel()
    assert [t.get_text() for t in axes.get_yticklabels()] == ["a", "b"]
    plots.auc_chart(summary.drop(columns=["auc_ci_low", "auc_ci_high"]), "toy", tmp_path / "std.png")
    assert "± std over seeds" in drawn["std.png"].axes[0].get_title()
    plots.forest_plot([("x − y", 0.01, 0.004, 0.016, True)], "toy", "whiskers: w", "", tmp_path / "forest.png")
    low, high = drawn["forest.png"].axes[0].get_xlim()
    assert low < 0 < 0.016 < high  # the zero line is always inside


def test_the_readme_opens_with_findings_then_the_grouped_main_table_and_ends_with_the_checks(results):
    folder, _, _, lines = results
    text = (folder / "v2" / "README.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## Findings", "## Main table: test AUC"] and headings[-1] == "## Appendix: checks"
    found = text.split("## Findings")[1].split("## Main table")[0]
    numbered = [line for line in found.splitlines() if re.match(r"\d+\. ", line)]
    assert 1 <= len(numbered) <= 6
    direct = paired_difference(matrix(lines, ELECTRONICS, "prism"), matrix(lines, ELECTRONICS, "gated_deltanet"))
    gdn = next(line for line in numbered if "prism" in line and "gated_deltanet" in line)
    assert ("significantly different on 1 of 1 datasets" in gdn) == direct.significant  # only electronics has both
    assert "(#main-table-test-auc)" in numbered[0] and any("(#appendix-checks)" in line for line in numbered)
    leader = numbered[0]  # sasrec has the fixture's best mean on electronics, the one ranked dataset
    assert leader.startswith("1. **sasrec has the best mean rank, 1.0 over 1 datasets, and the best mean test AUC "
                             "on 1 of 1**")
    table = text.split("## Main table: test AUC")[1].split("For orientation")[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ")][1:]  # the header row left out
    names = [row[0] for row in rows]
    groups = [i for i, name in enumerate(names) if name.startswith("**")]
    assert [names[i] for i in groups] == ["**baselines**", "**PRISM and its ablations**", "**the authors' presets**"]
    baselines = names[groups[0] + 1:groups[1]]
    assert baselines[:4] == ["pop (floor)", "sasrec", "gated_deltanet", "hstu"]  # pop, then by mean rank
    assert all(row[-1] == "missing" for row in rows[groups[0] + 5:groups[1]])  # models without runs last
    prism_family = names[groups[1] + 1:groups[2]]
    assert prism_family[0] == "prism" and {"prism", "prism-L1", "prism-eq18"} <= set(prism_family)
    assert all(name.endswith("-authors") for name in names[groups[2] + 1:])
