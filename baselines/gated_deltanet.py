"""The ``gated_deltanet`` backbone: Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025) as fla builds it.

Its layer and stack live in ``prism_rec.models.gated_deltanet`` (the equations and the initialisation are in
that module's docstring), because PRISM (``prism_rec.models.prism``) extends both.
"""

from __future__ import annotations

from prism_rec.models.gated_deltanet import GatedDeltaNet, GatedDeltaNetLayer
from prism_rec.registry import register_backbone

__all__ = ["GatedDeltaNet", "GatedDeltaNetLayer"]

register_backbone("gated_deltanet", description="Gated DeltaNet: gated delta-rule recurrence (Yang et al. 2025)")(
    GatedDeltaNet)
