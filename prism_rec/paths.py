"""Where the project's checkout is, where its published results go and where the reports' prose lives."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = PROJECT_ROOT / "results"  # the published tables (headline/report/)
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"  # the prose of the reports (markdown.fill)
