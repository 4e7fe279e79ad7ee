"""The registry: presets, errors, and the README's promise that one new file in baselines/ is enough."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from prism_rec import registry

ROOT = Path(__file__).resolve().parents[1]


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(KeyError, match="sasrec"):
        registry.build_backbone("no-such-model")
    with pytest.raises(KeyError, match="ml-100k"):
        registry.get_dataset("no-such-data")


def test_overrides_replace_registered_defaults():
    model = registry.build_backbone("sasrec", d_model=16, n_layers=3, dropout=0.0)
    assert len(model.blocks) == 3


def test_readme_example_backbone_is_discovered_and_keeps_the_contract(tmp_path):
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n# baselines/(\w+\.py)\n(.*?)```", readme, re.S)
    name, code = example.group(1), example.group(2)
    target = ROOT / "baselines" / f"readme_example_{name}"
    target.write_text(code)
    try:
        listing = subprocess.run([sys.executable, "-m", "prism_rec.cli", "list"], capture_output=True, text=True,
                                 check=True).stdout
        assert "causal-cnn" in listing
        contract = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", str(ROOT / "tests" / "models" / "test_backbone_contract.py"), "-k",
             "causal-cnn"],
            capture_output=True, text=True, cwd=tmp_path,
        )
        assert contract.returncode == 0 and " passed" in contract.stdout, contract.stdout[-2000:]  # 5: none ran
    finally:
        target.unlink()
