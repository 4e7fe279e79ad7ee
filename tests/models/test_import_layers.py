"""Imports run down the layers: baselines/ files import prism_rec.models (the shared layers) and never each
other, prism_rec/models/ imports no baselines/ file, and prism_rec/data/ imports only the ground floor
(prism_rec/markdown.py, paths.py, files.py, registry.py, ...), nothing from the layers above it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UPPER_LAYERS = ("models", "baselines", "kernels", "training", "tracking", "experiments")


def imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in ``path``, a module of ``package``; relative imports resolved,
    and ``from a import b`` listed as both ``a`` and ``a.b``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, (base, node.module)))
            found += [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def offending(folder: Path, package: str, forbidden) -> list[str]:
    """``file:line: name`` for every import in ``folder``'s modules for which ``forbidden(file, name)``."""
    return sorted({f"{path.relative_to(ROOT)}:{line}: imports {name}"
                   for path in folder.glob("*.py") for line, name in imports(path, package) if forbidden(path, name)})


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_resolver_reads_absolute_and_relative_imports(tmp_path):
    module = tmp_path / "stats.py"
    module.write_text("import os\nfrom ..tracking.markdown import fill\nfrom . import amazon\n"
                      "from prism_rec.models import nn\n")
    assert imports(module, "prism_rec.data") == [
        (1, "os"), (2, "prism_rec.tracking.markdown"), (2, "prism_rec.tracking.markdown.fill"),
        (3, "prism_rec.data"), (3, "prism_rec.data.amazon"), (4, "prism_rec.models"), (4, "prism_rec.models.nn")]


def test_baselines_never_import_each_other():
    assert not offending(ROOT / "baselines", "prism_rec.baselines",
                         lambda path, name: within(name, "prism_rec.baselines") and name != "prism_rec.baselines"
                         and not within(name, f"prism_rec.baselines.{path.stem}"))


def test_models_import_no_baselines():
    assert not offending(ROOT / "prism_rec" / "models", "prism_rec.models",
                         lambda path, name: within(name, "prism_rec.baselines"))


@pytest.mark.parametrize("layer", UPPER_LAYERS)
def test_data_imports_nothing_from_the_layers_above(layer):
    assert not offending(ROOT / "prism_rec" / "data", "prism_rec.data",
                         lambda path, name: within(name, f"prism_rec.{layer}"))
