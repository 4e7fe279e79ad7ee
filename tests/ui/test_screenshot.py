"""`make test-ui`: headless Debian chromium loads the experiment page of the MLflow UI and saves a screenshot
to build/ui/mlflow-experiment.png. Not part of `make test`; skipped without chromium."""

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from prism_rec.tracking import PROJECT_ROOT

SCREENSHOT = PROJECT_ROOT / "build" / "ui" / "mlflow-experiment.png"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.skipif(not os.environ.get("PRISM_REC_TEST_UI"), reason="browser test: run it with `make test-ui`"),
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)"),
]


def test_experiment_page_screenshot(mlflow_server, tmp_path):
    lookup = f"{mlflow_server}/api/2.0/mlflow/experiments/get-by-name?experiment_name=ml-100k"
    with urllib.request.urlopen(lookup, timeout=10) as response:
        experiment_page = f"{mlflow_server}/#/experiments/{json.load(response)['experiment']['experiment_id']}"
    page = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1400,900", "--virtual-time-budget=15000", "--dump-dom", experiment_page],
        capture_output=True, text=True, timeout=120)
    assert "MLflow" in page.stdout, page.stderr[-2000:]
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1400,900", "--virtual-time-budget=15000", f"--screenshot={SCREENSHOT}",
         experiment_page], capture_output=True, timeout=120, check=True)
    assert Path(SCREENSHOT).read_bytes().startswith(b"\x89PNG")
