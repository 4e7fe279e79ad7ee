"""`make test-ui`: headless Debian chromium opens every link `prism-rec ui` prints, over a tiny bench, and the
test reads what the browser rendered (its DOM): the ranked runs view and the bench's view show one group row
per model, in the model-training view, with the mean test AUC of its runs, each run beneath it, by test AUC;
the chart view draws the comparison's charts; the newest bench's links render its comparison table
(comparison.json) with n and the interval per model, its paired differences with their verdicts, and its
figure. Screenshots go to build/ui/. Not part
of `make test`; skipped without chromium (tests/tracking/test_mlflow_ui.py checks the tags and links without
a browser)."""

import os
import re
import shutil
import subprocess
import urllib.request

import mlflow
import pytest

from prism_rec.paths import PROJECT_ROOT
from prism_rec.tracking.store import ui_links

SCREENSHOTS = PROJECT_ROOT / "build" / "ui"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# virtual time the page runs for: the chart view loads its plotting code lazily and needs most of it
VIRTUAL_TIME_MS = 60_000

pytestmark = [
    pytest.mark.skipif(not os.environ.get("PRISM_REC_TEST_UI"), reason="browser test: run it with `make test-ui`"),
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium); "
                                                "tests/tracking/test_mlflow_ui.py still checks the tags and links"),
]


def browse(url: str, profile, screenshot: str) -> str:
    """The DOM of ``url`` once headless chromium has let the page run for VIRTUAL_TIME_MS of virtual time;
    also saves a screenshot build/ui/<screenshot>."""
    options = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
               "--window-size=1900,1200", f"--virtual-time-budget={VIRTUAL_TIME_MS}",
               "--run-all-compositor-stages-before-draw"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    subprocess.run([*options, f"--screenshot={SCREENSHOTS / screenshot}", url], capture_output=True, timeout=180,
                   check=True)
    page = subprocess.run([*options, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert "MLflow" in page.stdout, page.stderr[-2000:]
    return page.stdout


def cell_texts(dom: str, column: str) -> dict[str, str]:
    """{row id: text} of the cells of grid column ``column`` (its col-id) in ``dom``, in the grid's row order;
    a group row's id is ``tag.model.<model>``, a run's ``tag.model.<model>.<run id>``."""
    rows = []
    starts = [match.start() for match in re.finditer(r'role="row" row-index="', dom)] + [len(dom)]
    for start, end in zip(starts, starts[1:]):
        row = dom[start:end]
        cell = re.search(re.escape(f'col-id="{column}"') + r"[^>]*>(.*?)</div></div>", row)
        if cell:
            index, row_id = re.match(r'role="row" row-index="(\d+)" row-id="([^"]*)"', row).groups()
            rows.append((int(index), row_id, re.sub(r"<[^>]+>", "", cell.group(1))))
    return {row_id: text for _, row_id, text in sorted(rows)}


def assert_grouped_by_model(dom: str, children) -> None:
    """One group row per model of ``children`` (MLflow's runs frame) with the mean of its runs' test AUC,
    the groups in the order of their best run (the runs sorted by test AUC, a group where its first run
    would be), and every run of ``children`` beneath its group."""
    assert "Model training" in dom and "Detect Issues" not in dom and "Group by: model" in dom
    aucs = cell_texts(dom, "metrics.`test_auc`")
    means = children.groupby("tags.model")["metrics.test_auc"].mean()
    for model, mean in means.items():
        shown = aucs[f"tag.model.{model}"]
        assert shown.endswith(" (average)") and float(shown.split()[0]) == pytest.approx(mean, abs=1e-12)
        assert f"Group: {model}" in dom
    groups = [row for row in aucs if row.count(".") == 2]
    best = children.groupby("tags.model")["metrics.test_auc"].max().sort_values(ascending=False)
    assert groups == [f"tag.model.{model}" for model in best.index]
    runs = {row.rsplit(".", 1)[1]: float(text) for row, text in aucs.items() if row.count(".") == 3}
    assert runs == dict(zip(children["run_id"], children["metrics.test_auc"]))  # every run shown, none other
    for run_name in children["tags.mlflow.runName"]:
        assert f">{run_name}<" in dom


def test_every_printed_link_shows_what_it_names(mlflow_server, tmp_path):
    (name, views), = ui_links(mlflow_server)
    assert name == "ml-100k"
    children = mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'child'")
    parent = mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'parent'").iloc[0]
    assert set(views) == {"ranked runs", "charts", "newest bench", "newest figure", "newest paired differences",
                          f"bench {parent['tags.mlflow.runName']}"}

    assert_grouped_by_model(browse(views["ranked runs"], tmp_path / "profile", "ranked-runs.png"), children)
    bench = browse(views[f"bench {parent['tags.mlflow.runName']}"], tmp_path / "profile", "bench.png")
    assert_grouped_by_model(bench, children[children["tags.mlflow.parentRunId"] == parent["run_id"]])

    charts = browse(views["charts"], tmp_path / "profile", "charts.png")
    assert re.search(r">prism-rec: the models compared</div><div[^>]*>\(3\)<", charts)  # the stored charts
    for title in ("test_auc_ci_low vs test_auc vs test_auc_ci_high", "train_tokens_per_s vs. test_auc", "valid_auc"):
        assert f'title="{title}"' in charts
    assert charts.count('class="main-svg"') >= 6, "the comparison's charts were not drawn"  # 2 svg layers each

    table = browse(views["newest bench"], tmp_path / "profile", "comparison-table.png")
    assert "View as table" in table
    for column in ("model", "n_seeds", "n_test_users", "test_auc_mean", "test_auc_ci_low", "test_auc_ci_high"):
        assert f">{column}<" in table
    for model in children["tags.model"].unique():
        assert f">{model}<" in table
    assert ">943<" in table  # the test users of ml-100k, n of every row

    paired = browse(views["newest paired differences"], tmp_path / "profile", "paired-differences.png")
    assert "View as table" in paired
    for cell in ("difference", "users_low", "users_high", "n_users", "verdict", "sasrec − pop", "943"):
        assert f">{cell}<" in paired

    figure = browse(views["newest figure"], tmp_path / "profile", "newest-figure.png")
    assert re.search(r'<img alt="auc.png" src="blob:', figure), "auc.png is not rendered"
    for artifact in ("auc.png", "learning_curves.png"):
        assert f">{artifact}<" in figure  # listed in the artifact tree
        url = f"{mlflow_server}/get-artifact?path={artifact}&run_uuid={parent['run_id']}"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.read().startswith(b"\x89PNG")
