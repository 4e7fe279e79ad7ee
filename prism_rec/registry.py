"""Registries of backbones and datasets.

A backbone is an ``nn.Module`` built as ``cls(d_model=..., **options)`` whose forward takes hidden
states [B, T, d] and a padding mask [B, T] (True = real item; sequences are left-padded) and returns
[B, T, d], causally. Registering one is a decorator on a class or factory in a file of ``baselines/``; one
whose class says ``trains = False`` is a recommender that does not train (:func:`trains`).
A backbone whose factory takes ``backend`` (``SCAN_OPTION``) runs the delta scan (kernels/delta_scan.py) and
gives it that backend (:func:`runs_scan`).
A dataset is a ``prism_rec.data.sources.DatasetSource`` subclass registered in a file of ``prism_rec/data/``.
Every module of the packages in ``DISCOVERED_PACKAGES`` is imported when the registry is first read, so a
new file is all it takes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DISCOVERED_PACKAGES = ("prism_rec.baselines", "prism_rec.models", "prism_rec.data")
SCAN_OPTION = "backend"  # the factory option naming the delta scan's backend (kernels/delta_scan.py BACKENDS)
RECBOLE_PREFIX = "recbole:"  # "recbole:<Model>" names a RecBole model trained through prism_rec/recbole_bridge
_BACKBONES: dict[str, BackboneEntry] = {}
_DATASETS: dict[str, Any] = {}
_discovered = False


@dataclass(frozen=True)
class BackboneEntry:
    name: str
    factory: Callable[..., Any]
    defaults: dict[str, Any] = field(default_factory=dict)
    description: str = ""


def register_backbone(name: str, description: str = "", **defaults: Any):
    """Register ``factory`` under ``name``; ``defaults`` are options applied before user overrides.

    The same factory may be registered under several names with different defaults (presets).
    """

    def decorator(factory):
        if name in _BACKBONES and _BACKBONES[name].factory is not factory:
            raise ValueError(f"backbone {name!r} is registered twice ({_BACKBONES[name].factory} and {factory})")
        summary = description or next(iter((factory.__doc__ or "").strip().splitlines()), "")
        _BACKBONES[name] = BackboneEntry(name, factory, dict(defaults), summary)
        return factory

    return decorator


def register_dataset(name: str):
    """Register a dataset source class (see ``prism_rec.data.sources.DatasetSource``) under ``name``."""

    def decorator(cls):
        if name in _DATASETS and _DATASETS[name] is not cls:
            raise ValueError(f"dataset {name!r} is registered twice")
        _DATASETS[name] = cls
        return cls

    return decorator


def _discover() -> None:
    """Import every module of ``DISCOVERED_PACKAGES`` (once), so that their registrations run."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for package_name in DISCOVERED_PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{package_name}.{module.name}")


def list_backbones() -> list[str]:
    _discover()
    return sorted(_BACKBONES)


def backbone_entry(name: str) -> BackboneEntry:
    _discover()
    if name not in _BACKBONES:
        raise KeyError(f"unknown backbone {name!r}; registered: {', '.join(sorted(_BACKBONES))}")
    return _BACKBONES[name]


def backbone_parameters(name: str) -> dict[str, inspect.Parameter]:
    """The options the backbone ``name``'s factory takes: its signature's parameters by name (``d_model`` and the
    settings every backbone shares among them)."""
    return dict(inspect.signature(backbone_entry(name).factory).parameters)


def runs_scan(name: str) -> bool:
    """Whether the registered backbone ``name`` runs the delta scan: its factory takes ``SCAN_OPTION``."""
    _discover()
    return name in _BACKBONES and SCAN_OPTION in backbone_parameters(name)


def trains(name: str) -> bool:
    """Whether the recommender ``name`` trains: False for a registered one that declares ``trains = False``
    (``pop``, which ranks by training counts and is deterministic, so it runs once whatever the seeds); True
    otherwise, also for a name no longer registered (old runs in a manifest were all trained)."""
    _discover()
    entry = _BACKBONES.get(name)
    return entry is None or getattr(entry.factory, "trains", True)


def build_backbone(name: str, d_model: int = 64, **overrides: Any):
    """Build the backbone ``name`` at width ``d_model``; ``overrides`` replace its registered defaults."""
    entry = backbone_entry(name)
    return entry.factory(d_model=d_model, **{**entry.defaults, **overrides})


def list_datasets() -> list[str]:
    _discover()
    return sorted(_DATASETS)


def get_dataset(name: str):
    _discover()
    if name not in _DATASETS:
        raise KeyError(f"unknown dataset {name!r}; registered: {', '.join(sorted(_DATASETS))}")
    return _DATASETS[name]
