"""`make test-ui`: headless Debian chromium opens the links `prism-rec ui` prints, over a tiny bench, and
the test reads what the browser rendered (its DOM): the ranked runs view shows the child runs with their
test AUC, best first, in the model-training view; the bench's link shows its runs; the chart view shows the
AUC charts; the newest bench's page renders its comparison artifacts. Screenshots go to build/ui/. Not part
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

pytestmark = [
    pytest.mark.skipif(not os.environ.get("PRISM_REC_TEST_UI"), reason="browser test: run it with `make test-ui`"),
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium); "
                                                "tests/tracking/test_mlflow_ui.py still checks the tags and links"),
]


def browse(url: str, profile, screenshot: str) -> str:
    """The DOM of ``url`` once headless chromium has let the page run for 20 s of virtual time; also saves
    a screenshot build/ui/<screenshot>."""
    options = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
               "--window-size=1600,1000", "--virtual-time-budget=20000"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    subprocess.run([*options, f"--screenshot={SCREENSHOTS / screenshot}", url], capture_output=True, timeout=120,
                   check=True)
    page = subprocess.run([*options, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert "MLflow" in page.stdout, page.stderr[-2000:]
    return page.stdout


def test_the_printed_links_show_the_ranked_runs_and_the_comparison(mlflow_server, tmp_path):
    (name, views), = ui_links(mlflow_server)
    assert name == "ml-100k"
    children = mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'child'")
    ranked = browse(views["ranked runs"], tmp_path / "profile", "ranked-runs.png")
    assert "Model training" in ranked and "Detect Issues" not in ranked
    for run_name in children["tags.mlflow.runName"]:
        assert run_name in ranked
    shown = [value for value in map(repr, children["metrics.test_auc"]) if value in ranked]
    assert len(shown) == len(children), "a child run's test AUC is not in the table"
    assert sorted(shown, key=ranked.index) == [repr(v) for v in sorted(children["metrics.test_auc"], reverse=True)]

    parent = mlflow.search_runs(experiment_names=["ml-100k"], filter_string="tags.prism_rec_role = 'parent'").iloc[0]
    bench = browse(views[f"bench {parent['tags.mlflow.runName']}"], tmp_path / "profile", "bench.png")
    for run_name in children["tags.mlflow.runName"]:  # the bench's runs, filtered to it
        assert run_name in bench

    charts = browse(views["charts"], tmp_path / "profile", "charts.png")
    assert "test_auc" in charts and "valid_auc" in charts

    comparison = browse(views["newest bench"], tmp_path / "profile", "newest-bench.png")
    assert re.search(r'<img alt="auc.png" src="blob:', comparison), "auc.png is not rendered"
    for artifact in ("auc.png", "learning_curves.png"):
        assert f">{artifact}<" in comparison  # listed in the artifact tree
        url = f"{mlflow_server}/get-artifact?path={artifact}&run_uuid={parent['run_id']}"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.read().startswith(b"\x89PNG")
