"""What the bridge needs of recbole 1.2.1, which is installed without its dependency list (pyproject.toml).

RecBole's quick_start imports ray (a hyper-parameter search the bridge does not use), so the bridge never
imports it: run.py does what ``recbole.quick_start.run_recbole`` does with recbole.config, .data, .model,
.trainer and .utils, which need only the modules of :data:`REQUIRED_MODULES` (the pyproject ``recbole``
extra, at recbole's own pins where it has them) at versions below :data:`VERSION_CAPS`. :func:`import_recbole`
also papers over two things recbole does to the process: numpy 2 removed the aliases np.float_, np.complex_
and np.unicode_ that recbole's data loaders still use, and importing its SINE model turns torch's anomaly
detection on for the whole process (recbole/model/sequential_recommender/sine.py).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys

import numpy as np
import torch

# module -> the pip requirement that provides it: recbole itself, the pyproject ``recbole`` extra (at recbole's
# own pins where it has them), what recbole's evaluator and trainer import besides (scikit-learn, tqdm, pandas,
# scipy, pyyaml) and what torch.utils.tensorboard's SummaryWriter, which RecBole's trainer makes, imports
# (tensorboard with protobuf and absl-py), and pytz, which pandas below 3 imports
REQUIRED_MODULES = {"recbole": "recbole==1.2.1 (--no-deps)", "colorlog": "colorlog==4.7.2",
                    "colorama": "colorama==0.4.4", "texttable": "texttable>=0.9", "tensorboard": "tensorboard>=2.5",
                    "google.protobuf": "protobuf", "absl": "absl-py", "yaml": "pyyaml>=5.1", "scipy": "scipy",
                    "pandas": "pandas", "sklearn": "scikit-learn", "tqdm": "tqdm",
                    "pytz": "pytz"}
# distribution -> (the first major version recbole 1.2.1 fails under, the requirement that avoids it): pandas 3
# takes Series.agg(len) over the whole column, not per row, so Dataset._remap splits every token_seq field
# (our item_id_list) into one piece and stops with "Length of values (1) does not match length of index"
VERSION_CAPS = {"pandas": (3, "pandas<3")}
NUMPY_ALIASES = (("float_", "float64"), ("complex_", "complex128"), ("unicode_", "str_"))


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent is missing (google.protobuf without google)
        return False


def _too_new(distribution: str, major_cap: int) -> bool:
    try:
        return int(importlib.metadata.version(distribution).split(".")[0]) >= major_cap
    except importlib.metadata.PackageNotFoundError:  # not installed: REQUIRED_MODULES names it
        return False


def unmet_requirements() -> list[str]:
    """The requirements of :data:`REQUIRED_MODULES` whose module cannot be imported here, then those of
    :data:`VERSION_CAPS` installed at a version at or above the cap."""
    missing = [requirement for module, requirement in REQUIRED_MODULES.items() if not _importable(module)]
    return missing + [requirement for distribution, (major_cap, requirement) in VERSION_CAPS.items()
                      if _too_new(distribution, major_cap)]


def import_recbole():
    """``(recbole.config, recbole.data, recbole.utils, recbole.data.interaction)`` imported as the module
    docstring says; raises ImportError naming every unmet requirement."""
    unmet = unmet_requirements()
    if unmet:
        raise ImportError(f"the RecBole bridge needs {', '.join(unmet)}: pip install them "
                          "(recbole itself with --no-deps, as `make install` does)")
    for alias, target in NUMPY_ALIASES:
        if not hasattr(np, alias):
            setattr(np, alias, getattr(np, target))
    anomaly = torch.is_anomaly_enabled()
    try:
        modules = tuple(importlib.import_module(name) for name in
                        ("recbole.config", "recbole.data", "recbole.utils", "recbole.data.interaction"))
        importlib.import_module("recbole.model.sequential_recommender")  # what get_model imports (SINE among them)
    finally:
        torch.autograd.set_detect_anomaly(anomaly)
    return modules


@contextlib.contextmanager
def isolated_config():
    """The block (RecBole's Config) sees no command-line arguments and leaves CUDA_VISIBLE_DEVICES as it was:
    Config reads every ``--key=value`` of sys.argv as a setting of its own (``prism-rec bench --epochs=5``
    would reach it twice) and sets CUDA_VISIBLE_DEVICES from its ``gpu_id``; the bridge gives RecBole its
    settings and its device itself (run.py)."""
    saved, arguments = os.environ.get("CUDA_VISIBLE_DEVICES"), sys.argv
    sys.argv = sys.argv[:1]
    try:
        yield
    finally:
        sys.argv = arguments
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


@contextlib.contextmanager
def cudnn_flags_kept():
    """Restore torch.backends.cudnn's benchmark and deterministic flags after the block: RecBole's init_seed
    sets them for the whole process, and the runs that follow a RecBole run in the same bench must not train
    under them."""
    saved = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved
