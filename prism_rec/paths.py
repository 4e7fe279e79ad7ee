"""Where the project's checkout is and where its published results go."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = PROJECT_ROOT / "results"  # the published tables (headline/report.py)
