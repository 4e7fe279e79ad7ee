"""AUC table formatting: column titles line up with values, best mean in bold, std over seeds."""

import pandas as pd
import pytest

from prism_rec.cli import main
from prism_rec.errors import OptionError
from prism_rec.tracking import tables
from prism_rec.tracking.tables import markdown_table, store_cells, summarise
from prism_rec.training.metrics import METRIC_NAMES


def fake_runs():
    rows = []
    for model, base in (("a", 0.5), ("b", 0.7)):
        for seed in range(2):
            row = {"tags.model": model, "tags.seed": str(seed), "metrics.n_parameters": 100.0}
            for index, name in enumerate(METRIC_NAMES):
                row[f"metrics.test_{name}"] = base + index / 100 + seed / 1000
            rows.append(row)
    return pd.DataFrame(rows)


def test_summary_and_markdown_columns_line_up():
    summary = summarise(store_cells(fake_runs()))
    assert summary["n_seeds"].tolist() == [2, 2]
    assert abs(summary.loc[1, "auc_std"] - pd.Series([0.7, 0.701]).std()) < 1e-12
    header, _, row_a, row_b = markdown_table(summary).splitlines()
    titles = [cell.strip() for cell in header.strip("|").split("|")]
    assert titles[:4] == ["Model", "AUC", "Hit@10", "NDCG@10"] and titles[-2:] == ["Params", "Seeds"]
    cells_b = [cell.strip() for cell in row_b.strip("|").split("|")]
    for title, name in zip(titles[1:], METRIC_NAMES):
        index = METRIC_NAMES.index(name)
        assert cells_b[titles.index(title)].startswith(f"**{0.7 + index / 100 + 0.0005:.4f}")
    assert "**" not in row_a


def test_tables_keep_only_the_newest_protocol(store, tiny, one_torch_thread):
    """A later benchmark with other shared settings (epochs here) hides the earlier runs from the table."""
    from prism_rec.tracking.tables import finished_child_runs

    main(["bench", "--models", "sasrec", "--seeds", "1", "--results-dir", str(store / "r"), *tiny])
    main(["bench", "--models", "sasrec", "--seeds", "1", "--results-dir", str(store / "r"), *tiny, "--epochs", "1"])
    runs, other_protocols = finished_child_runs("ml-100k")
    assert len(runs) == 1 and other_protocols == 1 and runs["params.epochs"].iloc[0] == "1"
    assert "Left out: 1 finished run(s)" in (store / "r" / "ml-100k" / "auc.md").read_text()


def test_runs_from_before_the_precision_param_count_as_bf16():
    old = pd.Series({"params.d_model": "64", "params.data.split": "loo", "params.precision": float("nan")})
    new = pd.Series({"params.d_model": "64", "params.data.split": "loo", "params.precision": "bf16"})
    fp32 = pd.Series({"params.d_model": "64", "params.data.split": "loo", "params.precision": "fp32"})
    assert tables.protocol_key(old) == tables.protocol_key(new) != tables.protocol_key(fp32)


def test_a_store_table_does_not_replace_the_headline_reports(tmp_path):
    assert tables.table_folder(tmp_path, "ml-100k") == tmp_path / "ml-100k"
    (tmp_path / "ml-100k").mkdir()
    (tmp_path / "ml-100k" / "auc.md").write_text("# ml-100k: full-ranking test metrics\n")  # a store table: replaced
    assert tables.table_folder(tmp_path, "ml-100k") == tmp_path / "ml-100k"
    (tmp_path / "ml-100k" / "auc.md").write_text("# ml-100k: full-ranking test metrics (protocol headline-v2)\n")
    assert tables.table_folder(tmp_path, "ml-100k") == tmp_path / "ml-100k" / "store"


def test_a_sampled_evaluation_is_labelled_and_extra_metrics_are_columns():
    runs = fake_runs().assign(**{"params.sampled": "uniform:100", "metrics.test_mrr": 0.25})
    summary = summarise(store_cells(runs, metrics=(*METRIC_NAMES, "mrr", "coverage_10")),
                        metrics=(*METRIC_NAMES, "mrr", "coverage_10"))
    header = markdown_table(summary).splitlines()[0]
    titles = [cell.strip() for cell in header.strip("|").split("|")]
    assert titles[1] == "AUC (sampled)" and titles[-4:-2] == ["MRR (sampled)", "Coverage@10 (sampled)"]
    assert markdown_table(summary).splitlines()[2].split("|")[-4].strip() == "—"  # runs without coverage_10
    note = tables.spread_note(summary)
    assert "sampled: for comparison with papers that sample only: each test case ranks its target against 100 " \
           "uniform-sampled negatives" in note and "full-ranking AUC (all items, history kept)" in note
    full = markdown_table(summarise(store_cells(fake_runs()))).splitlines()[0]
    assert "sampled" not in full and "sampled" not in tables.spread_note(summarise(store_cells(fake_runs())))


def test_unknown_table_metrics_name_the_option():
    assert tables.parse_table_metrics("mrr, ndcg_20,coverage_10,avg_pop_5") == ("mrr", "ndcg_20", "coverage_10",
                                                                                 "avg_pop_5")
    for bad in ("recall_10", "hit_0", "mrr_10", "coverage"):
        with pytest.raises(OptionError, match=f"option --metrics: unknown metric '{bad}'"):
            tables.parse_table_metrics(bad)
