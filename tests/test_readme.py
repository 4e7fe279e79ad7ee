"""The README stays true: every `make <target>` it names exists in the Makefile and parses."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = sorted(set(re.findall(r"`make ([a-z][a-z-]*)", (ROOT / "README.md").read_text())))


def test_readme_names_make_targets():
    assert {"bench", "test", "tables", "ui"} <= set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_make_target_exists(target):
    result = subprocess.run(["make", "-n", target, "DIR=records"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
