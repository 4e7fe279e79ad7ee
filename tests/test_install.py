"""The install: recbole without its dependency list, one pin for it, and the resolution check CI runs."""

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from prism_rec.data.core import MissingDataError
from prism_rec.data.movielens import RECBOLE_REQUIREMENT
from prism_rec.data.sources import load_dataset

ROOT = Path(__file__).resolve().parents[1]


def load_resolve():
    spec = importlib.util.spec_from_file_location("resolve", ROOT / ".ci" / "resolve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recbole_is_installed_without_its_dependencies():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^RECBOLE_SPEC \?= (\S+)$", makefile, re.M).group(1) == RECBOLE_REQUIREMENT
    assert re.search(r'pip install .*--no-deps "\$\(RECBOLE_SPEC\)"', makefile)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [spec for extra in project["optional-dependencies"].values() for spec in extra]
    names = {re.match(r"[A-Za-z0-9_.-]+", spec).group(0).lower() for spec in declared}
    assert not names & {"recbole", "ray", "plotly", "thop"}


def test_ml100k_without_recbole_names_the_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "recbole", None)  # what `import recbole` meets when it is not installed
    with pytest.raises(MissingDataError, match=re.escape(f"pip install --no-deps {RECBOLE_REQUIREMENT}")):
        load_dataset("ml-100k", processed_dir=tmp_path)


def test_resolve_names_the_package_at_fault(tmp_path):
    """A pin with no wheel for Python 3.12 (ray 2.6.3, recbole's own pin) is named, from pip's real answer."""
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                             "--python-version", "3.12", "--dest", str(tmp_path), "ray==2.6.3"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert load_resolve().fault(result) == "ray==2.6.3"


def test_every_package_of_the_tree_is_listed_for_installation():
    """A regular (non-editable) install ships only the packages pyproject.toml lists: every folder with an
    __init__.py under prism_rec/, kernels/ and baselines/ must be one of them."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join((name, *init.parent.relative_to(ROOT / folder).parts))
             for name, folder in setuptools["package-dir"].items() for init in (ROOT / folder).rglob("__init__.py")}
    assert found == set(setuptools["packages"])
